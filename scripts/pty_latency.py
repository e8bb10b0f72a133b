#!/usr/bin/env python3
"""Keystroke echo latency of an interactive session (`gpool run --pty`).

Starts `gpool up` on a scratch data directory (simulated GPUs), runs
`gpool run --pty -- cat` on a pseudo-terminal of this script's, types one
key at a time and times each key's echo (the job's terminal echoes it back
through the shim, the agent, the control plane and the client). Prints the
median, p99 and max over N keys, with the time the session took to open.

Usage: scripts/pty_latency.py [--keys 500] [--gpool target/release/gpool]
"""

import argparse
import os
import pty
import select
import shutil
import signal
import statistics
import subprocess
import tempfile
import time


def read_until(fd, needle, limit):
    seen = b""
    deadline = time.monotonic() + limit
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SystemExit(f"never saw {needle!r}; the screen: {seen[-400:]!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            seen += os.read(fd, 4096)
    return seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=500)
    ap.add_argument("--gpool", default="target/release/gpool")
    a = ap.parse_args()
    gpool = os.path.abspath(a.gpool)
    scratch = tempfile.mkdtemp(prefix="gpool-pty-")
    data = os.path.join(scratch, "data")
    up = subprocess.Popen(
        [gpool, "up", "--data-dir", data, "--listen", "127.0.0.1:0", "--simulate-gpus", "1xH100-80GB"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in up.stdout:
            if "is up at" in line:
                break
        t0 = time.monotonic()
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(gpool, [gpool, "run", "--data-dir", data, "--gpus", "1", "--pty", "--",
                             "sh", "-c", "echo ready; exec cat"])
        read_until(fd, b"ready", 60)
        opened = time.monotonic() - t0
        times = []
        for i in range(a.keys):
            key = bytes([ord("a") + i % 26])
            t = time.perf_counter()
            os.write(fd, key)
            read_until(fd, key, 10)
            times.append((time.perf_counter() - t) * 1000)
        os.write(fd, b"\r\x04")
        os.waitpid(pid, 0)
        times.sort()
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
        print(f"session opened in {opened * 1000:.0f} ms (submit, start, attach, first output)")
        print(f"{a.keys} keys echoed: median {statistics.median(times):.2f} ms, p99 {p99:.2f} ms, max {times[-1]:.2f} ms")
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=30)
        subprocess.run(["pkill", "-f", f"gpool shim {data}"], check=False)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
