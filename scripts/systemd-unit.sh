#!/usr/bin/env bash
# Checks the systemd unit of docs/operations.md (docs/examples/stockd.service):
#   1. `systemd-analyze verify` finds nothing to say about it (any warning fails: verify itself
#      exits 0 on an unknown key or a value it cannot parse);
#   2. its ExecStart runs as written, with the settings the unit documents for
#      /etc/stockd/stockd.env: the command line (binary and state directory replaced by the
#      debug build and a temporary directory, the listen address by a free loopback port)
#      starts a server that answers with its tokens;
#   3. its stop works within the unit's TimeoutStopSec: SIGTERM (the unit's KillSignal) while a
#      reserve waits for stock lets that request finish with its answer, then stockd exits 0
#      (so Restart=on-failure does not restart it) well before the timeout, and a start on the
#      same directory has the data back.
# Installs systemd from Debian's packages when systemd-analyze is missing (nothing is started:
# only its analyzer runs). Usage: scripts/systemd-unit.sh (builds the debug binary if needed).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

UNIT=docs/examples/stockd.service
if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "== installing systemd (for systemd-analyze; nothing is started)"
    install_without_services systemd
fi
cargo build -q -p stockd --bin stockd
BIN="$(pwd)/target/debug/stockd"

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
    [ -z "$SERVER_PID" ] || kill "$SERVER_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

unit_value() { # KEY: the value of KEY= in the unit (the last one, as systemd reads it)
    sed -n "s/^$1=//p" "$UNIT" | tail -n 1
}

echo "== systemd-analyze verify $UNIT"
# verify needs the binary of ExecStart to exist: the debug build stands in for it.
sed "s#/usr/local/bin/stockd#$BIN#" "$UNIT" > "$WORK/stockd.service"
if ! out=$(systemd-analyze verify "$WORK/stockd.service" 2>&1) || [ -n "$out" ]; then
    echo "systemd-analyze verify has something to say about $UNIT:" >&2
    echo "$out" >&2
    exit 1
fi

exec_start=$(unit_value ExecStart)
timeout_stop_s=$(unit_value TimeoutStopSec)
[ "$(unit_value KillSignal)" = SIGTERM ] || { echo "$UNIT: KillSignal is not SIGTERM" >&2; exit 1; }
[ "$(unit_value Restart)" = on-failure ] || { echo "$UNIT: Restart is not on-failure" >&2; exit 1; }
case "$exec_start" in
    "/usr/local/bin/stockd serve --data-dir /var/lib/stockd"*) ;;
    *) echo "$UNIT: ExecStart is not the documented command: $exec_start" >&2; exit 1 ;;
esac
# The command line as systemd would run it (no quotes in it: words split on spaces).
read -r -a argv <<< "${exec_start//\/var\/lib\/stockd/$WORK/state}"
argv[0]="$BIN"

PORT=$(free_port)
BASE="http://127.0.0.1:$PORT"
ADMIN=admin-secret-for-the-unit-check
start_server() {
    # The variables the unit documents for /etc/stockd/stockd.env, and its Environment=.
    env STOCKD_LISTEN="0.0.0.0:$PORT" STOCKD_TOKENS="admin:$ADMIN,client:client-secret-unit" \
        "$(unit_value Environment | cut -d= -f1)=$(unit_value Environment | cut -d= -f2-)" \
        "${argv[@]}" >>"$WORK/stockd.log" 2>&1 &
    SERVER_PID=$!
    wait_http "$BASE/healthz" || { cat "$WORK/stockd.log" >&2; exit 1; }
}

echo "== ExecStart as written: ${argv[*]}"
start_server
auth=(-H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json')
curl -fsS "${auth[@]}" -X PUT "$BASE/v1/pools/unit-check" -d '{"total": 5}' >/dev/null
curl -fsS "${auth[@]}" -X POST "$BASE/v1/holds" \
    -d '{"hold_id": "unit-h1", "items": [{"pool": "unit-check", "qty": 2}], "confirm": true}' >/dev/null
status=$(curl -s -o /dev/null -w '%{http_code}' "$BASE/v1/pools/unit-check")
[ "$status" = 401 ] || { echo "a request without a token got $status, not 401" >&2; exit 1; }

echo "== SIGTERM with a waiting reserve in flight: it is answered, stockd exits 0 within ${timeout_stop_s}s"
curl -fsS "${auth[@]}" -X POST "$BASE/v1/holds" \
    -d '{"hold_id": "unit-h2", "items": [{"pool": "unit-check", "qty": 3}], "confirm": true}' >/dev/null
# The pool is sold out: this reserve waits (up to 3 s) for released stock.
curl -sS -o "$WORK/wait.json" -w '%{http_code}' "${auth[@]}" -X POST "$BASE/v1/holds" \
    -d '{"hold_id": "unit-h3", "items": [{"pool": "unit-check", "qty": 1}], "wait_ms": 3000}' \
    > "$WORK/wait.status" &
wait_pid=$!
waiting=""
for _ in $(seq 1 200); do
    if curl -fsS "${auth[@]}" "$BASE/metrics" | grep -Eq '^stockd_waiters 1(\.0)?$'; then waiting=1; break; fi
    sleep 0.05
done
[ -n "$waiting" ] || { echo "the reserve never waited (stockd_waiters stayed 0)" >&2; exit 1; }
stop_started=$(date +%s%N)
kill -TERM "$SERVER_PID"
rc=0
wait "$SERVER_PID" || rc=$?
SERVER_PID=""
stop_ms=$(( ($(date +%s%N) - stop_started) / 1000000 ))
wait "$wait_pid" || true
[ "$rc" -eq 0 ] || { echo "stockd exited $rc on SIGTERM (Restart=on-failure would restart it)" >&2; cat "$WORK/stockd.log" >&2; exit 1; }
[ "$(cat "$WORK/wait.status")" = 409 ] \
    || { echo "the waiting reserve got $(cat "$WORK/wait.status") $(cat "$WORK/wait.json"), not 409 out of stock" >&2; exit 1; }
[ "$stop_ms" -lt $(( ${timeout_stop_s%s} * 1000 )) ] \
    || { echo "the stop took ${stop_ms} ms, beyond TimeoutStopSec=$timeout_stop_s" >&2; exit 1; }
echo "stopped in ${stop_ms} ms, exit 0"

echo "== a restart on the same state directory has the data back"
start_server
sold=$(curl -fsS "${auth[@]}" "$BASE/v1/pools/unit-check" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sold"])')
[ "$sold" = 5 ] || { echo "after the restart the pool has sold=$sold, not 5" >&2; exit 1; }
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
SERVER_PID=""
echo "systemd unit: OK"
