#!/usr/bin/env bash
# HTTP benchmark of the embedded engine, all in one run so that the ratios are comparable on a
# shared, noisy machine. stockd is measured with `stockd bench run`, which ends every run with a
# verdict read back from the server:
#   1. flash: POST /v1/holds confirm=true on one hot pool (stock that never runs out, no per-user
#      limit), 50 connections, closed loop;
#   2. team: 20 five-slot team pools, 1,000 buyers racing for each, 1,000 connections: exactly 5
#      winners per team, the latency of the race, and its order (losers a later winner overtook);
#   3. batch: the batch endpoint with 1,000 reserve+confirm ops per request, 4 connections;
# and the baselines, each under the load generator it is measured with elsewhere:
#   4. the same flash requests from wrk (50 connections), and a bare axum JSON handler (no state,
#      no log) under the same wrk load: the HTTP ceiling (the bare handler has no pools for
#      `stockd bench` to set up and read back, so both go through wrk for this ratio); and the
#      bare handler at 1,000 connections, the HTTP stack's own tail;
#   5. redis-benchmark -c 50 running EVALSHA of a Lua check-and-deduct on one key, without
#      persistence and with AOF appendfsync always (as durable as stockd), and with -P 16
#      (pipelined: what the batch endpoint is compared with), and with -c 1000 (the tail the
#      team race's 1,000 connections is compared with);
#   6. `stockd bench lab --only pg-update,stockd-embedded`: PostgreSQL's conditional UPDATE
#      (`UPDATE ... SET available = available - 1 WHERE ... AND available >= 1`, autocommit,
#      fsync and synchronous_commit on) and stockd embedded under the same load: 50 buyers, one
#      hot row / pool whose stock never runs out, on servers the lab starts itself.
# Exits 1 when a verdict failed: at once for a stockd bench run's, after printing the table for the
# lab's (a variant oversold, failed or was skipped, or stockd's verdict in it failed).
# Usage: scripts/bench-http.sh [seconds per run, default 10]. Set BENCH_OUT=DIR to keep the JSON
# reports and SVG plots of the stockd runs and the lab's report (docs/img/ holds the plots
# docs/benchmarks.md shows).
# Installs wrk, redis-server, redis-tools and postgresql from Debian's packages when missing
# (without starting their services).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
CONNECTIONS=50
THREADS=2

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
need wrk redis-server redis-tools postgresql

cargo build --release -q -p stockd --bin stockd
cargo build --release -q -p stockd-server --example bare_axum
WORK="$(mktemp -d)"
OUT="${BENCH_OUT:-$WORK/out}"
mkdir -p "$OUT"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

rps_of() { awk '/^Requests\/sec:/ {print $2}' "$1"; }
p99_of() { awk '$1=="99%" {print $2}' "$1"; }
max_of() { awk '$1=="Latency" && NF>=5 {print $4}' "$1"; }
BENCH=(target/release/stockd bench run --quiet)

