#!/usr/bin/env bash
# Redis backend benchmark, all in one run so that the ratios are comparable on a shared, noisy
# machine. For each of two Redis persistence settings, (a) none (--save '' --appendonly no) and
# (b) AOF with --appendfsync always (automatic rewrites off), each on fresh redis-servers bound to
# 127.0.0.1, stockd measured with `stockd bench run --scenario flash` (POST /v1/holds
# confirm=true, unique hold ids, one hot pool whose stock never runs out, no per-user limit, 50
# connections, closed loop), each run ending with the verdict read back from the server:
#   1. two stockd servers (release build, --backend redis://...) on one fresh Redis, one bench
#      process given both URLs: its 50 connections go 25 to each server;
#   2. one stockd server on another fresh Redis, the same load;
#   3. redis-benchmark -c 50 running EVALSHA of the seeds' Lua check-and-deduct (the coupon
#      script of seeds/004: the coupon exists, its stock is above zero, take one) on the Redis
#      of run 2;
#   4. redis-benchmark -c 50 running EVALSHA of a script that makes only the writes a confirmed
#      hold needs, in the smallest form we know, for 15 holds per call (stockd's calls carry
#      about 15 under this load): per hold the user's usage, the record with its expiry, the
#      three list indexes and the retention queue, and per call the pool's counts, one feed entry
#      with every event in a compact form and the seq. It checks no rule and reads nothing: the
#      floor under what any library keeping stockd's features could cost Redis, on the Redis of
#      run 2.
# And once, before both: 4. the bare axum JSON handler (crates/stockd-server/examples/bare_axum.rs:
# parse the hold, answer a fixed object, no state, no Redis) under wrk with the same requests
# (scripts/wrk/reserve_confirm.lua; the handler has no pools for `stockd bench` to set up and read
# back): the ceiling of the HTTP stack on this machine, which no HTTP service can pass.
# Around every run it reads Redis's INFO (cpu, commandstats, persistence), the stockd processes'
# CPU (/proc/PID/stat), the load generator's (the shell's `times`) and the machine's
# (/proc/stat); after every stockd run, the pool (the units sold, for the per-hold figures).
# Exits 1 when a stockd run's verdict failed (after printing the table).
# Usage: scripts/bench-redis.sh [seconds per run, default 10]. Set BENCH_OUT=DIR to keep the JSON
# reports and SVG plots of the stockd runs.
# Then 5. --redis-replicas 0 against 1: one stockd server on a primary with one replica (both
# here, no persistence), the same flash load, req/s and p50/p99 as ratios of the N = 0 run.
# Installs wrk, redis-server and redis-tools from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
CONNECTIONS=50
THREADS=2
TOTAL=1000000000000

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
need wrk redis-server redis-tools curl

# The tree the binary is built from (untracked files under crates/ count as changes too).
VERSION="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if ! git diff --quiet HEAD -- crates Cargo.toml Cargo.lock 2>/dev/null \
    || [ -n "$(git ls-files --others --exclude-standard crates 2>/dev/null)" ]; then
    VERSION="$VERSION + uncommitted changes"
fi
cargo build --release -q -p stockd --bin stockd
cargo build --release -q -p stockd-server --example bare_axum
WORK="$(mktemp -d)"
OUT="${BENCH_OUT:-$WORK/out}"
mkdir -p "$OUT"
PIDS=()
cleanup() { # newest first: the load generators and servers before the Redis they use
    local i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[i]}" 2>/dev/null || true; done
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do wait "${PIDS[i]}" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# The seeds' check-and-deduct (seeds/004 receive_coupon.lua, steps 1, 2 and 5: the coupon exists,
# its stock is above zero, take one). Its time window and per-user limit are left out: the pool
# stockd is measured on has neither.
SEED_LUA="if(redis.call('exists', KEYS[1]) == 0) then return 1 end
if(tonumber(redis.call('hget', KEYS[1], 'totalNum')) <= 0) then return 2 end
redis.call('hincrby', KEYS[1], 'totalNum', '-1')
return 0"
SEED_KEY='prs:coupon:1'

