#!/usr/bin/env bash
# The dashboard's page weight and time to first render on a large cluster
# (BENCHMARKS.md, "Web dashboard"): `gpool-devtools bench cluster` brings up a real
# `gpool serve` with NODES simulated nodes and JOBS queued jobs and holds it;
# scripts/dashboard_weight.py loads each page in headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${NODES:-1000}
JOBS=${JOBS:-100000}
cargo build --release --bin gpool --bin gpool-devtools
info=$(mktemp)
rm -f "$info"
./target/release/gpool-devtools bench cluster --nodes "$NODES" --jobs "$JOBS" --seconds 5 --hold 900 --hold-file "$info" --json >/dev/null &
bench=$!
trap 'kill $bench 2>/dev/null || true; rm -f "$info"' EXIT
while [ ! -s "$info" ]; do
  kill -0 $bench 2>/dev/null || { echo "gpool-devtools bench cluster ended early" >&2; exit 1; }
  sleep 1
done
read -r url token <"$info"
echo "== $NODES nodes, $JOBS jobs at $url"
python3 scripts/dashboard_weight.py "$url" "$token" --runs "${RUNS:-3}"
