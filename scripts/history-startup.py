#!/usr/bin/env python3
# How long `gpool up` takes to start with N succeeded jobs in its store,
# which it reads to rebuild the learned run times (issue 17; BENCHMARKS.md,
# "Run times learned from history"). Runs N one-GPU `true` jobs on 64
# simulated GPUs, restarts the daemon three times, then times three starts
# on an empty store. Usage: scripts/history-startup.py [N]  (release build first).
import json, os, subprocess, sys, time, urllib.request, shutil
BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "gpool")
D = "/tmp/gpool-history-startup"
def start(data):
    p = subprocess.Popen([BIN, "up", "--simulate-gpus", "64xH100-80GB", "--data-dir", data, "--listen", "127.0.0.1:0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    t0 = time.monotonic()
    line = p.stdout.readline()
    dt = time.monotonic() - t0
    url = [w for w in line.split() if w.startswith("http")][0]
    return p, url, dt
def req(url, token, method, path, body=None):
    r = urllib.request.Request(url + path, method=method, data=json.dumps(body).encode() if body is not None else None,
                               headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(r, timeout=120) as f:
        return json.loads(f.read() or b"null")
shutil.rmtree(D, ignore_errors=True)
p, url, dt = start(D)
token = open(os.path.join(D, "admin.token")).read().strip()
N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
t0 = time.monotonic()
for b in range(0, N, 1000):
    jobs = [{"name": f"train-{i % 50}", "command": "true", "resources": {"nvidia.com/gpu": 1}} for i in range(b, min(N, b + 1000))]
    req(url, token, "POST", "/api/v1/jobs", {"jobs": jobs})
while True:

    s = req(url, token, "GET", "/api/v1/jobs?state=succeeded&limit=1&after=%d" % (N - 1))
    if s and s.get("jobs"):
        # the last job succeeded; check none pending/running
        act = req(url, token, "GET", "/api/v1/jobs?state=pending,running&limit=5")
        if not act.get("jobs"):
            break
    time.sleep(2)
print("ran %d jobs in %.0f s" % (N, time.monotonic() - t0), flush=True)
p.kill(); p.wait()
for i in range(3):
    p, url, dt = start(D)
    last = req(url, token, "POST", "/api/v1/jobs", {"name": "train-7", "command": "true", "resources": {"nvidia.com/gpu": 1}})
    j = req(url, token, "GET", "/api/v1/jobs/%d" % last["ids"][0])
    print("restart %d with %d jobs in the store: up in %.3f s; learned %s" % (i, N, dt, j.get("learned_estimate")), flush=True)
    p.kill(); p.wait()
E = "/tmp/gpool-history-startup-empty"
for i in range(3):
    shutil.rmtree(E, ignore_errors=True)
    p, url, dt = start(E)
    print("empty store: up in %.3f s" % dt, flush=True)
    p.kill(); p.wait()
