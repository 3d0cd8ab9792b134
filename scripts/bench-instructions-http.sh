#!/usr/bin/env bash
# Instructions per HTTP request, counted by callgrind over every thread of the server: a stockd
# serve (embedded engine, fresh data directory) and the bare axum handler (the HTTP ceiling,
# crates/stockd-server/examples/bare_axum.rs), each run under valgrind while wrk sends the flash
# requests (POST /v1/holds, confirm: true, one pool that never runs out; 10 connections, 15 s).
# Total instructions divided by the requests wrk counted. Both servers saturate the CPU in the
# throughput runs, so bare / stockd here predicts the wrk ratio of scripts/bench-http.sh without
# that run's noise. (The stockd figure includes its shutdown snapshot, a few percent.)
# Usage: scripts/bench-instructions-http.sh [STOCKD_BINARY...]
#   default: the release build (built if missing). Give copies of earlier builds to compare.
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
cargo build --release -q -p stockd-server --example bare_axum
WORK="$(mktemp -d)"
VPID=""
cleanup() { [ -z "$VPID" ] || kill "$VPID" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

# Runs "$@" (a server listening on $port) under callgrind, loads it, prints instructions/request.
measure() {
    local port=$1; shift
    rm -f "$WORK/cg.out"
    valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" "$@" 2>"$WORK/valgrind.log" &
    VPID=$!
    # Up once it answers anything (the bare handler has no /healthz); valgrind starts slowly.
    for _ in $(seq 1 120); do
        curl -s -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null && break
        sleep 0.5
    done
    curl -fs -X PUT "http://127.0.0.1:$port/v1/pools/hot" -d '{"total":1000000000000}' \
        >/dev/null 2>&1 || true
    wrk -t1 -c10 -d15s -s scripts/wrk/reserve_confirm.lua "http://127.0.0.1:$port" > "$WORK/wrk.txt"
    kill "$VPID"; wait "$VPID" 2>/dev/null || true; VPID=""
    local requests
    requests=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
    awk -v n="$requests" '/^summary:/ {printf "%.0f", $2 / n}' "$WORK/cg.out"
}

port=$(free_port)
bare=$(measure "$port" target/release/examples/bare_axum "127.0.0.1:$port")
printf '%-44s %12s\n' "server" "instr/req"
printf '%-44s %12s\n' "bare axum handler" "$bare"
for binary in "${BINARIES[@]}"; do
    port=$(free_port)
    mkdir -p "$WORK/data-$port"
    stockd=$(STOCKD_LOG=warn measure "$port" "$binary" serve --listen "127.0.0.1:$port" \
        --data-dir "$WORK/data-$port")
    printf '%-44s %12s   bare / stockd %s\n' "$binary" "$stockd" \
        "$(awk -v a="$bare" -v b="$stockd" 'BEGIN {printf "%.2f", a / b}')"
done
