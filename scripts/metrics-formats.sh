#!/usr/bin/env bash
# Scrapes a live `stockd serve` (debug build, embedded engine, after some traffic) the way a
# Prometheus 0.0.4 scraper does (no Accept header) and the way Prometheus asks for OpenMetrics,
# and reads each answer with the official Python client's parser for that format
# (prometheus_client from PyPI: `parser` for the classic text, `openmetrics.parser`, which is
# strict, for OpenMetrics). Both must parse, every counter must be typed a counter in both, the
# classic text must name each `# TYPE` after its samples (what Prometheus's own 0.0.4 parser
# matches on), and the two must carry the same values.
#
# prometheus_client is installed from PyPI into target/metrics-venv the first time (python3 with
# venv and pip is required); nothing is installed system-wide.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench-lib.sh

PROMETHEUS_CLIENT_VERSION=0.26.0
VENV=target/metrics-venv
if ! "$VENV/bin/python" -c "import prometheus_client, sys; sys.exit(prometheus_client.__version__ != '$PROMETHEUS_CLIENT_VERSION')" 2>/dev/null \
    && ! "$VENV/bin/pip" show prometheus-client 2>/dev/null | grep -qx "Version: $PROMETHEUS_CLIENT_VERSION"; then
    echo "== installing prometheus_client $PROMETHEUS_CLIENT_VERSION into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "prometheus-client==$PROMETHEUS_CLIENT_VERSION"
fi

cargo build -p stockd --locked -q
start_debug_stockd
base=$STOCKD_BASE
work=$STOCKD_WORK

# Traffic, so that counters, histograms and labels have values: a pool, a confirmed hold, a
# refusal, an unknown route.
curl -fs -X PUT "$base/v1/pools/metrics-a" -d '{"total":3}' >/dev/null
curl -fs -X POST "$base/v1/holds" \
    -d '{"hold_id":"m1","user":"u1","items":[{"pool":"metrics-a","qty":1}],"ttl_ms":60000,"confirm":true}' >/dev/null
curl -s -o /dev/null -X POST "$base/v1/holds" \
    -d '{"hold_id":"m2","user":"u2","items":[{"pool":"metrics-a","qty":9}],"ttl_ms":60000}'
curl -s -o /dev/null "$base/nowhere"

# Prometheus's own Accept header (scrape_protocols' default order).
PROMETHEUS_ACCEPT='application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'
curl -fs -D "$work/classic.headers" -o "$work/classic.txt" "$base/metrics"
curl -fs -D "$work/om.headers" -o "$work/om.txt" -H "Accept: $PROMETHEUS_ACCEPT" "$base/metrics"

"$VENV/bin/python" - "$work" <<'PY'
import os, re, sys
from prometheus_client.parser import text_string_to_metric_families as parse_classic
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om

work = sys.argv[1]
def read(name):
    with open(os.path.join(work, name)) as f:
        return f.read()
def content_type(name):
    for line in read(name).splitlines():
        if line.lower().startswith("content-type:"):
            return line.split(":", 1)[1].strip()
    return None

failures = []
def check(ok, what):
    if not ok:
        failures.append(what)

classic, om = read("classic.txt"), read("om.txt")
check(content_type("classic.headers") == "text/plain; version=0.0.4; charset=utf-8",
      f"classic content type: {content_type('classic.headers')}")
check(content_type("om.headers") == "application/openmetrics-text; version=1.0.0; charset=utf-8",
      f"OpenMetrics content type: {content_type('om.headers')}")
check("# EOF" not in classic, "the classic text has # EOF")
check(om.endswith("# EOF\n"), "the OpenMetrics text does not end with # EOF")

# What Prometheus's 0.0.4 parser matches on: a sample belongs to the family its TYPE line names
# (histograms: NAME_bucket, NAME_sum, NAME_count); a sample of no typed family is untyped.
types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", classic, re.M))
for line in classic.splitlines():
    if not line or line.startswith("#"):
        continue
    sample = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
    family = sample if sample in types else re.sub(r"_(bucket|sum|count)$", "", sample)
    check(family in types, f"classic sample {sample} has no # TYPE line of its own name")
for name, kind in types.items():
    if kind == "counter":
        check(name.endswith("_total"), f"classic counter family {name} is not named after its samples")

def families(parse, text):
    out = {}
    for family in parse(text):
        out[family.name] = family
    return out
try:
    classic_families = families(parse_classic, classic)
except Exception as error:
    failures.append(f"the classic parser refused the text: {error}")
    classic_families = {}
try:
    om_families = families(parse_om, om)
except Exception as error:
    failures.append(f"the OpenMetrics parser refused the text: {error}")
    om_families = {}

counters = ["stockd_http_requests", "stockd_hold_transitions", "stockd_http_connections_accepted",
            "stockd_wal_syncs", "stockd_engine_commands"]
for name in counters:
    for fmt, fams in (("classic", classic_families), ("OpenMetrics", om_families)):
        family = fams.get(name)
        check(family is not None and family.type == "counter",
              f"{fmt}: {name} is {family.type if family else 'missing'}, not a counter")
for name in ["stockd_http_request_duration_seconds", "stockd_expiry_lag_ms",
             "stockd_wal_fsync_duration_seconds"]:
    for fmt, fams in (("classic", classic_families), ("OpenMetrics", om_families)):
        family = fams.get(name)
        check(family is not None and family.type == "histogram", f"{fmt}: {name} is not a histogram")
check(classic_families.get("stockd_pools") is not None and classic_families["stockd_pools"].type == "gauge",
      "classic: stockd_pools is not a gauge")

def values(fams):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in fams.values() for s in f.samples if not s.name.endswith("_created")}
held = [s for s in classic_families.get("stockd_hold_transitions", type("", (), {"samples": []})).samples
        if s.labels.get("outcome") in ("held", "confirmed")]
check(sorted(s.value for s in held) == [1.0, 1.0], f"hold transitions: {held}")
requests = {s.labels["status"]: s.value for s in classic_families["stockd_http_requests"].samples
            if s.labels.get("route") == "/v1/holds"} if "stockd_http_requests" in classic_families else {}
check(requests.get("201") == 1.0 and requests.get("409") == 1.0, f"requests on /v1/holds: {requests}")
# The same numbers in both (the scrapes were moments apart: the /metrics request counter and
# latency, connection counts and the engine's own gauges may have moved).
moving = ("/metrics", "stockd_http_connections", "stockd_snapshot", "stockd_events_retained")
a, b = values(classic_families), values(om_families)
for key in a.keys() & b.keys():
    if not any(m in repr(key) for m in moving):
        check(a[key] == b[key], f"{key}: {a[key]} (classic) vs {b[key]} (OpenMetrics)")
check(len(a.keys() & b.keys()) > 50, f"only {len(a.keys() & b.keys())} samples in common")

if failures:
    print("metrics formats: FAILED", *failures, sep="\n  ")
    sys.exit(1)
print(f"metrics formats: ok ({len(classic_families)} families; classic 0.0.4 and OpenMetrics 1.0.0 "
      "parsed by prometheus_client, counters typed in both)")
PY
