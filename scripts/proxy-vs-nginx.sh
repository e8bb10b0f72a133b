#!/usr/bin/env bash
# gpool's service proxy against nginx, side by side in one run (issue 44;
# BENCHMARKS.md, "The service proxy against nginx"):
#   the same `gpool-devtools replica-demo` replica (a gpool service of one
#   replica), reached straight, through nginx (1 worker, keep-alive upstream)
#   and through gpool's proxy; wrk at 1 and at 32 connections, the three
#   interleaved, ROUNDS times (default 3). Prints each run and, per load, the
#   medians: requests/s and the p50 each adds over the direct path.
# Installs nginx and wrk from Debian's packages where missing (as root),
# and builds the release binaries where missing.
#   bash scripts/proxy-vs-nginx.sh [ROUNDS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECS=${2:-10}
B=${GPOOL:-target/release/gpool}
DT=${GPOOL_DEVTOOLS:-target/release/gpool-devtools}

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "== installing ${need[*]} (Debian packages)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$B" ] || cargo build --release -p gpool-cli --bin gpool
[ -x "$DT" ] || cargo build --release -p gpool-devtools

D=$(mktemp -d)
PROXY=127.0.0.1:${PROXY_PORT:-18791}
NGINX_PORT=${NGINX_PORT:-18792}
UP=""
cleanup() {
  [ -f "$D/nginx.pid" ] && kill "$(cat "$D/nginx.pid")" 2>/dev/null
  [ -n "$UP" ] && { kill "$UP" 2>/dev/null; wait "$UP" 2>/dev/null; }
  pkill -f "$(realpath "$DT") replica-demo" 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT

"$B" up --listen 127.0.0.1:0 --data-dir "$D" --simulate-gpus 8xA100-80GB --container-runtime=none \
  --proxy-listen "$PROXY" >"$D/up.log" 2>&1 &
UP=$!
for _ in $(seq 300); do [ -S "$D/gpool.sock" ] && break; sleep 0.1; done
[ -S "$D/gpool.sock" ] || { echo "gpool up did not start:" >&2; cat "$D/up.log" >&2; exit 1; }
cat >"$D/fast.yaml" <<YAML
name: fast
command: [$(realpath "$DT"), replica-demo, --delay, "0"]
resources: {nvidia.com/gpu: 1}
service: {readiness: /health, replicas: {min: 1, max: 1}}
YAML
"$B" submit -f "$D/fast.yaml" --data-dir "$D" >/dev/null
ADDR=""
for _ in $(seq 300); do
  ADDR=$("$B" services -o json --data-dir "$D" | python3 -c '
import json, sys
s = [x for x in json.load(sys.stdin) if x["name"] == "fast"]
print(s[0]["replicas"][0]["address"] if s and s[0]["ready"] >= 1 and s[0]["replicas"] else "")')
  [ -n "$ADDR" ] && break
  sleep 0.1
done
[ -n "$ADDR" ] || { echo "the replica never became ready" >&2; exit 1; }

# nginx as a reverse proxy is usually set up: one worker (gpool's proxy
# serves from the daemon's runtime on the same two cores), keep-alive to
# the upstream, no access log (gpool's proxy keeps none per request either).
mkdir -p "$D/nginx"
cat >"$D/nginx.conf" <<CONF
worker_processes 1;
pid $D/nginx.pid;
error_log $D/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $D/nginx; proxy_temp_path $D/nginx; fastcgi_temp_path $D/nginx;
  uwsgi_temp_path $D/nginx; scgi_temp_path $D/nginx;
  upstream replica { server $ADDR; keepalive 64; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location /fast/ {
      proxy_pass http://replica/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      proxy_set_header X-Forwarded-For \$remote_addr;
    }
  }
}
CONF
"$NGINX" -c "$D/nginx.conf" -p "$D/nginx" -e "$D/nginx/error.log"
for _ in $(seq 50); do [ -f "$D/nginx.pid" ] && break; sleep 0.1; done

# One wrk run: prints "RPS P50_US".
measure() { # url connections
  local threads=1
  [ "$2" -gt 1 ] && threads=2
  wrk -t"$threads" -c"$2" -d"${SECS}s" --latency "$1" | awk '
    function us(v) { if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return v * 1000; if (v ~ /s$/) return v * 1e6; return v }
    /^ +50%/ { p50 = us($2) } /Requests\/sec/ { rps = $2 } /Non-2xx|Socket errors/ { bad = 1 }
    END { if (bad) { print "errors" } else { printf "%.0f %.0f\n", rps, p50 } }'
}
declare -A URL=([direct]="http://$ADDR/x" [nginx]="http://127.0.0.1:$NGINX_PORT/fast/x" [gpool]="http://$PROXY/fast/x")
for path in direct nginx gpool; do # warm each path (connections, caches) before measuring
  wrk -t1 -c4 -d2s "${URL[$path]}" >/dev/null
done
echo "== $ROUNDS rounds of ${SECS}s each, direct / nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///') / gpool, interleaved"
R="$D/results"
: >"$R"
for round in $(seq "$ROUNDS"); do
  for c in 1 32; do
    for path in direct nginx gpool; do
      m=$(measure "${URL[$path]}" "$c")
      [ "$m" = errors ] && { echo "wrk saw errors through $path" >&2; exit 1; }
      echo "$c $path $m" >>"$R"
      printf "round %d  %2d connection(s)  %-6s  %8s req/s  p50 %6s us\n" "$round" "$c" "$path" $m
    done
  done
done
python3 - "$R" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
def med(c, path, i):
    return statistics.median(float(r[i]) for r in rows if r[0] == c and r[1] == path)
print("medians:")
for c in ("1", "32"):
    d50 = med(c, "direct", 3)
    for path in ("nginx", "gpool"):
        print(f"  {c:>2} connection(s)  {path:6} {med(c, path, 2):9.0f} req/s  p50 {med(c, path, 3):6.0f} us,"
              f" added {med(c, path, 3) - d50:+5.0f} us over direct ({med(c, 'direct', 2):.0f} req/s, p50 {d50:.0f} us)")
    r = med(c, "gpool", 2) / med(c, "nginx", 2)
    added = (med(c, "gpool", 3) - d50, med(c, "nginx", 3) - d50)
    print(f"  {c:>2} connection(s)  gpool/nginx requests/s {r:.2f}; added p50 gpool {added[0]:.0f} us, nginx {added[1]:.0f} us")
PY
