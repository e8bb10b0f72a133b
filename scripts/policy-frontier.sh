#!/usr/bin/env bash
# The trade-off behind issue 45's goals: the default's worst average ÷ the
# best non-clairvoyant baseline against its worst p99 ÷ FIFO, as the
# starvation guard's two knobs change (its age `after`, and `max_runtime`,
# the run time past which a job is never promoted), the overload gate on as
# in the default. Tuned on the training rows (Philly, ITP cluster04, 02 and
# 03 at 0.8, 1 and 1.2 × nominal load); the held-out cluster06 is replayed
# for each variant too and reported apart. Writes DIR/frontier.md and
# docs/img/policy-frontier.svg. About 14 minutes on 2 cores (21 variants).
#
#   cargo build --release --bin gpool && scripts/policy-frontier.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-target/policy-frontier}
bin=./target/release/gpool
[ -x "$bin" ] || { echo "build first: cargo build --release --bin gpool" >&2; exit 1; }
mkdir -p "$dir"
for after in 24h 36h 48h 60h 96h off; do
  for max in 18h 24h 36h 72h; do
    if [ "$after" = off ]; then
      [ "$max" = 24h ] || continue
      g=(--set guard=off)
    else
      g=(--set "guard.after=$after" --set "guard.max_runtime=$max")
    fi
    name="${after}_${max}"
    "$bin" bench policies --policies fifo,fifo-backfill,las,fair,default \
      "${g[@]}" --out "$dir/$name" > "$dir/$name.log" 2>&1
    echo "$name done" >&2
  done
done
python3 scripts/policy_frontier.py "$dir" docs/img/policy-frontier.svg > "$dir/frontier.md"
cat "$dir/frontier.md"
