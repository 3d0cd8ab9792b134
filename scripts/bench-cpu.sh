#!/usr/bin/env bash
# Where a stockd server's CPU goes per request, thread by thread: wrk sends the flash requests
# (POST /v1/holds, confirm: true, one pool that never runs out) to a fresh embedded stockd, and
# the script reads each thread's CPU time and context switches from /proc before and after, and
# the server's fsyncs from /metrics. Per request: CPU microseconds (user + kernel) and context
# switches of the HTTP workers (tokio-rt-worker) and of the writer (stockd-writer); requests
# per fsync. The bare axum handler (crates/stockd-server/examples/bare_axum.rs) is measured
# first, the same way: the HTTP stack's own cost per request.
#
# Usage: scripts/bench-cpu.sh [SECONDS] [CONNECTIONS] [STOCKD_BINARY...]
#   defaults: 6 s, 50 connections, the release build (built if missing). Give several binaries
#   (copies of earlier builds) to compare them in one run, alternated as given.
# Installs wrk from Debian's packages when missing. docs/benchmarks.md ("The hot path") has
# the figures this measured.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-6}"
CONNECTIONS="${2:-50}"
shift $(($# < 2 ? $# : 2))
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
need wrk
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
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s scripts/wrk/reserve_confirm.lua \
        "http://127.0.0.1:$port" > "$WORK/wrk.txt"
    threads "$SPID" > "$WORK/after"
    requests=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
    syncs=$(curl -fs "http://127.0.0.1:$port/metrics" 2>/dev/null | awk '/^stockd_wal_syncs_total/ {print $2}' || true)
    ticks=$(getconf CLK_TCK)
    echo "$binary, $CONNECTIONS connections: $(awk '/^Requests\/sec:/ {print $2}' "$WORK/wrk.txt") req/s," \
        "p50 $(awk '$1 == "50%" {print $2}' "$WORK/wrk.txt"), p99 $(awk '$1 == "99%" {print $2}' "$WORK/wrk.txt")," \
        "$(awk -v n="$requests" -v s="${syncs:-0}" 'BEGIN {printf "%.1f", (s > 0 ? n / s : 0)}') requests per fsync"
    join "$WORK/before" "$WORK/after" | awk -v n="$requests" -v hz="$ticks" '
        { user = ($6 - $3) * 1e6 / hz / n; kernel = ($7 - $4) * 1e6 / hz / n; switches = ($5 - $2) / n }
        user + kernel > 0 && $1 !~ /^(stockd|bare_axum)$/ {
            printf "  %-16s CPU %6.1f us/request (user %.1f, kernel %.1f), %.3f context switches/request\n",
                $1, user + kernel, user, kernel, switches
            tu += user; tk += kernel
        }
        END { printf "  %-16s CPU %6.1f us/request (user %.1f, kernel %.1f)\n", "all threads", tu + tk, tu, tk }'
    kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=""
done
