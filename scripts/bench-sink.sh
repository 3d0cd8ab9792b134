#!/usr/bin/env bash
# The sink's speed against reading the feed alone, in the same run: an embedded stockd with
# EVENTS events (confirm:true reserves through POST /v1/batch, two events each), a private
# PostgreSQL (initdb in a temporary directory, fsync and synchronous_commit on), then
#   baseline: `stockd events tail --after 0 --no-follow --json` (pages of 1,000, printed, dropped)
#   sink:     `stockd sink postgres --once` (pages of 1,000, one transaction each)
# both reading the whole feed from the start. Prints events/s of each and their ratio.
# Usage: scripts/bench-sink.sh [events, default 200000] [--batch N for the sink, default 1000].
# Uses target/release/stockd when it exists (cargo build --release -p stockd), else target/debug.
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${1:-200000}"
SINK_BATCH="${2:-1000}"
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
need curl python3

STOCKD=target/release/stockd
[ -x "$STOCKD" ] || STOCKD=target/debug/stockd
[ -x "$STOCKD" ] || { echo "build stockd first: cargo build --release -p stockd" >&2; exit 1; }

PG_BIN=$(dirname "$(readlink -f "$(command -v initdb 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")")
WORK=$(mktemp -d)
as_postgres() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
[ "$(id -u)" -ne 0 ] || chown postgres "$WORK"
as_postgres "$PG_BIN/initdb" -D "$WORK/pg" -U postgres --auth=trust --locale=C -E UTF8 --no-sync >/dev/null
PG_PORT=$(free_port)
as_postgres "$PG_BIN/postgres" -D "$WORK/pg" -h 127.0.0.1 -p "$PG_PORT" -k "$WORK/pg" >"$WORK/pg.log" 2>&1 &
PG_PID=$!
SINK_PID=""
cleanup() {
    stop_debug_stockd
    # The postmaster itself (PG_PID may be runuser's shell, which ignores SIGQUIT): immediate
    # shutdown, nothing to keep.
    local postmaster
    postmaster=$(head -n 1 "$WORK/pg/postmaster.pid" 2>/dev/null || true)
    [ -z "$postmaster" ] || kill -QUIT "$postmaster" 2>/dev/null || true
    wait "$PG_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
DSN="host=127.0.0.1 port=$PG_PORT user=postgres dbname=postgres"
for _ in $(seq 1 200); do "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" && break; sleep 0.05; done

STOCKD_WORK=$(mktemp -d)
port=$(free_port)
STOCKD_BASE="http://127.0.0.1:$port"
"$STOCKD" serve --listen "127.0.0.1:$port" --data-dir "$STOCKD_WORK/data" >"$STOCKD_WORK/stockd.log" 2>&1 &
STOCKD_PID=$!
wait_http "$STOCKD_BASE/healthz"
trap cleanup EXIT
B="$STOCKD_BASE"

curl -fs -X PUT "$B/v1/pools/hot" -d '{"total": 1000000000000}' >/dev/null
for pool in a b c d; do curl -fs -X PUT "$B/v1/pools/$pool" -d '{"total": 1000000000}' >/dev/null; done
HOLDS=$((EVENTS / 2))
for ((from = 0; from < HOLDS; from += 1000)); do
    python3 - "$from" 1000 "$HOLDS" >"$WORK/batch.json" <<'PY'
import json, sys
start, size, total = (int(a) for a in sys.argv[1:])
pools = ["hot", "a", "b", "c", "d"]
ops = [{"op": "reserve", "hold_id": f"order-{n:07d}", "user": f"user-{n % 1000}",
        "items": [{"pool": pools[n % 5], "qty": 1}], "confirm": True}
       for n in range(start, min(start + size, total))]
print(json.dumps({"ops": ops}))
PY
    curl -fs -X POST "$B/v1/batch" --data-binary "@$WORK/batch.json" >/dev/null
done

seconds() { python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$1" "$2"; }
t0=$(date +%s.%N)
read_count=$("$STOCKD" events tail --url "$B" --after 0 --no-follow --json 2>/dev/null | wc -l)
t1=$(date +%s.%N)
"$STOCKD" sink postgres --once --url "$B" --dsn "$DSN" --batch "$SINK_BATCH" 2>"$WORK/sink.log"
t2=$(date +%s.%N)
applied=$(as_postgres "$PG_BIN/psql" -At -h 127.0.0.1 -p "$PG_PORT" -U postgres -c 'SELECT count(*) FROM stockd_events')

read_s=$(seconds "$t0" "$t1")
sink_s=$(seconds "$t1" "$t2")
python3 - "$read_count" "$read_count" "$read_s" "$applied" "$sink_s" "$STOCKD" "$SINK_BATCH" <<'PY'
import sys
made, read, read_s, applied, sink_s, binary, batch = sys.argv[1:]
read_rate = int(read) / float(read_s)
sink_rate = int(applied) / float(sink_s)
print(f"{binary}: {made} events in the feed; sink pages of {batch}")
print(f"read the feed (events tail --no-follow): {int(read):>8} events in {float(read_s):6.2f} s = {read_rate:>9.0f} events/s")
print(f"sink postgres --once:                     {int(applied):>8} events in {float(sink_s):6.2f} s = {sink_rate:>9.0f} events/s")
print(f"sink / read: {sink_rate / read_rate:.2f}")
PY
