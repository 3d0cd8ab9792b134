#!/usr/bin/env bash
# Runs schemathesis (https://schemathesis.readthedocs.io) with all of its checks against a live
# `stockd serve` (debug build, embedded engine, a temporary data directory, bearer tokens on),
# reading the OpenAPI document the server itself serves at /openapi.json. Every status, header and
# body the server sends must be the documented one; any failure fails this script.
#
# Bounded: at most ST_MAX_EXAMPLES test cases per operation and phase (default 40) and ST_MAX_TIME
# seconds (default 240) for the whole run, so that it finishes in a few minutes on 2 cores. Run it
# longer with, for example, ST_MAX_EXAMPLES=500 ST_MAX_TIME=1800 scripts/schemathesis.sh.
# Extra arguments go to `schemathesis run` (for example --seed 1 to replay a run).
#
# schemathesis is installed from PyPI into target/schemathesis-venv the first time (python3 with
# venv and pip is required); nothing is installed system-wide.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench-lib.sh

SCHEMATHESIS_VERSION=4.32.5
VENV=target/schemathesis-venv
MAX_EXAMPLES=${ST_MAX_EXAMPLES:-40}
MAX_TIME=${ST_MAX_TIME:-240}
ADMIN_TOKEN=schemathesis-admin-secret

if [ "$("$VENV/bin/schemathesis" --version 2>/dev/null)" != "schemathesis, version $SCHEMATHESIS_VERSION" ]; then
    echo "== installing schemathesis $SCHEMATHESIS_VERSION into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

echo "== cargo build -p stockd (debug)"
cargo build -p stockd --locked

# Bearer tokens on, so that the `ignored_auth` check has something to check: a request without
# the token must be refused (401) on every operation the document marks as secured.
start_debug_stockd --tokens "admin:$ADMIN_TOKEN"
base=$STOCKD_BASE

echo "== schemathesis run $base/openapi.json (all checks, $MAX_EXAMPLES examples per operation, ${MAX_TIME}s at most)"
# All checks are enabled in scripts/schemathesis/schemathesis.toml, with the exceptions to "every
# check on every operation", each with its reason; hooks.py writes whole floats in bodies as
# integers.
# One worker: with two threads, hypothesis (describing its filters with Python 3.11's `ast`)
# sometimes fails inside schemathesis with "AST constructor recursion depth mismatch", a runtime
# error of the tool, not of stockd. The run is bounded by time either way.
# Run from target/, where schemathesis keeps its cache (target/.schemathesis: `st replay ID` from
# there replays a failure).
repo=$(pwd)
status=0
(
    cd target
    SCHEMATHESIS_HOOKS="$repo/scripts/schemathesis/hooks.py" \
    "$repo/$VENV/bin/schemathesis" --config-file "$repo/scripts/schemathesis/schemathesis.toml" \
        run "$base/openapi.json" \
        --max-examples "$MAX_EXAMPLES" \
        --max-time "$MAX_TIME" \
        --request-timeout 40 \
        --workers 1 \
        --header "Authorization: Bearer $ADMIN_TOKEN" \
        --no-color \
        "$@"
) || status=$?

if ! kill -0 "$STOCKD_PID" 2>/dev/null; then
    echo "stockd is no longer running:" >&2
    tail -n 50 "$STOCKD_WORK/stockd.log" >&2
    status=1
fi
exit "$status"
