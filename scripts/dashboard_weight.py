#!/usr/bin/env python3
"""Page weight and time to first render of the dashboard's pages, in headless
Chromium: bytes transferred (the page, its scripts and styles, the API
answers it reads) and the time from navigation until the page has painted
its data (the `gpool:drawn` mark app.js sets after the first frame with
it). Usage: dashboard_weight.py URL TOKEN [--runs N]. Standard library
only: a minimal DevTools Protocol client over a WebSocket."""

import base64, json, os, shutil, socket, struct, subprocess, sys, tempfile, time, urllib.request

PAGES = [
    ("overview", "/", "document.querySelector('[data-testid=\"GPUs busy\"]') && document.querySelectorAll('.heat .cell').length > 0"),
    ("queue", "/queue", "document.querySelector('tbody tr')"),
    ("nodes", "/nodes", "document.querySelector('section table')"),
    ("usage", "/usage?by=team&since=7d", "document.querySelector('table')"),
]


class WS:
    def __init__(self, url):
        assert url.startswith("ws://")
        hostport, path = url[5:].split("/", 1)
        host, port = hostport.split(":")
        self.s = socket.create_connection((host, int(port)))
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.s.recv(1)
        assert b" 101 " in head.split(b"\r\n")[0], head

    def send(self, text):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        hdr = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536
                               else bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.s.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    def recv(self):
        msg = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            msg += payload
            if b0 & 0x80:
                return msg.decode()


class Page:
    def __init__(self, ws):
        self.ws, self.n = ws, 0

    def call(self, method, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.n:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")


def main():
    url, token = sys.argv[1].rstrip("/"), sys.argv[2]
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 3
    chrome = next(p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p)
    profile = tempfile.mkdtemp()
    proc = subprocess.Popen([chrome, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                             "--remote-debugging-port=0", "--window-size=1280,900", f"--user-data-dir={profile}",
                             "about:blank"], stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if line.startswith("DevTools listening on "):
                port = line.split(":")[-1].split("/")[0]
                break
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = Page(WS(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"]))
        page.call("Page.enable")
        page.call("Network.enable")
        page.call("Network.setCacheDisabled", cacheDisabled=True)
        page.call("Page.navigate", url=url + "/login")
        time.sleep(1)
        page.eval(f"sessionStorage.setItem('gpool.token', {json.dumps(token)}); true")
        rows = []
        for name, path, ready in PAGES:
            times, sizes = [], []
            for _ in range(runs):
                page.eval("performance.clearResourceTimings(); true")
                page.call("Page.navigate", url=url + path)
                t0 = time.time()
                while not page.eval(f"Boolean({ready})"):
                    if time.time() - t0 > 120:
                        raise RuntimeError(f"{name}: not drawn within 120 s")
                    time.sleep(0.02)
                # The page marks the paint of its data (app.js `painted`); polling alone would add the
                # round trips of this loop on a busy machine.
                while not page.eval("performance.getEntriesByName('gpool:drawn').length > 0"):
                    if time.time() - t0 > 120:
                        raise RuntimeError(f"{name}: no gpool:drawn mark within 120 s")
                    time.sleep(0.02)
                drawn = page.eval("performance.getEntriesByName('gpool:drawn')[0].startTime")
                # Bytes: the document, then every resource and API answer it fetched (the event stream is open, counted as received so far).
                size = page.eval("(performance.getEntriesByType('navigation')[0] || {}).transferSize + "
                                 "performance.getEntriesByType('resource').reduce((a, r) => a + (r.transferSize || r.encodedBodySize || 0), 0)")
                times.append(drawn)
                sizes.append(size)
            times.sort()
            rows.append({"page": name, "path": path, "bytes": int(max(sizes)), "first_render_ms_median": round(times[len(times) // 2]),
                         "first_render_ms_max": round(times[-1]), "runs": runs})
        print(json.dumps(rows, indent=1))
    finally:
        proc.kill()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
