//! A fleet: two and three `stockd serve` processes on one real `redis-server` behave as one
//! server. Bursts spread over the servers sell exactly the stock there is, copies of one request
//! make one hold, per-user limits hold, waiters are served in arrival order across servers, and
//! expiry is swept by whichever server runs.
//!
//! These tests always run on a single Redis of their own; with `STOCKD_TEST_BACKEND=redis-cluster`
//! they run on a 3-primary Redis Cluster of their own instead.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{
    assert_pool, put_pool, reserve_all_at_once_over, spawn_waiter, tally, Api, RedisBackend,
    RedisClusterBackend, Server, TestBackend, CLUSTER_PARTITIONS,
};

/// `n` servers sharing one fresh Redis (or Redis Cluster).
async fn fleet(n: usize) -> (Arc<dyn TestBackend>, Vec<Server>) {
    let redis: Arc<dyn TestBackend> = match std::env::var("STOCKD_TEST_BACKEND").as_deref() {
        Ok("redis-cluster") => Arc::new(RedisClusterBackend::start(CLUSTER_PARTITIONS)),
        _ => Arc::new(RedisBackend::start()),
    };
    let servers = Server::fleet(redis.clone(), n).await;
    (redis, servers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_reserves_over_three_servers_sell_exactly_five() {
    for n in [2, 3] {
        let (_redis, servers) = fleet(n).await;
        let apis: Vec<Api> = servers.iter().map(Server::api).collect();
        put_pool(&apis[0], "burst", json!({"total": 5})).await;
        let bodies = (0..1000)
            .map(|i| json!({"hold_id": format!("h{i}"), "items": [{"pool": "burst", "qty": 1}]}))
            .collect();
        let counts = tally(&reserve_all_at_once_over(&apis, bodies).await);
        assert_eq!(
            counts.get(&(201, String::new())),
            Some(&5),
            "{n} servers: {counts:?}"
        );
        assert_eq!(
            counts.get(&(409, "insufficient_stock".to_string())),
            Some(&995),
            "{n} servers: {counts:?}"
        );
        for api in &apis {
            assert_pool(&api.pool("burst").await, 5, 0, 5, 0);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_copies_over_two_servers_make_one_hold() {
    let (_redis, servers) = fleet(2).await;
    let apis: Vec<Api> = servers.iter().map(Server::api).collect();
    put_pool(&apis[0], "dup", json!({"total": 10})).await;
    let body = json!({"hold_id": "order-1", "user": "u", "items": [{"pool": "dup", "qty": 3}]});
    let replies = reserve_all_at_once_over(&apis, vec![body; 200]).await;
    let counts = tally(&replies);
    assert_eq!(counts.get(&(201, String::new())), Some(&1), "{counts:?}");
    assert_eq!(counts.get(&(200, String::new())), Some(&199), "{counts:?}");
    let created_at = &replies[0].1["created_at_ms"];
    for (_, body) in &replies {
        assert_eq!(&body["created_at_ms"], created_at, "one hold: {body}");
    }
    assert_pool(&apis[1].pool("dup").await, 10, 7, 3, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn per_user_limit_holds_across_servers() {
    let (_redis, servers) = fleet(3).await;
    let apis: Vec<Api> = servers.iter().map(Server::api).collect();
    put_pool(&apis[0], "lim", json!({"total": 100, "per_user_limit": 2})).await;
    let bodies = (0..60)
        .map(|i| {
            json!({"hold_id": format!("l{i}"), "user": format!("u{}", i % 3),
                   "items": [{"pool": "lim", "qty": 1}]})
        })
        .collect();
    let counts = tally(&reserve_all_at_once_over(&apis, bodies).await);
    assert_eq!(counts.get(&(201, String::new())), Some(&6), "{counts:?}");
    assert_eq!(
        counts.get(&(409, "user_limit_exceeded".to_string())),
        Some(&54),
        "{counts:?}"
    );
    assert_pool(&apis[2].pool("lim").await, 100, 94, 6, 0);
}

/// Arrival order is defined by real time, so arrivals are spaced by this much.
const ARRIVAL_GAP: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_on_different_servers_are_served_in_arrival_order() {
    let (_redis, servers) = fleet(3).await;
    let apis: Vec<Api> = servers.iter().map(Server::api).collect();
    put_pool(&apis[0], "w", json!({"total": 2})).await;
    for id in ["w-a", "w-b"] {
        let body = json!({"hold_id": id, "items": [{"pool": "w", "qty": 1}]});
        let (status, reply) = apis[0].call("POST", "/v1/holds", Some(body)).await;
        assert_eq!(status, 201, "{reply}");
    }
    // Three waiters, each on another server; the first wants 2 units, so one unit back must
    // skip it (it still cannot be satisfied) and go to the second.
    let first = spawn_waiter(&apis[1], "w-first", "w", 2, 10_000);
    tokio::time::sleep(ARRIVAL_GAP).await;
    let second = spawn_waiter(&apis[2], "w-second", "w", 1, 10_000);
    tokio::time::sleep(ARRIVAL_GAP).await;
    let third = spawn_waiter(&apis[0], "w-third", "w", 1, 2_000);
    tokio::time::sleep(ARRIVAL_GAP).await;
    assert!(!first.is_finished() && !second.is_finished() && !third.is_finished());

    let (status, body) = apis[0].call("POST", "/v1/holds/w-a/release", None).await;
    assert_eq!(status, 200, "{body}");
    let ((status, body), waited) = second.await.unwrap();
    assert_eq!(
        status, 201,
        "the unit skips the first waiter (needs 2) for the second: {body}"
    );
    assert!(waited < Duration::from_secs(5), "served late: {waited:?}");

    // w-b back: one unit again. The first waiter is ahead but still cannot be satisfied, so the
    // third, on yet another server, is served.
    let (status, body) = apis[1].call("POST", "/v1/holds/w-b/release", None).await;
    assert_eq!(status, 200, "{body}");
    let ((status, body), _) = third.await.unwrap();
    assert_eq!(
        status, 201,
        "the third waiter gets the unit the first cannot use: {body}"
    );

    // Both release: two units come back, and they go to the first waiter.
    apis[2]
        .call("POST", "/v1/holds/w-second/release", None)
        .await;
    apis[0]
        .call("POST", "/v1/holds/w-third/release", None)
        .await;
    let ((status, body), _) = first.await.unwrap();
    assert_eq!(status, 201, "the first waiter gets both units: {body}");
    assert_pool(&apis[1].pool("w").await, 2, 0, 2, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expiry_is_swept_by_whichever_server_runs() {
    let (_redis, mut servers) = fleet(2).await;
    let api = servers[0].api();
    put_pool(&api, "e", json!({"total": 3})).await;
    let body = json!({"hold_id": "e-1", "items": [{"pool": "e", "qty": 2}], "ttl_ms": 1000});
    let (status, hold) = api.call("POST", "/v1/holds", Some(body)).await;
    assert_eq!(status, 201, "{hold}");
    let expires_at_ms = hold["expires_at_ms"].as_u64().unwrap();
    // The server that made the hold dies; the other one expires it, with no traffic.
    servers[0].kill();
    let survivor = servers[1].api();
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    // All events of a hold are in its partition.
    let path = format!(
        "/v1/events?partition={}&after=0&wait_ms=1000",
        hold["partition"]
    );
    while Instant::now() < deadline {
        let (_, page) = survivor.call("GET", &path, None).await;
        events = page["events"].as_array().cloned().unwrap_or_default();
        if events.iter().any(|e| e["type"] == "expired") {
            break;
        }
    }
    let expired = events
        .iter()
        .find(|e| e["type"] == "expired")
        .unwrap_or_else(|| panic!("no expired event: {events:?}"));
    let lag_ms = expired["at_ms"].as_u64().unwrap() - expires_at_ms;
    assert!(lag_ms <= 1000, "expired {lag_ms} ms after its deadline");
    assert_pool(&survivor.pool("e").await, 3, 3, 0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fencing_tokens_increase_across_servers() {
    let (_redis, servers) = fleet(2).await;
    let apis: Vec<Api> = servers.iter().map(Server::api).collect();
    let mut last = 0;
    for round in 0..6 {
        let api = &apis[round % 2];
        let (status, lock) = api
            .call(
                "POST",
                "/v1/locks/job/acquire",
                Some(json!({"owner": format!("o{round}"), "ttl_ms": 60_000})),
            )
            .await;
        assert_eq!(status, 200, "{lock}");
        let token = lock["token"].as_u64().unwrap();
        assert!(token > last, "token {token} after {last}");
        last = token;
        let (status, body) = apis[(round + 1) % 2]
            .call(
                "POST",
                "/v1/locks/job/release",
                Some(json!({"owner": format!("o{round}"), "token": token})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
}

/// More holds lapse at once than one sweep call expires (1,000: the library's bound, so that a
/// call stays short): the sweeps that follow at once take the rest, all within the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crowd_of_holds_lapsing_at_once_all_expire_within_a_second() {
    const HOLDS: usize = 2_500;
    let (_redis, servers) = fleet(1).await;
    let api = servers[0].api();
    put_pool(&api, "crowd", json!({"total": HOLDS})).await;
    let mut last_deadline_ms = 0;
    for chunk in 0..HOLDS.div_ceil(1_000) {
        let ops: Vec<_> = (chunk * 1_000..HOLDS.min((chunk + 1) * 1_000))
            .map(|i| {
                json!({"op": "reserve", "hold_id": format!("c{i}"), "ttl_ms": 1_000,
                       "items": [{"pool": "crowd", "qty": 1}]})
            })
            .collect();
        let (status, body) = api
            .call("POST", "/v1/batch", Some(json!({"ops": ops})))
            .await;
        assert_eq!(status, 200, "{body}");
        for result in body["results"].as_array().expect("results") {
            assert_eq!(result["status"], 201, "{result}");
            let deadline = result["body"]["expires_at_ms"].as_u64().unwrap();
            last_deadline_ms = last_deadline_ms.max(deadline);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while api.pool("crowd").await["available"] != json!(HOLDS) {
        assert!(Instant::now() < deadline, "the crowd never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lag_ms = support::now_ms().saturating_sub(last_deadline_ms);
    assert!(
        lag_ms <= 1_000,
        "the last units came back {lag_ms} ms after the last deadline"
    );
}
