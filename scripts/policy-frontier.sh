#!/usr/bin/env bash
# The trade-off behind issue 15's goals: the default's worst average ÷ SRTF
# against its worst p99 ÷ FIFO over the ITP training rows (clusters 04, 02
# and 03 at 0.8, 1 and 1.2 × nominal load), as the starvation guard's age
# and the order within a level change. Writes DIR/frontier.md and
# docs/img/policy-frontier.svg. About 3 minutes on 2 cores.
#
#   cargo build --release --bin gpool && scripts/policy-frontier.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-target/policy-frontier}
bin=./target/release/gpool
[ -x "$bin" ] || { echo "build first: cargo build --release --bin gpool" >&2; exit 1; }
mkdir -p "$dir"
for within in submit gittins; do
  for guard in 40h 60h 80h 100h 150h 200h off; do
    if [ "$guard" = off ]; then g=(--set guard=off); else g=(--set "guard.after=$guard"); fi
    name="${within}_${guard}"
    "$bin" bench policies --traces itp04,itp02,itp03 --policies fifo,srtf,las,fair,default \
      --set "within_level=$within" "${g[@]}" --out "$dir/$name" > "$dir/$name.log" 2>&1
    echo "$name done" >&2
  done
done
python3 scripts/policy_frontier.py "$dir" docs/img/policy-frontier.svg > "$dir/frontier.md"
cat "$dir/frontier.md"
