//! A real 3-primary Redis Cluster (with replicas) behind stockd servers with 16 partitions:
//! holds whose pools live in different partitions are all-or-nothing and move exactly once,
//! whichever server asks and whichever sweeps; bursts over two servers sell exactly the stock
//! there is; a primary failing over to its replica under load loses no acknowledged change.
//!
//! These tests always run (they start their own cluster, whatever `STOCKD_TEST_BACKEND` says).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{
    acknowledged_holds_present, assert_pool, hold_body, pools_in_distinct_partitions, put_pool,
    tally, Api, RedisClusterBackend, Server,
};
use tokio::sync::Barrier;

const PARTITIONS: u32 = 16;

async fn cluster_servers(n: usize) -> (Arc<RedisClusterBackend>, Vec<Server>) {
    let cluster = Arc::new(RedisClusterBackend::start(PARTITIONS));
    let servers = Server::fleet(cluster.clone(), n).await;
    (cluster, servers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_across_partitions_are_all_or_nothing_and_move_once() {
    let (_cluster, servers) = cluster_servers(2).await;
    let (a, b) = (servers[0].api(), servers[1].api());
    let pools = pools_in_distinct_partitions(&a, "x", 3, 10).await;
    let (p1, p2, p3) = (pools[0].as_str(), pools[1].as_str(), pools[2].as_str());

    // A hold over three partitions, made on one server, confirmed on the other.
    let body = hold_body("x-h1", &[(p1, 2), (p2, 3), (p3, 1)], json!({"user": "u1"}));
    let (status, hold) = a.call("POST", "/v1/holds", Some(body.clone())).await;
    assert_eq!(status, 201, "{hold}");
    assert_eq!(hold["status"], "held");
    let (status, again) = b.call("POST", "/v1/holds", Some(body)).await;
    assert_eq!(
        (status, &again["created_at_ms"]),
        (200, &hold["created_at_ms"]),
        "{again}"
    );
    assert_pool(&a.pool(p1).await, 10, 8, 2, 0);
    assert_pool(&b.pool(p2).await, 10, 7, 3, 0);
    let (status, confirmed) = b.call("POST", "/v1/holds/x-h1/confirm", None).await;
    assert_eq!(
        (status, &confirmed["status"]),
        (200, &json!("confirmed")),
        "{confirmed}"
    );
    assert_pool(&a.pool(p1).await, 10, 8, 0, 2);
    assert_pool(&a.pool(p2).await, 10, 7, 0, 3);
    assert_pool(&a.pool(p3).await, 10, 9, 0, 1);
    let (status, refunded) = a.call("POST", "/v1/holds/x-h1/refund", None).await;
    assert_eq!(
        (status, &refunded["status"]),
        (200, &json!("refunded")),
        "{refunded}"
    );
    for pool in [p1, p2, p3] {
        assert_pool(&b.pool(pool).await, 10, 10, 0, 0);
    }

    // All or nothing: the third pool is short, nothing is taken anywhere.
    let body = hold_body("x-h2", &[(p1, 1), (p2, 1), (p3, 11)], json!({}));
    let (status, error) = a.call("POST", "/v1/holds", Some(body)).await;
    assert_eq!(
        (status, &error["error"], &error["pool"]),
        (409, &json!("insufficient_stock"), &json!(p3)),
        "{error}"
    );
    for pool in [p1, p2, p3] {
        assert_pool(&a.pool(pool).await, 10, 10, 0, 0);
    }
    let (status, _) = a.call("GET", "/v1/holds/x-h2", None).await;
    assert_eq!(status, 404, "a failed reserve is not remembered");

    // The first failure in item order wins, whichever partition is asked first.
    let (status, _) = a
        .call(
            "PUT",
            &format!("/v1/pools/{p2}"),
            Some(json!({"total": 10, "per_user_limit": 1})),
        )
        .await;
    assert_eq!(status, 200);
    let body = hold_body("x-h3", &[(p1, 1), (p3, 11), (p2, 5)], json!({"user": "u2"}));
    let (status, error) = b.call("POST", "/v1/holds", Some(body)).await;
    assert_eq!((status, &error["pool"]), (409, &json!(p3)), "{error}");
    let body = hold_body("x-h4", &[(p2, 5), (p3, 11)], json!({"user": "u2"}));
    let (status, error) = b.call("POST", "/v1/holds", Some(body)).await;
    assert_eq!(
        (status, &error["error"], &error["pool"]),
        (409, &json!("user_limit_exceeded"), &json!(p2)),
        "{error}"
    );

    // Release gives everything back; the same hold id with other items is a conflict.
    let body = hold_body("x-h5", &[(p3, 4), (p1, 4)], json!({}));
    let (status, hold) = b.call("POST", "/v1/holds", Some(body)).await;
    assert_eq!(status, 201, "{hold}");
    let (status, conflict) = a
        .call(
            "POST",
            "/v1/holds",
            Some(hold_body("x-h5", &[(p3, 4)], json!({}))),
        )
        .await;
    assert_eq!(
        (status, &conflict["error"]),
        (409, &json!("hold_id_conflict")),
        "{conflict}"
    );
    let (status, released) = a.call("POST", "/v1/holds/x-h5/release", None).await;
    assert_eq!(
        (status, &released["status"]),
        (200, &json!("released")),
        "{released}"
    );
    for pool in [p1, p3] {
        assert_pool(&a.pool(pool).await, 10, 10, 0, 0);
    }

    // confirm: true over partitions, then a refund after one of its pools was deleted.
    let body = hold_body("x-h6", &[(p1, 1), (p3, 1)], json!({"confirm": true}));
    let (status, hold) = a.call("POST", "/v1/holds", Some(body)).await;
    assert_eq!(
        (status, &hold["status"]),
        (201, &json!("confirmed")),
        "{hold}"
    );
    assert_pool(&b.pool(p3).await, 10, 9, 0, 1);
    let (status, _) = a.call("DELETE", &format!("/v1/pools/{p3}"), None).await;
    assert_eq!(status, 204);
    let (status, error) = b.call("POST", "/v1/holds/x-h6/refund", None).await;
    assert_eq!(
        (status, &error["error"]),
        (409, &json!("pool_deleted")),
        "{error}"
    );
    assert_pool(&a.pool(p1).await, 10, 9, 0, 1);

    // A refund without restock over partitions: every part's pool shrinks, once.
    let body = hold_body(
        "x-h7",
        &[(p1, 2), (p2, 1)],
        json!({"confirm": true, "user": "u3"}),
    );
    let (status, hold) = a.call("POST", "/v1/holds", Some(body)).await;
    assert_eq!(status, 201, "{hold}");
    assert_pool(&a.pool(p1).await, 10, 7, 0, 3);
    assert_pool(&a.pool(p2).await, 10, 9, 0, 1);
    let (status, refunded) = b
        .call(
            "POST",
            "/v1/holds/x-h7/refund",
            Some(json!({"restock": false})),
        )
        .await;
    assert_eq!(
        (status, &refunded["status"]),
        (200, &json!("refunded")),
        "{refunded}"
    );
    let (status, again) = a.call("POST", "/v1/holds/x-h7/refund", None).await;
    assert_eq!(
        (status, &again["finished_at_ms"]),
        (200, &refunded["finished_at_ms"]),
        "{again}"
    );
    assert_pool(&b.pool(p1).await, 8, 7, 0, 1);
    assert_pool(&b.pool(p2).await, 9, 9, 0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cross_partition_hold_expires_within_a_second_without_traffic() {
    let (_cluster, servers) = cluster_servers(1).await;
    let api = servers[0].api();
    let pools = pools_in_distinct_partitions(&api, "e", 2, 5).await;
    let body = hold_body(
        "e-h",
        &[(&pools[0], 2), (&pools[1], 1)],
        json!({"ttl_ms": 1000}),
    );
    let (status, hold) = api.call("POST", "/v1/holds", Some(body)).await;
    assert_eq!(status, 201, "{hold}");
    let expires_at_ms = hold["expires_at_ms"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let back = api.pool(&pools[0]).await["available"] == json!(5)
            && api.pool(&pools[1]).await["available"] == json!(5);
        if back {
            break;
        }
        assert!(Instant::now() < deadline, "units never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let returned_after_ms = support::now_ms().saturating_sub(expires_at_ms);
    assert!(
        returned_after_ms <= 1_000,
        "units back {returned_after_ms} ms after the deadline"
    );
    let (_, hold) = api.call("GET", "/v1/holds/e-h", None).await;
    assert_eq!(hold["status"], "expired", "{hold}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bursts_over_two_servers_on_a_cluster_sell_exactly_the_stock() {
    let (_cluster, servers) = cluster_servers(2).await;
    let apis: Vec<Api> = servers.iter().map(Server::api).collect();
    put_pool(&apis[0], "burst", json!({"total": 5})).await;
    let barrier = Arc::new(Barrier::new(1000));
    let handles: Vec<_> = (0..1000)
        .map(|i| {
            let (api, barrier) = (apis[i % 2].clone(), barrier.clone());
            // Half of them name the same hold ids twice: copies must not make two holds.
            let body =
                json!({"hold_id": format!("b{}", i / 2), "items": [{"pool": "burst", "qty": 1}]});
            tokio::spawn(async move {
                barrier.wait().await;
                api.call("POST", "/v1/holds", Some(body)).await
            })
        })
        .collect();
    let replies = support::join_all(handles).await;
    let counts = tally(&replies);
    let created = counts.get(&(201, String::new())).copied().unwrap_or(0);
    assert_eq!(created, 5, "{counts:?}");
    assert_pool(&apis[1].pool("burst").await, 5, 0, 5, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_failing_over_under_load_loses_no_acknowledged_change() {
    let (cluster, servers) = cluster_servers(1).await;
    let api = servers[0].api();
    let pools = pools_in_distinct_partitions(&api, "f", 4, 1_000_000).await;
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..8)
        .map(|worker| {
            let (api, stop, pools) = (api.clone(), stop.clone(), pools.clone());
            tokio::spawn(async move {
                let mut tried = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let hold_id = format!("f-{worker}-{i}");
                    let pool = &pools[i % pools.len()];
                    i += 1;
                    let body = json!({"hold_id": hold_id, "items": [{"pool": pool, "qty": 1}],
                                      "confirm": true});
                    let status = api
                        .try_call("POST", "/v1/holds", Some(body))
                        .await
                        .map(|r| r.0)
                        .unwrap_or(0);
                    tried.push((hold_id, status));
                }
                tried
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A coordinated failover of one primary to its replica (no acknowledged write is lost).
    let primary = cluster.primaries()[0].port;
    let replica = cluster
        .nodes
        .iter()
        .find(|n| {
            n.cli(&["INFO", "replication"])
                .contains(&format!("master_port:{primary}"))
        })
        .expect("the primary has a replica");
    assert_eq!(replica.cli(&["CLUSTER", "FAILOVER"]), "OK");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !replica.cli(&["ROLE"]).starts_with("master") {
        assert!(Instant::now() < deadline, "the replica never took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, Ordering::Relaxed);
    let mut tried = Vec::new();
    for handle in handles {
        tried.extend(handle.await.expect("load task"));
    }
    let acknowledged = tried.iter().filter(|(_, s)| *s == 201).count();
    assert!(acknowledged > 50, "too little load: {acknowledged}");
    let present = acknowledged_holds_present(&api, &tried).await;
    let mut sold = 0;
    for pool in &pools {
        let view = api.pool(pool).await;
        assert_eq!(view["held"], json!(0), "{view}");
        sold += view["sold"].as_u64().unwrap();
    }
    assert_eq!(sold, present, "every unit sold is a hold that exists");
}

/// `--redis-replicas 1` on a 6-node Cluster: a primary killed with SIGKILL under load (holds of
/// one partition and holds over two) is replaced by its replica, the killed node comes back as
/// the new primary's replica (a supervisor restarts it), and then: every acknowledged hold is
/// there, every cross-partition hold is whole, every pool sold exactly the holds that exist, and
/// the server serves again by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_killed_under_load_with_a_replica_to_wait_for_loses_no_acknowledged_hold() {
    let mut cluster = tokio::task::block_in_place(|| RedisClusterBackend::start(PARTITIONS));
    cluster.server_args = vec!["--redis-replicas".into(), "1".into()];
    let cluster = Arc::new(cluster);
    let servers = Server::fleet(cluster.clone(), 2).await;
    let apis: Vec<Api> = servers.iter().map(Server::api).collect();
    let pools = pools_in_distinct_partitions(&apis[0], "k", 4, 1_000_000).await;
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..8)
        .map(|worker| {
            let (api, stop, pools) = (apis[worker % 2].clone(), stop.clone(), pools.clone());
            tokio::spawn(async move {
                let mut tried = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let hold_id = format!("k-{worker}-{i}");
                    let first = &pools[i % pools.len()];
                    let second = &pools[(i + 1) % pools.len()];
                    let items = if i % 2 == 0 {
                        json!([{"pool": first, "qty": 1}])
                    } else {
                        json!([{"pool": first, "qty": 1}, {"pool": second, "qty": 1}])
                    };
                    i += 1;
                    let body = json!({"hold_id": hold_id, "items": items, "confirm": true});
                    let status = api
                        .try_call("POST", "/v1/holds", Some(body))
                        .await
                        .map(|r| r.0)
                        .unwrap_or(0);
                    tried.push((hold_id, status));
                    if status != 201 {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                tried
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1_000)).await;

    let killed_at = Instant::now();
    let primary = cluster.primaries()[0];
    let port = primary.port;
    let replica = cluster.replica_of(port).expect("the primary has a replica");
    primary.kill();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !replica.cli(&["ROLE"]).starts_with("master") {
        assert!(Instant::now() < deadline, "the replica never took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let promoted = killed_at.elapsed();
    tokio::task::block_in_place(|| {
        primary.start_again();
        cluster.wait_healthy();
    });
    assert_eq!(
        primary.replication("role").as_deref(),
        Some("slave"),
        "the killed node came back as a replica"
    );
    // Every server serves holds in every pool again by itself.
    let mut probes = Vec::new();
    for (i, api) in apis.iter().enumerate() {
        for pool in &pools {
            let mut n = 0;
            loop {
                n += 1;
                let probe = format!("probe-{i}-{pool}-{n}");
                let body =
                    json!({"hold_id": probe, "items": [{"pool": pool, "qty": 1}], "confirm": true});
                let status = api
                    .try_call("POST", "/v1/holds", Some(body))
                    .await
                    .map(|r| r.0)
                    .unwrap_or(0);
                probes.push((probe, status));
                if status == 201 {
                    break;
                }
                assert!(
                    killed_at.elapsed() < Duration::from_secs(40),
                    "server {i} still answers {status} for {pool}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let healed = killed_at.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut tried = Vec::new();
    for handle in handles {
        tried.extend(handle.await.expect("load task"));
    }
    eprintln!(
        "cluster failover: promoted {promoted:?} after the kill, serving again {healed:?} after it"
    );
    let acknowledged = tried.iter().filter(|(_, s)| *s == 201).count();
    assert!(acknowledged > 50, "too little load: {acknowledged}");
    tried.extend(probes);

    // Whole holds only: each present hold is confirmed with all its items; each pool sold
    // exactly the units of the holds that exist (probes included), once nothing is held.
    let mut sold_by_pool = std::collections::BTreeMap::<String, u64>::new();
    let api = &apis[1];
    for (hold_id, status) in &tried {
        let (got, hold) = api.call("GET", &format!("/v1/holds/{hold_id}"), None).await;
        if *status == 201 {
            assert_eq!(
                (got, &hold["status"]),
                (200, &json!("confirmed")),
                "acknowledged {hold_id} lost: {hold}"
            );
        }
        if got == 200 && hold["status"] == "confirmed" {
            for item in hold["items"].as_array().expect("items") {
                *sold_by_pool
                    .entry(item["pool"].as_str().unwrap().to_string())
                    .or_default() += 1;
            }
        }
    }
    for pool in &pools {
        let deadline = Instant::now() + Duration::from_secs(20);
        let view = loop {
            let view = api.pool(pool).await;
            if view["held"] == json!(0) || Instant::now() > deadline {
                break view;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(view["held"], json!(0), "{view}");
        let expected = sold_by_pool.get(pool.as_str()).copied().unwrap_or(0);
        assert_eq!(view["sold"].as_u64(), Some(expected), "{pool}: {view}");
    }
}

/// The contract's sell-out race on a segmented pool: 1,000 buyers at once over two servers, a
/// 64-unit pool of 8 segments spread over the partitions. Exactly 64 are sold, whichever segment
/// the last units were in (a buyer is refused only when the whole pool is out), and the pool
/// and each of its segments add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_segmented_pool_sells_exactly_its_stock_to_a_thousand_buyers() {
    let (cluster, servers) = cluster_servers(2).await;
    let apis: Vec<Api> = servers.iter().map(Server::api).collect();
    put_pool(&apis[0], "flash", json!({"total": 64, "segments": 8})).await;
    let barrier = Arc::new(Barrier::new(1000));
    let handles: Vec<_> = (0..1000)
        .map(|i| {
            let (api, barrier) = (apis[i % 2].clone(), barrier.clone());
            let body = json!({"hold_id": format!("f{i}"), "user": format!("buyer-{i}"),
                "items": [{"pool": "flash", "qty": 1}], "confirm": true});
            tokio::spawn(async move {
                barrier.wait().await;
                api.call("POST", "/v1/holds", Some(body)).await
            })
        })
        .collect();
    let replies = support::join_all(handles).await;
    let counts = tally(&replies);
    let other = replies
        .iter()
        .find(|(status, _)| *status != 201 && *status != 409);
    let sold = counts.get(&(201, String::new())).copied().unwrap_or(0);
    let refused = counts
        .get(&(409, "insufficient_stock".to_string()))
        .copied()
        .unwrap_or(0);
    assert_eq!(
        (sold, refused),
        (64, 936),
        "{counts:?}, for example {other:?}"
    );
    assert_pool(&apis[1].pool("flash").await, 64, 0, 0, 64);
    let (status, list) = apis[0].call("GET", "/v1/pools/flash/segments", None).await;
    assert_eq!(status, 200, "{list}");
    let segments = list["segments"].as_array().expect("a list");
    assert_eq!(segments.len(), 8, "{list}");
    let mut partitions: Vec<u64> = segments
        .iter()
        .map(|s| s["partition"].as_u64().unwrap())
        .collect();
    partitions.sort_unstable();
    partitions.dedup();
    assert_eq!(
        partitions.len(),
        8,
        "each segment in a partition of its own: {list}"
    );
    // Segments are placed by primary: the first three on the three primaries, and the eight
    // spread 3 / 3 / 2. Each segment's hash is found on the primary serving it.
    let primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3);
    let primary_of = |segment: &serde_json::Value| {
        let (index, partition) = (
            segment["segment"].as_u64().unwrap(),
            segment["partition"].as_u64().unwrap(),
        );
        let name = if index == 0 {
            "flash".to_string()
        } else {
            format!("flash~{index}")
        };
        let key = stockd_redis::keys::PartitionKeys::new(partition as u32, PARTITIONS).pool(&name);
        let found: Vec<usize> = (0..primaries.len())
            .filter(|&p| primaries[p].cli(&["EXISTS", &key]).trim() == "1")
            .collect();
        assert_eq!(found.len(), 1, "{key} on one primary: {found:?}");
        found[0]
    };
    let on: Vec<usize> = segments.iter().map(primary_of).collect();
    assert!(
        on[0] != on[1] && on[1] != on[2] && on[0] != on[2],
        "{on:?}: {list}"
    );
    let mut per_primary = [0; 3];
    for primary in &on {
        per_primary[*primary] += 1;
    }
    per_primary.sort_unstable();
    assert_eq!(per_primary, [2, 3, 3], "{on:?}: {list}");
    let count = |field: &str| {
        segments
            .iter()
            .map(|s| s[field].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!(
        (count("total"), count("sold"), count("available")),
        (64, 64, 0),
        "{list}"
    );
    for segment in segments {
        let n = |field: &str| segment[field].as_u64().unwrap();
        assert_eq!(
            n("total"),
            n("available") + n("held") + n("sold"),
            "{segment}"
        );
    }
}
