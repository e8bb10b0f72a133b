#!/usr/bin/env bash
# What `gpool profile` costs a running job (BENCHMARKS.md, "Profiling
# overhead"): a pure-Python loop that prints its iterations each second runs
# under `gpool up` on a simulated GPU; 6 s windows with no profile alternate
# with 6 s profiles (CYCLES of each mode: plain, then --native). Prints each
# window's median iterations/s and each profiled window against the one before.
# Needs py-spy (GPOOL_PY_SPY, else target/pytools/bin/py-spy, else PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
CYCLES=${CYCLES:-5}
cargo build -q --bin gpool
G=$PWD/target/debug/gpool
export GPOOL_PY_SPY=${GPOOL_PY_SPY:-$( [ -x target/pytools/bin/py-spy ] && echo "$PWD/target/pytools/bin/py-spy" || command -v py-spy )}
dir=$(mktemp -d)
export GPOOL_DATA_DIR=$dir/data
trap 'kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; rm -rf "$dir"' EXIT
cat > "$dir/tput.py" <<'PY'
import time
def work():
    s = 0
    for i in range(10000):
        s += i * i % 7
    return s
start = time.time(); n = 0; mark = start + 1
while True:
    work(); n += 1
    t = time.time()
    if t >= mark:
        print(f"{int(t - start)} {n}", flush=True); n = 0; mark += 1
PY
"$G" up --simulate-gpus 1xH100-80GB --listen 127.0.0.1:0 >/dev/null 2>"$dir/up.log" &
daemon=$!
until [ -S "$dir/data/gpool.sock" ]; do sleep 0.2; done
job=$("$G" submit --gpus 1 -- python3 "$dir/tput.py")
last() { "$G" logs "$job" | tail -1 | cut -d' ' -f1; }
until [ -n "$(last)" ]; do sleep 0.5; done
sleep 3
windows=()
for mode in plain native; do
  for _ in $(seq "$CYCLES"); do
    a=$(last); sleep 6; b=$(last); windows+=("off $a $b")
    flag=(); [ "$mode" = native ] && flag=(--native)
    "$G" profile "$job" --seconds 6 "${flag[@]}" -o json >/dev/null
    c=$(last); windows+=("$mode $b $c")
  done
done
"$G" logs "$job" > "$dir/rates"
printf '%s\n' "${windows[@]}" | python3 -c '
import statistics, sys
rates = dict(tuple(map(int, l.split())) for l in open(sys.argv[1]) if len(l.split()) == 2)
by, ratios, before = {}, {}, None
for line in sys.stdin:
    mode, a, b = line.split(); a, b = int(a), int(b)
    inside = [rates[s] for s in range(a + 2, b) if s in rates]
    if not inside:
        continue
    m = statistics.median(inside)
    by.setdefault(mode, []).append(m)
    if mode == "off":
        before = m
    elif before:
        ratios.setdefault(mode, []).append(m / before)
for mode, v in by.items():
    print(f"{mode:7} iterations/s per window: {[round(x) for x in v]}, median {round(statistics.median(v))}")
for mode, v in ratios.items():
    print(f"{mode:7} against the window before: {[round(x, 2) for x in v]}, median {statistics.median(v):.2f}")
' "$dir/rates"
