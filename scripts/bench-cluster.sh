#!/usr/bin/env bash
# Redis Cluster benchmark, all in one run: holds over 1, 2 and 8 partitions. Starts a 3-primary
# Redis Cluster (no replicas, no persistence) on free loopback ports and one stockd (release
# build) with --backend redis+cluster://... and 16 partitions, then runs `stockd bench run
# --scenario cart` (50 connections, closed loop, POST /v1/holds confirm=true) with N pools of
# their own per run, each in a partition of its own (--spread-partitions), and every hold taking
# one unit of each of the N pools, for N = 1, 2 and 8. It reports req/s, p99 and the verdict read
# back from the server (every pool adds up, the units each pool sold equal the holds
# acknowledged), and each run's req/s as a ratio of the single-partition hold's.
# A single-partition hold is one call where its id hashes to its pool's partition, else two
# (a directory entry, then the hold); a hold over N partitions runs the cross-partition protocol
# (begin, N parts, commit, N applies, applied).
# Then the hot pool: `stockd bench run --scenario flash` (one pool whose stock never runs out,
# 100,000 buyers, no per-user limit) on a pool of 1 segment, then on a pool of 3 segments spread
# over the 3 primaries, reading each primary's Redis CPU (INFO cpu) around each run: the busiest
# primary's and all primaries' CPU per hold, as ratios of the 1-segment run's.
# Then the slow path of segments: one hold at a time whose segment is short while its pool is not
# (a collect, then a rebalance), on pools of 2, 3, 4 and 8 segments against a pool of 1: its
# latency, the FCALLs and the Redis CPU it costs.
# Exits 1 when a run's verdict failed (after printing the table).
# Usage: scripts/bench-cluster.sh [seconds per run, default 10]. Set BENCH_OUT=DIR to keep the JSON
# reports and SVG plots.
# Installs redis-server and redis-tools from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
CONNECTIONS=50
SPANS=(1 2 8)

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
need redis-server redis-tools curl

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
OUT="${BENCH_OUT:-$WORK/out}"
mkdir -p "$OUT"
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

# Each run sets up pools of its own, named after the run: no run sells from another's pools.
FAILED=()
for span in "${SPANS[@]}"; do
    status=0
    target/release/stockd bench run --quiet --url "$B" --scenario cart \
        --pools "$span" --items "$span" --spread-partitions \
        --connections "$CONNECTIONS" --duration "${DURATION}s" \
        --json "$OUT/cluster-span$span.json" --plot "$OUT/cluster-span$span.svg" \
        > "$WORK/span$span.txt" || status=$?
    if [ ! -s "$OUT/cluster-span$span.json" ]; then
        echo "stockd bench run over $span partition(s) failed (exit $status) without a report:" >&2
        cat "$WORK/span$span.txt" >&2
        exit 1
    fi
    [ "$status" -eq 0 ] || FAILED+=("hold over $span partition(s): stockd bench run exited $status")
done

# Redis CPU seconds (user + sys) of each primary, one line.
primaries_cpu() {
    local node
    for node in "${NODES[@]}"; do
        redis-cli -p "${node#*:}" INFO cpu | tr -d '\r' \
            | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%s ", s}'
    done
    echo
}

for segments in 1 3; do
    status=0
    primaries_cpu > "$WORK/flash$segments.before"
    target/release/stockd bench run --quiet --url "$B" --scenario flash --segments "$segments" \
        --stock 1000000000000 --per-user-limit 0 --connections "$CONNECTIONS" \
        --duration "${DURATION}s" --json "$OUT/flash-segments$segments.json" \
        --plot "$OUT/flash-segments$segments.svg" > "$WORK/flash$segments.txt" || status=$?
    primaries_cpu > "$WORK/flash$segments.after"
    if [ ! -s "$OUT/flash-segments$segments.json" ]; then
        echo "stockd bench run on a pool of $segments segment(s) failed (exit $status) without a report:" >&2
        cat "$WORK/flash$segments.txt" >&2
        exit 1
    fi
    [ "$status" -eq 0 ] || FAILED+=("flash on $segments segment(s): stockd bench run exited $status")
done

# The slow path: a hold whose segment is short while the pool is not. Each pool of S segments
# holds 2S units, 2 in each segment, and its one hold asks 3: every hold reads the whole pool
# (a collect) and runs a rebalance before it is made. One client, one hold at a time, on pools
# made beforehand; the baseline is the same hold on a pool of one segment (6 units).
slow_path() {
    local segments=$1 total=$2
    python3 - "$B" "$segments" "$total" "$SLOW_HOLDS" "$WORK/slow$segments.lat" <<'PY'
import http.client, json, sys, time
base, segments, total, holds, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
host, port = base.removeprefix("http://").split(":")
conn = http.client.HTTPConnection(host, int(port))
def call(method, path, body):
    conn.request(method, path, json.dumps(body), {"content-type": "application/json"})
    r = conn.getresponse(); data = r.read()
    return r.status, data
for i in range(holds):
    status, data = call("PUT", f"/v1/pools/slow{segments}-{i}", {"total": total, "segments": segments})
    assert status == 201, (status, data)
print("ready", flush=True)
sys.stdin.readline()
lat = []
for i in range(holds):
    started = time.perf_counter()
    status, data = call("POST", "/v1/holds", {"hold_id": f"slow{segments}-h{i}", "user": f"u{i}",
                        "items": [{"pool": f"slow{segments}-{i}", "qty": 3}], "confirm": True})
    lat.append((time.perf_counter() - started) * 1000)
    assert status == 201, (status, data)
open(out, "w").write(" ".join(f"{x:.3f}" for x in lat))
PY
}
SLOW_HOLDS=200
# FCALLs run by the primaries so far, one number.
primaries_fcalls() {
    local node
    for node in "${NODES[@]}"; do
        redis-cli -p "${node#*:}" INFO commandstats | tr -d '\r' \
            | awk -F'[=,:]' '/^cmdstat_fcall:/ {print $3}'
    done | awk '{s += $1} END {print s + 0}'
}
for segments in 1 2 3 4 8; do
    total=$((segments == 1 ? 6 : 2 * segments))
    coproc SLOW { slow_path "$segments" "$total"; }
    read -r _ <&"${SLOW[0]}"
    primaries_cpu > "$WORK/slow$segments.before"
    primaries_fcalls > "$WORK/slow$segments.fbefore"
    echo go >&"${SLOW[1]}"
    wait "$SLOW_PID"
    primaries_cpu > "$WORK/slow$segments.after"
    primaries_fcalls > "$WORK/slow$segments.fafter"
