//! The event feed: the per-case event tables, and the properties that need a server of their own
//! (a fresh feed, the window, long polls, the partition-aware matching itself, `created_at_ms`).
//!
//! The cases are data (see `case.rs`), run by `runner.rs`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::case::*;
use crate::runner::{fill_expect, fill_partitions};
use crate::support::{
    backend_partitions, error_shape_problem, match_events, match_subset, partition_rules_problem,
    short, vars_with_partitions, FeedEvent, Server, ServerConfig, TimeWindow, Vars,
};

pub(crate) fn event_cases() -> Vec<Case> {
    let a = "{p}-a";
    let b = "{p}-b";
    let none = json!({});
    vec![
        case("partitions: the feed has the backend's partition count (1 on the embedded engine and a single Redis)")
            .get("/v1/events/partitions", 200, json!({"partitions": backend_partitions()})),
        case("partitions: partition=K reads partition K: a pool's events are in the partition its object names")
            .get("/v1/events/partitions", 200, json!({"partitions": "{P}"}))
            .put_pool(a, json!({"total": 1}), 201, json!({"partition": "$partition:pa"}))
            .get("/v1/events?partition={$pa}&after=0&limit=1", 200, json!({"events": {"$len": 1}, "next_after": "$int"}))
            .get("/v1/events?partition={$pa}&after=0&limit=1000", 200, json!({"events": "$any", "next_after": "$int"}))
            .get("/v1/events?partition={P-1}&after=0", 200, json!({"events": "$any", "next_after": "$int"}))
            .events(json!([ev("pool_upserted", json!({"pool": a, "partition": "$same:pa"}))])),
        // The largest `after` there is: nothing comes after it, and nothing before it was
        // dropped, so it is an empty page (not 410), waiting or not; one more is not a u64.
        case("events: after = 2^64 - 1 is 200 with no events and next_after the same after")
            .put_pool(a, json!({"total": 1}), 201, json!({"partition": "$partition:pa"}))
            .get("/v1/events?partition={$pa}&after=18446744073709551615", 200, json!({"events": [], "next_after": u64::MAX}))
            .get("/v1/events?partition={$pa}&after=18446744073709551615&limit=1&wait_ms=100", 200, json!({"events": [], "next_after": u64::MAX}))
            .get("/v1/events?partition={$pa}&after=18446744073709551616", 422, err("invalid_request"))
            .events(json!([ev("pool_upserted", json!({"pool": a, "partition": "$same:pa"}))])),
        case("partitions: with one partition, leaving partition out reads partition 0")
            .only(When::OnePartition)
            .put_pool(a, json!({"total": 1}), 201, json!({"partition": 0}))
            .get("/v1/events?after=0&limit=1", 200, json!({"events": [{"seq": 1, "type": "$save:t", "at_ms": "$save:at"}], "next_after": 1}))
            .get("/v1/events?partition=0&after=0&limit=1", 200, json!({"events": [{"seq": 1, "type": "$same:t", "at_ms": "$same:at"}], "next_after": 1}))
            .get("/v1/events?after=0&limit=1000", 200, json!({"events": "$any", "next_after": "$int"}))
            .get("/v1/events?partition=0&after=0&limit=1000", 200, json!({"events": "$any", "next_after": "$int"}))
            .get("/v1/events", 200, json!({"events": "$any", "next_after": "$int"})),
        case("partitions: with several partitions, leaving partition out is 422 partition_required")
            .only(When::ManyPartitions)
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .get("/v1/events?after=0", 422, json!({"error": "partition_required", "message": "$contains:partition"}))
            .get("/v1/events", 422, err("partition_required"))
            .get("/v1/events?after=0&limit=1&wait_ms=30000", 422, err("partition_required"))
            .get("/v1/events?partition=0&after=0", 200, json!({"events": "$any", "next_after": "$int"})),
        case("partitions: a partition outside 0..P-1 is 422 invalid_request naming the field and the value")
            .get("/v1/events?partition={P}", 422, json!({"error": "invalid_request", "message": "$contains:partition"}))
            .get("/v1/events?partition={P+6}&after=0", 422, json!({"error": "invalid_request", "message": "$contains:{P+6}"}))
            .get("/v1/events?partition=abc", 422, json!({"error": "invalid_request", "message": "$contains:abc"}))
            .get("/v1/events?partition=-1", 422, err("invalid_request"))
            .get("/v1/events?partition=4294967296", 422, err("invalid_request"))
            .get("/v1/events?partition=0.5", 422, err("invalid_request"))
            .get("/v1/events?partition=", 422, err("invalid_request")),
        case("partitions: pool and hold objects carry their partition (0 with one), the same in every answer")
            .put_pool(a, json!({"total": 5}), 201, json!({"partition": "$partition:pa"}))
            .put_pool("{p}-a?if_absent=true", json!({"total": 5}), 200, json!({"partition": "$partition:pa"}))
            .restock(a, 1, 200, json!({"partition": "$partition:pa"}))
            .get_pool(a, json!({"partition": "$partition:pa"}))
            .get("/v1/pools?prefix={p}", 200, json!({"pools": [{"pool": a, "partition": "$partition:pa"}], "next": null}))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 201, json!({"partition": "$partition:ph"}))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 200, json!({"partition": "$partition:ph"}))
            .get_hold("{p}-h", 200, json!({"partition": "$partition:ph"}))
            .extend("{p}-h", 60_000, 200, json!({"partition": "$partition:ph"}))
            .confirm("{p}-h", 200, json!({"partition": "$partition:ph"}))
            .refund("{p}-h", 200, json!({"partition": "$partition:ph"}))
            .batch(
                json!([{"op": "reserve", "hold_id": "{p}-h2", "items": [{"pool": a, "qty": 1}]}, {"op": "release", "hold_id": "{p}-h2"}]),
                200,
                json!({"results": [{"status": 201, "body": {"partition": "$partition:ph2"}}, {"status": 200, "body": {"status": "released", "partition": "$partition:ph2"}}]}),
            )
            .get_hold("{p}-h2", 200, json!({"partition": "$partition:ph2"}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a, "partition": "$same:pa"})),
                ev("restocked", json!({"pool": a, "partition": "$same:pa"})),
                ev("held", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
                ev("extended", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
                ev("confirmed", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
                ev("refunded", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
                ev("held", json!({"hold_id": "{p}-h2", "partition": "$same:ph2"})),
                ev("released", json!({"hold_id": "{p}-h2", "partition": "$same:ph2"})),
            ])),
        case("partitions: a multi-pool hold names one partition in every answer, and its events are all there")
            .put_pool(a, json!({"total": 5}), 201, json!({"partition": "$partition:pa"}))
            .put_pool(b, json!({"total": 5}), 201, json!({"partition": "$partition:pb"}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 2)], none.clone()), 201, json!({"partition": "$partition:ph"}))
            .get_hold("{p}-h", 200, json!({"partition": "$partition:ph"}))
            .extend("{p}-h", 60_000, 200, json!({"partition": "$partition:ph"}))
            .confirm("{p}-h", 200, json!({"partition": "$partition:ph"}))
            .refund("{p}-h", 200, json!({"partition": "$partition:ph"}))
            .get_pool(a, json!({"partition": "$partition:pa", "available": 5}))
            .get_pool(b, json!({"partition": "$partition:pb", "available": 5}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a, "partition": "$same:pa"})),
                ev("pool_upserted", json!({"pool": b, "partition": "$same:pb"})),
                ev("held", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
                ev("extended", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
                ev("confirmed", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
                ev("refunded", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
            ])),
        case("events: every change appends one event of its type, in order, with its fields")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .restock(a, 5, 200, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 2)], json!({"user": "u1"})), 201, json!({}))
            .confirm("{p}-h1", 200, json!({}))
            .refund("{p}-h1", 200, json!({}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], none.clone()), 201, json!({}))
            .extend("{p}-h2", 5000, 200, json!({}))
            .release("{p}-h2", 200, json!({}))
            .delete_pool(a, 204, Value::Null)
            .events(json!([
                ev("pool_upserted", json!({"pool": a, "total": 10, "available": 10, "delta": 10})),
                ev("restocked", json!({"pool": a, "total": 15, "available": 15, "delta": 5})),
                ev("held", json!({"hold_id": "{p}-h1", "user": "u1", "items": [{"pool": a, "qty": 2}]})),
                ev("confirmed", json!({"hold_id": "{p}-h1"})),
                ev("refunded", json!({"hold_id": "{p}-h1"})),
                ev("held", json!({"hold_id": "{p}-h2", "items": [{"pool": a, "qty": 1}]})),
                ev("extended", json!({"hold_id": "{p}-h2"})),
                ev("released", json!({"hold_id": "{p}-h2"})),
                ev("pool_deleted", json!({"pool": a, "total": 15, "available": 15})),
            ])),
        // A consumer keeps a pool's numbers by adding deltas, whatever order it reads the
        // partitions in: a PUT says how it moved total (and so available), a delete what it took.
        case("events: pool_upserted carries the change of total, pool_deleted the pool's last numbers")
            .put_pool(a, json!({"total": 5}), 201, counts(5, 5, 0, 0))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"confirm": true})), 201, status("confirmed"))
            .put_pool(a, json!({"total": 8}), 200, counts(8, 6, 0, 2))
            .put_pool(a, json!({"total": 4}), 200, counts(4, 2, 0, 2))
            .put_pool(a, json!({"total": 4}), 200, counts(4, 2, 0, 2))
            .delete_pool(a, 204, Value::Null)
            .put_pool(a, json!({"total": 3}), 201, counts(3, 3, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a, "delta": 5, "total": 5, "available": 5})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
                ev("pool_upserted", json!({"pool": a, "delta": 3, "total": 8, "available": 6})),
                ev("pool_upserted", json!({"pool": a, "delta": -4, "total": 4, "available": 2})),
                ev("pool_upserted", json!({"pool": a, "delta": 0, "total": 4, "available": 2})),
                ev("pool_deleted", json!({"pool": a, "total": 4, "available": 2})),
                ev("pool_upserted", json!({"pool": a, "delta": 3, "total": 3, "available": 3})),
            ])),
        case("events: confirm:true gives held then confirmed")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"confirm": true, "user": "u1"})), 201, status("confirmed"))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h", "user": "u1", "items": [{"pool": a, "qty": 2}]})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
            ])),
        case("events: refused, replayed and repeated requests append nothing")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], none.clone()), 201, json!({}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], none.clone()), 409, err("insufficient_stock"))
            .reserve(hold_req("{p}-h1", &[(a, 1)], none.clone()), 200, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], json!({"user": "x"})), 409, err("hold_id_conflict"))
            .confirm("{p}-h1", 200, json!({}))
            .confirm("{p}-h1", 200, json!({}))
            .put_pool("{p}-a?if_absent=true", json!({"total": 50}), 200, json!({"total": 1}))
            .restock(a, -2, 409, err("insufficient_stock"))
            .put_pool(a, json!({"total": 0}), 409, err("total_below_committed"))
            .refund("{p}-h1", 200, json!({}))
            .refund("{p}-h1", 200, json!({}))
            .release("{p}-h1", 409, err("hold_refunded"))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h1"})),
                ev("confirmed", json!({"hold_id": "{p}-h1"})),
                ev("refunded", json!({"hold_id": "{p}-h1"})),
            ])),
        case("events: a multi-pool hold is one held event with every item")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .put_pool(b, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 2)], none.clone()), 201, json!({}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("pool_upserted", json!({"pool": b})),
                ev("held", json!({"hold_id": "{p}-h", "items": items(json!([{"pool": a, "qty": 1}, {"pool": b, "qty": 2}]))})),
            ])),
        case("events: expiry appends expired")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"ttl_ms": 1000})), 201, json!({}))
            .poll_pool(a, 1000, counts(5, 5, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("expired", json!({"hold_id": "{p}-h"})),
            ])),
        case("low_stock: fires once each time available crosses from above the threshold to at or below")
            .put_pool(a, json!({"total": 10, "low_stock_threshold": 3}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 6)], none.clone()), 201, json!({}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], none.clone()), 201, json!({}))
            .reserve(hold_req("{p}-h3", &[(a, 1)], none.clone()), 201, json!({}))
            .release("{p}-h3", 200, json!({}))
            .release("{p}-h2", 200, json!({}))
            .release("{p}-h1", 200, json!({}))
            .reserve(hold_req("{p}-h4", &[(a, 8)], none.clone()), 201, json!({}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h1"})),
                ev("held", json!({"hold_id": "{p}-h2"})),
                ev("low_stock", json!({"pool": a, "available": 3})),
                ev("held", json!({"hold_id": "{p}-h3"})),
                ev("released", json!({"hold_id": "{p}-h3"})),
                ev("released", json!({"hold_id": "{p}-h2"})),
                ev("released", json!({"hold_id": "{p}-h1"})),
                ev("held", json!({"hold_id": "{p}-h4"})),
                ev("low_stock", json!({"pool": a, "available": 2})),
            ])),
        case("low_stock: fires when a pool is created or updated at or below the threshold")
            .put_pool(a, json!({"total": 2, "low_stock_threshold": 2}), 201, json!({}))
            .put_pool(a, json!({"total": 2, "low_stock_threshold": 2}), 200, json!({}))
            .put_pool(a, json!({"total": 5, "low_stock_threshold": 2}), 200, json!({}))
            .put_pool(a, json!({"total": 5, "low_stock_threshold": 5}), 200, json!({}))
            .put_pool("{p}-a?if_absent=true", json!({"total": 1, "low_stock_threshold": 9}), 200, json!({}))
            .put_pool(a, json!({"total": 5}), 200, json!({}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("low_stock", json!({"pool": a, "available": 2})),
                ev("pool_upserted", json!({"pool": a})),
                ev("low_stock", json!({"pool": a, "available": 2})),
                ev("pool_upserted", json!({"pool": a})),
                ev("pool_upserted", json!({"pool": a})),
                ev("low_stock", json!({"pool": a, "available": 5})),
                ev("pool_upserted", json!({"pool": a})),
            ])),
        case("low_stock: threshold 0 fires when the pool sells out, and on an empty pool's creation")
            .put_pool(a, json!({"total": 2, "low_stock_threshold": 0}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], none.clone()), 201, json!({}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], none.clone()), 201, json!({}))
            .put_pool(b, json!({"total": 0, "low_stock_threshold": 0}), 201, json!({}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h1"})),
                ev("held", json!({"hold_id": "{p}-h2"})),
                ev("low_stock", json!({"pool": a, "available": 0})),
                ev("pool_upserted", json!({"pool": b})),
                ev("low_stock", json!({"pool": b, "available": 0})),
            ])),
        case("low_stock: a negative restock across the threshold fires")
            .put_pool(a, json!({"total": 10, "low_stock_threshold": 3}), 201, json!({}))
            .restock(a, -7, 200, counts(3, 3, 0, 0))
            .restock(a, 1, 200, counts(4, 4, 0, 0))
            .restock(a, -4, 200, counts(0, 0, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("restocked", json!({"pool": a, "total": 3, "available": 3})),
                ev("low_stock", json!({"pool": a, "available": 3})),
                ev("restocked", json!({"pool": a, "total": 4, "available": 4})),
                ev("restocked", json!({"pool": a, "total": 0, "available": 0})),
                ev("low_stock", json!({"pool": a, "available": 0})),
            ])),
        case("low_stock: never fires without a threshold")
            .put_pool(a, json!({"total": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], none.clone()), 201, json!({}))
            .put_pool(b, json!({"total": 0}), 201, json!({}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("pool_upserted", json!({"pool": b})),
            ])),
        case("low_stock: a multi-pool hold fires only for the pool that crosses")
            .put_pool(a, json!({"total": 2, "low_stock_threshold": 1}), 201, json!({}))
            .put_pool(b, json!({"total": 5, "low_stock_threshold": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 1)], none.clone()), 201, json!({}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("pool_upserted", json!({"pool": b})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("low_stock", json!({"pool": a, "available": 1})),
            ])),
        case("low_stock: confirm leaves available alone and does not fire")
            .put_pool(a, json!({"total": 2, "low_stock_threshold": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 201, json!({}))
            .confirm("{p}-h", 200, json!({}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("low_stock", json!({"pool": a, "available": 1})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
            ])),
        case("low_stock: a failed reserve does not fire")
            .put_pool(a, json!({"total": 5, "low_stock_threshold": 1}), 201, json!({}))
            .put_pool(b, json!({"total": 0}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 5), (b, 1)], none.clone()), 409, err("insufficient_stock"))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("pool_upserted", json!({"pool": b})),
            ])),
    ]
}

