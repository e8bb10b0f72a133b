#!/usr/bin/env bash
# Power budgets against fewer GPUs (issue 24, BENCHMARKS.md "Power budgets
# in gpool sim"): each trace at its nominal size with a cluster-wide budget of
# 100%, 80% and 60% of its GPUs' nameplate power (gpool sim --power-budget;
# a GPU at work draws nameplate, an idle one a tenth), against the same
# trace on a cluster cut to 100%, 80% and 60% of its nodes. Default policy.
# Usage: scripts/power-budgets.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin gpool
run() { # trace-name file window gpus
  local name=$1 file=$2 window=$3 gpus=$4 nodes=$(($4 / 8))
  for f in 1.0 0.8 0.6; do
    local cut
    cut=$(python3 -c "print(round($nodes * $f))")
    for setup in budget cut; do
      args=(--trace "data/traces/$file" --gpus-per-node 8 --json)
      [ -n "$window" ] && args+=(--window "$window")
      if [ "$setup" = budget ]; then args+=(--nodes "$nodes" --power-budget "$f"); else args+=(--nodes "$cut"); fi
      local used=$nodes
      [ "$setup" = cut ] && used=$cut
      ./target/release/gpool sim "${args[@]}" 2>/dev/null |
        python3 -c '
import json, sys
name, f, setup, used, full = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
r = json.load(sys.stdin)
r = r[0] if isinstance(r, list) else r
busy = r["gpu_utilization"] * used / full
label = ("power budget %d%%" % round(float(f) * 100)) if setup == "budget" else ("%d%% of the nodes" % round(float(f) * 100))
print("| %s | %s | %.0f | %.0f | %.0f | %.1f%% | %d |" % (name, label, r["avg_jct_s"], r["p99_jct_s"], r["avg_queue_s"], busy * 100, r["unfinished"] + r["rejected"]))
' "$name" "$f" "$setup" "$used" "$nodes"
    done
  done
}
echo "| trace | set-up | avg JCT s | p99 JCT s | avg queue s | GPUs busy (of the full cluster) | unfinished or rejected jobs |"
echo "|---|---|---:|---:|---:|---:|---:|"
run philly philly_pollux.csv 2017-10-01..2017-11-30 640
run itp04 itp_elasticflow_cluster04.csv "" 640
run itp02 itp_elasticflow_cluster02.csv "" 112
run itp03 itp_elasticflow_cluster03.csv "" 176
run itp06 itp_elasticflow_cluster06.csv "" 112
