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

/// A new hold's first stop, where its id hashes, writes the directory entry and sends it home
/// without parsing the request or remembering the call (the hot path of a hold on a pool of
/// another partition): it must still find a record of the id that is there, and an entry that
/// is there, as any retry does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_holds_first_stop_moves_it_home_unless_the_id_is_known_there() {
    let cluster = Arc::new(RedisClusterBackend::of_primaries(
        1,
        2,
        &["--appendonly", "no"],
    ));
    let server = Server::start_with(ServerConfig::on(cluster.clone())).await;
    let api = server.api();
    let partition = |id: &str| stockd_redis::keys::partition_of(id, 2);
    let named = |prefix: &str, at: u32| {
        (0..)
            .map(|n| format!("{prefix}{n}"))
            .find(|id| partition(id) == at)
            .expect("an id in each partition")
    };
    let (a, b) = (named("a", 0), named("b", 1));
    put_pool(&api, &a, json!({"total": 100})).await;
    put_pool(&api, &b, json!({"total": 100})).await;
    let node = &cluster.nodes[0];
    let call_records = || {
        node.cli(&["--scan", "--pattern", "stockd:*:call:*"])
            .lines()
            .count()
    };
    let reserve = |hold_id: &str, pool: &str| json!({"hold_id": hold_id, "items": [{"pool": pool, "qty": 1}]});

    // A hold of pool A (partition 0) whose id hashes to partition 1: an entry there, and only
    // the call that made the hold remembered (its answer would differ if it ran again).
    let x = named("x", 1);
    let before = call_records();
    let (status, hold) = api.call("POST", "/v1/holds", Some(reserve(&x, &a))).await;
    assert_eq!((status, &hold["partition"]), (201, &json!(0)), "{hold}");
    let entries = node.cli(&["--scan", "--pattern", &format!("stockd:*:dir:{x}")]);
    assert_eq!(entries.lines().count(), 1, "no directory entry for {x}");
    assert_eq!(
        call_records(),
        before + 1,
        "the directory's move was remembered"
    );

    // A retry goes through the entry to the hold: a replay.
    let (status, hold) = api.call("POST", "/v1/holds", Some(reserve(&x, &a))).await;
    assert_eq!((status, &hold["hold_id"]), (200, &json!(x)), "{hold}");
    // A confirm goes through the entry too: its move is not remembered, its confirm is.
    let before = call_records();
    let (status, hold) = api
        .call("POST", &format!("/v1/holds/{x}/confirm"), None)
        .await;
    assert_eq!(
        (status, &hold["status"]),
        (200, &json!("confirmed")),
        "{hold}"
    );
    assert_eq!(
        call_records(),
        before + 1,
        "the directory's move was remembered"
    );
    // The same id for pool B, whose partition is where the entry is: the entry still wins.
    let (status, body) = api.call("POST", "/v1/holds", Some(reserve(&x, &b))).await;
    assert_eq!(
        (status, &body["error"]),
        (409, &json!("hold_id_conflict")),
        "{body}"
    );

    // A hold of pool B living where its id hashes (partition 1), then the same id for pool A:
    // the record there answers (a conflict); no entry sends the id to partition 0 for a second
    // hold.
    let y = named("y", 1);
    let (status, hold) = api.call("POST", "/v1/holds", Some(reserve(&y, &b))).await;
    assert_eq!((status, &hold["partition"]), (201, &json!(1)), "{hold}");
    let (status, body) = api.call("POST", "/v1/holds", Some(reserve(&y, &a))).await;
    assert_eq!(
        (status, &body["error"]),
        (409, &json!("hold_id_conflict")),
        "{body}"
    );
    let (status, pool) = api.call("GET", &format!("/v1/pools/{a}"), None).await;
    assert_eq!((status, &pool["available"]), (200, &json!(99)), "{pool}");
    assert!(node
        .cli(&["--scan", "--pattern", &format!("stockd:*:dir:{y}")])
        .is_empty());
}
