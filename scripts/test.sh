#!/usr/bin/env bash
# Runs every check and test of stockd on a fresh machine: formatting, lints, and the whole test
# suite (unit, property, engine, HTTP conformance, concurrency, crash and garbage tests).
# Tests start their own stockd processes on free loopback ports; nothing else needs installing
# for the embedded backend.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is required (https://rustup.rs)" >&2
    exit 1
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked "$@"
