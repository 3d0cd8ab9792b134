//! A stockd server killed at each step of a cross-partition hold (fault points compiled into
//! test builds only: `cargo test --features fault-injection`). Whatever step it dies at, the
//! hold ends all there or not there at all, every unit it took is sold, held by it or back,
//! and nothing stays stuck: the surviving server's sweeper rolls a decided transition forward
//! and an unfinished reserve back, or the client's retry finishes it.

#![cfg(feature = "fault-injection")]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{
    hold_body, pools_in_distinct_partitions, Api, RedisClusterBackend, Server, ServerConfig,
};

/// Longest the sweepers may take: an unfinished reserve is rolled back 10 s after it began.
const CONVERGE_WITHIN: Duration = Duration::from_secs(20);

async fn server(cluster: &Arc<RedisClusterBackend>, fault: Option<&str>) -> Server {
    Server::start_with(ServerConfig::on(cluster.clone()).fault(fault)).await
}

/// Polls `pool` until (available, held, sold) is `want`.
async fn converges(api: &Api, pool: &str, want: (u64, u64, u64), case: &str) {
    let deadline = Instant::now() + CONVERGE_WITHIN;
    loop {
        let view = api.pool(pool).await;
        let got = (
            view["available"].as_u64().unwrap_or(u64::MAX),
            view["held"].as_u64().unwrap_or(u64::MAX),
            view["sold"].as_u64().unwrap_or(u64::MAX),
        );
        assert_eq!(view["total"], json!(10), "{case}: {view}");
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{case}: pool {pool} is {got:?}, expected {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Case {
    fault: &'static str,
    /// Items (index into two pools in distinct partitions, qty), and whether to confirm.
    items: [(usize, u64); 2],
    confirm: bool,
    /// The client retries the same request on the surviving server.
    retry: bool,
    /// (available, held, sold) each pool must reach, and whether the hold then exists.
    end: [(u64, u64, u64); 2],
    exists: Option<&'static str>,
}

async fn run_case(cluster: Arc<RedisClusterBackend>, survivor: Api, name: usize, case: Case) {
    let label = format!("{} (case {name})", case.fault);
    let pools = pools_in_distinct_partitions(&survivor, &format!("c{name}"), 2, 10).await;
    let mut dying = server(&cluster, Some(case.fault)).await;
    let items: Vec<(&str, u64)> = case
        .items
        .iter()
        .map(|(i, q)| (pools[*i].as_str(), *q))
        .collect();
    let hold_id = format!("c{name}-h");
    let body = hold_body(&hold_id, &items, json!({"confirm": case.confirm}));
    dying
        .call_and_die("POST", "/v1/holds", body.clone(), &label)
        .await;
    if case.retry {
        let (status, hold) = survivor.call("POST", "/v1/holds", Some(body)).await;
        assert!(
            matches!(status, 200 | 201),
            "{label}: retry answered {status} {hold}"
        );
    }
    for (pool, want) in pools.iter().zip(case.end) {
        converges(&survivor, pool, want, &label).await;
    }
    let (status, hold): (u16, Value) = survivor
        .call("GET", &format!("/v1/holds/{hold_id}"), None)
        .await;
    match case.exists {
        Some(state) => assert_eq!(
            (status, &hold["status"]),
            (200, &json!(state)),
            "{label}: {hold}"
        ),
        None => assert_eq!(status, 404, "{label}: {hold}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_killed_at_each_step_of_a_cross_partition_hold_leaves_nothing_stuck() {
    let cluster = Arc::new(RedisClusterBackend::start(16));
    let survivor = server(&cluster, None).await;
    let ok = [(0, 2), (1, 3)];
    let short = [(0, 2), (1, 11)];
    // (fault point, items, confirm, the client retries, (available, held, sold) of each pool at
    // the end, the hold's status then)
    let table = [
        // Died after the record was written: rolled back by a sweeper...
        (
            "cross.after_begin",
            ok,
            false,
            false,
            [(10, 0, 0), (10, 0, 0)],
            None,
        ),
        // ...or finished by the client's retry.
        (
            "cross.after_begin",
            ok,
            false,
            true,
            [(8, 2, 0), (7, 3, 0)],
            Some("held"),
        ),
        // Died with one part taken: rolled back (the part returns its units)...
        (
            "cross.after_part",
            ok,
            false,
            false,
            [(10, 0, 0), (10, 0, 0)],
            None,
        ),
        // ...or rolled forward by the retry.
        (
            "cross.after_part:2",
            ok,
            true,
            true,
            [(8, 0, 2), (7, 0, 3)],
            Some("confirmed"),
        ),
        // Died after the commit of a confirm: true hold, before its parts moved to sold.
        (
            "cross.after_commit",
            ok,
            true,
            false,
            [(8, 0, 2), (7, 0, 3)],
            Some("confirmed"),
        ),
        // Died with one part confirmed and the other not.
        (
            "cross.after_apply_part",
            ok,
            true,
            false,
            [(8, 0, 2), (7, 0, 3)],
            Some("confirmed"),
        ),
        // A refused reserve: died after marking the record for roll back...
        (
            "cross.after_abort",
            short,
            false,
            false,
            [(10, 0, 0), (10, 0, 0)],
            None,
        ),
        // ...and after returning the first part.
        (
            "cross.after_return_part",
            short,
            false,
            false,
            [(10, 0, 0), (10, 0, 0)],
            None,
        ),
    ];
    let cases = table
        .into_iter()
        .map(|(fault, items, confirm, retry, end, exists)| Case {
            fault,
            items,
            confirm,
            retry,
            end,
            exists,
        });
    let mut tasks = Vec::new();
    for (name, case) in cases.into_iter().enumerate() {
        tasks.push(tokio::spawn(run_case(
            cluster.clone(),
            survivor.api(),
            name,
            case,
        )));
    }
    for task in tasks {
        task.await.expect("case panicked");
    }
}
