#!/usr/bin/env bash
# Issue 41: elastic against rigid on the shared traces, at nominal and
# stress load (1.0 and 1.2 × the nominal arrival rate of each trace on its
# nominal cluster, as `gpool bench policies` sizes them). Every whole-GPU job
# is replayed as an elastic one of one-GPU replicas from half to twice its
# GPUs, scaling by 0.8 per doubling, 60 s lost at each restart (resize or
# preemption); see docs/elastic.md. Prints a Markdown table. About 2
# minutes on 2 cores.
#
#   cargo build --release --bin gpool && scripts/elastic-sim.sh [EXTRA gpool sim FLAGS]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./target/release/gpool
[ -x "$bin" ] || { echo "build first: cargo build --release --bin gpool" >&2; exit 1; }
traces=${GPOOL_TRACES:-../shared/traces}
echo "| trace | load | rigid avg JCT s | elastic avg JCT s | avg ÷ rigid | rigid p99 s | elastic p99 s | p99 ÷ rigid | util rigid → elastic | resizes |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"
while read -r name file nodes window; do
  for load in 1.0 1.2; do
    w=(); [ "$window" != "-" ] && w=(--window "$window")
    out=$("$bin" sim --trace "$traces/$file" --nodes "$nodes" "${w[@]}" --load-scale "$load" --elastic --json "$@")
    python3 - "$name" "$load" "$out" <<'PY'
import json, sys
name, load, out = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
rigid, el = out[0], out[1]
r = lambda a, b: a / b if b else float("nan")
print(f"| {name} | {load} | {rigid['avg_jct_s']:.0f} | {el['avg_jct_s']:.0f} | {r(el['avg_jct_s'], rigid['avg_jct_s']):.2f} | "
      f"{rigid['p99_jct_s']:.0f} | {el['p99_jct_s']:.0f} | {r(el['p99_jct_s'], rigid['p99_jct_s']):.2f} | "
      f"{rigid['gpu_utilization']*100:.1f}% → {el['gpu_utilization']*100:.1f}% | {el['resizes']} |")
PY
  done
done <<'TRACES'
philly philly_pollux.csv 80 2017-10-01..2017-11-30
itp04 itp_elasticflow_cluster04.csv 80 -
itp02 itp/itp_elasticflow_cluster02.csv 14 -
itp03 itp/itp_elasticflow_cluster03.csv 22 -
itp06 itp/itp_elasticflow_cluster06.csv 14 -
TRACES
