#!/usr/bin/env bash
# Instructions per request of the load generators, counted by callgrind: `stockd bench run
# --scenario flash` (50 connections, 15 s) and wrk with the same flash requests
# (scripts/wrk/reserve_confirm.lua), each against a fresh embedded stockd running natively.
# Total instructions of the generator's process divided by the requests it sent, its set-up and
# verdict included. On a machine the generator shares with the server, each instruction it
# spends is CPU the server does not get: this is what "stockd bench flash / wrk -> stockd" in
# scripts/bench-http.sh measures with the noise of a throughput run.
# Usage: scripts/bench-instructions-client.sh [STOCKD_BINARY...]
#   default: the release build (built if missing). Each binary is run as the load generator;
#   the server is always the first binary. Give copies of earlier builds to compare.
# Installs valgrind and wrk from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
need valgrind wrk
BINARIES=("$@")
if [ ${#BINARIES[@]} -eq 0 ]; then
    cargo build --release -q -p stockd --bin stockd
    BINARIES=(target/release/stockd)
fi
SERVER="${BINARIES[0]}"
WORK="$(mktemp -d)"
SPID=""
cleanup() { [ -z "$SPID" ] || kill "$SPID" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

start_server() { # -> URL
    local port; port=$(free_port)
    mkdir -p "$WORK/data-$port"
    STOCKD_LOG=warn "$SERVER" serve --listen "127.0.0.1:$port" --data-dir "$WORK/data-$port" &
    SPID=$!
    URL="http://127.0.0.1:$port"
    wait_http "$URL/healthz"
}
stop_server() { kill "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; SPID=""; }
per_request() { awk -v n="$2" '/^summary:/ {printf "%.0f", $2 / n}' "$1"; }

printf '%-44s %10s %12s\n' "load generator" "requests" "instr/req"
start_server
curl -fs -X PUT "$URL/v1/pools/hot" -d '{"total":1000000000000}' >/dev/null
valgrind --tool=callgrind --callgrind-out-file="$WORK/wrk.cg" \
    wrk -t1 -c50 -d15s -s scripts/wrk/reserve_confirm.lua "$URL" >"$WORK/wrk.txt" 2>/dev/null
stop_server
requests=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
printf '%-44s %10s %12s\n' "wrk (reserve_confirm.lua)" "$requests" "$(per_request "$WORK/wrk.cg" "$requests")"
for binary in "${BINARIES[@]}"; do
    start_server
    valgrind --tool=callgrind --callgrind-out-file="$WORK/bench.cg" \
        "$binary" bench run --quiet --url "$URL" --scenario flash --stock 1000000000000 \
        --per-user-limit 0 --connections 50 --duration 15s --warmup 0s --json "$WORK/flash.json" \
        >/dev/null 2>"$WORK/valgrind.log"
    stop_server
    requests=$(python3 -c "import json; print(json.load(open('$WORK/flash.json'))['requests'])")
    printf '%-44s %10s %12s\n' "$binary bench (flash)" "$requests" \
        "$(per_request "$WORK/bench.cg" "$requests")"
done