# Run 4's writes (ARGV[1]: a random number, so that every call makes new hold ids and users).
FLOOR_HOLDS_PER_CALL=15
FLOOR_LUA="local base = ARGV[1]
local events = {}
for i = 1, $FLOOR_HOLDS_PER_CALL do
    local id = 'order-' .. base .. '-' .. i
    local user = 'user-' .. base .. '-' .. i
    redis.call('HINCRBY', 'stockd:{p0.0}:usage:flash', user, 1)
    redis.call('SET', 'stockd:{p0.0}:hold:' .. id,
        'C flash 1 1 ' .. user .. ' 1795956094674 1795956694674 1795956094674', 'PXAT', 1796564494674)
    redis.call('ZADD', 'stockd:{p0.0}:holds', 0, id)
    redis.call('ZADD', 'stockd:{p0.0}:pholds:flash', 0, id)
    redis.call('ZADD', 'stockd:{p0.0}:uholds:' .. user, 0, id)
    redis.call('ZADD', 'stockd:{p0.0}:forget', 1796560894674, id)
    events[#events + 1] = 'H ' .. id .. ' ' .. user .. ' flash 1'
    events[#events + 1] = 'C ' .. id
end
redis.call('HINCRBY', 'stockd:{p0.0}:pool:flash', 's', $FLOOR_HOLDS_PER_CALL)
redis.call('HINCRBY', 'stockd:{p0.0}:pool:flash', 'a', -$FLOOR_HOLDS_PER_CALL)
redis.call('XADD', 'stockd:{p0.0}:events', 'MAXLEN', '1000000', '*', 'e', table.concat(events, ' '))
redis.call('HSET', 'stockd:{p0.0}:meta', 'seq', 1, 'rev', 1)
return 0"

# snap NAME REDIS_PORT [STOCKD_PID...]: everything the analysis needs, before or after a run.
snap() {
    local name="$1" port="$2"; shift 2
    date +%s.%N > "$WORK/$name.time"
    head -1 /proc/stat > "$WORK/$name.stat"
    redis-cli -p "$port" INFO everything > "$WORK/$name.info"
    times > "$WORK/$name.times"  # this shell's waited-for children: the load generators
    : > "$WORK/$name.pids"
    for pid in "$@"; do cat "/proc/$pid/stat" >> "$WORK/$name.pids"; done
}

# The analysis and the final table (reads the files written by snap, read_pool, the stockd bench
# reports, redis-benchmark and wrk).
cat > "$WORK/bench.py" <<'PY'
import csv, json, os, re, sys

work, out = os.environ["WORK"], os.environ["OUT"]
duration, conns = float(os.environ["DURATION"]), int(os.environ["CONNECTIONS"])
ticks = os.sysconf("SC_CLK_TCK")
ncpu = os.cpu_count()

def read(name, ext):
    with open(os.path.join(work, f"{name}.{ext}")) as f:
        return f.read()

def info(name):
    out = {}
    for line in read(name, "info").splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out

def cmdstat(i, cmd):
    v = i.get(f"cmdstat_{cmd}")
    if not v:
        return 0, 0
    d = dict(kv.split("=") for kv in v.split(","))
    return int(d["calls"]), int(d["usec"])

def redis_cpu(i):
    return float(i["used_cpu_sys"]) + float(i["used_cpu_user"])

def machine(name):
    f = [int(x) for x in read(name, "stat").split()[1:]]
    return sum(f), f[3] + f[4]  # all, idle + iowait

def procs_cpu(name):
    total = 0
    for line in read(name, "pids").splitlines():
        rest = line[line.rindex(")") + 2:].split()
        total += int(rest[11]) + int(rest[12])  # utime, stime
    return total / ticks

def children_cpu(name):
    line = read(name, "times").splitlines()[1]
    total = 0.0
    for part in line.split():
        m = re.fullmatch(r"(\d+)m([\d.]+)s", part)
        total += int(m.group(1)) * 60 + float(m.group(2))
    return total

def delta(b, a):
    ib, ia = info(b), info(a)
    wall = float(read(a, "time")) - float(read(b, "time"))
    (mb_all, mb_idle), (ma_all, ma_idle) = machine(b), machine(a)
    busy = ((ma_all - mb_all) - (ma_idle - mb_idle)) / max(1, ma_all - mb_all) * ncpu
    fc = [y - x for x, y in zip(cmdstat(ib, "fcall"), cmdstat(ia, "fcall"))]
    ev = [y - x for x, y in zip(cmdstat(ib, "evalsha"), cmdstat(ia, "evalsha"))]
    aof = int(ia.get("aof_current_size", 0) or 0) - int(ib.get("aof_current_size", 0) or 0)
    # Commands run from inside functions and scripts: all but the ones clients send directly.
    outer = {"fcall", "fcall_ro", "evalsha", "eval", "info", "ping", "subscribe", "script", "function", "config"}
    inner = sum(cmdstat(ia, k[8:])[0] - cmdstat(ib, k[8:])[0]
                for k in ia if k.startswith("cmdstat_") and k[8:].split("|")[0] not in outer)
    redis_cores = (redis_cpu(ia) - redis_cpu(ib)) / wall
    stockd_cores = (procs_cpu(a) - procs_cpu(b)) / wall
    load_cores = (children_cpu(a) - children_cpu(b)) / wall
    others = busy - redis_cores - stockd_cores - load_cores
    return dict(inner_calls=inner, wall=wall, load_cores=load_cores, others=others, redis_cpu=redis_cpu(ia) - redis_cpu(ib), machine_cores=busy,
                stockd_cpu=procs_cpu(a) - procs_cpu(b), fcalls=fc[0], fcall_usec=fc[1],
                evalshas=ev[0], evalsha_usec=ev[1], aof_bytes=aof)

def wrk(path):
    t = open(path).read()
    out = dict(rps=float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1)))
    for pct in ("50", "99"):
        m = re.search(rf"^\s+{pct}%\s+(\S+)", t, re.M)
        out[f"p{pct}"] = m.group(1) if m else "?"
    return out

