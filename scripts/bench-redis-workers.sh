#!/usr/bin/env bash
# How many HTTP worker threads a Redis-backed `stockd serve` should have on this machine: one
# stockd (release build) on a fresh Redis (no persistence), measured with `stockd bench run
# --scenario flash` (50 connections, a stock that never runs out) with --worker-threads 1 and
# then 2, alternating, ROUNDS times (default 3). Per run: throughput, p99, and the CPU per
# request of stockd (/proc/PID/stat) and of Redis (INFO cpu). The default of `stockd serve`
# (docs/operations.md, "Cores") is chosen from these figures.
# Usage: scripts/bench-redis-workers.sh [seconds per run, default 8]. Installs redis-server and
# redis-tools from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
need redis-server redis-tools curl
DURATION="${1:-8}"
ROUNDS="${ROUNDS:-3}"
cargo build --release -q -p stockd --bin stockd
BIN=target/release/stockd

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
    --daemonize no >/dev/null &
PIDS+=($!)
for _ in $(seq 1 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.05; done

redis_cpu_s() { redis-cli -p "$RPORT" info cpu | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {print s}'; }
process_cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

echo "worker threads | requests/s | p99 ms | stockd CPU µs/request | Redis CPU µs/request"
for _ in $(seq 1 "$ROUNDS"); do
    for workers in 1 2; do
        redis-cli -p "$RPORT" flushall >/dev/null
        port=$(free_port)
        STOCKD_LOG=error "$BIN" serve --backend "redis://127.0.0.1:$RPORT" \
            --listen "127.0.0.1:$port" --worker-threads "$workers" &
        pid=$!
        PIDS+=("$pid")
        wait_http "http://127.0.0.1:$port/healthz"
        stockd_before=$(process_cpu_ticks "$pid")
        redis_before=$(redis_cpu_s)
        "$BIN" bench run --quiet --scenario flash --url "http://127.0.0.1:$port" \
            --stock 1000000000000 --per-user-limit 0 --connections 50 \
            --duration "${DURATION}s" --json "$WORK/run.json" >/dev/null
        stockd_after=$(process_cpu_ticks "$pid")
        redis_after=$(redis_cpu_s)
        kill "$pid"
        wait "$pid" || true
        python3 - "$WORK/run.json" "$workers" "$stockd_before" "$stockd_after" \
            "$redis_before" "$redis_after" "$(getconf CLK_TCK)" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
workers = sys.argv[2]
ticks = int(sys.argv[7])
stockd_s = (int(sys.argv[4]) - int(sys.argv[3])) / ticks
redis_s = float(sys.argv[6]) - float(sys.argv[5])
requests = run["requests"]
print(f"{workers} | {run['throughput_per_s']:.0f} | {run['latency']['p99_ms']:.1f} | "
      f"{stockd_s / requests * 1e6:.1f} | {redis_s / requests * 1e6:.1f}")
PY
    done
done
