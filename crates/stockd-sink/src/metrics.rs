//! The sink's Prometheus metrics, served on `--metrics-listen` at `/metrics` in the same two
//! text formats as stockd's own (the classic text by default, OpenMetrics when asked for).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{header, HeaderMap};
use axum::response::IntoResponse;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use stockd_server::exposition;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabel {
    pub partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabel {
    pub cause: String,
}

/// Everything the sink counts.
#[derive(Default)]
pub struct Metrics {
    registry: Registry,
    /// Events written to `stockd_events`, by partition.
    pub applied: Family<PartitionLabel, Counter>,
    /// The stored cursor: the seq of the last event applied, by partition.
    pub cursor: Family<PartitionLabel, Gauge>,
    /// Seconds between the newest event applied and now while a partition is behind (a full
    /// page); 0 once a page came back short (caught up).
    pub lag: Family<PartitionLabel, Gauge<f64, AtomicU64>>,
    /// Gaps recorded: the feed had dropped events the sink had not applied.
    pub gaps: Family<PartitionLabel, Counter>,
    /// Committed page transactions.
    pub transactions: Counter,
    /// Retries after an error, by where it came from (`stockd` or `postgres`).
    pub retries: Family<CauseLabel, Counter>,
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let mut metrics = Metrics::default();
        let registry = &mut metrics.registry;
        registry.register(
            "stockd_sink_events_applied",
            "Events written to stockd_events",
            metrics.applied.clone(),
        );
        registry.register(
            "stockd_sink_cursor_seq",
            "The stored cursor: seq of the last event applied",
            metrics.cursor.clone(),
        );
        registry.register(
            "stockd_sink_lag_seconds",
            "Age of the newest applied event while the partition is behind; 0 when caught up",
            metrics.lag.clone(),
        );
        registry.register(
            "stockd_sink_gaps",
            "Gaps recorded: events the feed dropped before the sink applied them",
            metrics.gaps.clone(),
        );
        registry.register(
            "stockd_sink_transactions",
            "Committed page transactions",
            metrics.transactions.clone(),
        );
        registry.register(
            "stockd_sink_retries",
            "Retries after an error, by cause (stockd, postgres)",
            metrics.retries.clone(),
        );
        Arc::new(metrics)
    }

    /// The OpenMetrics text of every metric.
    pub fn openmetrics(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

/// Serves `/metrics` on `listener` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
) -> std::io::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move |headers: HeaderMap| {
            let metrics = metrics.clone();
            async move {
                let accept = headers
                    .get(header::ACCEPT)
                    .and_then(|value| value.to_str().ok());
                let format = exposition::negotiate(accept);
                let text = metrics.openmetrics();
                let body = match format {
                    exposition::Format::Classic => exposition::to_classic(&text),
                    exposition::Format::OpenMetrics => text,
                };
                (
                    [
                        (header::CONTENT_TYPE, format.content_type()),
                        (header::VARY, "Accept"),
                    ],
                    body,
                )
                    .into_response()
            }
        }),
    );
    axum::serve(listener, app).await
}

/// Binds `address` for [`serve`].
pub async fn bind(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(address).await
}
