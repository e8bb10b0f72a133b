#!/usr/bin/env bash
# Learned run-time estimates against none and the oracle (issue 17,
# BENCHMARKS.md "Run times learned from history"): the default policy, FIFO
# + EASY backfill, SJF and SRTF planning with them, on Philly's pooled
# window and the four ITP clusters at nominal size.
# Usage: scripts/learned-estimates.sh [ESTIMATES...]  (default: none learned oracle)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin gpool
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(none learned oracle)
run() { # trace-name file window gpus
  local name=$1 file=$2 window=$3 gpus=$4
  for est in "${modes[@]}"; do
    # learned_estimates=plan: the default plans with them too (by itself it only shows them).
    args=(--trace "data/traces/$file" --nodes $((gpus / 8)) --gpus-per-node 8
          --compare default,fifo-backfill,sjf,srtf --estimates "$est" --set learned_estimates=plan --json)
    [ -n "$window" ] && args+=(--window "$window")
    ./target/release/gpool sim "${args[@]}" 2>/dev/null |
      python3 -c '
import json, sys
name, est = sys.argv[1], sys.argv[2]
for r in json.load(sys.stdin):
    l = r.get("learned_estimates") or {}
    cells = [name, r["policy"], est, "%.0f" % r["avg_jct_s"], "%.0f" % r["p99_jct_s"], "%.0f" % r["avg_queue_s"],
             str(l.get("jobs", "-")), str(l.get("median_abs_error_s", "-")), str(l.get("median_ratio", "-"))]
    print("| " + " | ".join(cells) + " |")
' "$name" "$est"
  done
}
echo "| trace | policy | estimates | avg JCT s | p99 JCT s | avg queue s | jobs estimated | median abs. error s | median estimate ÷ duration |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|"
run philly philly_pollux.csv 2017-10-01..2017-11-30 640
run itp04 itp_elasticflow_cluster04.csv "" 640
run itp02 itp_elasticflow_cluster02.csv "" 112
run itp03 itp_elasticflow_cluster03.csv "" 176
run itp06 itp_elasticflow_cluster06.csv "" 112
