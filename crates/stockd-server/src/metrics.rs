//! Prometheus metrics: HTTP requests by route, method and status; latency per route; and, at
//! scrape time, the backend's own [`BackendStats`] (hold transitions, histograms such as expiry
//! lag and log fsync durations, gauges, counters).
//!
//! The request path only touches pre-resolved handles: a counter cell per (route, method,
//! status) resolved once and cached, and a histogram per route created up front, so a request
//! never hashes or formats a label set. Label values are bounded: routes are the router's own
//! patterns (`unmatched` for the rest), methods are a fixed list, statuses are what this server
//! sends. This module must never block on the backend except while rendering a scrape.

use std::fmt::{self, Write as _};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::http::{Method, StatusCode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel, EncodeLabelSet, EncodeMetric, LabelSetEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use stockd_core::{Backend, BackendStats, HistogramStats};

use crate::conn::Closed;
use crate::exposition::{to_classic, Format};
use crate::routes::RouteId;

/// Latency buckets in seconds: sub-millisecond for the hot path, up to 30 s for long polls.
const DURATION_BUCKETS_SECONDS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Route label slots: one per route plus `unmatched`.
const ROUTE_SLOTS: usize = RouteId::ALL.len() + 1;
const UNMATCHED_SLOT: usize = RouteId::ALL.len();
const UNMATCHED: &str = "unmatched";

const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "OTHER",
];

/// Statuses this server sends; any other one is still counted, through the slower family
/// lookup.
const STATUSES: [u16; 15] = [
    200, 201, 204, 400, 401, 403, 404, 405, 408, 409, 410, 413, 422, 500, 503,
];

/// The method's label slot; methods outside the list share `OTHER` to bound cardinality.
pub(crate) fn method_slot(method: &Method) -> usize {
    match *method {
        Method::GET => 0,
        Method::HEAD => 1,
        Method::POST => 2,
        Method::PUT => 3,
        Method::DELETE => 4,
        Method::PATCH => 5,
        Method::OPTIONS => 6,
        _ => 7,
    }
}

fn route_slot(route: Option<RouteId>) -> usize {
    route.map_or(UNMATCHED_SLOT, |route| route as usize)
}

fn route_label(slot: usize) -> &'static str {
    RouteId::ALL
        .get(slot)
        .map_or(UNMATCHED, |route| route.path())
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct RequestLabels {
    route: &'static str,
    method: &'static str,
    status: u16,
}