/// On a fresh server, in every partition: seq starts at 1 and strictly increases, `next_after` is
/// the last returned seq or the given `after`, `limit` defaults to 100 and is at most 1000, paging
/// sees every event once, and locks append nothing. Order is compared within a partition only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_feed_on_a_fresh_server() {
    let server = Server::start().await;
    let api = server.api();
    let partitions = api.partitions().await;

    expect_empty_feed(&api).await;

    let home = create_pool_in_partition(&api, "ev-a", 5000, partitions).await;
    let window = TimeWindow {
        before_ms: 0,
        after_ms: u64::MAX / 2,
    };
    for partition in 0..partitions {
        let path = api.events_path(partition, "after=0").await;
        let (status, body) = api.call("GET", &path, None).await;
        assert_eq!(status, 200, "{path}: {body}");
        let expected = if partition == home {
            json!({"events": [{"seq": 1, "type": "pool_upserted", "pool": "ev-a", "at_ms": "$int"}], "next_after": 1})
        } else {
            json!({"events": [], "next_after": 0})
        };
        match_subset(&expected, &body, &mut Vars::new(), window).unwrap_or_else(|why| {
            panic!("{path}: the first event is in the pool's partition {home}, with seq 1: {why}")
        });
    }

    // 1000 held events in one batch, then 200 more: 1201 events in all.
    const HOLDS: usize = 1200;
    let ops: Vec<Value> = (0..1000)
        .map(|i| json!({"op": "reserve", "hold_id": format!("ev-h{i}"), "items": [{"pool": "ev-a", "qty": 1}]}))
        .collect();
    let (status, body) = api
        .call("POST", "/v1/batch", Some(json!({"ops": ops})))
        .await;
    assert_eq!(status, 200, "batch: {}", short(&body));
    let ops: Vec<Value> = (1000..HOLDS)
        .map(|i| json!({"op": "reserve", "hold_id": format!("ev-h{i}"), "items": [{"pool": "ev-a", "qty": 1}]}))
        .collect();
    let (status, body) = api
        .call("POST", "/v1/batch", Some(json!({"ops": ops})))
        .await;
    assert_eq!(status, 200, "batch: {}", short(&body));

    // Paging each partition with an odd page size sees every event exactly once: per partition
    // seq starts at 1 and strictly increases.
    let mut seen: Vec<Vec<Value>> = Vec::new();
    for partition in 0..partitions {
        let mut events_of_partition = Vec::new();
        let mut after = 0u64;
        loop {
            let path = api
                .events_path(partition, &format!("after={after}&limit=333"))
                .await;
            let (status, page) = api.call("GET", &path, None).await;
            assert_eq!(status, 200, "{path}: {}", short(&page));
            let events = page["events"].as_array().unwrap().clone();
            let next = page["next_after"].as_u64().expect("next_after");
            if events.is_empty() {
                assert_eq!(
                    next, after,
                    "{path}: an empty page gives back the given after"
                );
                break;
            }
            assert!(events.len() <= 333);
            assert_eq!(Some(next), events.last().unwrap()["seq"].as_u64(), "{path}");
            events_of_partition.extend(events);
            after = next;
        }
        let seqs: Vec<u64> = events_of_partition
            .iter()
            .map(|e| e["seq"].as_u64().expect("integer seq"))
            .collect();
        if let Some(first) = seqs.first() {
            assert_eq!(*first, 1, "partition {partition}: seq starts at 1");
        }
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "partition {partition}: seq must strictly increase"
        );
        seen.push(events_of_partition);
    }
    let total: usize = seen.iter().map(Vec::len).sum();
    assert_eq!(total, 1 + HOLDS, "1 pool_upserted + {HOLDS} held events");
    assert_eq!(seen[home as usize][0]["type"], "pool_upserted");
    // One held event per hold; within a partition they follow batch order.
    let mut held = vec![0; HOLDS];
    for (partition, events) in seen.iter().enumerate() {
        let mut last_index = None;
        for event in events {
            if event["type"] == "pool_upserted" && partition == home as usize {
                continue;
            }
            assert_eq!(
                event["type"],
                "held",
                "partition {partition}: {}",
                short(event)
            );
            let index: usize = event["hold_id"]
                .as_str()
                .and_then(|id| id.strip_prefix("ev-h"))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("not one of ours: {}", short(event)));
            held[index] += 1;
            assert!(
                last_index < Some(index),
                "partition {partition}: events follow batch order: ev-h{index} after ev-h{}",
                last_index.unwrap()
            );
            last_index = Some(index);
        }
    }
    assert!(held.iter().all(|n| *n == 1), "one held event per hold");
    assert_eq!(api.all_events().await.len(), 1 + HOLDS);
    let mut heads: Vec<u64> = seen
        .iter()
        .map(|events| events.last().map_or(0, |e| e["seq"].as_u64().unwrap()))
        .collect();

    // Default limit 100, max 1000, 1001 refused, read on the busiest partition. Should no
    // partition hold more than 1000 events (holds spread over partitions), restocks of ev-a add
    // pool events to its partition (all of a pool's events are in one) until one does.
    let mut busiest = (0..partitions)
        .max_by_key(|k| seen[*k as usize].len())
        .unwrap();
    if seen[busiest as usize].len() <= 1000 {
        busiest = home;
        let mut count = seen[home as usize].len();
        while count <= 1000 {
            let (status, body) = api
                .call("POST", "/v1/pools/ev-a/restock", Some(json!({"delta": 1})))
                .await;
            assert_eq!(status, 200, "{body}");
            let new = api.events_in(home, heads[home as usize]).await;
            count += new.len();
            if let Some(last) = new.last() {
                heads[home as usize] = last["seq"].as_u64().unwrap();
            }
        }
    }
    let path = api.events_path(busiest, "after=0").await;
    let (status, page) = api.call("GET", &path, None).await;
    assert_eq!(status, 200, "{}", short(&page));
    let events = page["events"].as_array().expect("events array");
    assert_eq!(events.len(), 100, "{path}: limit defaults to 100");
    assert_eq!(
        page["next_after"], events[99]["seq"],
        "next_after is the seq of the last event returned"
    );
    let path = api.events_path(busiest, "after=0&limit=1000").await;
    let (status, page) = api.call("GET", &path, None).await;
    assert_eq!(status, 200, "{}", short(&page));
    assert_eq!(
        page["events"].as_array().unwrap().len(),
        1000,
        "{path}: limit=1000 returns 1000 events"
    );
    let path = api.events_path(busiest, "after=0&limit=1001").await;
    let (status, body) = api.call("GET", &path, None).await;
    assert_eq!(
        (status, body["error"].clone()),
        (422, json!("invalid_request")),
        "{path}"
    );

    // After each partition's head: nothing, next_after = after.
    for partition in 0..partitions {
        let head = heads[partition as usize];
        for after in [head, head + 1000] {
            let path = api.events_path(partition, &format!("after={after}")).await;
            let (status, page) = api.call("GET", &path, None).await;
            expect_subset(
                status,
                &page,
                json!({"events": [], "next_after": after}),
                &path,
            );
        }
    }

    // Locks append no event.
    let (status, lock) = api
        .call(
            "POST",
            "/v1/locks/ev-l/acquire",
            Some(json!({"owner": "o1", "ttl_ms": 1000})),
        )
        .await;
    assert_eq!(status, 200, "{lock}");
    let token = lock["token"].clone();
    let (status, _) = api
        .call(
            "POST",
            "/v1/locks/ev-l/renew",
            Some(json!({"owner": "o1", "token": token, "ttl_ms": 1000})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = api
        .call(
            "POST",
            "/v1/locks/ev-l/release",
            Some(json!({"owner": "o1", "token": token})),
        )
        .await;
    assert_eq!(status, 200);
    for partition in 0..partitions {
        let head = heads[partition as usize];
        let path = api.events_path(partition, &format!("after={head}")).await;
        let (status, page) = api.call("GET", &path, None).await;
        expect_subset(
            status,
            &page,
            json!({"events": [], "next_after": head}),
            &format!("locks give no events: {path}"),
        );
    }

    // The next change continues the sequence of its hold's partition; the others stay as they were.
    let (status, hold) = api.call("POST", "/v1/holds/ev-h0/confirm", None).await;
    assert_eq!(status, 200, "{hold}");
    let hold_partition = partition_of(&hold, partitions);
    for partition in 0..partitions {
        let head = heads[partition as usize];
        let path = api.events_path(partition, &format!("after={head}")).await;
        let (status, page) = api.call("GET", &path, None).await;
        assert_eq!(status, 200, "{path}: {page}");
        let events = page["events"].as_array().unwrap();
        if partition != hold_partition {
            assert!(events.is_empty(), "{path}: {}", short(&page));
            continue;
        }
        assert_eq!(events.len(), 1, "{path}: {}", short(&page));
        assert!(events[0]["seq"].as_u64().unwrap() > head);
        assert_eq!(events[0]["type"], "confirmed");
        assert_eq!(events[0]["hold_id"], "ev-h0");
    }
}

/// The feed keeps a bounded window (`--event-retention-max`). A consumer whose `after` is older
/// than the window gets 410 `events_expired` with `oldest_seq`, never a silent gap, including a
/// consumer starting from 0; `after = oldest_seq - 1` resumes with the whole window; the window
/// and the answer survive a restart. One pool's events are all in its partition: that one is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_behind_the_window_are_410_with_the_oldest_kept() {
    const WINDOW: u64 = 5;
    let config = ServerConfig::default()
        .arg("--event-retention-max")
        .arg(WINDOW.to_string());
    let mut server = Server::start_with(config).await;
    let api = server.api();
    let partitions = api.partitions().await;
    expect_empty_feed(&api).await;

    // Seq 1 (pool_upserted) and 2..=8 (restocked) in the pool's partition: 8 events, the newest 5
    // (4..=8) kept.
    let home = create_pool_in_partition(&api, "win-a", 1, partitions).await;
    for _ in 0..7 {
        let (status, body) = api
            .call("POST", "/v1/pools/win-a/restock", Some(json!({"delta": 1})))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let oldest_seq = 8 - WINDOW + 1;

    for pass in ["before a restart", "after a restart"] {
        let api = server.api();
        let mut paths = Vec::new();
        for query in [
            "after=0".to_string(),
            "after=1".to_string(),
            format!("after={}", oldest_seq - 2),
            "after=0&wait_ms=30000".to_string(),
        ] {
            paths.push(api.events_path(home, &query).await);
        }
        paths.push(format!("/v1/events?partition={home}&after=0"));
        for path in paths {
            let started = Instant::now();
            let (status, body) = api.call("GET", &path, None).await;
            assert_eq!(status, 410, "{pass}, {path}: {body}");
            assert_eq!(body["error"], "events_expired", "{path}: {body}");
            assert_eq!(body["oldest_seq"], oldest_seq, "{path}: {body}");
            assert!(
                error_shape_problem(status, &body).is_none(),
                "{path}: {body}"
            );
            let resume = format!("after={}", oldest_seq - 1);
            assert!(
                body["message"].as_str().unwrap_or("").contains(&resume),
                "{path}: the message says where to resume: {body}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{path}: a long poll behind the window is answered at once"
            );
        }

        // Resuming from oldest_seq - 1 reads the whole window, then the head as usual.
        let path = api
            .events_path(home, &format!("after={}", oldest_seq - 1))
            .await;
        let (status, page) = api.call("GET", &path, None).await;
        assert_eq!(status, 200, "{path}: {page}");
        let seqs: Vec<u64> = page["events"]
            .as_array()
            .expect("events array")
            .iter()
            .map(|event| event["seq"].as_u64().expect("integer seq"))
            .collect();
        assert_eq!(seqs, (oldest_seq..=8).collect::<Vec<_>>(), "{pass}: {page}");
        assert_eq!(page["next_after"], 8);
        for after in [oldest_seq, 8, 1000] {
            let path = api.events_path(home, &format!("after={after}")).await;
            let (status, page) = api.call("GET", &path, None).await;
            assert_eq!(status, 200, "{pass}, {path}: {page}");
        }
        // The other partitions dropped nothing.
        let others = (0..partitions).filter(|k| *k != home);
        expect_empty_partitions(&api, others, pass).await;
        if pass == "before a restart" {
            // SIGKILL: the window comes back from the log, as it was.
            server.restart().await;
        }
    }
}

/// `wait_ms` long-polls: with nothing new it waits about that long and returns empty; when an
/// event arrives meanwhile it returns early with it. Real time is what is under test. The pool's
/// events are all in its partition: that one is polled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_long_poll_waits_and_returns_early() {
    let server = Server::start().await;
    let api = server.api();
    let partitions = api.partitions().await;
    let home = create_pool_in_partition(&api, "lp-a", 5, partitions).await;
    let head = api.events_in(home, 0).await.last().expect("one event")["seq"]
        .as_u64()
        .unwrap();

    // Nothing new: the answer comes after about wait_ms, empty.
    let started = Instant::now();
    let path = api
        .events_path(home, &format!("after={head}&wait_ms=400"))
        .await;
    let (status, page) = api.call("GET", &path, None).await;
    let waited = started.elapsed();
    expect_subset(
        status,
        &page,
        json!({"events": [], "next_after": head}),
        "a long-poll with nothing new",
    );
    assert!(
        waited >= Duration::from_millis(350),
        "wait_ms=400 returned after {waited:?}: it did not wait"
    );
    assert!(
        waited < Duration::from_secs(5),
        "wait_ms=400 took {waited:?}"
    );

    // An event arrives while a long-poll waits: it returns early with that event.
    let poller = {
        let api = api.clone();
        let path = api
            .events_path(home, &format!("after={head}&wait_ms=20000"))
            .await;
        tokio::spawn(async move {
            let started = Instant::now();
            let reply = api.call("GET", &path, None).await;
            (reply, started.elapsed())
        })
    };
    // Give the long-poll time to be parked before the change; the assertion below only needs the
    // event to arrive well before wait_ms ends, so a slow start cannot make this test pass wrongly.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let changed_at = Instant::now();
    let (status, _) = api
        .call("POST", "/v1/pools/lp-a/restock", Some(json!({"delta": 1})))
        .await;
    assert_eq!(status, 200);
    let ((status, page), waited) = tokio::time::timeout(Duration::from_secs(25), poller)
        .await
        .expect("long-poll did not return")
        .expect("poller task");
    assert_eq!(status, 200, "{page}");
    let events = page["events"].as_array().expect("events");
    assert_eq!(events.len(), 1, "{}", short(&page));
    assert_eq!(events[0]["type"], "restocked");
    assert_eq!(page["next_after"], events[0]["seq"]);
    assert!(
        waited < Duration::from_secs(5),
        "long-poll returned after {waited:?}, not early"
    );
    assert!(changed_at.elapsed() < Duration::from_secs(5));

    // wait_ms on a feed that already has events after `after` answers at once.
    let started = Instant::now();
    let path = api.events_path(home, "after=0&wait_ms=30000").await;
    let (status, page) = api.call("GET", &path, None).await;
    assert_eq!(status, 200);
    assert_eq!(page["events"].as_array().unwrap().len(), 2);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "events were there: no waiting"
    );
}

