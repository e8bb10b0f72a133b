#!/usr/bin/env bash
# Start-up with many finished jobs, and cost reports on them (BENCHMARKS.md,
# "Cost reports and the usage ledger"): `gpool up` runs one real job, stops;
# its record is copied JOBS times into the store (users, teams and end times
# spread over 30 days, rising with the id); then `gpool up` is started again
# and timed until it answers, and each cost report is timed by curl.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-100000}
BIN=${BIN:-./target/release/gpool}
[ -x "$BIN" ] || cargo build --release --bin gpool
dir=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
trap 'kill $up 2>/dev/null || true; rm -rf "$dir"' EXIT
start() {
  "$BIN" up --simulate-gpus 8xH100-80GB --data-dir "$dir" --listen "127.0.0.1:$port" >"$dir/up.log" 2>&1 &
  up=$!
}
ready() { until curl -sf -o /dev/null "http://127.0.0.1:$port/api/v1/whoami" -H "Authorization: Bearer $(cat "$dir/admin.token" 2>/dev/null)"; do sleep 0.05; done; }
start
ready
curl -sf "http://127.0.0.1:$port/api/v1/jobs" -H "Authorization: Bearer $(cat "$dir/admin.token")" \
    -H 'Content-Type: application/json' -d '{"command": ["sleep", "1"], "resources": {"nvidia.com/gpu": 1}}' >/dev/null
until curl -sf "http://127.0.0.1:$port/api/v1/jobs/1" -H "Authorization: Bearer $(cat "$dir/admin.token")" | grep -q '"succeeded"'; do sleep 0.2; done
kill $up; wait $up 2>/dev/null || true
python3 - "$dir/state.db" "$JOBS" <<'PY'
import json, sqlite3, sys
db, n = sys.argv[1], int(sys.argv[2])
c = sqlite3.connect(db)
row = c.execute("SELECT id, user_name, team, queue, state, submitted_ms, doc FROM jobs WHERE id = 1").fetchone()
doc = json.loads(row[6])
end = doc["ended_ms"]
rows = []
for i in range(n):
    d = dict(doc)
    d["id"] = 1000 + i
    d["user"], d["team"] = f"u{i % 50}", f"t{i % 10}"
    # Ids follow submission, as in the store: the newest job ended last.
    shift = (n - 1 - i) * (30 * 86400000 // n)
    d["submitted_ms"], d["started_ms"], d["ended_ms"] = doc["submitted_ms"] - shift, doc["started_ms"] - shift, end - shift
    rows.append((d["id"], d["user"], d["team"], row[3], row[4], d["submitted_ms"], json.dumps(d)))
# The real job (id 1) becomes the oldest: ended before all the copies.
old = dict(doc)
back = 31 * 86400000
old["submitted_ms"], old["started_ms"], old["ended_ms"] = doc["submitted_ms"] - back, doc["started_ms"] - back, end - back
c.execute("UPDATE jobs SET doc = ?, submitted_ms = ? WHERE id = 1", (json.dumps(old), old["submitted_ms"]))
c.executemany("INSERT INTO jobs (id, user_name, team, queue, state, submitted_ms, doc) VALUES (?,?,?,?,?,?,?)", rows)
c.commit()
PY
t0=$(date +%s.%N)
start
ready
t1=$(date +%s.%N)
echo "== $JOBS finished jobs in the store"
echo "start-up until the API answers: $(python3 -c "print(f'{$t1 - $t0:.2f} s')")"
for q in "by=team&since=30d" "by=user&since=7d" "by=team&since=1d" "by=job&since=30d" "by=job&since=7d" "by=job&since=1d"; do
  for _ in 1 2 3; do
    curl -s -o /dev/null -w "%{time_total} %{size_download}\n" "http://127.0.0.1:$port/api/v1/cost?$q" \
      -H "Authorization: Bearer $(cat "$dir/admin.token")"
  done | sort -n | sed -n 2p | awk -v q="$q" '{printf "cost %-18s median of 3: %.3f s, %d bytes\n", q, $1, $2}'
done