impl EncodeLabelSet for RequestLabels {
    fn encode(&self, mut encoder: LabelSetEncoder) -> Result<(), fmt::Error> {
        ("route", self.route).encode(encoder.encode_label())?;
        ("method", self.method).encode(encoder.encode_label())?;
        ("status", self.status).encode(encoder.encode_label())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct RouteLabels {
    route: &'static str,
}

impl EncodeLabelSet for RouteLabels {
    fn encode(&self, mut encoder: LabelSetEncoder) -> Result<(), fmt::Error> {
        ("route", self.route).encode(encoder.encode_label())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct ErrorLabels {
    route: &'static str,
    code: &'static str,
}

impl EncodeLabelSet for ErrorLabels {
    fn encode(&self, mut encoder: LabelSetEncoder) -> Result<(), fmt::Error> {
        ("route", self.route).encode(encoder.encode_label())?;
        ("code", self.code).encode(encoder.encode_label())
    }
}

/// The error code of an answer, put in its extensions by the error's `into_response`, so that
/// the metrics can count refusals by what they were (`insufficient_stock`, ...), not only by
/// status.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ErrorCode(pub(crate) &'static str);

type HistogramFamily = Family<RouteLabels, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS_SECONDS)
}

/// The connection layer's metrics: open connections, and connections the server closed itself,
/// by reason. Cheap to clone (shared atomics).
#[derive(Clone)]
pub(crate) struct ConnectionMetrics {
    open: Gauge,
    accepted: Counter,
    closed_by_server: [Counter; Closed::ALL.len()],
}

impl ConnectionMetrics {
    fn register(registry: &mut Registry) -> Self {
        let open = Gauge::default();
        registry.register(
            "stockd_http_connections",
            "HTTP connections open now",
            open.clone(),
        );
        let accepted = Counter::default();
        registry.register(
            "stockd_http_connections_accepted",
            "HTTP connections accepted",
            accepted.clone(),
        );
        let family = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "stockd_http_connections_closed_by_server",
            "HTTP connections the server closed because a limit passed (idle_timeout, \
             header_timeout, write_timeout)",
            family.clone(),
        );
        let closed_by_server = Closed::ALL.map(|reason| {
            family
                .get_or_create(&ReasonLabels {
                    reason: reason.label(),
                })
                .clone()
        });
        ConnectionMetrics {
            open,
            accepted,
            closed_by_server,
        }
    }

    pub(crate) fn opened(&self) {
        self.accepted.inc();
        self.open.inc();
    }

    pub(crate) fn closed(&self) {
        self.open.dec();
    }

    pub(crate) fn closed_by_server(&self, reason: Closed) {
        self.closed_by_server[reason as usize].inc();
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct ReasonLabels {
    reason: &'static str,
}

impl EncodeLabelSet for ReasonLabels {
    fn encode(&self, mut encoder: LabelSetEncoder) -> Result<(), fmt::Error> {
        ("reason", self.reason).encode(encoder.encode_label())
    }
}

/// The registry and the handles the request path uses.
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    /// `[route][method][status]`, filled on first use; a hit is one atomic load.
    request_cells: Box<[OnceLock<Counter>]>,
    /// One per route slot, created up front so every route shows in the first scrape.
    durations: Box<[Histogram]>,
    /// Error answers by route and code (a bounded set: the contract's codes).
    errors: Family<ErrorLabels, Counter>,
    /// 1 when the backend answered the last scrape's readiness check, 0 when not.
    ready: Gauge,
    connections: ConnectionMetrics,
}

impl Metrics {
    pub(crate) fn new(backend: Arc<dyn Backend>) -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "stockd_http_requests",
            "HTTP requests by route pattern, method and status",
            requests.clone(),
        );
        let duration_family = HistogramFamily::new_with_constructor(duration_histogram);
        registry.register(
            "stockd_http_request_duration_seconds",
            "HTTP request latency by route pattern, in seconds",
            duration_family.clone(),
        );
        // Histogram handles share their data with the family's, so observing through the cached
        // handle is what the family encodes.
        let durations = (0..ROUTE_SLOTS)
            .map(|slot| {
                duration_family
                    .get_or_create(&RouteLabels {
                        route: route_label(slot),
                    })
                    .clone()
            })
            .collect();
        let errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "stockd_http_errors",
            "HTTP error answers by route pattern and error code (insufficient_stock, \
             backend_unavailable, ...)",
            errors.clone(),
        );
        let ready = Gauge::default();
        registry.register(
            "stockd_ready",
            "1 when the backend can take writes (what /readyz answers), checked at each scrape; \
             0 when not",
            ready.clone(),
        );
        let connections = ConnectionMetrics::register(&mut registry);
        registry.register_collector(Box::new(BackendCollector { backend }));
        Metrics {
            errors,
            ready,
            connections,
            registry,
            requests,
            request_cells: (0..ROUTE_SLOTS * METHODS.len() * STATUSES.len())
                .map(|_| OnceLock::new())
                .collect(),
            durations,
        }
    }

    pub(crate) fn connections(&self) -> ConnectionMetrics {
        self.connections.clone()
    }

    /// Counts one finished request, and its error code when it has one.
    pub(crate) fn record(
        &self,
        route: Option<RouteId>,
        method: usize,
        status: StatusCode,
        error: Option<ErrorCode>,
        elapsed: Duration,
    ) {
        let route = route_slot(route);
        if let Some(ErrorCode(code)) = error {
            self.errors
                .get_or_create(&ErrorLabels {
                    route: route_label(route),
                    code,
                })
                .inc();
        }
        self.durations[route].observe(elapsed.as_secs_f64());
        let status = status.as_u16();
        let labels = || RequestLabels {
            route: route_label(route),
            method: METHODS[method],
            status,
        };
        match STATUSES.iter().position(|&known| known == status) {
            Some(status_slot) => {
                let cell = (route * METHODS.len() + method) * STATUSES.len() + status_slot;
                self.request_cells[cell]
                    .get_or_init(|| self.requests.get_or_create(&labels()).clone())
                    .inc();
            }
            None => {
                self.requests.get_or_create(&labels()).inc();
            }
        }
    }

    /// Records what the readiness check of this scrape found.
    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    /// The text exposition of every metric, backend stats included, in `format`.
    pub(crate) fn render(&self, format: Format) -> String {
        let mut text = String::with_capacity(16 * 1024);
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::error!(%error, "metrics failed to encode");
        }
        match format {
            Format::OpenMetrics => text,
            Format::Classic => to_classic(&text),
        }
    }
}

