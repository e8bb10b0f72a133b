#!/usr/bin/env bash
# The cost table of BENCHMARKS.md ("Elastic pools and spot"): each trace on a
# fixed on-demand cluster sized for it, the same nodes autoscaled, and spot
# first with on-demand fallback on six spot availability traces.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p gpool-cli >&2
for t in philly:data/traces/philly_pollux.csv itp04:data/traces/itp_elasticflow_cluster04.csv; do
  name=${t%%:*}; trace=${t#*:}
  ./target/release/gpool sim --trace "$trace" --compare-pools "$(ls bench/pools/"$name"-*.yaml | paste -sd,)" "$@"
done
