#!/usr/bin/env bash
# Submitting and reading pipeline runs (BENCHMARKS.md, "Pipelines,
# schedules, windows and deadlines"): `gpool up --simulate-gpus
# 8xH100-80GB`, then pipelines of 4 chained stages whose matrix makes N/4
# instances each, every instance needing every instance of the stage
# before (N/4 edges each). Each figure is the wall time of one CLI call,
# process start included, repeated RUNS times (min–max printed).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./target/release/gpool}
RUNS=${RUNS:-3}
[ -x "$BIN" ] || cargo build --release --bin gpool
dir=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
trap 'kill $up 2>/dev/null || true; rm -rf "$dir"' EXIT
"$BIN" up --simulate-gpus 8xH100-80GB --data-dir "$dir" --listen "127.0.0.1:$port" >"$dir/up.log" 2>&1 &
up=$!
export GPOOL_SERVER="http://127.0.0.1:$port"
until [ -s "$dir/admin.token" ] && GPOOL_TOKEN=$(cat "$dir/admin.token") "$BIN" whoami >/dev/null 2>&1; do sleep 0.1; done
export GPOOL_TOKEN=$(cat "$dir/admin.token")

# pipeline JOBS: 4 stages of JOBS/4 instances; the jobs sleep, so they stay in the queue.
pipeline() {
  local jobs=$1 width=$(($1 / 4))
  local values
  values=$(seq -s, 1 "$width")
  {
    echo "name: bench-$jobs"
    echo "stages:"
    local prev=""
    for s in a b c d; do
      echo "  - name: $s"
      [ -n "$prev" ] && echo "    needs: [$prev]"
      echo "    matrix: {i: [$values]}"
      echo "    command: sleep 600"
      echo "    resources: {nvidia.com/gpu: 1}"
      prev=$s
    done
  } >"$dir/p$jobs.yaml"
  echo "$dir/p$jobs.yaml"
}

# times LABEL CMD...: RUNS wall times of CMD, in seconds, min–max.
times() {
  local label=$1 t0 t1 all=()
  shift
  for _ in $(seq "$RUNS"); do
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    all+=("$(echo "$t1 - $t0" | bc)")
  done
  printf '%-48s %s s\n' "$label" "$(printf '%s\n' "${all[@]}" | sort -n | sed -n '1p;$p' | xargs printf '%.2f\n' | paste -sd-)"
}

p100=$(pipeline 100)
p1000=$(pipeline 1000)
times "gpool pipeline run (100 jobs, 25 edges each)" "$BIN" pipeline run "$p100"
times "gpool pipeline run (1,000 jobs, 250 edges each)" "$BIN" pipeline run "$p1000"
run=$("$BIN" pipeline list -o json | python3 -c 'import json,sys; r=json.load(sys.stdin); print(max(x["run"] for x in r["runs"]))')
jobs=$("$BIN" queue -o json --limit 100000 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin); print(len(r if isinstance(r,list) else r["jobs"]))')
echo "runs and jobs in the store: $((2 * RUNS)) runs, $jobs jobs queued"
times "gpool pipeline status RUN -o json (1,000 jobs)" "$BIN" pipeline status "$run" -o json
times "gpool pipeline list" "$BIN" pipeline list