/// Renders [`Backend::stats`] at scrape time, so the backend keeps its own counters and the
/// server never mirrors them.
struct BackendCollector {
    backend: Arc<dyn Backend>,
}

impl fmt::Debug for BackendCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BackendCollector")
    }
}

impl Collector for BackendCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        encode_backend_stats(&self.backend.stats(), &mut encoder)
    }
}

fn encode_backend_stats(
    stats: &BackendStats,
    encoder: &mut DescriptorEncoder,
) -> Result<(), fmt::Error> {
    {
        let mut metric = encoder.encode_descriptor(
            "stockd_hold_transitions",
            "Hold transitions by outcome.",
            None,
            MetricType::Counter,
        )?;
        for (outcome, count) in &stats.hold_transitions {
            let labels = [("outcome", *outcome)];
            ConstCounter::new(*count).encode(metric.encode_family(&labels)?)?;
        }
    }
    let mut name = String::with_capacity(64);
    for histogram in &stats.histograms {
        if !set_metric_name(&mut name, histogram.name) {
            continue;
        }
        let mut metric = encoder.encode_descriptor(
            &name,
            backend_help(histogram.name),
            None,
            MetricType::Histogram,
        )?;
        metric.encode_histogram::<NoLabelSet>(
            histogram.sum,
            histogram.count,
            &per_bucket_counts(histogram),
            None,
        )?;
    }
    for (gauge, value) in &stats.gauges {
        if !set_metric_name(&mut name, gauge) {
            continue;
        }
        let mut metric =
            encoder.encode_descriptor(&name, backend_help(gauge), None, MetricType::Gauge)?;
        metric.encode_gauge(value)?;
    }
    for (counter, value) in &stats.counters {
        // The encoder appends `_total` to counters itself.
        let base = counter.strip_suffix("_total").unwrap_or(counter);
        if !set_metric_name(&mut name, base) {
            continue;
        }
        let mut metric =
            encoder.encode_descriptor(&name, backend_help(counter), None, MetricType::Counter)?;
        metric.encode_counter::<NoLabelSet, u64, u64>(value, None)?;
    }
    Ok(())
}

/// What a backend's histogram, gauge or counter measures, for its `# HELP` line.
fn backend_help(name: &str) -> &'static str {
    match name {
        "expiry_lag_ms" => "How late hold expiries ran after their deadline, in milliseconds.",
        "wal_fsync_duration_seconds" => {
            "How long each fdatasync of the write-ahead log took, in seconds; one observation \
             per stockd_wal_syncs_total."
        }
        "pools" => "Pools that exist now.",
        "holds" => "Holds retained now, open and finished.",
        "waiters" => "Reserves waiting for released stock now.",
        "events_retained" => "Events kept in the feed's window now.",
        "snapshot_build_ms_last" => "How long the last snapshot took to build, in milliseconds.",
        "snapshot_in_progress" => "1 while a snapshot is being built, else 0.",
        "wal_syncs_total" => "fsyncs of the write-ahead log.",
        "wal_records_total" => "Records appended to the write-ahead log.",
        "wal_bytes_total" => "Bytes appended to the write-ahead log.",
        "snapshots_total" => "Snapshots written.",
        "engine_batches_total" => "Batches of commands the engine's writer applied.",
        "engine_commands_total" => "Commands the engine's writer applied.",
        "redis_partitions" => "Partitions of the event feed on Redis.",
        "redis_healthy" => "1 when the last call to Redis succeeded, else 0.",
        "redis_calls_total" => "Calls (scripts, functions) made to Redis.",
        "redis_commands_total" => "Commands carried by the calls made to Redis.",
        "redis_replicas" => {
            "Replicas a change must reach before it is answered (--redis-replicas)."
        }
        "redis_replica_timeouts_total" => {
            "Calls to Redis answered 503 because fewer than --redis-replicas replicas \
             acknowledged them in time."
        }
        _ => "A backend statistic.",
    }
}

/// Writes `stockd_<base>` into `name`; false (and the metric is skipped) when `base` is not a
/// valid Prometheus name, so a backend's typo cannot corrupt the exposition.
fn set_metric_name(name: &mut String, base: &str) -> bool {
    let valid = !base.is_empty()
        && base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':');
    if valid {
        name.clear();
        let _ = write!(name, "stockd_{base}");
    }
    valid
}

