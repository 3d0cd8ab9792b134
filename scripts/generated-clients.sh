#!/usr/bin/env bash
# Generates clients from the OpenAPI document a live stockd serves, as a new user would, and runs
# one scenario through each: a Python client by openapi-python-client, and TypeScript types by
# openapi-typescript used with openapi-fetch, type-checked by `tsc --strict`. The scenario (pool,
# reserve with the defaults, a per-user limit error, confirm and release with default arguments,
# refund, a batch, the event feed) is scripts/generated-clients/scenario.py and scenario.ts; each
# prints a transcript that must equal scripts/generated-clients/expected.txt. Any generator
# warning, an operation not generated, a type error or another answer fails this script.
#
# The server is a debug `stockd serve` (embedded engine, a temporary data directory, a bearer
# token, a free loopback port). Generated code and tools stay in target/generated-clients:
# openapi-python-client (a pinned version, from PyPI) in a venv there, and the npm packages of
# scripts/generated-clients/package.json (pinned, with package-lock.json) in a directory there.
# python3 with venv is required; node and npm are installed from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

PYTHON_CLIENT_VERSION=0.29.1
SCENARIO=scripts/generated-clients
WORK=$(pwd)/target/generated-clients
VENV=$WORK/venv
TS=$WORK/typescript
TOKEN=generated-clients-secret

if [ "$("$VENV/bin/openapi-python-client" --version 2>/dev/null)" != "openapi-python-client version: $PYTHON_CLIENT_VERSION" ]; then
    echo "== installing openapi-python-client $PYTHON_CLIENT_VERSION into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "openapi-python-client==$PYTHON_CLIENT_VERSION"
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "== installing nodejs and npm"
    install_without_services nodejs npm
fi
mkdir -p "$TS"
if ! cmp -s "$SCENARIO/package-lock.json" "$TS/package-lock.json" || [ ! -d "$TS/node_modules" ]; then
    echo "== installing openapi-typescript, openapi-fetch and typescript into $TS"
    cp "$SCENARIO/package.json" "$SCENARIO/package-lock.json" "$TS/"
    (cd "$TS" && npm ci --no-audit --no-fund --loglevel=error)
fi

echo "== cargo build -p stockd (debug)"
cargo build -p stockd --locked
start_debug_stockd --tokens "admin:$TOKEN"
curl -fsS "$STOCKD_BASE/openapi.json" -o "$WORK/openapi.json"
operations=$(python3 -c 'import json, sys
paths = json.load(open(sys.argv[1]))["paths"]
print(sum(method in ("get", "put", "post", "delete") for item in paths.values() for method in item))' "$WORK/openapi.json")

echo "== openapi-python-client generate"
rm -rf "$WORK/python"
mkdir -p "$WORK/python"
# ruff, a dependency of the generator, formats the code it writes: it must be on PATH.
PATH="$VENV/bin:$PATH" openapi-python-client generate --path "$WORK/openapi.json" \
    --output-path "$WORK/python/stockd_api" --meta none 2>&1 | tee "$WORK/python-generate.log"
if grep -qi "warning\|error\|not be generated\|skipping" "$WORK/python-generate.log"; then
    echo "openapi-python-client did not generate the document cleanly" >&2
    exit 1
fi
generated=$(find "$WORK/python/stockd_api/api" -name '*.py' ! -name '__init__.py' | wc -l)
if [ "$generated" -ne "$operations" ]; then
    echo "openapi-python-client generated $generated of the document's $operations operations" >&2
    exit 1
fi

echo "== openapi-typescript, and tsc --strict on the scenario"
cp "$SCENARIO/scenario.ts" "$SCENARIO/tsconfig.json" "$TS/"
rm -rf "$TS/out"
"$TS/node_modules/.bin/openapi-typescript" "$WORK/openapi.json" -o "$TS/stockd-api.d.ts"
(cd "$TS" && node_modules/.bin/tsc --project tsconfig.json --strict)

status=0
run() {
    local name=$1
    shift
    echo "== the scenario through the $name client"
    if ! "$@" >"$WORK/$name.txt"; then
        status=1
    fi
    if ! diff -u "$SCENARIO/expected.txt" "$WORK/$name.txt"; then
        echo "the $name client's transcript is not $SCENARIO/expected.txt" >&2
        status=1
    fi
}
run python env PYTHONPATH="$WORK/python" "$VENV/bin/python" "$SCENARIO/scenario.py" "$STOCKD_BASE" "$TOKEN" py-
run typescript node "$TS/out/scenario.js" "$STOCKD_BASE" "$TOKEN" ts-

if ! kill -0 "$STOCKD_PID" 2>/dev/null; then
    echo "stockd is no longer running:" >&2
    tail -n 50 "$STOCKD_WORK/stockd.log" >&2
    status=1
fi
[ "$status" -ne 0 ] || echo "generated clients: python and typescript ran the scenario as expected"
exit "$status"
