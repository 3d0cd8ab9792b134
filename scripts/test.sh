#!/usr/bin/env bash
# Runs every check and test of stockd on a fresh machine: formatting, lints, and the whole test
# suite (unit, property, engine, HTTP conformance, concurrency, crash and garbage tests) against
# the embedded engine, then the black-box suites again against a real Redis and a real Redis
# Cluster, plus the Redis fleet, fault and cluster tests, the history checks (one bounded
# history each on the embedded engine, a Redis, a Redis killed under load and a Redis Cluster,
# with kills; docs/testing.md), the seeded simulation of the Redis backend with faults (a
# Redis and a Cluster, crates/stockd-redis/tests/sim/, in the workspace pass), the PostgreSQL sink and reconcile (a private PostgreSQL, with
# the sink, stockd and PostgreSQL killed; on every backend), the oversell lab (`stockd bench
# lab`, briefly, on a real Redis and PostgreSQL), /metrics read by Prometheus's Python parsers, the alerting example checked by
# promtool (Debian's prometheus package, installed when missing), the TLS proxy example, the systemd unit (systemd-analyze verify, and its command run and stopped), a bounded run of every fuzz target
# (STOCKD_FUZZ_SECONDS per target, 20 by default), and schemathesis against a live server (its OpenAPI
# document must match every answer; it needs python3 with venv and PyPI access); last, Python and
# TypeScript clients generated from that document run a scenario against a live server.
# Tests start their own stockd, redis-server and postgres processes on free loopback ports, and
# drive the web console in a headless Chromium; this script and the scripts it calls install
# what they need when it is missing: redis-server, postgresql, chromium, chromium-driver,
# prometheus, nginx, openssl, systemd (for systemd-analyze), nodejs and npm from Debian's
# packages; schemathesis, openapi-python-client and prometheus_client from PyPI and the
# TypeScript tools from npm, into target/ (PyPI and npm access needed).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is required (https://rustup.rs)" >&2
    exit 1
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy

# redis-server and redis-cli (Debian's packages). The tests start their own servers on free
# loopback ports; a service the package may start on 6379 is not used.
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    echo "== installing redis-server"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq redis-server redis-tools >/dev/null
fi
redis-server --version

# redis-sentinel (Debian's package), for the failover tests (crates/stockd/tests/redis_replicas.rs),
# which start their own primary, replica and three Sentinels on free loopback ports. The packaged
# service is not started.
if ! command -v redis-sentinel >/dev/null 2>&1; then
    echo "== installing redis-sentinel (the packaged service is not started)"
    install_without_services redis-sentinel
fi

# PostgreSQL (Debian's postgresql), for the sink's tests (crates/stockd/tests/sink.rs) and the
# oversell lab (`stockd bench lab`), which run initdb in a temporary directory and their own
# postgres on a free loopback port (as the `postgres` user
# the package creates, when this runs as root). The packaged service is not started.
pg_initdb() {
    command -v initdb 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1
}
if [ -z "$(pg_initdb)" ]; then
    echo "== installing postgresql (the packaged service is not started)"
    install_without_services postgresql
fi
"$(pg_initdb)" --version

# Chromium and ChromeDriver (Debian's chromium and chromium-driver), for the web console's
# browser test (crates/stockd/tests/console.rs), which runs them headless on loopback. Here the
# test must not skip for want of them.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    echo "== installing chromium and chromium-driver"
    install_without_services chromium chromium-driver
fi
chromedriver --version
export STOCKD_REQUIRE_BROWSER=1

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test (embedded engine; Redis fleet and fault tests; history checks on every backend; the Redis simulation)"
cargo test --workspace --locked "$@"
echo "== fuzzing (scripts/fuzz.sh: every fuzz target for a bounded time from its committed corpus)"
scripts/fuzz.sh "${STOCKD_FUZZ_SECONDS:-20}"
echo "== cargo test (black-box suites against a real Redis)"
STOCKD_TEST_BACKEND=redis cargo test -p stockd --locked \
    --test conformance --test concurrency --test crash --test garbage --test cli --test keepalive --test raw_http \
    --test bench --test sink --test metrics "$@"
echo "== cargo test (black-box suites against a real 3-primary Redis Cluster, 16 partitions)"
STOCKD_TEST_BACKEND=redis-cluster cargo test -p stockd --locked \
    --test conformance --test concurrency --test garbage --test fleet --test sink --test metrics "$@"
echo "== /metrics in both formats, read by the official Python client's parsers"
scripts/metrics-formats.sh
echo "== the Prometheus alerting example: promtool check and unit tests, metrics that exist"
scripts/prometheus-rules.sh
echo "== TLS in front of stockd: the nginx example of docs/security.md, over HTTPS"
scripts/tls-proxy.sh
echo "== the systemd unit of docs/operations.md: systemd-analyze verify, its ExecStart run, a graceful stop"
scripts/systemd-unit.sh
echo "== cargo test (a server killed at each step of a cross-partition hold, or after a restock's call; test build only)"
cargo test -p stockd --locked --features fault-injection --test cluster_faults --test restock_faults "$@"
echo "== schemathesis: a live server's answers against its OpenAPI document (a few minutes)"
scripts/schemathesis.sh
echo "== generated clients: Python (openapi-python-client) and TypeScript (openapi-typescript, tsc --strict) run a scenario"
scripts/generated-clients.sh