/// The backend reports cumulative counts per upper bound; the encoder wants per-bucket counts
/// ending with a `+Inf` bucket (upper bound `f64::MAX`), which is added when missing.
fn per_bucket_counts(histogram: &HistogramStats) -> Vec<(f64, u64)> {
    let mut buckets = Vec::with_capacity(histogram.buckets.len() + 1);
    let mut previous = 0u64;
    for &(upper_bound, cumulative) in &histogram.buckets {
        let upper_bound = if upper_bound.is_infinite() {
            f64::MAX
        } else {
            upper_bound
        };
        buckets.push((upper_bound, cumulative.saturating_sub(previous)));
        previous = previous.max(cumulative);
    }
    if buckets
        .last()
        .is_none_or(|&(upper_bound, _)| upper_bound != f64::MAX)
    {
        buckets.push((f64::MAX, histogram.count.saturating_sub(previous)));
    }
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumulative_buckets_become_per_bucket_with_inf() {
        let histogram = HistogramStats {
            name: "expiry_lag_ms",
            buckets: vec![(10.0, 2), (100.0, 5)],
            sum: 0.0,
            count: 6,
        };
        assert_eq!(
            per_bucket_counts(&histogram),
            vec![(10.0, 2), (100.0, 3), (f64::MAX, 1)]
        );
        let histogram = HistogramStats {
            name: "expiry_lag_ms",
            buckets: vec![(10.0, 2), (f64::INFINITY, 4)],
            sum: 0.0,
            count: 4,
        };
        assert_eq!(
            per_bucket_counts(&histogram),
            vec![(10.0, 2), (f64::MAX, 2)]
        );
    }

    /// The exposition of `stats` alone, in OpenMetrics and in the classic text.
    fn exposition(stats: BackendStats) -> (String, String) {
        #[derive(Debug)]
        struct Fixed(BackendStats);
        impl Collector for Fixed {
            fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
                encode_backend_stats(&self.0, &mut encoder)
            }
        }
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed(stats)));
        let mut openmetrics = String::new();
        prometheus_client::encoding::text::encode(&mut openmetrics, &registry).unwrap();
        let classic = to_classic(&openmetrics);
        (openmetrics, classic)
    }

    #[test]
    fn a_backend_histogram_is_exposed_cumulative_up_to_inf_with_its_sum_and_count() {
        let (openmetrics, classic) = exposition(BackendStats {
            histograms: vec![
                HistogramStats {
                    name: "wal_fsync_duration_seconds",
                    buckets: vec![(0.001, 2), (0.002, 3), (0.004, 3)],
                    sum: 0.0125,
                    count: 4,
                },
                HistogramStats {
                    name: "bad name",
                    ..HistogramStats::default()
                },
            ],
            ..BackendStats::default()
        });
        let histogram = "\
# HELP stockd_wal_fsync_duration_seconds How long each fdatasync of the write-ahead log took, in seconds; one observation per stockd_wal_syncs_total.
# TYPE stockd_wal_fsync_duration_seconds histogram
stockd_wal_fsync_duration_seconds_sum 0.0125
stockd_wal_fsync_duration_seconds_count 4
stockd_wal_fsync_duration_seconds_bucket{le=\"0.001\"} 2
stockd_wal_fsync_duration_seconds_bucket{le=\"0.002\"} 3
stockd_wal_fsync_duration_seconds_bucket{le=\"0.004\"} 3
stockd_wal_fsync_duration_seconds_bucket{le=\"+Inf\"} 4
";
        assert!(openmetrics.contains(histogram), "{openmetrics}");
        assert!(classic.contains(histogram), "{classic}");
        assert!(!openmetrics.contains("bad name"), "{openmetrics}");
    }

    #[test]
    fn a_backend_without_histograms_exposes_none() {
        let (openmetrics, _) = exposition(BackendStats {
            counters: vec![("redis_calls_total", 3)],
            ..BackendStats::default()
        });
        assert!(!openmetrics.contains("histogram"), "{openmetrics}");
        assert!(
            openmetrics.contains("stockd_redis_calls_total 3"),
            "{openmetrics}"
        );
    }

    #[test]
    fn metric_names_are_checked() {
        let mut name = String::new();
        assert!(set_metric_name(&mut name, "wal_syncs"));
        assert_eq!(name, "stockd_wal_syncs");
        assert!(!set_metric_name(&mut name, "bad name"));
        assert!(!set_metric_name(&mut name, ""));
    }
}