# Each stockd measurement gets a fresh server and data directory, so that none runs on the
# holds another left behind.
start_stockd() { # -> URL, SPID
    local port; port=$(free_port)
    mkdir -p "$WORK/data-$port"
    STOCKD_LOG=warn target/release/stockd serve --listen "127.0.0.1:$port" \
        --data-dir "$WORK/data-$port" &
    SPID=$!
    PIDS+=("$SPID")
    URL="http://127.0.0.1:$port"
    wait_http "$URL/healthz"
}
stop_stockd() { kill "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; }

# 1-3. stockd bench: flash, team, batch.
start_stockd
"${BENCH[@]}" --url "$URL" --scenario flash --stock 1000000000000 --per-user-limit 0 \
    --connections "$CONNECTIONS" --duration "${DURATION}s" \
    --json "$OUT/flash.json" --plot "$OUT/flash.svg" > "$WORK/flash.txt"
stop_stockd
start_stockd
"${BENCH[@]}" --url "$URL" --scenario team --teams 20 --team-size 5 --buyers 1000 \
    --connections 1000 --json "$OUT/team.json" --plot "$OUT/team.svg" > "$WORK/team.txt"
stop_stockd
start_stockd
"${BENCH[@]}" --url "$URL" --scenario batch --ops 1000 --connections 4 \
    --duration "${DURATION}s" --json "$OUT/batch.json" --plot "$OUT/batch.svg" > "$WORK/batch.txt"
stop_stockd

# 4. wrk: the same flash requests to a fresh stockd, then to the bare handler.
start_stockd
curl -fs -X PUT "$URL/v1/pools/hot" -d '{"total":1000000000000}' >/dev/null
wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s scripts/wrk/reserve_confirm.lua \
    "$URL" > "$WORK/stockd-wrk.txt"
SOLD=$(curl -fs "$URL/v1/pools/hot" | python3 -c 'import json,sys; p=json.load(sys.stdin); print(p["sold"], p["total"]==p["available"]+p["held"]+p["sold"])')
stop_stockd

PORT=$(free_port)
target/release/examples/bare_axum "127.0.0.1:$PORT" &
PIDS+=($!)
for _ in $(seq 1 100); do
    curl -s -o /dev/null -X POST "http://127.0.0.1:$PORT/v1/holds" && break
    sleep 0.05
done
wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s scripts/wrk/reserve_confirm.lua \
    "http://127.0.0.1:$PORT" > "$WORK/axum.txt"
# The bare handler at 1,000 connections: the tail of the HTTP stack alone, doing nothing, as
# the ceiling of the team race's (which is held to redis-benchmark -c 1000 below).
wrk -t"$THREADS" -c1000 -d"${DURATION}s" --latency -s scripts/wrk/reserve_confirm.lua \
    "http://127.0.0.1:$PORT" > "$WORK/axum-c1000.txt"
kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true

# 5. redis-benchmark: EVALSHA check-and-deduct, no persistence (plain and pipelined), then AOF
# appendfsync always.
evalsha() { # PORT N EXTRA... -> "rps p50"
    local port="$1" n="$2"; shift 2
    redis-cli -p "$port" set stock 1000000000000 >/dev/null
    local sha; sha=$(redis-cli -p "$port" script load "$REDIS_CHECK_AND_DEDUCT_LUA")
    redis-benchmark -p "$port" -c "$CONNECTIONS" -n "$n" --csv "$@" EVALSHA "$sha" 1 stock 1 \
        | tail -1 | python3 -c 'import csv,sys; r=list(csv.reader(sys.stdin))[-1]; print(r[1], r[4])'
}
PORT=$(free_port)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >/dev/null &
PIDS+=($!)
for _ in $(seq 1 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
read -r REDIS_RPS REDIS_P50 <<< "$(evalsha "$PORT" $((DURATION * 140000)))"
read -r PIPE_RPS _ <<< "$(evalsha "$PORT" $((DURATION * 600000)) -P 16)"
# The same script at 1,000 connections: the tail the team race (1,000 connections) is held to.
redis-cli -p "$PORT" set stock 1000000000000 >/dev/null
SHA=$(redis-cli -p "$PORT" script load "$REDIS_CHECK_AND_DEDUCT_LUA")
read -r C1000_RPS C1000_P99 C1000_MAX <<< "$(redis-benchmark -p "$PORT" -c 1000 -n $((DURATION * 100000)) \
    --csv EVALSHA "$SHA" 1 stock 1 | tail -1 \
    | python3 -c 'import csv,sys; r=list(csv.reader(sys.stdin))[-1]; print(r[1], r[6], r[7])')"
kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true
PORT=$(free_port)
mkdir -p "$WORK/redis-aof"
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly yes --appendfsync always \
    --dir "$WORK/redis-aof" --daemonize no >/dev/null &
PIDS+=($!)
for _ in $(seq 1 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
read -r AOF_RPS AOF_P50 <<< "$(evalsha "$PORT" $((DURATION * 50000)))"
kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true

# 6. the lab: PostgreSQL's conditional UPDATE and stockd embedded, 50 buyers each. 10^9 units (the
# most the lab takes) never run out here: at 100,000 attempts/s that is almost three hours.
LAB_STATUS=0
target/release/stockd bench lab --quiet --only pg-update,stockd-embedded \
    --buyers "$CONNECTIONS" --stock 1000000000 --max-duration "${DURATION}s" \
    --json "$OUT/lab.json" > "$WORK/lab.txt" || LAB_STATUS=$?
if [ ! -s "$OUT/lab.json" ]; then
    echo "stockd bench lab failed (exit $LAB_STATUS) without a report:" >&2
    cat "$WORK/lab.txt" >&2
    exit 1
fi

VERDICT=0
echo
echo "== HTTP benchmark: ${DURATION}s per run, $(nproc) cores, stockd at $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
python3 - "$OUT" "$(rps_of "$WORK/stockd-wrk.txt")" "$(p99_of "$WORK/stockd-wrk.txt")" \
    "$(rps_of "$WORK/axum.txt")" "$(p99_of "$WORK/axum.txt")" \
    "$REDIS_RPS" "$REDIS_P50" "$AOF_RPS" "$AOF_P50" "$PIPE_RPS" "$SOLD" "$LAB_STATUS" \
    "$C1000_RPS" "$C1000_P99" "$C1000_MAX" "$(rps_of "$WORK/axum-c1000.txt")" \
    "$(p99_of "$WORK/axum-c1000.txt")" "$(max_of "$WORK/axum-c1000.txt")" <<'PY' || VERDICT=$?
import json, os, sys
out = sys.argv[1]
wrk_rps, wrk_p99, axum_rps, axum_p99, redis_rps, redis_p50, aof_rps, aof_p50, pipe_rps, sold, lab_status = sys.argv[2:13]
c1000_rps, c1000_p99, c1000_max = sys.argv[13:16]
axum1000_rps, axum1000_p99, axum1000_max = sys.argv[16:19]
f = lambda x: float(x) if x else 0.0
def ms(wrk_time):
    """wrk's 950.00us, 70.94ms or 1.20s, in milliseconds."""
    for unit, scale in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if wrk_time.endswith(unit):
            return float(wrk_time[: -len(unit)]) * scale
    return 0.0
rep = {name: json.load(open(os.path.join(out, f"{name}.json"))) for name in ("flash", "team", "batch")}
lab = json.load(open(os.path.join(out, "lab.json")))
lab_rows = {row["variant"]: row for row in lab["rows"]}
# Units sold per second: the stock never runs out here, so every attempt but an error is a sale.
lab_rate = lambda variant: lab_rows[variant]["sold_per_s"] if variant in lab_rows else 0.0
def lab_row(name, variant):
    r = lab_rows.get(variant)
    if r:
        row(name, f"{r['sold_per_s']:,.0f}", f"p99 {r['p99_ms']:.2f} ms")
    else:
        row(name, "did not run", "")
def row(name, rps, lat):
    print(f"{name:<52} {rps:>12} {lat:>14}")
row("run", "req/s", "latency")
fl, tm, bt = rep["flash"], rep["team"], rep["batch"]
row("stockd bench flash (50 conns)", f"{fl['throughput_per_s']:,.0f}", f"p99 {fl['latency']['p99_ms']:.2f} ms")
row("stockd bench team (20 x 1,000 buyers, 1,000 conns)", f"{tm['throughput_per_s']:,.0f}", f"p99 {tm['latency']['p99_ms']:.2f} ms")
print(f"{'  team: max':<52} {'':>12} {tm['latency']['max_ms']:>11.2f} ms")
ro = tm["race_order"]
print(f"{'  team: losers a later winner overtook':<52} {ro['overtaken']:>12,} {'max ' + format(ro['overtaken_by_max_ms'], '.2f') + ' ms':>14}")
print(f"{'  team: ... by more than one writer group':<52} {ro['beyond_one_commit']:>12,} {'group ' + format(ro['group_commit_ms'], '.2f') + ' ms':>14}")
row("stockd bench batch (1,000 ops/request, 4 conns)", f"{bt['throughput_per_s']:,.0f}", f"p99 {bt['latency']['p99_ms']:.2f} ms")
print(f"{'  batch: holds per second':<52} {bt['holds_per_s']:>12,.0f}")
row("wrk -> stockd, same flash requests (50 conns)", f"{f(wrk_rps):,.0f}", f"p99 {wrk_p99}")
row("wrk -> bare axum JSON handler (50 conns)", f"{f(axum_rps):,.0f}", f"p99 {axum_p99}")
row("wrk -> bare axum JSON handler (1,000 conns)", f"{f(axum1000_rps):,.0f}", f"p99 {axum1000_p99}")
print(f"{'  bare axum -c 1000: max':<52} {'':>12} {ms(axum1000_max):>11.2f} ms")
row("redis-benchmark EVALSHA, no persistence (-c 50)", f"{f(redis_rps):,.0f}", f"p50 {redis_p50} ms")
row("redis-benchmark EVALSHA, appendfsync always", f"{f(aof_rps):,.0f}", f"p50 {aof_p50} ms")
row("redis-benchmark EVALSHA, no persistence, -P 16", f"{f(pipe_rps):,.0f}", "")
row("redis-benchmark EVALSHA, no persistence, -c 1000", f"{f(c1000_rps):,.0f}", f"p99 {c1000_p99} ms")
print(f"{'  redis -c 1000: max':<52} {'':>12} {f(c1000_max):>11.2f} ms")
lab_row("lab: stockd embedded (50 buyers)", "stockd-embedded")
lab_row("lab: PostgreSQL conditional UPDATE (50 buyers)", "pg-update")
print()
def ratio(name, a, b):
    print(f"ratio {name:<58}: {a / b:.2f}" if b else f"ratio {name}: n/a")
ratio("stockd bench flash / redis EVALSHA (no persistence)", fl["throughput_per_s"], f(redis_rps))
ratio("stockd bench flash / redis EVALSHA (appendfsync always)", fl["throughput_per_s"], f(aof_rps))
ratio("wrk: stockd / bare axum", f(wrk_rps), f(axum_rps))
ratio("stockd bench flash / wrk -> stockd (load generator cost)", fl["throughput_per_s"], f(wrk_rps))
ratio("batch holds per s / redis EVALSHA -P 16", bt["holds_per_s"], f(pipe_rps))
ratio("team p99 / redis -c 1000 p99 (lower is better)", tm["latency"]["p99_ms"], f(c1000_p99))
ratio("bare axum -c 1000 p99 / redis -c 1000 p99 (the HTTP stack's floor)", ms(axum1000_p99), f(c1000_p99))
ratio("pg conditional UPDATE / stockd embedded (lab, same load)", lab_rate("pg-update"), lab_rate("stockd-embedded"))
print()
for name, r in rep.items():
    checks = "; ".join(c["name"] + (" ok" if c["ok"] else " FAILED") for c in r["verdict"]["checks"])
    print(f"verdict {name}: {'OK' if r['verdict']['ok'] else 'FAILED'} ({checks}); outcomes {r['outcomes']}")
s, inv = sold.split()
print(f"wrk run: pool sold {int(s):,}, total = available + held + sold: {inv}")
# The lab's exit status covers oversells and failed variants; stockd's own verdict failing only
# shows as the row's note, so the notes are read too.
lab_problems = [f"{r['variant']}: {r['note']}" for r in lab["rows"] if r["note"] and "verdict failed" in r["note"]]
lab_problems += [f"{r['variant']}: oversold {r['oversold_units']}" for r in lab["rows"] if r["oversold_units"]]
lab_problems += [f"{s['variant']}: {'failed' if s['failed'] else 'skipped'}, {s['reason']}" for s in lab["skipped"]]
if lab_status != "0":
    lab_problems.append(f"stockd bench lab exited {lab_status}")
lab_summary = "; ".join(f"{r['variant']} sold {r['sold_units']:,} (counter {r['counter_sold_units']}), errors {r['errors']}" for r in lab["rows"])
print(f"verdict lab: {'FAILED (' + '; '.join(lab_problems) + ')' if lab_problems else 'OK'}; {lab_summary}")
if lab_problems:  # (a stockd bench run whose verdict failed has stopped the script already)
    sys.exit(1)
PY
[ -z "${BENCH_OUT:-}" ] || echo "reports and plots in $OUT"
exit "$VERDICT"
