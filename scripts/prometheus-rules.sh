#!/usr/bin/env bash
# Checks the Prometheus alerting example (docs/examples/prometheus/stockd-alerts.yml): promtool
# must accept it, its unit tests (stockd-alerts.test.yml: series in, alerts out) must pass, and
# every stockd metric it names must exist on a live `stockd serve` (debug build), so that a
# renamed metric cannot leave the example alerting on nothing.
# promtool comes from Debian's prometheus package, installed (without starting its service)
# when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench-lib.sh

if ! command -v promtool >/dev/null 2>&1; then
    echo "== installing prometheus (for promtool; the packaged service is not started)"
    install_without_services prometheus
fi
RULES=docs/examples/prometheus/stockd-alerts.yml
promtool check rules "$RULES"
(cd docs/examples/prometheus && promtool test rules stockd-alerts.test.yml)

cargo build -p stockd --locked -q
start_debug_stockd
base=$STOCKD_BASE
work=$STOCKD_WORK
# A refusal, so that the error counter has a sample to show.
curl -fs -X PUT "$base/v1/pools/alerts" -d '{"total":1}' >/dev/null
curl -s -o /dev/null -X POST "$base/v1/holds" \
    -d '{"hold_id":"a1","items":[{"pool":"alerts","qty":2}]}'
curl -fs "$base/metrics" > "$work/metrics.txt"

missing=0
for metric in $(grep -o 'stockd_[a-z_]*' "$RULES" | sort -u); do
    if ! grep -q "^$metric[{ ]" "$work/metrics.txt"; then
        echo "$RULES names $metric, which /metrics does not have" >&2
        missing=1
    fi
done
[ "$missing" -eq 0 ]
echo "prometheus rules: ok (promtool check and unit tests pass; every metric named exists)"
