#!/usr/bin/env bash
# Where a stockd server's CPU goes per request, thread by thread: wrk sends the flash requests
# (POST /v1/holds, confirm: true, one pool that never runs out) to a fresh embedded stockd, and
# the script reads each thread's CPU time and context switches from /proc before and after, and
# the server's fsyncs from /metrics. Per request: CPU microseconds (user + kernel) and context
# switches of the HTTP workers (tokio-rt-worker) and of the writer (stockd-writer); requests
# per fsync. The bare axum handler (crates/stockd-server/examples/bare_axum.rs) is measured
# first, the same way: the HTTP stack's own cost per request. Then redis-server, the same way,
# under redis-benchmark -c CONNECTIONS running the EVALSHA check-and-deduct of
# scripts/bench-http.sh, without persistence and with AOF appendfsync always (as durable as
# stockd): what the alternative costs per request. Each load generator's own CPU per request
# is printed too (both share the machine's cores with the server they measure).
#
# Usage: scripts/bench-cpu.sh [SECONDS] [CONNECTIONS] [STOCKD_BINARY...]
#   defaults: 6 s, 50 connections, the release build (built if missing). Give several binaries
#   (copies of earlier builds) to compare them in one run, alternated as given.
# Installs wrk, redis-server and redis-tools from Debian's packages when missing.
# docs/benchmarks.md ("The hot path") has the figures this measured.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-6}"
CONNECTIONS="${2:-50}"
shift $(($# < 2 ? $# : 2))
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
need wrk redis-server redis-tools
BINARIES=("$@")
if [ ${#BINARIES[@]} -eq 0 ]; then
    cargo build --release -q -p stockd --bin stockd
    BINARIES=(target/release/stockd)
fi
THREADS=$((CONNECTIONS < 2 ? 1 : 2))
WORK="$(mktemp -d)"
SPID=""
cleanup() { [ -z "$SPID" ] || kill "$SPID" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

# One line per thread name: name, context switches, user and kernel CPU ticks (summed over
# its threads).
threads() {
    for task in /proc/"$1"/task/*; do
        printf '%s %s %s\n' "$(tr ' ' '_' < "$task/comm")" \
            "$(awk '/^voluntary_ctxt_switches/ {v=$2} /^nonvoluntary_ctxt_switches/ {n=$2} END {print v+n}' "$task/status")" \
            "$(awk '{print $14, $15}' "$task/stat")"
    done | awk '{c[$1] += $2; u[$1] += $3; k[$1] += $4} END {for (n in c) print n, c[n], u[n], k[n]}' | sort
}

# Prints each thread name's CPU and context switches per request between $WORK/before and
# $WORK/after (threads named like the process itself, matched by the regex, are left out of
# the per-name lines but counted in the sum), then the sum over all threads.
per_request() {
    join "$WORK/before" "$WORK/after" | awk -v n="$1" -v hz="$2" -v main="$3" '
        { user = ($6 - $3) * 1e6 / hz / n; kernel = ($7 - $4) * 1e6 / hz / n; switches = ($5 - $2) / n }
        user + kernel > 0 && $1 !~ main {
            printf "  %-16s CPU %6.1f us/request (user %.1f, kernel %.1f), %.3f context switches/request\n",
                $1, user + kernel, user, kernel, switches
        }
        { tu += user; tk += kernel }
        END { printf "  %-16s CPU %6.1f us/request (user %.1f, kernel %.1f)\n", "all threads", tu + tk, tu, tk }'
}

# The load generator's own CPU per request, from bash's `time` in $WORK/client-cpu.
client_cpu() {
    awk -v name="$1" -v n="$2" '
        /^user/ { split($2, t, /[ms]/); u = (t[1] * 60 + t[2]) * 1e6 / n }
        /^sys/ { split($2, t, /[ms]/); k = (t[1] * 60 + t[2]) * 1e6 / n }
        END { printf "  %-16s CPU %6.1f us/request (user %.1f, kernel %.1f)\n", name " (client)", u + k, u, k }' \
        "$WORK/client-cpu"
}

ticks=$(getconf CLK_TCK)
cargo build --release -q -p stockd-server --example bare_axum
for binary in bare "${BINARIES[@]}"; do
    port=$(free_port)
    if [ "$binary" = bare ]; then
        target/release/examples/bare_axum "127.0.0.1:$port" &
        SPID=$!
        # Up once it answers anything (it has no /healthz).
        for _ in $(seq 1 200); do
            curl -s -o /dev/null "http://127.0.0.1:$port/" && break
            sleep 0.05
        done
        binary="bare axum handler"
    else
        mkdir -p "$WORK/data-$port"
        STOCKD_LOG=warn "$binary" serve --listen "127.0.0.1:$port" --data-dir "$WORK/data-$port" &
        SPID=$!
        wait_http "http://127.0.0.1:$port/healthz"
        curl -fs -X PUT "http://127.0.0.1:$port/v1/pools/hot" -d '{"total":1000000000000}' >/dev/null
    fi
    threads "$SPID" > "$WORK/before"
    { time wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s scripts/wrk/reserve_confirm.lua \
        "http://127.0.0.1:$port" > "$WORK/wrk.txt"; } 2> "$WORK/client-cpu"
    threads "$SPID" > "$WORK/after"
    requests=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
    syncs=$(curl -fs "http://127.0.0.1:$port/metrics" 2>/dev/null | awk '/^stockd_wal_syncs_total/ {print $2}' || true)
    echo "$binary, $CONNECTIONS connections: $(awk '/^Requests\/sec:/ {print $2}' "$WORK/wrk.txt") req/s," \
        "p50 $(awk '$1 == "50%" {print $2}' "$WORK/wrk.txt"), p99 $(awk '$1 == "99%" {print $2}' "$WORK/wrk.txt")," \
        "$(awk -v n="$requests" -v s="${syncs:-0}" 'BEGIN {printf "%.1f", (s > 0 ? n / s : 0)}') requests per fsync"
    per_request "$requests" "$ticks" '^(stockd|bare_axum)$'
    client_cpu wrk "$requests"
    kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=""
done

# redis-server, without persistence and with appendfsync always.
for persistence in none always; do
    port=$(free_port)
    mkdir -p "$WORK/redis-$port"
    if [ "$persistence" = none ]; then
        redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >/dev/null &
    else
        redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly yes --appendfsync always \
            --dir "$WORK/redis-$port" --daemonize no >/dev/null &
    fi
    SPID=$!
    for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
    redis-cli -p "$port" set stock 1000000000000 >/dev/null
    sha=$(redis-cli -p "$port" script load "$REDIS_CHECK_AND_DEDUCT_LUA")
    # About DURATION seconds of requests at the rate redis-benchmark reaches here.
    rate=50000
    [ "$persistence" = always ] || rate=80000
    requests=$((DURATION * rate))
    threads "$SPID" > "$WORK/before"
    { time redis-benchmark -p "$port" -c "$CONNECTIONS" -n "$requests" --csv EVALSHA "$sha" 1 stock 1 \
        > "$WORK/rb.csv"; } 2> "$WORK/client-cpu"
    threads "$SPID" > "$WORK/after"
    echo "redis-server EVALSHA, persistence $persistence, $CONNECTIONS connections:" \
        "$(tail -1 "$WORK/rb.csv" | python3 -c 'import csv,sys; r=list(csv.reader(sys.stdin))[-1]; print(f"{float(r[1]):,.0f} req/s, p50 {r[4]}ms, p99 {r[6]}ms")')"
    per_request "$requests" "$ticks" '^redis-server$'
    client_cpu redis-benchmark "$requests"
    kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=""
done
