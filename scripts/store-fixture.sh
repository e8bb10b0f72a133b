#!/usr/bin/env bash
# Writes a gpool store with something of every kind in it, using the gpool
# binary given: run it with each release's binary and keep the result as
# test data, so that the next version is tested on what this one wrote
# (crates/gpool-cli/tests/upgrade.rs, docs/operations.md "Upgrades").
#
#   scripts/store-fixture.sh --bin OLD/gpool --out crates/gpool-cli/tests/data/stores/NAME
#   scripts/store-fixture.sh --bin OLD/gpool --out DIR --postgres postgres://USER@HOST:PORT/EMPTY_DB
#
# With --postgres, a `gpool serve` on that (empty) database and one `gpool
# agent` stand in for `gpool up`, and the result is OUT/state.sql, the
# database as `pg_dump --no-owner --no-privileges` writes it.
#
# It starts `gpool up` on a scratch data directory with two simulated H100s
# and, through that binary's own CLI: jobs that succeed, fail, are cancelled,
# held, pending, and one left running when the daemon stops (an upgrade with
# jobs running); an array; tokens of each role; a pipeline run; a service; a
# recurring schedule; a node pool with a node being created. Then it stops the daemon (SIGTERM: the
# WAL is folded into the file) and writes OUT/state.db, OUT/pools.yaml and
# OUT/fixture.json (what it made, with the tokens' secrets: test data only).
set -euo pipefail

bin="" out="" pg=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --postgres) pg="$2"; shift 2 ;;
    *) echo "usage: $0 --bin PATH/gpool --out DIR [--postgres URL]" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] && [ -n "$out" ] || { echo "usage: $0 --bin PATH/gpool --out DIR" >&2; exit 2; }
bin="$(realpath "$bin")"
command -v jq >/dev/null || { echo "$0 needs jq (apt-get install jq)" >&2; exit 1; }

