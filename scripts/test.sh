#!/usr/bin/env bash
# Runs every check and test of stockd on a fresh machine: formatting, lints, and the whole test
# suite (unit, property, engine, HTTP conformance, concurrency, crash and garbage tests) against
# the embedded engine, then the black-box suites again against a real Redis and a real Redis
# Cluster, plus the Redis fleet, fault and cluster tests, and a bounded run of every fuzz target
# (STOCKD_FUZZ_SECONDS per target, 20 by default; docs/testing.md).
# Tests start their own stockd and redis-server processes on free loopback ports; this script
# installs what they need (redis-server from Debian's packages) when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

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

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test (embedded engine; Redis fleet and fault tests)"
cargo test --workspace --locked "$@"
echo "== fuzzing (scripts/fuzz.sh: every fuzz target for a bounded time from its committed corpus)"
scripts/fuzz.sh "${STOCKD_FUZZ_SECONDS:-20}"
echo "== cargo test (black-box suites against a real Redis)"
STOCKD_TEST_BACKEND=redis cargo test -p stockd --locked \
    --test conformance --test concurrency --test crash --test garbage --test cli --test keepalive "$@"
echo "== cargo test (black-box suites against a real 3-primary Redis Cluster, 16 partitions)"
STOCKD_TEST_BACKEND=redis-cluster cargo test -p stockd --locked \
    --test conformance --test concurrency --test garbage --test fleet "$@"
echo "== cargo test (a server killed at each step of a cross-partition hold; test build only)"
cargo test -p stockd --locked --features fault-injection --test cluster_faults "$@"
