//! The directory of holds on a partitioned Redis dataset, against a real `redis-server`: a hold
//! lives in the partition of its first pool, and the partition its id hashes to keeps a
//! directory entry (`dir:HOLD`) pointing there, so that a command naming only the hold id finds
//! it. The entry must live as long as the hold can be kept, whichever retention is longer.
//!
//! A Redis Cluster of one node (every slot on it) is enough for two partitions, and cheap.
//! These tests always run (they start their own Redis, whatever `STOCKD_TEST_BACKEND` says).

mod support;

use std::sync::Arc;

use serde_json::json;
use support::{put_pool, RedisClusterBackend, Server, ServerConfig};

/// With a hold retention longer than the confirmed one (10 days against 7), a released hold is
/// kept 10 days: its directory entry must outlive that, or `GET /v1/holds/ID` answers 404 for a
/// hold that is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_entry_lives_as_long_as_the_longer_retention() {
    const HOLD_RETENTION_MS: u64 = 10 * 86_400_000;
    let cluster = Arc::new(RedisClusterBackend::of_primaries(
        1,
        2,
        &["--appendonly", "no"],
    ));
    let server = Server::start_with(
        ServerConfig::on(cluster.clone())
            .arg("--hold-retention-ms")
            .arg(HOLD_RETENTION_MS.to_string()),
    )
    .await;
    let api = server.api();
    put_pool(&api, "a", json!({"total": 100})).await;
    let node = &cluster.nodes[0];

    // A hold whose id hashes to the other partition than its pool's has a directory entry.
    let mut entry = None;
    for n in 0..64 {
        let hold_id = format!("h{n}");
        let body = json!({"hold_id": hold_id, "items": [{"pool": "a", "qty": 1}]});
        let (status, hold) = api.call("POST", "/v1/holds", Some(body)).await;
        assert_eq!(status, 201, "{hold}");
        let keys = node.cli(&["--scan", "--pattern", &format!("stockd:*:dir:{hold_id}")]);
        if !keys.is_empty() {
            entry = Some((hold_id, keys));
            break;
        }
    }
    let (hold_id, key) = entry.expect("no hold id of 64 hashes to the other partition");
    let (status, hold) = api
        .call("POST", &format!("/v1/holds/{hold_id}/release"), None)
        .await;
    assert_eq!(
        (status, &hold["status"]),
        (200, &json!("released")),
        "{hold}"
    );

    // The released hold is kept HOLD_RETENTION_MS from now; the entry at least that long (a
    // command through the entry sets it again, at most a hold's lifetime before it finishes).
    let ttl_ms: u64 = node.cli(&["PTTL", &key]).parse().expect("PTTL");
    assert!(
        ttl_ms > HOLD_RETENTION_MS,
        "{key} lives {ttl_ms} ms, less than the {HOLD_RETENTION_MS} ms its hold is kept"
    );
    assert!(
        ttl_ms <= HOLD_RETENTION_MS + stockd_redis::library::DIR_EXTRA_MS,
        "{key} lives {ttl_ms} ms"
    );
    let (status, hold) = api.call("GET", &format!("/v1/holds/{hold_id}"), None).await;
    assert_eq!(
        (status, &hold["status"]),
        (200, &json!("released")),
        "{hold}"
    );
}
