#!/usr/bin/env bash
# How the Philly replay's time grows with the trace (issue 44): the trace
# itself, then K copies of it one after another (each shifted by the trace's
# span plus a day, so the arrival rate is the same and the trace is K times
# longer), on the same 80 × 8 GPUs. Prints wall seconds and µs per pass.
# Usage: scripts/replay-growth.sh [K]   (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
k=${1:-10}
cargo build --release --bin gpool
g=$PWD/target/release/gpool
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$k" data/traces/philly_pollux.csv "$tmp/philly_x$k.csv" <<'PY'
import csv, sys
from datetime import datetime, timedelta
k, src, dst = int(sys.argv[1]), sys.argv[2], sys.argv[3]
fmt = "%Y-%m-%d %H:%M:%S"
with open(src, newline="") as f:
    rows = list(csv.DictReader(f))
times = [datetime.strptime(r["timestamp"], fmt) for r in rows]
span = max(times) - min(times) + timedelta(days=1)
with open(dst, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    for c in range(k):
        for r, t in zip(rows, times):
            w.writerow({**r, "timestamp": (t + c * span).strftime(fmt)})
PY
for trace in data/traces/philly_pollux.csv "$tmp/philly_x$k.csv"; do
  "$g" sim --trace "$trace" --nodes 80 --gpus-per-node 8 -o json 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"$(basename "$trace"): {d['jobs']} jobs, {d['sched_calls']} passes, {d['sched_us_per_call']} µs/pass, {d['wall_s']} s\")"
done
