//! A restock retried after the server that ran it died (fault points compiled into test builds
//! only: `cargo test --features fault-injection`). Two stockd servers share one Redis (or one
//! Redis Cluster); the first dies right after the library call that wrote the restock, before
//! it answers. The client retries on the second with the same request id: 200 with
//! `Stockd-Replayed: true`, and the stock is added exactly once, with exactly one `restocked`
//! event.

#![cfg(feature = "fault-injection")]

mod support;

use std::sync::Arc;

use serde_json::{json, Value};
use support::{Api, RedisBackend, RedisClusterBackend, Server, ServerConfig, TestBackend};

async fn server(backend: Arc<dyn TestBackend>, fault: Option<&str>) -> Server {
    Server::start_with(ServerConfig::on(backend).fault(fault)).await
}

async fn restocked_events(api: &Api, pool: &str) -> Vec<Value> {
    api.events_after(0)
        .await
        .into_iter()
        .filter(|event| event["type"] == "restocked" && event["pool"] == pool)
        .collect()
}

async fn a_restock_retried_on_another_server_adds_once(backend: Arc<dyn TestBackend>) {
    let second = server(backend.clone(), None).await;
    let survivor = second.api();
    let (status, _) = survivor
        .call("PUT", "/v1/pools/rf-a", Some(json!({"total": 10})))
        .await;
    assert_eq!(status, 201);

    let mut dying = server(backend, Some("restock.after_call")).await;
    let body = json!({"delta": 5, "request_id": "rf-r1"});
    dying
        .call_and_die(
            "POST",
            "/v1/pools/rf-a/restock",
            body.clone(),
            "restock.after_call",
        )
        .await;
    // The restock was written before the server died.
    assert_eq!(survivor.pool("rf-a").await["total"], json!(15));

    // The first answer the client gets says the restock was a retry: it was applied before.
    for _ in 0..2 {
        let authorization = survivor.default_authorization();
        let (status, headers, pool) = survivor
            .send_with_headers(
                authorization.as_deref(),
                "POST",
                "/v1/pools/rf-a/restock",
                Some(serde_json::to_vec(&body).unwrap()),
                Some("application/json"),
            )
            .await
            .expect("the survivor answers");
        assert_eq!(
            (status, &pool["total"], &pool["available"]),
            (200, &json!(15), &json!(15)),
            "{pool}"
        );
        assert_eq!(
            headers.get("stockd-replayed").map(|value| value.as_bytes()),
            Some(&b"true"[..]),
            "{headers:?}"
        );
    }
    let (status, refused) = survivor
        .call(
            "POST",
            "/v1/pools/rf-a/restock",
            Some(json!({"delta": 6, "request_id": "rf-r1"})),
        )
        .await;
    assert_eq!(
        (status, &refused["error"], &refused["delta"]),
        (409, &json!("request_id_conflict"), &json!(5)),
        "{refused}"
    );
    let events = restocked_events(&survivor, "rf-a").await;
    assert_eq!(events.len(), 1, "exactly one restocked event: {events:?}");
    assert_eq!(events[0]["request_id"], "rf-r1");
    assert_eq!(survivor.pool("rf-a").await["total"], json!(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restock_retried_on_another_server_of_a_redis_fleet_adds_once() {
    a_restock_retried_on_another_server_adds_once(Arc::new(RedisBackend::start())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restock_retried_on_another_server_of_a_redis_cluster_adds_once() {
    a_restock_retried_on_another_server_adds_once(Arc::new(RedisClusterBackend::start(16))).await;
}
