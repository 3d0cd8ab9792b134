//! Datasets on Redis, against a real `redis-server`: two datasets in one Redis (DB 0 and DB 1)
//! never affect each other, wake-ups included.
//!
//! These tests always run (they start their own Redis, whatever `STOCKD_TEST_BACKEND` says).

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::{put_pool, spawn_waiter, Api, RedisServer, Server, ServerConfig, TestBackend};

/// One database (`/DB` in the URL) of a `redis-server` shared with other tests' datasets.
struct RedisDatabase {
    redis: Arc<RedisServer>,
    db: u32,
}

impl TestBackend for RedisDatabase {
    fn name(&self) -> &str {
        "redis"
    }
    fn extra_args(&self) -> Vec<String> {
        vec![
            "--backend".to_string(),
            format!("{}/{}", self.redis.url(), self.db),
        ]
    }
    fn extra_env(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

async fn server_on_db(redis: &Arc<RedisServer>, db: u32) -> Server {
    Server::start_with(ServerConfig {
        backend: Arc::new(RedisDatabase {
            redis: redis.clone(),
            db,
        }),
        ..ServerConfig::default()
    })
    .await
}

async fn reserve(api: &Api, hold_id: &str, pool: &str) -> (u16, serde_json::Value) {
    let body = json!({"hold_id": hold_id, "items": [{"pool": pool, "qty": 1}]});
    api.call("POST", "/v1/holds", Some(body)).await
}

/// Redis's pub/sub is server-wide: it ignores the DB number. A wake-up of DB 0's dataset (its
/// seq, its waiters' tickets) must not reach DB 1's servers, which would take DB 0's seq for
/// their own (and answer 503, as if their Redis had lost changes) or wake their own waiter of
/// the same ticket number early (answering it before its stock came back).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_datasets_in_one_redis_never_affect_each_other() {
    let redis = Arc::new(RedisServer::start_with(&["--appendonly", "no"]));
    let zero = server_on_db(&redis, 0).await;
    let one = server_on_db(&redis, 1).await;
    let (a, b) = (zero.api(), one.api());
    put_pool(&a, "pa", json!({"total": 1_000})).await;
    put_pool(&b, "pb", json!({"total": 1_000})).await;
    put_pool(&a, "wa", json!({"total": 1})).await;
    put_pool(&b, "wb", json!({"total": 1})).await;

    // Each dataset's first waiter: both get ticket 1 of their own dataset.
    let (status, body) = reserve(&b, "b-holder", "wb").await;
    assert_eq!(status, 201, "{body}");
    let waiter_b = spawn_waiter(&b, "b-waiter", "wb", 1, 20_000);
    let (status, body) = reserve(&a, "a-holder", "wa").await;
    assert_eq!(status, 201, "{body}");
    let waiter_a = spawn_waiter(&a, "a-waiter", "wa", 1, 20_000);
    // The waiters park (each in its own DB's queue); then DB 0's waiter is served, which wakes
    // ticket 1 of DB 0.
    for (db, pool) in [("0", "wa"), ("1", "wb")] {
        let queue = format!("stockd:{{p0.0}}:waitq:{pool}");
        let mut waited = 0;
        while redis.cli(&["-n", db, "ZCARD", &queue]) != "1" {
            assert!(waited < 500, "the waiter on {pool} did not park");
            waited += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let (status, body) = a.call("POST", "/v1/holds/a-holder/release", None).await;
    assert_eq!(status, 200, "{body}");
    let ((status, body), _) = waiter_a.await.expect("waiter task");
    assert_eq!(status, 201, "DB 0's waiter is served: {body}");

    // Traffic on both: DB 0 makes twice the events DB 1 does, so its seqs run ahead.
    for i in 0..100 {
        for (k, (api, pool)) in [(&a, "pa"), (&a, "pa"), (&b, "pb")].into_iter().enumerate() {
            let hold_id = format!("{pool}-{i}-{k}");
            let (status, body) = reserve(api, &hold_id, pool).await;
            assert_eq!(status, 201, "{pool} round {i}: {body}");
        }
    }
    assert!(
        !waiter_b.is_finished(),
        "DB 1's waiter was answered while its stock was still held"
    );
    let (status, body) = b.call("POST", "/v1/holds/b-holder/release", None).await;
    assert_eq!(status, 200, "{body}");
    let ((status, body), _) = waiter_b.await.expect("waiter task");
    assert_eq!(
        status, 201,
        "DB 1's waiter is served by DB 1's release: {body}"
    );
    for api in [&a, &b] {
        let (status, body) = api.call("GET", "/readyz", None).await;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(a.pool("pa").await["held"], json!(200));
    assert_eq!(b.pool("pb").await["held"], json!(100));
}