def save(key, value):
    with open(os.path.join(work, "results"), "a") as f:
        f.write(f"{key} {value}\n")

def us(x):
    return f"{x * 1e6:.1f}"

def stockd_run(mode, label, before, after, report_file, pool_file):
    d = delta(before, after)
    r = json.load(open(os.path.join(out, report_file)))
    pool = json.load(open(os.path.join(work, pool_file)))
    rps, lat = r["throughput_per_s"], r["latency"]
    sold = pool["sold"]  # a fresh pool: every unit it sold was sold during this run, warm-up included
    others = {k: v for k, v in r["outcomes"].items() if k != "201"}
    ok = r["verdict"]["ok"]
    per_fcall = sold / d["fcalls"] if d["fcalls"] else 0.0
    print(f"[{mode}] {label}: {rps:,.0f} req/s (p50 {lat['p50_ms']:.2f} p99 {lat['p99_ms']:.2f} ms) "
          f"over {', '.join(r['urls'])}")
    print(f"    holds sold {sold:,}; verdict {'OK' if ok else 'FAILED'}: "
          + "; ".join(f"{c['name']} {'ok' if c['ok'] else 'FAILED'} ({c['detail']})" for c in r["verdict"]["checks"])
          + (f"; answers other than 201: {others}" if others else ""))
    print(f"    FCALLs {d['fcalls']:,}: {per_fcall:.1f} holds per FCALL, "
          f"{1 / per_fcall if per_fcall else 0:.3f} FCALLs per hold; "
          f"time inside FCALL {d['fcall_usec'] / max(1, sold):.1f} us per hold, "
          f"{d['inner_calls'] / max(1, sold):.1f} Redis commands per hold inside it")
    print(f"    Redis CPU {us(d['redis_cpu'] / max(1, sold))} us per hold ({d['redis_cpu'] / d['wall']:.2f} cores); "
          f"stockd CPU {us(d['stockd_cpu'] / max(1, sold))} us per hold ({d['stockd_cpu'] / d['wall']:.2f} cores); "
          f"stockd bench {d['load_cores']:.2f} cores; other processes {d['others']:.2f} cores"
          + (f"; AOF {d['aof_bytes'] / max(1, sold):,.0f} bytes per hold" if d["aof_bytes"] else ""))
    key = f"{mode}.{label}"
    for k, v in dict(rps=rps, sold=sold, holds_per_fcall=per_fcall,
                     redis_us=d["redis_cpu"] / max(1, sold) * 1e6,
                     stockd_us=d["stockd_cpu"] / max(1, sold) * 1e6,
                     fcall_us=d["fcall_usec"] / max(1, sold),
                     redis_cores=d["redis_cpu"] / d["wall"], stockd_cores=d["stockd_cpu"] / d["wall"],
                     load_cores=d["load_cores"],
                     latency=f"{lat['p50_ms']:.2f}/{lat['p99_ms']:.2f}",
                     others=d["others"], verdict_ok=int(ok), aof=d["aof_bytes"] / max(1, sold),
                     other_answers=sum(others.values())).items():
        save(f"{key}.{k}", v)

