#!/usr/bin/env bash
# Redis Cluster benchmark, all in one run: holds over 1, 2 and 8 partitions. Starts a 3-primary
# Redis Cluster (no replicas, no persistence) on free loopback ports, one stockd (release build)
# with --backend redis+cluster://... and 16 partitions, makes 8 pools that live in 8 different
# partitions, then runs wrk (50 connections) with POST /v1/holds confirm=true over the first
# 1, 2 and 8 of them, and reports req/s and each as a ratio of the single-partition hold.
# A single-partition hold is one call where its id hashes to its pool's partition, else two
# (a directory entry, then the hold); a hold over N partitions runs the cross-partition protocol
# (begin, N parts, commit, N applies, applied). After every run the pools are checked:
# total == available + held + sold, and sold == holds sold.
# Usage: scripts/bench-cluster.sh [seconds per run, default 10]
# Installs wrk, redis-server and redis-tools from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
CONNECTIONS=50

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
need wrk redis-server redis-tools

# A free port whose cluster bus port (+10000) is free and valid too.
cluster_port() {
    python3 -c '
import random, socket
while True:
    p = random.randint(20000, 55535)
    try:
        for port in (p, p + 10000):
            s = socket.socket(); s.bind(("127.0.0.1", port)); s.close()
        print(p); break
    except OSError:
        pass'
}

cargo build --release -q -p stockd --bin stockd
WORK="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

NODES=()
for i in 1 2 3; do
    port=$(cluster_port)
    mkdir -p "$WORK/node$port"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
        --cluster-enabled yes --cluster-config-file nodes.conf --dir "$WORK/node$port" \
        >/dev/null 2>&1 &
    PIDS+=($!)
    NODES+=("127.0.0.1:$port")
done
for node in "${NODES[@]}"; do
    until redis-cli -p "${node#*:}" PING >/dev/null 2>&1; do sleep 0.05; done
done
redis-cli --cluster create "${NODES[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
until redis-cli -p "${NODES[0]#*:}" CLUSTER INFO | grep -q cluster_state:ok; do sleep 0.1; done

PORT=$(free_port)
URL="redis+cluster://$(IFS=,; echo "${NODES[*]}")"
STOCKD_LOG=warn target/release/stockd serve --listen "127.0.0.1:$PORT" --backend "$URL" \
    --redis-partitions 16 &
PIDS+=($!)
B="http://127.0.0.1:$PORT"
wait_http "$B/healthz"

# Eight pools in eight different partitions.
POOLS=()
SEEN=" "
n=0
while [ ${#POOLS[@]} -lt 8 ]; do
    name="span-$n"; n=$((n + 1))
    partition=$(curl -fs -X PUT "$B/v1/pools/$name" -d '{"total":1000000000000}' \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["partition"])')
    if [[ "$SEEN" == *" $partition "* ]]; then
        curl -fs -X DELETE "$B/v1/pools/$name" >/dev/null
    else
        SEEN="$SEEN$partition "
        POOLS+=("$name")
    fi
done

check_pools() {
    for pool in "$@"; do
        curl -fs "$B/v1/pools/$pool" | python3 -c '
import json, sys
p = json.load(sys.stdin)
ok = p["total"] == p["available"] + p["held"] + p["sold"] and p["held"] == 0
print(p["sold"] if ok else "BROKEN %s" % p)'
    done
}

declare -A RPS
for span in 1 2 8; do
    pools=$(IFS=,; echo "${POOLS[*]:0:$span}")
    before=$(check_pools "${POOLS[0]}")
    STOCKD_BENCH_POOLS="$pools" wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" --latency \
        -s scripts/wrk/reserve_confirm_items.lua "$B" > "$WORK/span$span.txt"
    sleep 2.5   # let any part still being applied land (the sweepers finish left work after 2 s)
    rps=$(awk '/^Requests\/sec:/ {print $2}' "$WORK/span$span.txt")
    p99=$(awk '$1=="99%" {print $2}' "$WORK/span$span.txt")
    non2xx=$(awk '/Non-2xx/ {print $5}' "$WORK/span$span.txt"); non2xx=${non2xx:-0}
    after=$(check_pools "${POOLS[@]:0:$span}" | tr '\n' ' ')
    RPS[$span]=$rps
    echo "hold over $span partition(s): $rps req/s (p99 $p99), non-2xx $non2xx; pools sold: $after(first pool had $before before)"
done

echo
echo "== Redis Cluster benchmark: 3 primaries, 16 partitions, $DURATION s per run, $CONNECTIONS connections"
printf '%-40s %12s %8s\n' "hold over" "req/s" "ratio"
for span in 1 2 8; do
    printf '%-40s %12s %8s\n' "$span partition(s)" "${RPS[$span]}" \
        "$(python3 -c "print(f'{float(${RPS[$span]})/float(${RPS[1]}):.2f}')")"
done
