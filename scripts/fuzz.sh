#!/usr/bin/env bash
# Fuzzes stockd with cargo-fuzz (libFuzzer) on the stable toolchain: builds every target of fuzz/
# and runs each for a bounded time from its committed corpus (fuzz/corpus/<target>/). Fails on
# the first crash and prints the reproducer's path and how to replay it.
#
#   scripts/fuzz.sh               60 s per target
#   scripts/fuzz.sh 3600          a long run: an hour per target
#   scripts/fuzz.sh 600 --merge   then add what the run found that covers new code to the corpus
#   STOCKD_FUZZ_TARGETS="core_sequence" scripts/fuzz.sh 30    some targets only
#
# New inputs go to target/fuzz-corpus/<target>/ (never into the repository unless --merge), crash
# reproducers to fuzz/artifacts/<target>/. cargo-fuzz is installed into target/fuzz-tools/ when it
# is missing. Stable only: `--sanitizer none` needs no nightly feature (the coverage
# instrumentation is passed with stable -C flags).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
merge=0
for arg in "$@"; do
    case "$arg" in
        --merge) merge=1 ;;
        '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [--merge]" >&2; exit 2 ;;
        *) seconds=$arg ;;
    esac
done
targets=${STOCKD_FUZZ_TARGETS:-decode_request core_sequence storage_recovery}

# The toolchain a fresh machine has; never a nightly one, even where one is installed.
if command -v rustup >/dev/null 2>&1; then
    export RUSTUP_TOOLCHAIN=stable
fi
export CARGO_INCREMENTAL=0

CARGO_FUZZ_VERSION=0.13.2
tools="$PWD/target/fuzz-tools"
export PATH="$tools/bin:$PATH"
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    echo "== installing cargo-fuzz $CARGO_FUZZ_VERSION into $tools"
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION" --root "$tools"
fi

# Per target: the longest input, and the libFuzzer options of its input format.
options_of() {
    case "$1" in
        decode_request) echo "-max_len=8192 -dict=fuzz/dict/decode_request.dict" ;;
        core_sequence) echo "-max_len=1024" ;;
        storage_recovery) echo "-max_len=512" ;;
        *) echo "unknown fuzz target $1" >&2; exit 2 ;;
    esac
}

echo "== cargo fmt --check (fuzz/)"
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
echo "== building the fuzz targets (release, coverage instrumented, no sanitizer)"
build_started=$SECONDS
cargo fuzz build --sanitizer none
echo "built in $((SECONDS - build_started)) s"

summary=()
for target in $targets; do
    scratch="target/fuzz-corpus/$target"
    artifacts="fuzz/artifacts/$target"
    mkdir -p "$scratch" "$artifacts"
    log="target/fuzz-$target.log"
    echo "== fuzzing $target for $seconds s (corpus fuzz/corpus/$target, log $log)"
    # shellcheck disable=SC2046 # the options are words on purpose
    if ! cargo fuzz run --sanitizer none "$target" "$scratch" "fuzz/corpus/$target" -- \
        $(options_of "$target") -max_total_time="$seconds" -timeout=20 \
        -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1; then
        tail -n 60 "$log"
        reproducer=$(grep -o "Test unit written to .*" "$log" | tail -n 1 | sed 's/Test unit written to //')
        echo
        echo "FUZZ FAILURE in $target; reproducer: ${reproducer:-see $log}"
        echo "replay it:  STOCKD_FUZZ_TRACE=1 fuzz/target/x86_64-unknown-linux-gnu/release/$target ${reproducer:-<file>}"
        echo "  or:       cargo fuzz run --sanitizer none $target ${reproducer:-<file>}"
        exit 1
    fi
    runs=$(grep -o "Done [0-9]* runs" "$log" | grep -o "[0-9]*" || echo "?")
    cov=$(grep -E "^#[0-9]+" "$log" | tail -n 1 | grep -o "cov: [0-9]* ft: [0-9]* corp: [0-9]*/[0-9a-zA-Z]*" || true)
    summary+=("$target: $runs executions in $seconds s; $cov")
    if [ "$merge" -eq 1 ]; then
        echo "== merging into fuzz/corpus/$target what covers new code"
        # shellcheck disable=SC2046
        cargo fuzz run --sanitizer none "$target" "fuzz/corpus/$target" "$scratch" -- \
            $(options_of "$target") -merge=1 >"target/fuzz-$target-merge.log" 2>&1
    fi
done
echo "== fuzzing done"
printf '%s\n' "${summary[@]}"
