#!/usr/bin/env bash
# Measures inference services on this machine (BENCHMARKS.md, "Services"):
#  1. the proxy's cost: wrk straight to one replica and through the proxy
#     (1 connection: added p50; 64 connections: most requests/s);
#  2. a load step from 1 to 24 clients for 60 s on a service answering in
#     50 ms (min 1, max 6, inFlight 4): replicas over time, failed requests,
#     p99 before and after the step, and the way back to 1 replica;
#  3. a cold start: the first request to a service scaled to zero.
# Needs wrk (apt-get install wrk) and a release build of gpool and of the
# developers' gpool-devtools, whose replica-demo the services run (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${GPOOL:-target/release/gpool}
DT=${GPOOL_DEVTOOLS:-target/release/gpool-devtools}
command -v wrk >/dev/null || { echo "needs wrk: apt-get install -y wrk" >&2; exit 1; }
[ -x "$B" ] || { echo "needs $B: cargo build --release -p gpool-cli" >&2; exit 1; }
[ -x "$DT" ] || { echo "needs $DT: cargo build --release -p gpool-devtools" >&2; exit 1; }
D=$(mktemp -d)
PROXY=127.0.0.1:${PROXY_PORT:-18790}
"$B" up --listen 127.0.0.1:0 --data-dir "$D" --simulate-gpus 8xA100-80GB --proxy-listen "$PROXY" >"$D/up.log" 2>&1 &
UP=$!
trap 'kill $UP 2>/dev/null; wait $UP 2>/dev/null; pkill -f "replica-demo" || true; rm -rf "$D"' EXIT
for _ in $(seq 100); do [ -S "$D/gpool.sock" ] && break; sleep 0.1; done
svc() { # name min max delay down window
  cat >"$D/$1.yaml" <<YAML
name: $1
command: [$(realpath "$DT"), replica-demo, --delay, $4]
resources: {nvidia.com/gpu: 1}
service: {readiness: /health, replicas: {min: $2, max: $3}, target: {inFlight: 4}, scaleDownDelay: $5, window: $6}
YAML
  "$B" submit -f "$D/$1.yaml" --data-dir "$D" >/dev/null
}
field() { "$B" services -o json --data-dir "$D" | python3 -c "import json,sys; s=[x for x in json.load(sys.stdin) if x['name']=='$1'][0]; print($2)"; }
wait_for() { for _ in $(seq 1200); do [ "$(field "$1" "$2")" = "$3" ] && return 0; sleep 0.1; done; echo "timed out waiting for $1: $2 = $3" >&2; return 1; }
p() { awk '/^ +50%/{p50=$2} /^ +99%/{p99=$2} /Requests\/sec/{rps=$2} /Non-2xx|Socket errors/{err=err" "$0} END{printf "p50 %s  p99 %s  %s req/s%s\n", p50, p99, rps, (err==""?"  0 errors":err)}'; }

echo "== 1. proxy cost (replica answers at once)"
svc fast 1 1 0 60s 60s
wait_for fast "s['ready']" 1
ADDR=$(field fast "s['replicas'][0]['address']")
wrk -t1 -c1 -d3s "http://$ADDR/x" >/dev/null
echo "direct,  1 connection:   $(wrk -t1 -c1 -d10s --latency "http://$ADDR/x" | p)"
echo "proxy,   1 connection:   $(wrk -t1 -c1 -d10s --latency "http://$PROXY/fast/x" | p)"
echo "direct, 64 connections:  $(wrk -t2 -c64 -d10s --latency "http://$ADDR/x" | p)"
echo "proxy,  64 connections:  $(wrk -t2 -c64 -d10s --latency "http://$PROXY/fast/x" | p)"
"$B" services delete fast --data-dir "$D" >/dev/null

echo "== 2. load step: 1 -> 24 clients for 60 s (replica answers in 50 ms; min 1, max 6, inFlight 4)"
svc step 1 6 50ms 60s 60s
wait_for step "s['ready']" 1
echo "unloaded, 1 client, 20 s: $(wrk -t1 -c1 -d20s --latency "http://$PROXY/step/x" | p)"
T0=$(date +%s.%N)
( wrk -t2 -c24 -d40s --latency "http://$PROXY/step/x" >"$D/ramp.txt"; wrk -t2 -c24 -d20s --latency "http://$PROXY/step/x" >"$D/settled.txt" ) &
W=$!
while kill -0 $W 2>/dev/null; do
  printf "  t=%5.1fs ready %s desired %s\n" "$(echo "$(date +%s.%N) - $T0" | bc)" "$(field step "s['ready']")" "$(field step "s['desired']")"
  sleep 5
done
echo "step, first 40 s:        $(p <"$D/ramp.txt")"
echo "step, last 20 s:         $(p <"$D/settled.txt")"
T1=$(date +%s.%N)
wait_for step "len(s['replicas'])" 1
echo "back to 1 replica $(echo "$(date +%s.%N) - $T1" | bc | cut -c1-5) s after the load stopped (window 60 s + scaleDownDelay 60 s)"
echo "failed through the proxy: $(field step "s['failed_total']") of $(field step "s['requests_total']")"

echo "== 3. cold start from zero"
svc cold 0 1 0 2s 2s
wait_for cold "len(s['replicas'])" 0
for i in 1 2 3; do
  echo "first request after scale-to-zero: $(curl -s -o /dev/null -w '%{http_code} in %{time_total} s' "http://$PROXY/cold/x")"
  wait_for cold "len(s['replicas'])" 0
done