work="$(mktemp -d)"
data="$work/data"
mkdir -p "$data" "$out"
export GPOOL_DATA_DIR="$data"
# The running job's command line, which pkill finds (sleep takes 3600.PID seconds).
marker="sleep 3600.$$"
cleanup() {
  [ -n "${agent:-}" ] && kill "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
  [ -n "${daemon:-}" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  pkill -f "$marker" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# A pool whose one node (min: 1) is asked for and never registers: the store
# keeps it as being created, with its node token.
cat > "$out/pools.yaml" <<'YAML'
pools:
  - name: burst
    gpus: 2
    model: H100-80GB
    min: 1
    max: 2
    bootTimeout: 24h
    provider: {command: {create: ["true"], delete: ["true"]}}
YAML
if [ -z "$pg" ]; then
  "$bin" up --data-dir "$data" --listen 127.0.0.1:0 --simulate-gpus 2xH100-80GB --proxy-listen 127.0.0.1:0 \
    --pools "$out/pools.yaml" > "$work/up.out" 2> "$work/up.err" &
  daemon=$!
  for _ in $(seq 200); do [ -S "$data/gpool.sock" ] && break; sleep 0.1; done
  [ -S "$data/gpool.sock" ] || { cat "$work/up.err" >&2; exit 1; }
  g() { "$bin" "$@"; }   # GPOOL_DATA_DIR names the daemon: its socket, no token
else
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  GPOOL_DB="$pg" "$bin" serve --data-dir "$data" --listen "127.0.0.1:$port" --proxy-listen 127.0.0.1:0 \
    --pools "$out/pools.yaml" > "$work/serve.out" 2> "$work/serve.err" &
  daemon=$!
  for _ in $(seq 300); do [ -s "$data/admin.token" ] && grep -q "http://" "$work/serve.out" && break; sleep 0.1; done
  [ -s "$data/admin.token" ] || { cat "$work/serve.err" >&2; exit 1; }
  export GPOOL_SERVER="http://127.0.0.1:$port" GPOOL_TOKEN="$(cat "$data/admin.token")"
  g() { "$bin" "$@"; }
  "$bin" token create --user '*' --role node -o json | jq -r .token > "$work/node.token"
  chmod 600 "$work/node.token"
  env -u GPOOL_TOKEN -u GPOOL_DATA_DIR "$bin" agent --server "$GPOOL_SERVER" --token-file "$work/node.token" \
    --node-name n0 --simulate-gpus 2xH100-80GB --data-dir "$work/agent" > "$work/agent.out" 2> "$work/agent.err" &
  agent=$!
  for _ in $(seq 300); do g nodes -o json | jq -e 'map(select(.name == "n0")) | length == 1' >/dev/null 2>&1 && break; sleep 0.1; done
fi
id_of() { grep -oE '[0-9]+' | head -1; }
state() { g show "$1" -o json | jq -r 'if type == "array" then .[0].state else .state end'; }
until_state() {
  for _ in $(seq 300); do [ "$(state "$1")" = "$2" ] && return 0; sleep 0.1; done
  echo "job $1 never became $2 (it is $(state "$1"))" >&2; exit 1
}

succeeded=$(g submit --gpus 1 --name fixture-ok -- true | id_of)
failed=$(g submit --gpus 1 --name fixture-fails -- sh -c 'exit 3' | id_of)
array=$(g submit --gpus 1 --array 0-1 --name fixture-array -- true | id_of)
until_state "$succeeded" succeeded
until_state "$failed" failed
running=$(g submit --gpus 2 --name fixture-running -- $marker | id_of)
until_state "$running" running
pending=$(g submit --gpus 1 --name fixture-pending -- true | id_of)
held=$(g submit --gpus 1 --name fixture-held -- true | id_of)
g hold "$held" >/dev/null
cancelled=$(g submit --gpus 1 --name fixture-cancelled -- true | id_of)
g cancel "$cancelled" >/dev/null
until_state "$cancelled" cancelled

user_token=$(g token create --user ana --team ml -o json | jq -r .token)
reader_token=$(g token create --user bo --role reader -o json | jq -r .token)
admin_token=$(g token create --user carla --role admin -o json | jq -r .token)

cat > "$work/pipeline.yaml" <<'YAML'
name: fixture-pipeline
stages:
  - name: prep
    command: "true"
  - name: train
    needs: [prep]
    matrix: {lr: [0.1, 0.01]}
    command: echo {{matrix.lr}}
    resources: {nvidia.com/gpu: 1}
YAML
pipeline=$(g pipeline run "$work/pipeline.yaml" | id_of)
for _ in $(seq 100); do g pools -o json | jq -e '.[0].nodes | length > 0' >/dev/null && break; sleep 0.1; done
g pools -o json | jq -e '.[0].nodes | length > 0' >/dev/null || { echo "pool burst asked for no node" >&2; g pools >&2; exit 1; }

cat > "$work/service.yaml" <<'YAML'
name: fixture-svc
command: [sh, -c, "exec sleep 3600"]
resources: {nvidia.com/gpu: 1}
service:
  replicas: {min: 0, max: 2}
YAML
g submit -f "$work/service.yaml" >/dev/null

cat > "$work/schedule.yaml" <<'YAML'
schedule: "0 2 * * *"
timeZone: Europe/Paris
suspend: true
job: {command: "true"}
YAML
g schedule apply fixture-nightly -f "$work/schedule.yaml" >/dev/null

if [ -n "$pg" ]; then
  kill -TERM "$agent"; wait "$agent" || true; agent=""
fi
kill -TERM "$daemon"
wait "$daemon" || true
daemon=""
pkill -f "$marker" 2>/dev/null || true
if [ -z "$pg" ]; then
  [ ! -e "$data/state.db-wal" ] || [ ! -s "$data/state.db-wal" ] || { echo "the WAL was not folded in" >&2; exit 1; }
  cp "$data/state.db" "$out/state.db"
else
  pg_dump --no-owner --no-privileges --dbname="$pg" -f "$out/state.sql"
fi
version="$("$bin" --version)"
jq -n --arg version "$version" --arg commit "${FIXTURE_COMMIT:-unknown}" \
  --argjson succeeded "$succeeded" --argjson failed "$failed" --argjson array "$array" \
  --argjson running "$running" --argjson pending "$pending" --argjson held "$held" \
  --argjson cancelled "$cancelled" --argjson pipeline "$pipeline" \
  --arg user_token "$user_token" --arg reader_token "$reader_token" --arg admin_token "$admin_token" \
  '{written_by: $version, commit: $commit,
    jobs: {succeeded: $succeeded, failed: $failed, array: $array, running: $running,
           pending: $pending, held: $held, cancelled: $cancelled},
    pipeline_run: $pipeline, service: "fixture-svc", schedule: "fixture-nightly",
    tokens: {ana: $user_token, bo_reader: $reader_token, carla_admin: $admin_token}}' > "$out/fixture.json"
if [ -z "$pg" ]; then echo "$out/state.db"; else echo "$out/state.sql"; fi
