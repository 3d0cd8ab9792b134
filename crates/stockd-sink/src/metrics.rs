//! The sink's Prometheus metrics, served on `--metrics-listen` at `/metrics` in the same two
//! text formats as stockd's own (the classic text by default, OpenMetrics when asked for).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use stockd_api::exposition;

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

/// Serves `/metrics` on `listener` until the process ends: `GET` (or `HEAD`) `/metrics` answers
/// 200 with the text, another method on it 405, any other path 404.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
) -> std::io::Result<()> {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors, or a connection reset before it was accepted: the
            // listener stays, and tries again a moment later rather than spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let metrics = Arc::clone(&metrics);
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let answer = answer(&metrics, &request);
                async move { Ok::<_, Infallible>(answer) }
            });
            // A scraper that goes away mid-answer ends its own connection, nothing else.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The answer to one request of the metrics listener.
fn answer<B>(metrics: &Metrics, request: &Request<B>) -> Response<String> {
    let status = if request.uri().path() != stockd_api::paths::METRICS {
        StatusCode::NOT_FOUND
    } else if !matches!(*request.method(), Method::GET | Method::HEAD) {
        StatusCode::METHOD_NOT_ALLOWED
    } else {
        let accept = request
            .headers()
            .get(header::ACCEPT)
            .and_then(|value| value.to_str().ok());
        let format = exposition::negotiate(accept);
        let text = metrics.openmetrics();
        let body = match format {
            exposition::Format::Classic => exposition::to_classic(&text),
            exposition::Format::OpenMetrics => text,
        };
        let mut response = Response::new(body);
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        );
        headers.insert(header::VARY, HeaderValue::from_static("Accept"));
        return response;
    };
    let mut response = Response::new(String::new());
    *response.status_mut() = status;
    if status == StatusCode::METHOD_NOT_ALLOWED {
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET,HEAD"));
    }
    response
}

/// Binds `address` for [`serve`].
pub async fn bind(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(address).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(method: Method, path: &str, accept: Option<&str>) -> Response<String> {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(accept) = accept {
            request = request.header(header::ACCEPT, accept);
        }
        answer(&Metrics::new(), &request.body(()).unwrap())
    }

    #[test]
    fn metrics_answer_in_the_format_asked_for() {
        let classic = ask(Method::GET, "/metrics", None);
        assert_eq!(classic.status(), StatusCode::OK);
        assert_eq!(
            classic.headers()[header::CONTENT_TYPE],
            exposition::Format::Classic.content_type()
        );
        assert_eq!(classic.headers()[header::VARY], "Accept");
        assert!(classic
            .body()
            .contains("# TYPE stockd_sink_transactions_total counter"));
        let openmetrics = ask(
            Method::GET,
            "/metrics",
            Some("application/openmetrics-text; version=1.0.0"),
        );
        assert_eq!(
            openmetrics.headers()[header::CONTENT_TYPE],
            exposition::Format::OpenMetrics.content_type()
        );
        assert!(openmetrics.body().ends_with("# EOF\n"));
    }

    #[test]
    fn other_methods_and_paths_are_refused() {
        let post = ask(Method::POST, "/metrics", None);
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(post.headers()[header::ALLOW], "GET,HEAD");
        assert_eq!(ask(Method::HEAD, "/metrics", None).status(), StatusCode::OK);
        assert_eq!(ask(Method::GET, "/", None).status(), StatusCode::NOT_FOUND);
        assert_eq!(
            ask(Method::GET, "/metrics/x", None).status(),
            StatusCode::NOT_FOUND
        );
    }
}
