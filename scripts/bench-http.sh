#!/usr/bin/env bash
# HTTP benchmark, all in one run so that the ratios are comparable on a shared, noisy machine:
#   1. stockd (release build, embedded engine, fsync'd log): POST /v1/holds confirm=true, unique
#      hold ids, one hot pool, wrk with 50 keep-alive connections;
#   2. a bare axum JSON handler (no state, no log) under the same wrk load: the HTTP ceiling;
#   3. redis-benchmark -c 50 running EVALSHA of a Lua check-and-deduct on one key, without
#      persistence (Redis's fastest, and what most hand-written Lua setups run), and
#   4. the same with AOF appendfsync always: Redis as durable as stockd.
# Usage: scripts/bench-http.sh [seconds per run, default 10]
# Installs wrk, redis-server and redis-tools from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
CONNECTIONS=50
THREADS=2

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
need wrk redis-server redis-tools


cargo build --release -q -p stockd --bin stockd
cargo build --release -q -p stockd-server --example bare_axum
WORK="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

rps_of() { awk '/^Requests\/sec:/ {print $2}' "$1"; }
p99_of() { awk '$1=="99%" {print $2}' "$1"; }
errors_of() { awk '/Non-2xx/ {print $5} END {}' "$1" | head -1; }

# 1. stockd
PORT=$(free_port)
STOCKD_LOG=warn target/release/stockd serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" &
PIDS+=($!)
wait_http "http://127.0.0.1:$PORT/healthz"
curl -fs -X PUT "http://127.0.0.1:$PORT/v1/pools/hot" -d '{"total":1000000000000}' >/dev/null
wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s scripts/wrk/reserve_confirm.lua \
    "http://127.0.0.1:$PORT" > "$WORK/stockd.txt"
SOLD=$(curl -fs "http://127.0.0.1:$PORT/v1/pools/hot" | python3 -c 'import json,sys; p=json.load(sys.stdin); print(p["sold"], p["total"]==p["available"]+p["held"]+p["sold"])')
kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true

# 2. bare axum
PORT=$(free_port)
target/release/examples/bare_axum "127.0.0.1:$PORT" &
PIDS+=($!)
sleep 0.3
wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s scripts/wrk/reserve_confirm.lua \
    "http://127.0.0.1:$PORT" > "$WORK/axum.txt"
kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true

# 3. redis EVALSHA check-and-deduct
PORT=$(free_port)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >/dev/null &
PIDS+=($!)
for _ in $(seq 1 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
redis-cli -p "$PORT" set stock 1000000000000 >/dev/null
SHA=$(redis-cli -p "$PORT" script load "local s = tonumber(redis.call('GET', KEYS[1])) if s and s >= tonumber(ARGV[1]) then redis.call('DECRBY', KEYS[1], ARGV[1]) return 1 end return 0")
REDIS_N=$(( DURATION * 150000 ))
redis-benchmark -p "$PORT" -c "$CONNECTIONS" -n "$REDIS_N" -q EVALSHA "$SHA" 1 stock 1 > "$WORK/redis.txt" 2>&1
REDIS_LINE=$(tr '\r' '\n' < "$WORK/redis.txt" | grep 'requests per second' | tail -1)
REDIS_RPS=$(sed -E 's/.*: ([0-9.]+) requests per second.*/\1/' <<< "$REDIS_LINE")
REDIS_P50=$(sed -E 's/.*p50=([0-9.]+ msec).*/\1/' <<< "$REDIS_LINE")

kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true

# 4. the same, with Redis as durable as stockd: AOF with an fsync before every reply.
PORT=$(free_port)
mkdir -p "$WORK/redis-aof"
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly yes --appendfsync always \
    --dir "$WORK/redis-aof" --daemonize no >/dev/null &
PIDS+=($!)
for _ in $(seq 1 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
redis-cli -p "$PORT" set stock 1000000000000 >/dev/null
SHA=$(redis-cli -p "$PORT" script load "local s = tonumber(redis.call('GET', KEYS[1])) if s and s >= tonumber(ARGV[1]) then redis.call('DECRBY', KEYS[1], ARGV[1]) return 1 end return 0")
redis-benchmark -p "$PORT" -c "$CONNECTIONS" -n $(( DURATION * 40000 )) -q EVALSHA "$SHA" 1 stock 1 > "$WORK/redis-aof.txt" 2>&1
AOF_LINE=$(tr '\r' '\n' < "$WORK/redis-aof.txt" | grep 'requests per second' | tail -1)
AOF_RPS=$(sed -E 's/.*: ([0-9.]+) requests per second.*/\1/' <<< "$AOF_LINE")
AOF_P50=$(sed -E 's/.*p50=([0-9.]+ msec).*/\1/' <<< "$AOF_LINE")

STOCKD_RPS=$(rps_of "$WORK/stockd.txt"); AXUM_RPS=$(rps_of "$WORK/axum.txt")
echo
echo "== HTTP benchmark: ${DURATION}s per run, ${CONNECTIONS} connections, $(nproc) cores"
printf "%-34s %12s %10s\n" "run" "req/s" "p99"
printf "%-34s %12s %10s\n" "stockd reserve confirm=true" "$STOCKD_RPS" "$(p99_of "$WORK/stockd.txt")"
printf "%-34s %12s %10s\n" "bare axum JSON handler" "$AXUM_RPS" "$(p99_of "$WORK/axum.txt")"
printf "%-34s %12s %10s\n" "redis EVALSHA check-and-deduct" "$REDIS_RPS" "p50 $REDIS_P50"
printf "%-34s %12s %10s\n" "redis EVALSHA, appendfsync always" "$AOF_RPS" "p50 $AOF_P50"
python3 - "$STOCKD_RPS" "$AXUM_RPS" "$REDIS_RPS" "$AOF_RPS" <<'PY'
import sys
s, a, r, f = (float(x) if x else 0.0 for x in sys.argv[1:5])
def ratio(name, base):
    print(f"ratio stockd / {name:<27}: {s / base:.2f}" if base else f"ratio stockd / {name}: n/a")
ratio("bare axum", a)
ratio("redis (no persistence)", r)
ratio("redis (appendfsync always)", f)
PY
echo "stockd non-2xx responses: $(awk '/Non-2xx/ {print $NF}' "$WORK/stockd.txt" | grep . || echo 0)"
echo "stockd pool after run: sold=${SOLD% *} invariant_holds=${SOLD#* }"