def evalsha_run(mode, before, after, csv_file, left):
    d = delta(before, after)
    row = list(csv.reader(open(os.path.join(work, csv_file))))[-1]
    rps, p50, p99 = float(row[1]), row[4], row[6]
    ops = d["evalshas"]
    print(f"[{mode}] redis-benchmark EVALSHA check-and-deduct: {rps:,.0f} req/s (p50 {p50} ms, p99 {p99} ms)")
    print(f"    {ops:,} EVALSHAs ({d['wall']:.1f} s), stock left {left}; time inside EVALSHA "
          f"{d['evalsha_usec'] / max(1, ops):.1f} us per op, {d['inner_calls'] / max(1, ops):.1f} Redis commands per op inside it; Redis CPU {us(d['redis_cpu'] / max(1, ops))} us per op "
          f"({d['redis_cpu'] / d['wall']:.2f} cores); redis-benchmark {d['load_cores']:.2f} cores; "
          f"other processes {d['others']:.2f} cores"
          + (f"; AOF {d['aof_bytes'] / max(1, ops):,.0f} bytes per op" if d["aof_bytes"] else ""))
    for k, v in dict(rps=rps, redis_us=d["redis_cpu"] / max(1, ops) * 1e6,
                     eval_us=d["evalsha_usec"] / max(1, ops), others=d["others"]).items():
        save(f"{mode}.evalsha.{k}", v)

def floor_run(mode, before, after, per_call):
    d = delta(before, after)
    holds = d["evalshas"] * int(per_call)
    print(f"[{mode}] the writes of {holds:,} holds alone ({per_call} per EVALSHA): Redis CPU "
          f"{us(d['redis_cpu'] / max(1, holds))} us per hold; time inside EVALSHA "
          f"{d['evalsha_usec'] / max(1, holds):.1f} us per hold"
          + (f"; AOF {d['aof_bytes'] / max(1, holds):,.0f} bytes per hold" if d["aof_bytes"] else ""))
    for k, v in dict(redis_us=d["redis_cpu"] / max(1, holds) * 1e6,
                     aof=d["aof_bytes"] / max(1, holds)).items():
        save(f"{mode}.floor.{k}", v)

def ceiling_run(wrk_file):
    r = wrk(os.path.join(work, wrk_file))
    print(f"[http] bare axum JSON handler (no state, no Redis): {r['rps']:,.0f} req/s (p50 {r['p50']} p99 {r['p99']})")
    save("http.rps", r["rps"])

