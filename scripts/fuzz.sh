#!/usr/bin/env bash
# Fuzzes stockd with libFuzzer (coverage guided) on the stable toolchain: builds every target of
# fuzz/ and runs each for a bounded time from its committed corpus (fuzz/corpus/<target>/). Fails
# on the first crash and prints the reproducer's path and how to replay it.
#
#   scripts/fuzz.sh               60 s per target
#   scripts/fuzz.sh 3600          a long run: an hour per target, one target at a time
#   scripts/fuzz.sh 600 --merge   then add to fuzz/corpus/ what the run found that covers new code
#   STOCKD_FUZZ_TARGETS="core_sequence" scripts/fuzz.sh 30    some targets only
#
# The targets are built as cargo-fuzz builds them (`cargo fuzz build --sanitizer none`, same
# flags, same output paths, so cargo-fuzz can be used on them too), but with cargo alone: the
# sanitizer-coverage instrumentation is a set of stable -C flags, and libfuzzer-sys compiles
# libFuzzer with the C++ compiler. No nightly, nothing to install but the crates.
# New inputs go to target/fuzz-corpus/<target>/ (never into the repository unless --merge), crash
# reproducers to fuzz/artifacts/<target>/, logs to target/fuzz-<target>.log.
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
if ! command -v c++ >/dev/null 2>&1; then
    echo "a C++ compiler (c++) is required to build libFuzzer" >&2
    exit 1
fi

# Per target: the longest input, and the libFuzzer options of its input format.
options_of() {
    case "$1" in
        decode_request) echo "-max_len=8192 -dict=fuzz/dict/decode_request.dict" ;;
        core_sequence) echo "-max_len=1024" ;;
        storage_recovery) echo "-max_len=512" ;;
        *) echo "unknown fuzz target $1" >&2; return 2 ;;
    esac
}
for target in $targets; do
    options_of "$target" >/dev/null
done

echo "== cargo fmt --check (fuzz/)"
cargo fmt --manifest-path fuzz/Cargo.toml -- --check

# What `cargo fuzz build --sanitizer none` passes (cargo-fuzz 0.13). `--target` keeps the flags
# off build scripts and proc macros, which run on the host and must not be instrumented.
host=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing \
-Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Cllvm-args=-sanitizer-coverage-stack-depth \
-Cdebug-assertions -Ccodegen-units=1"
echo "== building the fuzz targets (release, coverage instrumented, debug assertions, $host)"
build_started=$SECONDS
cargo build --manifest-path fuzz/Cargo.toml --locked --release --target "$host" --bins
echo "built in $((SECONDS - build_started)) s"
bin="fuzz/target/$host/release"

summary=()
for target in $targets; do
    scratch="target/fuzz-corpus/$target"
    artifacts="fuzz/artifacts/$target"
    mkdir -p "$scratch" "$artifacts"
    log="target/fuzz-$target.log"
    echo "== fuzzing $target for $seconds s (corpus fuzz/corpus/$target, log $log)"
    # shellcheck disable=SC2046 # the options are words on purpose
    if ! "$bin/$target" $(options_of "$target") -max_total_time="$seconds" -timeout=20 \
        -print_final_stats=1 -artifact_prefix="$artifacts/" "$scratch" "fuzz/corpus/$target" \
        >"$log" 2>&1; then
        tail -n 60 "$log"
        reproducer=$(grep -o "Test unit written to .*" "$log" | tail -n 1 | sed 's/Test unit written to //')
        echo
        echo "FUZZ FAILURE in $target; reproducer: ${reproducer:-see $log}"
        echo "replay it: STOCKD_FUZZ_TRACE=1 $bin/$target ${reproducer:-<file>}"
        exit 1
    fi
    runs=$(grep -o "Done [0-9]* runs" "$log" | grep -o "[0-9]*" || echo "?")
    cov=$(grep -E "^#[0-9]+" "$log" | tail -n 1 | grep -o "cov: [0-9]* ft: [0-9]* corp: [0-9]*/[0-9a-zA-Z]*" || true)
    summary+=("$target: $runs executions in $seconds s; $cov")
    if [ "$merge" -eq 1 ]; then
        # New edges only (-use_counters=0): counting how often an edge ran would keep thousands
        # of inputs, and the committed corpus must stay small.
        echo "== merging into fuzz/corpus/$target what covers new code"
        # shellcheck disable=SC2046
        "$bin/$target" $(options_of "$target") -merge=1 -use_counters=0 "fuzz/corpus/$target" \
            "$scratch" >"target/fuzz-$target-merge.log" 2>&1
        grep "MERGE-OUTER: .* new files" "target/fuzz-$target-merge.log" || true
    fi
done
echo "== fuzzing done"
printf '%s\n' "${summary[@]}"
