//! Redis back with less than it had, whichever change it lost: a change that writes no event (a
//! lock acquisition) is detected as surely as one that does, so a fencing token is never handed
//! out twice; and an idle fleet writes nothing (no per-call memory, no change counted), so the
//! change counter that detects a loss costs nothing while nothing happens.
//!
//! These tests always run (they start their own Redis, whatever `STOCKD_TEST_BACKEND` says).

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{
    assert_pool, pools_in_distinct_partitions, put_pool, redis_accept, Api, RedisBackend,
    RedisClusterBackend, RedisServer, Server, ServerConfig,
};

async fn readyz(api: &Api) -> u16 {
    api.try_call("GET", "/readyz", None)
        .await
        .map(|(status, _)| status)
        .unwrap_or(0)
}

async fn acquire(api: &Api, owner: &str) -> (u16, serde_json::Value) {
    let body = json!({"owner": owner, "ttl_ms": 60_000});
    api.call("POST", "/v1/locks/nightly/acquire", Some(body))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_lock_acquisition_is_refused_not_served_again() {
    // No AOF: `SAVE` is the backup, and a SIGKILL restart loads it (the state of that moment).
    let redis = Arc::new(RedisBackend::start());
    let server = Server::start_with(ServerConfig::on(redis.clone())).await;
    let api = server.api();
    let (status, first) = acquire(&api, "worker-a").await;
    assert_eq!(status, 200, "{first}");
    let body = json!({"owner": "worker-a", "token": first["token"]});
    let (status, reply) = api
        .call("POST", "/v1/locks/nightly/release", Some(body))
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(redis.redis.cli(&["SAVE"]), "OK");
    let (status, second) = acquire(&api, "worker-b").await;
    assert_eq!(status, 200, "{second}");
    assert!(second["token"].as_u64() > first["token"].as_u64());

    // Redis comes back from the backup: worker-b's acquisition is lost, and no event said so.
    redis.redis.kill();
    redis.redis.start_again();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let status = readyz(&api).await;
        if status == 503 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz stayed {status} on a Redis that lost a lock acquisition"
        );
        // A call is what finds the loss: the readiness probe alone may not have made one yet.
        let _ = api.try_call("GET", "/v1/pools/any", None).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, reply) = acquire(&api, "worker-c").await;
    assert_eq!(
        (status, &reply["error"]),
        (503, &json!("backend_unavailable")),
        "the token {} must not be handed out again: {reply}",
        second["token"]
    );
}

/// `rdb_changes_since_last_save` of a node: every write Redis applied since its last save.
fn writes(node: &RedisServer) -> u64 {
    node.cli(&["INFO", "persistence"])
        .lines()
        .find_map(|line| line.trim().strip_prefix("rdb_changes_since_last_save:"))
        .and_then(|n| n.parse().ok())
        .expect("INFO persistence has rdb_changes_since_last_save")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_server_on_a_cluster_writes_nothing() {
    let cluster = Arc::new(RedisClusterBackend::start(16));
    let server = Server::start_with(ServerConfig::on(cluster.clone())).await;
    let api = server.api();
    put_pool(&api, "idle-pool", json!({"total": 5})).await;
    let body =
        json!({"hold_id": "idle-h", "items": [{"pool": "idle-pool", "qty": 1}], "ttl_ms": 600_000});
    let (status, reply) = api.call("POST", "/v1/holds", Some(body)).await;
    assert_eq!(status, 201, "{reply}");

    // The server sweeps every partition ten times a second: over two seconds, about 320 sweep
    // calls and reads, none of which may write.
    let before: Vec<u64> = cluster.primaries().into_iter().map(writes).collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, _) = api.call("GET", "/v1/pools/idle-pool", None).await;
    assert_eq!(status, 200);
    let after: Vec<u64> = cluster.primaries().into_iter().map(writes).collect();
    assert_eq!(before, after, "writes per primary while idle");
}

/// The primary of `cluster` that holds `pool`'s record.
fn primary_of<'a>(cluster: &'a RedisClusterBackend, pool: &str) -> &'a RedisServer {
    let pattern = format!("stockd:*:pool:{pool}");
    cluster
        .primaries()
        .into_iter()
        .find(|node| !node.cli(&["KEYS", &pattern]).trim().is_empty())
        .expect("a primary holds the pool")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_part_whose_home_was_lost_is_returned_once_the_loss_is_accepted() {
    let cluster = Arc::new(RedisClusterBackend::start(16));
    let server = Server::start_with(ServerConfig::on(cluster.clone())).await;
    let api = server.api();
    let pools = pools_in_distinct_partitions(&api, "lost", 16, 5).await;
    let home = pools[0].as_str();
    let home_primary = primary_of(&cluster, home).port;
    let other = pools
        .iter()
        .find(|pool| primary_of(&cluster, pool).port != home_primary)
        .expect("a pool on another primary")
        .as_str();
    let body = json!({"hold_id": "lost-h", "items": [{"pool": home, "qty": 1}, {"pool": other, "qty": 1}], "ttl_ms": 600_000});
    let (status, hold) = api.call("POST", "/v1/holds", Some(body)).await;
    assert_eq!(status, 201, "{hold}");
    assert_pool(&api.pool(other).await, 5, 4, 1, 0);

    // The home's primary loses everything (and its replica with it): the hold record is gone,
    // and its part in `other` holds a unit for nobody.
    let lost = primary_of(&cluster, home);
    assert_eq!(lost.cli(&["FLUSHALL"]), "OK");
    redis_accept(&cluster.url(), &["--redis-partitions", "16"]);

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, pool) = api
            .try_call("GET", &format!("/v1/pools/{other}"), None)
            .await
            .unwrap_or((0, json!(null)));
        if status == 200 && pool["held"] == 0 {
            assert_pool(&pool, 5, 5, 0, 0);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the unit of a lost hold is still held: {status} {pool}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, reply) = api
        .call("DELETE", &format!("/v1/pools/{other}"), None)
        .await;
    assert_eq!(
        status, 204,
        "a pool with nothing held can be deleted: {reply}"
    );
}