def table():
    r = {}
    for line in open(os.path.join(work, "results")):
        k, v = line.split()
        try:
            r[k] = float(v)
        except ValueError:
            r[k] = v
    g = lambda k: r.get(k)
    print()
    print(f"== Redis backend benchmark: {duration:g} s per run, {conns} connections, {ncpu} cores")
    print(f"{'':44} {'no persistence':>16} {'appendfsync always':>20}")
    def row(name, f, fmt):
        vals = []
        for mode in ("none", "always"):
            try:
                v = f(mode)
                vals.append(format(v, fmt) if v is not None else "n/a")
            except (TypeError, ZeroDivisionError):
                vals.append("n/a")
        print(f"{name:44} {vals[0]:>16} {vals[1]:>20}")
    row("stockd, 1 server, req/s", lambda m: g(f"{m}.one.rps"), ",.0f")
    row("stockd, 2 servers (25+25 conns), req/s", lambda m: g(f"{m}.two.rps"), ",.0f")
    row("stockd, 1 server, latency p50/p99 ms", lambda m: g(f"{m}.one.latency"), "")
    row("redis-benchmark EVALSHA, req/s", lambda m: g(f"{m}.evalsha.rps"), ",.0f")
    row("ratio stockd / redis-benchmark", lambda m: g(f"{m}.one.rps") / g(f"{m}.evalsha.rps"), ".3f")
    row("bare axum handler (HTTP ceiling), req/s", lambda m: g("http.rps"), ",.0f")
    row("ratio HTTP ceiling / redis-benchmark", lambda m: g("http.rps") / g(f"{m}.evalsha.rps"), ".3f")
    row("ratio stockd / HTTP ceiling", lambda m: g(f"{m}.one.rps") / g("http.rps"), ".3f")
    row("ratio 2 servers / 1 server", lambda m: g(f"{m}.two.rps") / g(f"{m}.one.rps"), ".2f")
    row("Redis CPU us per hold, stockd (1 server)", lambda m: g(f"{m}.one.redis_us"), ".1f")
    row("Redis CPU us per hold, stockd (2 servers)", lambda m: g(f"{m}.two.redis_us"), ".1f")
    row("Redis CPU us per op, EVALSHA", lambda m: g(f"{m}.evalsha.redis_us"), ".1f")
    row("ratio Redis CPU per hold, stockd / EVALSHA", lambda m: g(f"{m}.one.redis_us") / g(f"{m}.evalsha.redis_us"), ".1f")
    row("Redis CPU us per hold, its writes alone", lambda m: g(f"{m}.floor.redis_us"), ".1f")
    row("ratio writes alone / EVALSHA", lambda m: g(f"{m}.floor.redis_us") / g(f"{m}.evalsha.redis_us"), ".2f")
    row("ratio stockd / writes alone", lambda m: g(f"{m}.one.redis_us") / g(f"{m}.floor.redis_us"), ".1f")
    row("AOF bytes per hold: stockd / writes alone", lambda m: f"{g(f'{m}.one.aof'):,.0f} / {g(f'{m}.floor.aof'):,.0f}" if g(f"{m}.one.aof") else "-", "")
    row("us inside FCALL per hold / inside EVALSHA", lambda m: f"{g(f'{m}.one.fcall_us'):.1f} / {g(f'{m}.evalsha.eval_us'):.1f}", "")
    row("holds per FCALL (1 server)", lambda m: g(f"{m}.one.holds_per_fcall"), ".1f")
    row("FCALLs per hold (1 server)", lambda m: 1 / g(f"{m}.one.holds_per_fcall"), ".3f")
    row("holds per FCALL (2 servers)", lambda m: g(f"{m}.two.holds_per_fcall"), ".1f")
    row("stockd CPU us per hold (1 server)", lambda m: g(f"{m}.one.stockd_us"), ".1f")
    row("cores: Redis / stockd / bench (1 server)", lambda m: f"{g(f'{m}.one.redis_cores'):.2f} / {g(f'{m}.one.stockd_cores'):.2f} / {g(f'{m}.one.load_cores'):.2f}", "")
    others = [r[k] for k in r if k.endswith(".others")]
    print(f"CPU of other processes during the runs: up to {max(others):.2f} cores "
          f"(near 0 on a quiet machine; more makes the run noisy)")
    verdicts = [k for k in r if k.endswith(".verdict_ok")]
    bad = [k[: -len(".verdict_ok")] for k in verdicts if r[k] != 1]
    print(f"stockd bench verdicts (read back from the server): {len(verdicts) - len(bad)}/{len(verdicts)} runs OK"
          + (f"; FAILED: {', '.join(bad)}" if bad else ""))
    errors = {k[: -len(".other_answers")]: int(r[k]) for k in r if k.endswith(".other_answers") and r[k]}
    print(f"answers other than 201: {errors if errors else 'none'}")

if __name__ == "__main__":
    {"stockd": stockd_run, "evalsha": evalsha_run, "floor": floor_run, "ceiling": ceiling_run,
     "table": table}[sys.argv[1]](*sys.argv[2:])
PY
export WORK OUT DURATION CONNECTIONS
bench() { python3 "$WORK/bench.py" "$@"; }

# flash NAME PORT... : `stockd bench run --scenario flash` against the stockd servers on these
# ports (one bench process, its connections spread over them), its report in $OUT/NAME.json. A
# run that failed (its verdict, exit 1) is reported in the table and fails the script at the end;
# a run that could not report fails it at once.
FAILED=()
flash() {
    local name="$1"; shift
    local urls=() port status=0
    for port in "$@"; do urls+=(--url "http://127.0.0.1:$port"); done
    target/release/stockd bench run --quiet --scenario flash "${urls[@]}" \
        --stock "$TOTAL" --per-user-limit 0 --connections "$CONNECTIONS" \
        --duration "${DURATION}s" --json "$OUT/$name.json" --plot "$OUT/$name.svg" \
        > "$WORK/$name.txt" || status=$?
    if [ ! -s "$OUT/$name.json" ]; then
        echo "stockd bench run $name failed (exit $status) without a report" >&2
        exit 1
    fi
    [ "$status" -eq 0 ] || FAILED+=("$name: stockd bench run exited $status")
}