done

echo
echo "== Redis Cluster benchmark: 3 primaries, 16 partitions, $DURATION s per run, $CONNECTIONS connections, stockd at $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
python3 - "$OUT" "${SPANS[@]}" <<'PY'
import json, os, sys
out, spans = sys.argv[1], sys.argv[2:]
reports = {span: json.load(open(os.path.join(out, f"cluster-span{span}.json"))) for span in spans}
base = reports[spans[0]]["throughput_per_s"]
print(f"{'hold over':<20} {'req/s':>10} {'p99 ms':>8} {'ratio':>7}  verdict")
for span, r in reports.items():
    ratio = f"{r['throughput_per_s'] / base:.2f}" if base else "n/a"
    print(f"{span + ' partition(s)':<20} {r['throughput_per_s']:>10,.0f} {r['latency']['p99_ms']:>8.2f} "
          f"{ratio:>7}  {'OK' if r['verdict']['ok'] else 'FAILED'}")
print()
for span, r in reports.items():
    checks = "; ".join(f"{c['name']} {'ok' if c['ok'] else 'FAILED'} ({c['detail']})" for c in r["verdict"]["checks"])
    print(f"verdict over {span} partition(s): {checks}; outcomes {r['outcomes']}")
PY
echo
python3 - "$OUT" "$WORK" <<'PY'
import json, os, re, sys
out, work = sys.argv[1], sys.argv[2]
rows = {}
for segments in (1, 3):
    r = json.load(open(os.path.join(out, f"flash-segments{segments}.json")))
    before = [float(x) for x in open(os.path.join(work, f"flash{segments}.before")).read().split()]
    after = [float(x) for x in open(os.path.join(work, f"flash{segments}.after")).read().split()]
    # Every hold of the run, warm-up included, as the verdict read them back from the server.
    acknowledged = [int(m) for c in r["verdict"]["checks"]
                    for m in re.findall(r"\((\d+) holds acknowledged", c["detail"])]
    holds = max(1, acknowledged[0] if acknowledged else r["outcomes"].get("201", 0))
    per_primary = [(a - b) * 1e6 / holds for a, b in zip(after, before)]
    rows[segments] = (r, per_primary)
print("hot pool (flash)     req/s   p99 ms   Redis CPU us/hold: busiest / all primaries   verdict")
base_busiest, base_all = max(rows[1][1]), sum(rows[1][1])
for segments, (r, cpu) in rows.items():
    print(f"{segments} segment(s)     {r['throughput_per_s']:>9,.0f} {r['latency']['p99_ms']:>8.2f}   "
          f"{max(cpu):>8.1f} ({max(cpu) / base_busiest:.2f}x) / {sum(cpu):>8.1f} ({sum(cpu) / base_all:.2f}x)"
          f"   {'OK' if r['verdict']['ok'] else 'FAILED'}")
    print(f"    per primary: {', '.join(f'{c:.1f}' for c in cpu)} us/hold")
PY
echo
python3 - "$WORK" "$SLOW_HOLDS" <<'PY'
import os, statistics, sys
work, holds = sys.argv[1], int(sys.argv[2])
def read(name):
    return [float(x) for x in open(os.path.join(work, name)).read().split()]
print(f"slow path (one client, {holds} holds each)   p50 ms   p99 ms   FCALLs/hold   Redis CPU us/hold")
base = None
for segments in (1, 2, 3, 4, 8):
    lat = sorted(read(f"slow{segments}.lat"))
    p50, p99 = statistics.median(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    calls = (read(f"slow{segments}.fafter")[0] - read(f"slow{segments}.fbefore")[0]) / holds
    cpu = sum(a - b for a, b in zip(read(f"slow{segments}.after"), read(f"slow{segments}.before"))) * 1e6 / holds
    base = base or (p50, calls, cpu)
    what = "1 segment, within it" if segments == 1 else f"{segments} segments, rebalanced"
    print(f"{what:<38} {p50:>8.2f} ({p50 / base[0]:.1f}x) {p99:>7.2f}   {calls:>6.1f} ({calls / base[1]:.1f}x)"
          f"   {cpu:>7.0f} ({cpu / base[2]:.1f}x)")
PY
[ -z "${BENCH_OUT:-}" ] || echo "reports and plots in $OUT"
if [ ${#FAILED[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${FAILED[@]}" >&2
    exit 1
fi
