#!/usr/bin/env bash
# What confining a job costs its start (issue 44), side by side in one run:
# jobs as their users in control groups (the default as root) against
# `--run-as=daemon --cgroups=off`, interleaved, on 8 simulated GPUs.
#   1. `gpool bench jobs --compare-unconfined`: 300 jobs of `true` submitted
#      in one batch, submit to all done (each figure the median of 3 runs);
#   2. from the CLI, as a user would: N × `gpool run --gpus 1 -- true`, one
#      after another (each waits for its job's end).
# Usage (as root): scripts/start-bench.sh [ROUNDS] [N]   (defaults 3, 100)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
n=${2:-100}
[ "$(id -u)" = 0 ] || { echo "run as root: running jobs as their users in control groups needs it" >&2; exit 1; }
cargo build --release --bin gpool
g=$PWD/target/release/gpool

echo "== gpool bench jobs --compare-unconfined (300 jobs of true, median of 3 runs each)"
for r in $(seq "$rounds"); do
  "$g" bench jobs --compare-unconfined 2>/dev/null
done

# N sequential `gpool run`s against a fresh `gpool up` with the given flags; prints jobs/s.
cli_rate() {
  local d pid t0 t1
  d=$(mktemp -d)
  "$g" up --simulate-gpus 8xH100-80GB --listen 127.0.0.1:0 --data-dir "$d/data" --container-runtime=none "$@" \
    >"$d/log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do [ -s "$d/data/server.url" ] && break; sleep 0.1; done
  GPOOL_DATA_DIR="$d/data" "$g" ping >/dev/null
  t0=$(date +%s.%N)
  for _ in $(seq "$n"); do GPOOL_DATA_DIR="$d/data" "$g" run --gpus 1 -- true 2>/dev/null; done
  t1=$(date +%s.%N)
  kill "$pid"
  wait "$pid" || true
  rm -rf "$d"
  python3 -c "print(round($n / ($t1 - $t0)))"
}

echo "== $n x gpool run --gpus 1 -- true, one after another (jobs/s)"
for r in $(seq "$rounds"); do
  confined=$(cli_rate)
  unconfined=$(cli_rate --run-as=daemon --cgroups=off)
  echo "round $r: as users in cgroups $confined, --run-as=daemon --cgroups=off $unconfined"
done