/// The harness's own partition-aware matching: order is compared within a partition only, never
/// weaker than element-wise with one partition.
#[test]
fn event_matching_compares_order_within_partitions() {
    let window = TimeWindow {
        before_ms: 0,
        after_ms: u64::MAX / 2,
    };
    let read = |partition: u32, seq: u64, kind: &str, key: &str, id: &str| FeedEvent {
        partition,
        event: json!({"seq": seq, "at_ms": 1, "type": kind, key: id}),
    };
    let expected = json!([
        ev("pool_upserted", json!({"pool": "a"})),
        ev("held", json!({"hold_id": "h"})),
        ev("confirmed", json!({"hold_id": "h"})),
    ]);
    let check = |actual: &[FeedEvent], partitions: u32| {
        match_events(
            &expected,
            actual,
            &mut vars_with_partitions(partitions),
            window,
        )
    };
    // One partition: exactly the expected order.
    let one = [
        read(0, 1, "pool_upserted", "pool", "a"),
        read(0, 2, "held", "hold_id", "h"),
        read(0, 3, "confirmed", "hold_id", "h"),
    ];
    assert!(check(&one, 1).is_ok());
    let swapped = [one[1].clone(), one[0].clone(), one[2].clone()];
    assert!(check(&swapped, 1).is_err());
    assert!(check(&one[..2], 1).is_err(), "a missing event");
    // Two partitions: any interleaving, but a hold's own events in order.
    let two = [
        read(0, 1, "held", "hold_id", "h"),
        read(0, 2, "confirmed", "hold_id", "h"),
        read(1, 1, "pool_upserted", "pool", "a"),
    ];
    assert!(check(&two, 2).is_ok());
    let reordered = [
        read(0, 1, "confirmed", "hold_id", "h"),
        read(0, 2, "held", "hold_id", "h"),
        read(1, 1, "pool_upserted", "pool", "a"),
    ];
    assert!(check(&reordered, 2).is_err());
    // The events of one hold must share a partition, and seq must increase within one.
    let split = [
        read(0, 1, "held", "hold_id", "h"),
        read(1, 1, "confirmed", "hold_id", "h"),
    ];
    assert!(partition_rules_problem(&split).is_some());
    assert!(partition_rules_problem(&two).is_none());
    let backwards = [
        read(0, 2, "held", "hold_id", "h"),
        read(0, 1, "held", "hold_id", "g"),
    ];
    assert!(partition_rules_problem(&backwards).is_some());
    // An event names the partition it was read from, for `$same:NAME`.
    let mut vars = vars_with_partitions(2);
    vars.insert("ph".to_string(), json!(0));
    let pinned = json!([
        ev("held", json!({"hold_id": "h", "partition": "$same:ph"})),
        ev("confirmed", json!({"hold_id": "h"})),
        ev(
            "pool_upserted",
            json!({"pool": "a", "partition": "$same:ph"})
        ),
    ]);
    assert!(match_events(&pinned, &two, &mut vars, window).is_err());

    // `$partition`: an integer in 0..P (exactly 0 with one partition); `$partition:NAME` also the
    // same every time.
    let mut vars = vars_with_partitions(1);
    assert!(match_subset(&json!("$partition"), &json!(0), &mut vars, window).is_ok());
    assert!(match_subset(&json!("$partition"), &json!(1), &mut vars, window).is_err());
    let mut vars = vars_with_partitions(16);
    assert!(match_subset(&json!("$partition:k"), &json!(15), &mut vars, window).is_ok());
    assert!(match_subset(&json!("$partition:k"), &json!(15), &mut vars, window).is_ok());
    assert!(match_subset(&json!("$partition:k"), &json!(3), &mut vars, window).is_err());
    assert!(match_subset(&json!("$partition"), &json!(16), &mut vars, window).is_err());
    assert!(match_subset(&json!("$partition"), &json!("0"), &mut vars, window).is_err());

    // Partition-count templates.
    assert_eq!(
        fill_partitions("/v1/events?partition={P}&x={P-1}&y={P+6}&{p}", 16),
        "/v1/events?partition=16&x=15&y=22&{p}"
    );
    assert_eq!(fill_expect(&json!("{P}"), "c0001", 1), json!(1));
    assert_eq!(
        fill_expect(&json!("$contains:{P+6}"), "c0001", 1),
        json!("$contains:7")
    );
}

