//! Datasets on Redis, against a real `redis-server`: two datasets in one Redis (DB 0 and DB 1)
//! never affect each other, wake-ups included; and after an operator accepts a dataset that lost
//! changes (restored from a backup), no fencing token or event seq is handed out twice.
//!
//! These tests always run (they start their own Redis, whatever `STOCKD_TEST_BACKEND` says).

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::{
    put_pool, redis_accept, spawn_waiter, Api, RedisAt, RedisServer, Server, ServerConfig,
};

/// A server on database `db` of `redis` (the URL's `/DB`), beside other tests' datasets.
async fn server_on_db(redis: &RedisServer, db: u32) -> Server {
    let database = RedisAt(format!("{}/{db}", redis.url()));
    Server::start_with(ServerConfig::on(Arc::new(database))).await
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

async fn acquire(api: &Api, owner: &str) -> u64 {
    let body = json!({"owner": owner, "ttl_ms": 60_000});
    let (status, lock) = api.call("POST", "/v1/locks/job/acquire", Some(body)).await;
    assert_eq!(status, 200, "{lock}");
    let token = lock["token"].as_u64().expect("token");
    let body = json!({"owner": owner, "token": token});
    let (status, reply) = api.call("POST", "/v1/locks/job/release", Some(body)).await;
    assert_eq!(status, 200, "{reply}");
    token
}

/// The feed after `after`, as a consumer reads it.
async fn events_after(api: &Api, after: u64) -> Vec<serde_json::Value> {
    let (status, page) = api
        .call("GET", &format!("/v1/events?after={after}&limit=1000"), None)
        .await;
    assert_eq!(status, 200, "{page}");
    page["events"].as_array().cloned().expect("events")
}

async fn readyz_becomes(api: &Api, want: u16) {
    for _ in 0..500 {
        if let Ok((status, _)) = api.try_call("GET", "/readyz", None).await {
            if status == want {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("/readyz never answered {want}");
}

/// Redis restored from a backup has lost what was handed out after it: lock tokens and event
/// seqs a consumer already has. Once an operator accepts it, nothing is handed out again: the
/// next token is above every token given before the loss, the next event's seq above every seq
/// a consumer saw (so the consumer, reading on from its checkpoint, gets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_an_accepted_loss_no_token_or_seq_is_handed_out_again() {
    // RDB only, saved when the test says (the harness turns automatic saves off).
    let redis = Arc::new(RedisServer::start_with(&["--appendonly", "no"]));
    let server = server_on_db(&redis, 0).await;
    let api = server.api();
    put_pool(&api, "p", json!({"total": 10})).await;
    let before_backup = acquire(&api, "o1").await;
    let (status, body) = reserve(&api, "h1", "p").await;
    assert_eq!(status, 201, "{body}");

    // The backup.
    assert_eq!(redis.cli(&["SAVE"]), "OK");
    let dump = redis.dir.path().join("dump.rdb");
    let backup = redis.dir.path().join("backup.rdb");
    std::fs::copy(&dump, &backup).expect("copy the backup");

    // Handed out after it, and lost with the restore.
    let lost_token = acquire(&api, "o2").await;
    assert!(lost_token > before_backup);
    let (status, body) = reserve(&api, "h2", "p").await;
    assert_eq!(status, 201, "{body}");
    let seen = events_after(&api, 0).await;
    let checkpoint = seen.last().expect("events")["seq"].as_u64().expect("seq");

    redis.kill();
    std::fs::copy(&backup, &dump).expect("restore the backup");
    redis.start_again();
    readyz_becomes(&api, 503).await;
    redis_accept(&redis.url(), &[]);
    readyz_becomes(&api, 200).await;

    let token = acquire(&api, "o3").await;
    assert!(
        token > lost_token,
        "token {token} handed out again (lost {lost_token})"
    );
    let (status, body) = reserve(&api, "h3", "p").await;
    assert_eq!(status, 201, "{body}");
    let new = events_after(&api, checkpoint).await;
    assert!(
        new.iter().any(|event| event["hold_id"] == "h3"),
        "the consumer at seq {checkpoint} does not get h3's event: {new:?}"
    );
    // A consumer that lost its checkpoint reads the feed kept again from 0: the events from
    // before the loss that Redis still has, then the new ones (the seq's jump does not push
    // them out of the window).
    let all = events_after(&api, 0).await;
    assert!(
        all.iter().any(|event| event["hold_id"] == "h1")
            && all.iter().any(|event| event["hold_id"] == "h3"),
        "the feed from 0 keeps h1's events and has h3's: {all:?}"
    );
    // Seqs stay exact in every JSON reader (JavaScript's numbers included).
    for event in &new {
        assert!(event["seq"].as_u64().expect("seq") < 1 << 53, "{event}");
    }
    assert!(token < 1 << 53);

    // The accepted dataset's wake-ups reach this server: it listens on the new dataset's
    // channel (a wake-up published before it subscribed is lost, costing that waiter its wait).
    let marker = redis.cli(&["HGET", "stockd:{p0.0}:meta", "dataset"]);
    let channel = format!("stockd:wake:{marker}");
    let mut polls = 0;
    while !redis.cli(&["PUBSUB", "NUMSUB", &channel]).ends_with("\n1") {
        assert!(polls < 500, "the server does not listen on {channel}");
        polls += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    put_pool(&api, "w", json!({"total": 1})).await;
    let (status, body) = reserve(&api, "w-holder", "w").await;
    assert_eq!(status, 201, "{body}");
    let waiter = spawn_waiter(&api, "w-waiter", "w", 1, 20_000);
    let queue = "stockd:{p0.0}:waitq:w";
    let mut polls = 0;
    while redis.cli(&["ZCARD", queue]) != "1" {
        assert!(polls < 500, "the waiter did not park");
        polls += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, body) = api.call("POST", "/v1/holds/w-holder/release", None).await;
    assert_eq!(status, 200, "{body}");
    let ((status, body), waited) = waiter.await.expect("waiter task");
    assert_eq!(status, 201, "{body}");
    assert!(waited < Duration::from_secs(10), "woken late: {waited:?}");
}
