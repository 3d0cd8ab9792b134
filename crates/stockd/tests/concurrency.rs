//! Concurrency: the no-oversell invariant, idempotency and per-user limits under a burst of
//! simultaneous requests, waiters served first-come first-served, and expiry with no traffic.
//!
//! Each test starts its own `stockd` and only speaks HTTP to it. Tests that measure real time
//! (waiting, expiry) use bounded polling with deadlines, never a fixed sleep as a proof.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{
    assert_pool, now_ms, put_pool, reserve_all_at_once_over, short, spawn_waiter, tally, Api,
    Server,
};

/// Sends every body to `POST /v1/holds` at once.
async fn reserve_all_at_once(api: &Api, bodies: Vec<Value>) -> Vec<(u16, Value)> {
    reserve_all_at_once_over(std::slice::from_ref(api), bodies).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_reserves_on_five_units_sell_exactly_five() {
    let server = Server::start().await;
    let api = server.api();
    put_pool(&api, "burst", json!({"total": 5})).await;

    let bodies = (0..1000)
        .map(|i| json!({"hold_id": format!("burst-h{i}"), "items": [{"pool": "burst", "qty": 1}]}))
        .collect();
    let replies = reserve_all_at_once(&api, bodies).await;

    let counts = tally(&replies);
    assert_eq!(
        counts.get(&(201, String::new())),
        Some(&5),
        "exactly 5 reserves succeed: {counts:?}"
    );
    assert_eq!(
        counts.get(&(409, "insufficient_stock".to_string())),
        Some(&995),
        "995 are insufficient_stock: {counts:?}"
    );
    assert_eq!(counts.len(), 2, "no other outcome: {counts:?}");
    for (status, body) in &replies {
        if *status == 409 {
            assert_eq!(
                (&body["pool"], &body["available"], &body["requested"]),
                (&json!("burst"), &json!(0), &json!(1)),
                "insufficient_stock details: {body}"
            );
        }
    }

    assert_pool(&api.pool("burst").await, 5, 0, 5, 0);
    let winners: Vec<&str> = replies
        .iter()
        .filter(|(s, _)| *s == 201)
        .map(|(_, b)| b["hold_id"].as_str().unwrap())
        .collect();
    for hold in &winners {
        let (status, body) = api.call("GET", &format!("/v1/holds/{hold}"), None).await;
        assert_eq!(
            (status, &body["status"]),
            (200, &json!("held")),
            "winner {hold}: {body}"
        );
    }
    let held_events: Vec<Value> = api
        .events_after(0)
        .await
        .into_iter()
        .filter(|e| e["type"] == "held")
        .collect();
    assert_eq!(
        held_events.len(),
        5,
        "one held event per success: {}",
        short(&Value::Array(held_events.clone()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_copies_of_one_request_make_one_hold() {
    let server = Server::start().await;
    let api = server.api();
    put_pool(&api, "same", json!({"total": 10})).await;

    let body = json!({"hold_id": "same-h", "user": "u1", "items": [{"pool": "same", "qty": 1}]});
    let replies = reserve_all_at_once(&api, vec![body; 200]).await;

    let counts = tally(&replies);
    assert_eq!(
        counts.get(&(201, String::new())),
        Some(&1),
        "exactly one 201: {counts:?}"
    );
    assert_eq!(
        counts.get(&(200, String::new())),
        Some(&199),
        "199 replays answer 200: {counts:?}"
    );
    let created = &replies.iter().find(|(s, _)| *s == 201).unwrap().1;
    for (_, body) in &replies {
        assert_eq!(body["hold_id"], "same-h", "{body}");
        assert_eq!(body["status"], "held", "{body}");
        assert_eq!(
            body["created_at_ms"], created["created_at_ms"],
            "every answer is the same hold: {body}"
        );
        assert_eq!(
            body["expires_at_ms"], created["expires_at_ms"],
            "every answer is the same hold: {body}"
        );
    }
    assert_pool(&api.pool("same").await, 10, 9, 1, 0);
    let held = api
        .events_after(0)
        .await
        .into_iter()
        .filter(|e| e["type"] == "held")
        .count();
    assert_eq!(held, 1, "one held event");
}

/// One request id sent at the same moment to restocks of eight pools (on a Cluster, pools of
/// several partitions): one of them adds its unit, the other seven are `request_id_conflict`
/// naming it, round after round. A refused restock leaves its id new for another pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_request_id_sent_to_eight_pools_at_once_restocks_one() {
    let server = Server::start().await;
    let api = server.api();
    let pools: Vec<String> = (0..8).map(|i| format!("rid-pool-{i}")).collect();
    for pool in &pools {
        put_pool(&api, pool, json!({"total": 10})).await;
    }
    const ROUNDS: usize = 12;
    for round in 0..ROUNDS {
        let request_id = format!("shared-{round}");
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(pools.len()));
        let handles: Vec<_> = pools
            .iter()
            .map(|pool| {
                let (api, barrier) = (api.clone(), barrier.clone());
                let path = format!("/v1/pools/{pool}/restock");
                let body = json!({"delta": 1, "request_id": request_id});
                tokio::spawn(async move {
                    barrier.wait().await;
                    api.call("POST", &path, Some(body)).await
                })
            })
            .collect();
        let mut replies = Vec::new();
        for handle in handles {
            replies.push(handle.await.expect("restock task"));
        }
        let counts = tally(&replies);
        assert_eq!(
            (
                counts.get(&(200, String::new())),
                counts.get(&(409, "request_id_conflict".to_string()))
            ),
            (Some(&1), Some(&7)),
            "round {round}: one restock applies, seven conflict: {counts:?}"
        );
        let winner = &replies.iter().find(|(status, _)| *status == 200).unwrap().1;
        for (status, body) in &replies {
            if *status == 409 {
                assert_eq!(
                    (&body["request_id"], &body["pool"], &body["delta"]),
                    (&json!(request_id), &winner["pool"], &json!(1)),
                    "round {round}: the conflict names the restock that applied: {body}"
                );
            }
        }
    }
    let mut total = 0;
    for pool in &pools {
        total += api.pool(pool).await["total"].as_u64().unwrap();
    }
    assert_eq!(total, 80 + ROUNDS as u64, "each round added one unit");
    let restocked = api
        .events_after(0)
        .await
        .into_iter()
        .filter(|event| event["type"] == "restocked")
        .count();
    assert_eq!(restocked, ROUNDS, "one restocked event per round");

    // A refused restock leaves its id new: the next pool may use it.
    let (status, body) = api
        .call(
            "POST",
            &format!("/v1/pools/{}/restock", pools[0]),
            Some(json!({"delta": -1000, "request_id": "refused-first"})),
        )
        .await;
    assert_eq!(
        (status, &body["error"]),
        (409, &json!("insufficient_stock")),
        "{body}"
    );
    let before = api.pool(&pools[5]).await["total"].as_u64().unwrap();
    let (status, body) = api
        .call(
            "POST",
            &format!("/v1/pools/{}/restock", pools[5]),
            Some(json!({"delta": 2, "request_id": "refused-first"})),
        )
        .await;
    assert_eq!(
        (status, &body["total"]),
        (200, &json!(before + 2)),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn per_user_limit_holds_under_concurrency() {
    let server = Server::start().await;
    let api = server.api();
    put_pool(&api, "lim", json!({"total": 100, "per_user_limit": 3})).await;

    let mut bodies: Vec<Value> = (0..100)
        .map(|i| json!({"hold_id": format!("lim-u1-{i}"), "user": "u1", "items": [{"pool": "lim", "qty": 1}]}))
        .collect();
    // A second user in the same burst must be unaffected by the first one's limit.
    bodies.extend((0..3).map(|i| json!({"hold_id": format!("lim-u2-{i}"), "user": "u2", "items": [{"pool": "lim", "qty": 1}]})));
    let replies = reserve_all_at_once(&api, bodies).await;

    let (u1, u2) = replies.split_at(100);
    let counts = tally(u1);
    assert_eq!(
        counts.get(&(201, String::new())),
        Some(&3),
        "user u1 gets exactly its limit: {counts:?}"
    );
    assert_eq!(
        counts.get(&(409, "user_limit_exceeded".to_string())),
        Some(&97),
        "{counts:?}"
    );
    assert_eq!(counts.len(), 2, "{counts:?}");
    for (status, body) in u1 {
        if *status == 409 {
            assert_eq!(
                (
                    &body["pool"],
                    &body["limit"],
                    &body["used"],
                    &body["requested"]
                ),
                (&json!("lim"), &json!(3), &json!(3), &json!(1)),
                "{body}"
            );
        }
    }
    assert!(
        u2.iter().all(|(status, _)| *status == 201),
        "user u2 unaffected: {u2:?}"
    );
    assert_pool(&api.pool("lim").await, 100, 94, 6, 0);
}

/// A reserve of one unit of `pool` that does not wait.
async fn reserve_one(api: &Api, hold_id: &str, pool: &str) -> (u16, Value) {
    let body = json!({"hold_id": hold_id, "items": [{"pool": pool, "qty": 1}]});
    api.call("POST", "/v1/holds", Some(body)).await
}

/// Spawns a reserve that waits for stock, returning its answer and how long it took.
/// Arrival order is defined by real time, so the test spaces arrivals by this much. The outcome
/// asserted does not depend on this gap being exact, only on the first waiter being first.
const ARRIVAL_GAP: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_units_go_to_the_first_waiter_before_anyone_else() {
    let server = Server::start().await;
    let api = server.api();
    put_pool(&api, "w", json!({"total": 1})).await;
    let (status, _) = reserve_one(&api, "w-a", "w").await;
    assert_eq!(status, 201);

    let first = spawn_waiter(&api, "w-first", "w", 1, 10_000);
    tokio::time::sleep(ARRIVAL_GAP).await;
    let second = spawn_waiter(&api, "w-second", "w", 1, 2_000);
    tokio::time::sleep(ARRIVAL_GAP).await;
    assert!(
        !first.is_finished() && !second.is_finished(),
        "waiters must still be waiting: no stock yet"
    );

    let (status, body) = api.call("POST", "/v1/holds/w-a/release", None).await;
    assert_eq!(status, 200, "{body}");
    // The unit went to a waiter as part of the release: a request that does not wait gets nothing.
    let (status, body) = reserve_one(&api, "w-nowait", "w").await;
    assert_eq!(
        (status, &body["error"]),
        (409, &json!("insufficient_stock")),
        "waiters are served first: {body}"
    );

    let ((status, body), waited) = first.await.unwrap();
    assert_eq!(status, 201, "the first waiter gets the unit: {body}");
    assert!(
        waited < Duration::from_secs(5),
        "the first waiter was served late: {waited:?}"
    );
    let ((status, body), waited) = second.await.unwrap();
    assert_eq!(
        (status, &body["error"]),
        (409, &json!("insufficient_stock")),
        "the second waiter times out: {body}"
    );
    assert!(
        waited >= Duration::from_millis(1_800),
        "the second waiter gave up early: {waited:?}"
    );
    assert_pool(&api.pool("w").await, 1, 0, 1, 0);
    let (_, hold) = api.call("GET", "/v1/holds/w-first", None).await;
    assert_eq!(hold["status"], "held", "{hold}");
}

/// A segmented pool's waiters wait in their own segment, are served there in arrival order, and
/// are served by units that come back in any segment (where the pool is whole, one segment,
/// the same holds). The waiters here are one user's, so in one segment; the units come back in
/// another user's segment where there are several.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_a_segmented_pool_are_served_in_order_by_units_freed_in_any_segment() {
    let server = Server::start().await;
    let api = server.api();
    // Two users whose holds land in different segments (partitions), where there are several.
    put_pool(&api, "swp", json!({"total": 100, "segments": 2})).await;
    let mut partitions = Vec::new();
    for n in 0..16 {
        let body = json!({"hold_id": format!("swp-{n}"), "user": format!("user-{n}"),
            "items": [{"pool": "swp", "qty": 1}]});
        let (status, hold) = api.call("POST", "/v1/holds", Some(body)).await;
        assert_eq!(status, 201, "{hold}");
        partitions.push(hold["partition"].as_u64().unwrap());
    }
    let other = (1..16)
        .find(|&n| partitions[n] != partitions[0])
        .unwrap_or(1);
    let waiting_user = format!("user-{other}");

    put_pool(&api, "sw", json!({"total": 2, "segments": 2})).await;
    let body = json!({"hold_id": "sw-all", "user": "user-0", "items": [{"pool": "sw", "qty": 2}]});
    let (status, hold) = api.call("POST", "/v1/holds", Some(body)).await;
    assert_eq!(status, 201, "{hold}");
    let spawn = |hold_id: &str, wait_ms: u64| {
        let api = api.clone();
        let body = json!({"hold_id": hold_id, "user": waiting_user, "wait_ms": wait_ms,
            "items": [{"pool": "sw", "qty": 1}]});
        tokio::spawn(async move {
            let started = Instant::now();
            let reply = api.call("POST", "/v1/holds", Some(body)).await;
            (reply, started.elapsed())
        })
    };
    let first = spawn("sw-first", 20_000);
    tokio::time::sleep(ARRIVAL_GAP).await;
    let second = spawn("sw-second", 20_000);
    tokio::time::sleep(ARRIVAL_GAP).await;
    let third = spawn("sw-third", 4_000);
    tokio::time::sleep(ARRIVAL_GAP).await;
    assert!(
        !first.is_finished() && !second.is_finished() && !third.is_finished(),
        "waiters must still be waiting: no stock yet"
    );

    let (status, body) = api.call("POST", "/v1/holds/sw-all/release", None).await;
    assert_eq!(status, 200, "{body}");
    for (waiter, name) in [(first, "first"), (second, "second")] {
        let ((status, body), waited) = waiter.await.unwrap();
        assert_eq!(status, 201, "the {name} waiter gets a unit: {body}");
        assert!(
            waited < Duration::from_secs(10),
            "the {name} waiter was served late: {waited:?}"
        );
    }
    let ((status, body), waited) = third.await.unwrap();
    assert_eq!(
        (status, &body["error"]),
        (409, &json!("insufficient_stock")),
        "the third waiter, last to arrive, times out: {body}"
    );
    assert!(
        waited >= Duration::from_millis(3_800),
        "the third waiter gave up early: {waited:?}"
    );
    assert_pool(&api.pool("sw").await, 2, 0, 2, 0);
}

/// A client whose waiting reserve timed out on its side retries it (the same hold id and body)
/// while the first is still parked: when stock comes back, both are answered at once, the first
/// with the hold (201) and the retry with its replay (200), not the retry at its own deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_of_a_waiting_reserve_is_answered_when_the_hold_is_created() {
    let server = Server::start().await;
    let api = server.api();
    put_pool(&api, "wr", json!({"total": 1})).await;
    let (status, _) = reserve_one(&api, "wr-a", "wr").await;
    assert_eq!(status, 201);
    let first = spawn_waiter(&api, "wr-w", "wr", 1, 20_000);
    tokio::time::sleep(ARRIVAL_GAP).await;
    let retry = spawn_waiter(&api, "wr-w", "wr", 1, 20_000);
    tokio::time::sleep(ARRIVAL_GAP).await;
    assert!(!first.is_finished() && !retry.is_finished());

    let (status, body) = api.call("POST", "/v1/holds/wr-a/release", None).await;
    assert_eq!(status, 200, "{body}");
    let ((status, first_hold), waited) = first.await.unwrap();
    assert_eq!(status, 201, "{first_hold}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    let ((status, replay), waited) = retry.await.unwrap();
    assert_eq!(status, 200, "the retry is the replay: {replay}");
    assert_eq!(replay, first_hold);
    assert!(
        waited < Duration::from_secs(10),
        "the retry waited for its own deadline: {waited:?}"
    );
    assert_pool(&api.pool("wr").await, 1, 0, 1, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_cannot_be_satisfied_is_skipped() {
    let server = Server::start().await;
    let api = server.api();
    put_pool(&api, "s", json!({"total": 2})).await;
    for hold in ["s-a1", "s-a2"] {
        let (status, _) = api
            .call(
                "POST",
                "/v1/holds",
                Some(json!({"hold_id": hold, "items": [{"pool": "s", "qty": 1}]})),
            )
            .await;
        assert_eq!(status, 201);
    }

    let big = spawn_waiter(&api, "s-big", "s", 2, 2_500);
    tokio::time::sleep(ARRIVAL_GAP).await;
    let small = spawn_waiter(&api, "s-small", "s", 1, 10_000);
    tokio::time::sleep(ARRIVAL_GAP).await;

    let (status, _) = api.call("POST", "/v1/holds/s-a1/release", None).await;
    assert_eq!(status, 200);
    let ((status, body), waited) = small.await.unwrap();
    assert_eq!(
        status, 201,
        "one unit back: the waiter for 2 is skipped, the waiter for 1 served: {body}"
    );
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    let ((status, body), _) = big.await.unwrap();
    assert_eq!(
        (status, &body["error"]),
        (409, &json!("insufficient_stock")),
        "{body}"
    );
    assert_pool(&api.pool("s").await, 2, 0, 2, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_fails_after_wait_ms_when_nothing_comes_back_and_gets_expired_units() {
    let server = Server::start().await;
    let api = server.api();
    put_pool(&api, "t", json!({"total": 1})).await;
    let (status, _) = api
        .call(
            "POST",
            "/v1/holds",
            Some(json!({"hold_id": "t-a", "items": [{"pool": "t", "qty": 1}], "ttl_ms": 1000})),
        )
        .await;
    assert_eq!(status, 201);

    // Nothing comes back within 300 ms (the hold lives 1 s): the waiter fails after waiting.
    let ((status, body), waited) = spawn_waiter(&api, "t-short", "t", 1, 300).await.unwrap();
    assert_eq!(
        (status, &body["error"]),
        (409, &json!("insufficient_stock")),
        "{body}"
    );
    assert!(
        waited >= Duration::from_millis(250),
        "wait_ms=300 gave up after {waited:?}"
    );

    // The expiring hold's unit goes to a waiter.
    let ((status, body), waited) = spawn_waiter(&api, "t-long", "t", 1, 5_000).await.unwrap();
    assert_eq!(
        status, 201,
        "units from an expired hold go to the waiter: {body}"
    );
    assert!(
        waited < Duration::from_millis(4_000),
        "served {waited:?} after asking; expiry lag too large"
    );
    let (_, hold) = api.call("GET", "/v1/holds/t-a", None).await;
    assert_eq!(hold["status"], "expired", "{hold}");
    assert_pool(&api.pool("t").await, 1, 0, 1, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_expires_without_traffic_within_a_second_of_its_deadline() {
    let server = Server::start().await;
    let api = server.api();
    put_pool(&api, "x", json!({"total": 3})).await;

    let started = Instant::now();
    let (status, hold) = api
        .call(
            "POST",
            "/v1/holds",
            Some(json!({"hold_id": "x-h", "items": [{"pool": "x", "qty": 2}], "ttl_ms": 1000})),
        )
        .await;
    assert_eq!(status, 201, "{hold}");
    let expires_at_ms = hold["expires_at_ms"].as_u64().expect("expires_at_ms");

    // Only the pool is polled, never the hold: expiry must not depend on touching the hold.
    let deadline = started + Duration::from_millis(2_500);
    loop {
        let pool = api.pool("x").await;
        let seen_at_ms = now_ms();
        if pool["held"] == 0 {
            assert_pool(&pool, 3, 3, 0, 0);
            assert!(
                seen_at_ms + 5 >= expires_at_ms,
                "units came back before the deadline ({seen_at_ms} < {expires_at_ms})"
            );
            break;
        }
        assert_pool(&pool, 3, 1, 2, 0);
        assert!(
            Instant::now() < deadline,
            "units still held {:?} after the reserve (deadline {expires_at_ms}, now {seen_at_ms})",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, hold) = api.call("GET", "/v1/holds/x-h", None).await;
    assert_eq!(
        (status, &hold["status"]),
        (200, &json!("expired")),
        "{hold}"
    );
    assert!(
        hold["finished_at_ms"].as_u64().is_some(),
        "finished_at_ms set: {hold}"
    );
}
