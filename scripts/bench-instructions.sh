#!/usr/bin/env bash
# Instructions per confirmed hold, counted by callgrind: a figure that this shared, noisy
# machine cannot move, for comparing builds of the hot path. Runs the hold_path example
# (crates/stockd-engine/examples/hold_path.rs: HOLDS reserve+confirm holds on one pool, batches
# of 1,000) twice per build and counts only what is spent inside
#   core:   stockd_core::State::execute (the pure state machine: decide and apply);
#   writer: stockd_engine::writer::Writer::decide_batch (the embedded engine's writer thread:
#           the core, the log records' encoding, the feed's append; not the fsync, which is the
#           log stage's, nor the HTTP server's work).
# Usage: scripts/bench-instructions.sh [HOLDS] [HOLD_PATH_BINARY...]
#   defaults: 200,000 holds, the profiling build of the example (`--profile profiling`: the
#   release build with the symbols callgrind needs to find the functions it counts; built if
#   missing). Give copies of earlier builds to compare them; the first is the baseline of the ratios.
#   HOLD_PREFIX=... sets the ids' prefix (default `order-`, then the hold's number): stockd
#   bench's ids (HOLD_PREFIX=bench-0123456789ab-) share 19 bytes, more than the hold index's
#   16-byte heads.
# Installs valgrind from Debian's packages when missing. docs/benchmarks.md has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
HOLDS="${1:-200000}"
HOLD_PREFIX="${HOLD_PREFIX:-order-}"
shift $(($# < 1 ? $# : 1))
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
need valgrind
BINARIES=("$@")
if [ ${#BINARIES[@]} -eq 0 ]; then
    cargo build --profile profiling -q -p stockd-engine --example hold_path
    BINARIES=(target/profiling/examples/hold_path)
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

count() { # binary mode function -> instructions per hold
    valgrind --tool=callgrind --toggle-collect="$3" --callgrind-out-file="$WORK/out" \
        "$1" "$2" "$HOLDS" "$HOLD_PREFIX" 2>"$WORK/log" >/dev/null || { cat "$WORK/log" >&2; return 1; }
    awk -v n="$HOLDS" '/Collected :/ {gsub(",", "", $NF); printf "%.0f", $NF / n}' "$WORK/log"
}

printf '%-44s %14s %14s\n' "build ($HOLDS holds, ids $HOLD_PREFIX<n>)" "core / hold" "writer / hold"
base_core="" base_writer=""
for binary in "${BINARIES[@]}"; do
    core=$(count "$binary" core 'stockd_core::state::State::execute')
    writer=$(count "$binary" engine 'stockd_engine::writer::Writer::decide_batch')
    if [ -z "$base_core" ]; then
        base_core=$core base_writer=$writer
        printf '%-44s %14s %14s\n' "$binary" "$core" "$writer"
    else
        printf '%-44s %14s %14s   (x%s, x%s)\n' "$binary" "$core" "$writer" \
            "$(awk -v a="$core" -v b="$base_core" 'BEGIN {printf "%.2f", a / b}')" \
            "$(awk -v a="$writer" -v b="$base_writer" 'BEGIN {printf "%.2f", a / b}')"
    fi
    if [ "$core" -le 0 ] || [ "$writer" -le 0 ]; then
        echo "nothing counted in $binary: was a function renamed or inlined?" >&2
        exit 1
    fi
done