# read_pool NAME PORT: the pool run NAME sold from, read back into $WORK/NAME-pool.json (after the
# run's closing snap, so that neither python nor curl counts as load).
read_pool() {
    local pool
    pool=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pool_ids"][0])' "$OUT/$1.json")
    curl -fs "http://127.0.0.1:$2/v1/pools/$pool" > "$WORK/$1-pool.json"
}

start_stockd() { # REDIS_PORT [MORE SETTINGS...] -> sets SPORT, SPID
    local redis_port="$1"; shift
    SPORT=$(free_port)
    STOCKD_LOG=warn target/release/stockd serve --backend "redis://127.0.0.1:$redis_port" \
        --listen "127.0.0.1:$SPORT" "$@" &
    SPID=$!
    PIDS+=("$SPID")
    wait_http "http://127.0.0.1:$SPORT/healthz"
}

start_redis() { # NAME persistence arguments... -> sets RPORT, RPID: a fresh, empty Redis
    local name="$1"; shift
    RPORT=$(free_port)
    mkdir -p "$WORK/redis-$name"
    redis-server --port "$RPORT" --bind 127.0.0.1 --dir "$WORK/redis-$name" --daemonize no \
        "$@" >/dev/null &
    RPID=$!
    PIDS+=("$RPID")
    for _ in $(seq 1 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
    redis-cli -p "$RPORT" ping >/dev/null
}

# Each stockd measurement starts on a fresh Redis, so that both see the same dataset size (a
# run leaves 100,000-200,000 hold records behind, and a growing keyspace costs Redis CPU).
one_mode() { # MODE redis-server persistence arguments...
    local mode="$1"; shift

    # 1. two stockd servers on one Redis, one bench process: 25 + 25 connections
    start_redis "$mode-two" "$@"
    local rport=$RPORT rpid=$RPID
    start_stockd "$rport"
    local a_port=$SPORT a_pid=$SPID
    start_stockd "$rport"
    local b_port=$SPORT b_pid=$SPID
    snap "$mode-two-0" "$rport" "$a_pid" "$b_pid"
    flash "redis-$mode-two" "$a_port" "$b_port"
    snap "$mode-two-1" "$rport" "$a_pid" "$b_pid"
    read_pool "redis-$mode-two" "$a_port"
    bench stockd "$mode" two "$mode-two-0" "$mode-two-1" "redis-$mode-two.json" "redis-$mode-two-pool.json"
    stop "$b_pid"; stop "$a_pid"; stop "$rpid"

    # 2. one stockd server on a fresh Redis, 50 connections
    start_redis "$mode" "$@"
    rport=$RPORT rpid=$RPID
    start_stockd "$rport"
    a_port=$SPORT a_pid=$SPID
    snap "$mode-one-0" "$rport" "$a_pid"
    flash "redis-$mode-one" "$a_port"
    snap "$mode-one-1" "$rport" "$a_pid"
    read_pool "redis-$mode-one" "$a_port"
    bench stockd "$mode" one "$mode-one-0" "$mode-one-1" "redis-$mode-one.json" "redis-$mode-one-pool.json"
    stop "$a_pid"

    # 3. redis-benchmark EVALSHA of the seeds' script: a short calibration run sizes -n so that the
    # measured run lasts about DURATION seconds.
    redis-cli -p "$rport" HSET "$SEED_KEY" totalNum "$TOTAL" >/dev/null
    local sha; sha=$(redis-cli -p "$rport" SCRIPT LOAD "$SEED_LUA")
    [ "$(redis-cli -p "$rport" EVALSHA "$sha" 1 "$SEED_KEY" 1)" = 0 ] || { echo "seed script failed" >&2; exit 1; }
    redis-benchmark -p "$rport" -c "$CONNECTIONS" -n 20000 --csv EVALSHA "$sha" 1 "$SEED_KEY" 1 > "$WORK/$mode-cal.csv"
    local n; n=$(python3 -c 'import csv,sys; print(max(10000, int(float(list(csv.reader(open(sys.argv[1])))[-1][1]) * float(sys.argv[2]))))' \
        "$WORK/$mode-cal.csv" "$DURATION")
    snap "$mode-eval-0" "$rport"
    timeout $((DURATION * 3 + 30)) redis-benchmark -p "$rport" -c "$CONNECTIONS" -n "$n" --csv \
        EVALSHA "$sha" 1 "$SEED_KEY" 1 > "$WORK/$mode-eval.csv"
    snap "$mode-eval-1" "$rport"
    bench evalsha "$mode" "$mode-eval-0" "$mode-eval-1" "$mode-eval.csv" \
        "$(redis-cli -p "$rport" HGET "$SEED_KEY" totalNum)"

    # 4. the writes alone, as many holds as the EVALSHA run made calls (at most 50,000 calls)
    local fsha; fsha=$(redis-cli -p "$rport" SCRIPT LOAD "$FLOOR_LUA")
    local fn=$(( n / FLOOR_HOLDS_PER_CALL < 50000 ? n / FLOOR_HOLDS_PER_CALL : 50000 ))
    fn=$(( fn < 1000 ? 1000 : fn ))
    snap "$mode-floor-0" "$rport"
    timeout $((DURATION * 3 + 30)) redis-benchmark -p "$rport" -c "$CONNECTIONS" -n "$fn" -r 1000000000 -q \
        EVALSHA "$fsha" 0 __rand_int__ > /dev/null
    snap "$mode-floor-1" "$rport"
    bench floor "$mode" "$mode-floor-0" "$mode-floor-1" "$FLOOR_HOLDS_PER_CALL"
    stop "$rpid"
}

echo "== ${DURATION}s per run, ${CONNECTIONS} connections, $(nproc) cores, stockd at $VERSION, $(redis-server --version | cut -d' ' -f1-3)"
# 4. the HTTP ceiling: the bare handler under the same load as stockd
HPORT=$(free_port)
target/release/examples/bare_axum "127.0.0.1:$HPORT" &
HPID=$!
PIDS+=("$HPID")
for _ in $(seq 1 100); do
    curl -s -o /dev/null -X POST "http://127.0.0.1:$HPORT/v1/holds" && break
    sleep 0.05
done
wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s scripts/wrk/reserve_confirm.lua \
    "http://127.0.0.1:$HPORT" > "$WORK/http.wrk"
stop "$HPID"
bench ceiling http.wrk

one_mode none --save '' --appendonly no
# Automatic AOF rewrites are off: a rewrite (a fork writing the whole dataset) would land inside
# some runs and not others (stockd writes over 10x more AOF per hold than EVALSHA does per op).
# The AOF bytes per hold are reported instead.
one_mode always --save '' --appendonly yes --appendfsync always --auto-aof-rewrite-percentage 0
bench table

# 5. replicas: one stockd server on a primary with one replica (no persistence, both on this
# machine), --redis-replicas 0 and then 1, each on a fresh pair: what the WAIT after each
# batched call costs.
replicas_run() { # N
    start_redis "replicas-$1-primary" --save '' --appendonly no
    local pport=$RPORT ppid=$RPID
    start_redis "replicas-$1-replica" --save '' --appendonly no --replicaof 127.0.0.1 "$pport"
    local qpid=$RPID qport=$RPORT
    for _ in $(seq 1 200); do
        redis-cli -p "$qport" INFO replication | grep -q 'master_link_status:up' && break
        sleep 0.05
    done
    start_stockd "$pport" --redis-replicas "$1"
    local spid=$SPID
    flash "replicas-$1" "$SPORT"
    stop "$spid"; stop "$qpid"; stop "$ppid"
}
replicas_run 0
replicas_run 1
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
runs = {n: json.load(open(os.path.join(out, f"replicas-{n}.json"))) for n in (0, 1)}
base = runs[0]["throughput_per_s"]
print("\n--redis-replicas (one replica, same machine)   req/s (ratio)     p50 ms   p99 ms")
for n, r in runs.items():
    lat = r["latency"]
    print(f"{n}                                    {r['throughput_per_s']:>9,.0f} ({r['throughput_per_s'] / base:.2f}x)"
          f"   {lat['p50_ms']:>6.2f}   {lat['p99_ms']:>6.2f}")
PY
[ -z "${BENCH_OUT:-}" ] || echo "reports and plots in $OUT"
if [ ${#FAILED[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${FAILED[@]}" >&2
    exit 1
fi
