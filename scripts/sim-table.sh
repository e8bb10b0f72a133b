#!/usr/bin/env bash
# Reproduces the policy table of BENCHMARKS.md: every policy on the Philly
# pooled window and ITP cluster04, on 640 and 512 GPUs (8-GPU nodes).
# Writes per-job CSVs and SVG plots under ${OUT:-target/sim-table}.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin gpool
out=${OUT:-target/sim-table}
policies=fifo,fifo-backfill,sjf,srtf,las,fair,default
for gpus in 640 512; do
  nodes=$((gpus / 8))
  echo "### Philly pooled window 2017-10-01..2017-11-30, $gpus GPUs"
  ./target/release/gpool sim --trace data/traces/philly_pollux.csv --window 2017-10-01..2017-11-30 \
    --nodes "$nodes" --gpus-per-node 8 --compare "$policies" --out "$out/philly-$gpus"
  echo "### ITP cluster04, $gpus GPUs"
  ./target/release/gpool sim --trace data/traces/itp_elasticflow_cluster04.csv \
    --nodes "$nodes" --gpus-per-node 8 --compare "$policies" --out "$out/itp-$gpus"
done
