//! `/metrics` of a real `stockd serve` after real traffic: what only the whole process can show,
//! the backend's own numbers as a scraper reads them. On the embedded engine the write-ahead
//! log's fsync histogram counts exactly the syncs the log made; on Redis, which has no log of
//! its own, the histogram is absent rather than zero.

mod support;

use serde_json::json;
use support::{embedded_backend, Server};

const FSYNC: &str = "stockd_wal_fsync_duration_seconds";

/// Holds made one after another: each is answered only after its own fsync, so each is one.
const HOLDS: u64 = 20;

/// etcd's `wal_fsync_duration_seconds` buckets, as the classic text writes them.
const FSYNC_BOUNDS: [&str; 15] = [
    "0.001", "0.002", "0.004", "0.008", "0.016", "0.032", "0.064", "0.128", "0.256", "0.512",
    "1.024", "2.048", "4.096", "8.192", "+Inf",
];

async fn metrics_text(server: &Server) -> String {
    match server.api().call("GET", "/metrics", None).await {
        (200, serde_json::Value::String(text)) => text,
        other => panic!("metrics: {other:?}"),
    }
}

/// The value of the sample named exactly `name` (no labels).
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in\n{text}"))
}

/// The histogram's buckets in the order written: (`le`, cumulative count).
fn buckets(text: &str, name: &str) -> Vec<(String, f64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    text.lines()
        .filter_map(|line| {
            let (le, value) = line.strip_prefix(&prefix)?.split_once("\"} ")?;
            Some((le.to_string(), value.parse().expect("bucket count")))
        })
        .collect()
}

#[tokio::test]
async fn the_fsync_histogram_counts_every_log_sync_in_cumulative_buckets() {
    let server = Server::start().await;
    let api = server.api();
    let (status, body) = api
        .call("PUT", "/v1/pools/fsync", Some(json!({"total": HOLDS})))
        .await;
    assert_eq!(status, 201, "{body}");
    for n in 0..HOLDS {
        let hold = json!({
            "hold_id": format!("fsync-{n}"),
            "items": [{"pool": "fsync", "qty": 1}],
            "ttl_ms": 600_000,
        });
        let (status, body) = api.call("POST", "/v1/holds", Some(hold)).await;
        assert_eq!(status, 201, "{body}");
    }
    // Every request has its answer, so no fsync is in flight now, and none is due (the holds
    // expire in ten minutes).
    let text = metrics_text(&server).await;
    if !embedded_backend() {
        assert!(!text.contains(FSYNC), "a backend without a log:\n{text}");
        return;
    }

    let syncs = sample(&text, "stockd_wal_syncs_total");
    let count = sample(&text, &format!("{FSYNC}_count"));
    assert!(
        syncs > HOLDS as f64,
        "{syncs} syncs for {HOLDS} holds and a pool"
    );
    assert_eq!(count, syncs, "the histogram counts every sync");
    // Each fdatasync took some time, so the sum of their durations is not zero.
    assert!(sample(&text, &format!("{FSYNC}_sum")) > 0.0, "{text}");

    let buckets = buckets(&text, FSYNC);
    let bounds: Vec<&str> = buckets.iter().map(|(le, _)| le.as_str()).collect();
    assert_eq!(bounds, FSYNC_BOUNDS, "{text}");
    assert!(
        buckets.windows(2).all(|pair| pair[0].1 <= pair[1].1),
        "buckets are cumulative: {buckets:?}"
    );
    assert_eq!(buckets.last().unwrap().1, count, "+Inf is the count");
}
