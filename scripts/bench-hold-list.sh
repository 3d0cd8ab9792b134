#!/usr/bin/env bash
# Listing holds (GET /v1/holds) on a Redis backend with many retained holds on one pool: time per
# page of 100 at the start, after half and after 90% of the holds, by pool and unfiltered, and a
# page whose status filter matches nothing (it examines its bound of 1,000 index entries and
# answers an empty page with a next). Each figure is the median of 20 pages (curl's time_total,
# loopback). The holds are made through the API (POST /v1/batch, 1,000 confirm:true reserves a
# request), so they are indexed exactly as in production.
# Usage: scripts/bench-hold-list.sh [holds, default 200000]. Runs target/debug/stockd (build it
# first: cargo build -p stockd) on a fresh redis-server bound to 127.0.0.1; the page's cost is
# Redis's ZRANGEBYLEX and hold reads, the server's share is a JSON pass. The embedded engine's
# figures come from `cargo bench -p stockd-engine --bench hold_list` (1,000,000 holds).
set -euo pipefail
cd "$(dirname "$0")/.."
HOLDS="${1:-200000}"
BATCH=1000

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
need redis-server redis-tools curl

REDIS_DIR=$(mktemp -d)
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$REDIS_DIR" --daemonize no >"$REDIS_DIR/redis.log" 2>&1 &
REDIS_PID=$!
cleanup() {
    stop_debug_stockd
    kill "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
    rm -rf "$REDIS_DIR"
}
trap cleanup EXIT
for _ in $(seq 1 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
start_debug_stockd --backend "redis://127.0.0.1:$REDIS_PORT"
trap cleanup EXIT
B="$STOCKD_BASE"

curl -fs -X PUT "$B/v1/pools/hot" -d '{"total": 1000000000000}' >/dev/null
started=$(date +%s.%N)
for ((from = 0; from < HOLDS; from += BATCH)); do
    python3 - "$from" "$BATCH" "$HOLDS" >"$REDIS_DIR/batch.json" <<'PY'
import json, sys
start, size, total = (int(a) for a in sys.argv[1:])
ops = [{"op": "reserve", "hold_id": f"order-{n:07d}", "user": f"user-{n % 1000}",
        "items": [{"pool": "hot", "qty": 1}], "confirm": True}
       for n in range(start, min(start + size, total))]
print(json.dumps({"ops": ops}))
PY
    curl -fs -X POST "$B/v1/batch" --data-binary "@$REDIS_DIR/batch.json" >/dev/null
done
made=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.0f}')" "$started" "$(date +%s.%N)")
echo "$HOLDS holds made through the API in ${made} s (Redis used_memory: $(redis-cli -p "$REDIS_PORT" info memory | grep '^used_memory_human' | cut -d: -f2 | tr -d '\r'))"

# Median of 20 time_total readings, in ms.
page_ms() {
    for _ in $(seq 1 20); do
        curl -fs -o /dev/null -w '%{time_total}\n' "$B/v1/holds?$1"
    done | sort -n | sed -n 10p | awk '{printf "%.2f", $1 * 1000}'
}
half=$(printf 'order-%07d' $((HOLDS / 2)))
ninety=$(printf 'order-%07d' $((HOLDS * 9 / 10)))
printf '%-44s %10s\n' "page of 100" "ms (median)"
for query in "pool=hot&limit=100" "pool=hot&limit=100&after=$half" "pool=hot&limit=100&after=$ninety" \
    "limit=100" "limit=100&after=$ninety" "user=user-7&limit=100&after=$half" \
    "pool=hot&status=refunded&limit=100" "pool=hot&status=refunded&limit=100&after=$ninety"; do
    printf '%-44s %10s\n' "$query" "$(page_ms "$query")"
done