/// A `held` event carries the hold's created_at_ms, as GET /v1/holds/{id} shows it, also for a
/// hold over several partitions (on a Redis Cluster created a little before it is held); no
/// other event has the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_events_carry_the_holds_created_at_ms() {
    let server = Server::start().await;
    let api = server.api();
    let partitions = api.partitions().await;
    // Pools until two are in different partitions (or eight, with one partition).
    let mut pools: Vec<(String, u32)> = Vec::new();
    for n in 0..64 {
        let pool = format!("ca-p{n}");
        let (status, body) = api
            .call(
                "PUT",
                &format!("/v1/pools/{pool}"),
                Some(json!({"total": 10, "low_stock_threshold": 9})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let partition = partition_of(&body, partitions);
        if pools.iter().all(|(_, p)| *p != partition) {
            pools.push((pool, partition));
        }
        if pools.len() == 2 || (partitions == 1 && n == 1) {
            break;
        }
    }
    if partitions == 1 {
        pools = vec![("ca-p0".into(), 0), ("ca-p1".into(), 0)];
    }
    assert_eq!(pools.len(), 2, "no two pools in different partitions");
    let holds = [
        ("ca-h1", vec![&pools[0].0], false),
        ("ca-h2", vec![&pools[0].0, &pools[1].0], false),
        ("ca-h3", vec![&pools[0].0, &pools[1].0], true),
    ];
    let mut created = std::collections::HashMap::new();
    for (hold_id, on, confirm) in &holds {
        let items: Vec<Value> = on.iter().map(|p| json!({"pool": p, "qty": 1})).collect();
        let (status, body) = api
            .call(
                "POST",
                "/v1/holds",
                Some(json!({"hold_id": hold_id, "items": items, "confirm": confirm})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let (status, hold) = api.call("GET", &format!("/v1/holds/{hold_id}"), None).await;
        assert_eq!(status, 200, "{hold}");
        assert_eq!(hold["created_at_ms"], body["created_at_ms"], "{hold}");
        created.insert(hold_id.to_string(), hold["created_at_ms"].clone());
    }
    let (status, body) = api.call("POST", "/v1/holds/ca-h2/release", None).await;
    assert_eq!(status, 200, "{body}");
    let mut held = 0;
    for read in api.all_events().await {
        let event = &read.event;
        if event["type"] == "held" {
            let hold_id = event["hold_id"].as_str().unwrap();
            assert_eq!(event["created_at_ms"], created[hold_id], "{event}");
            assert!(
                event["created_at_ms"].as_u64().unwrap() <= event["at_ms"].as_u64().unwrap(),
                "{event}"
            );
            held += 1;
        } else {
            assert!(event.get("created_at_ms").is_none(), "{event}");
        }
    }
    assert_eq!(held, holds.len());
}
