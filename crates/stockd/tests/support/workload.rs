//! Helpers shared by the load, fleet and fault suites: creating pools, reserving many holds at
//! once, waiting reserves, tallying answers and checking a pool's counts and invariant.
//!
//! They speak only through [`Api`]; what a test expects of the answers stays in the test.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::api::{short, Api};

/// `total = available + held + sold`, every term an integer >= 0.
pub fn pool_invariant_problem(pool: &Value) -> Option<String> {
    let term = |key: &str| pool.get(key).and_then(Value::as_u64);
    match (term("total"), term("available"), term("held"), term("sold")) {
        (Some(total), Some(available), Some(held), Some(sold))
            if total == available + held + sold =>
        {
            None
        }
        _ => Some(format!(
            "pool breaks total = available + held + sold (all >= 0): {}",
            short(pool)
        )),
    }
}

/// Creates a pool (201 expected) and returns it.
pub async fn put_pool(api: &Api, pool: &str, body: Value) -> Value {
    let (status, reply) = api
        .call("PUT", &format!("/v1/pools/{pool}"), Some(body))
        .await;
    assert_eq!(status, 201, "create pool {pool}: {reply}");
    reply
}

pub async fn join_all<T: Send + 'static>(handles: Vec<JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.expect("task panicked"));
    }
    out
}

pub fn tally(replies: &[(u16, Value)]) -> HashMap<(u16, String), usize> {
    let mut counts = HashMap::new();
    for (status, body) in replies {
        let code = body
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        *counts.entry((*status, code)).or_insert(0) += 1;
    }
    counts
}

pub fn assert_pool(pool: &Value, total: u64, available: u64, held: u64, sold: u64) {
    let got = (
        &pool["total"],
        &pool["available"],
        &pool["held"],
        &pool["sold"],
    );
    assert_eq!(
        got,
        (&json!(total), &json!(available), &json!(held), &json!(sold)),
        "pool (total, available, held, sold): {pool}"
    );
}

/// Starts a reserve that waits up to `wait_ms`; resolves to its reply and how long it took.
pub fn spawn_waiter(
    api: &Api,
    hold_id: &str,
    pool: &str,
    qty: u64,
    wait_ms: u64,
) -> JoinHandle<((u16, Value), Duration)> {
    let api = api.clone();
    let body =
        json!({"hold_id": hold_id, "items": [{"pool": pool, "qty": qty}], "wait_ms": wait_ms});
    tokio::spawn(async move {
        let started = Instant::now();
        let reply = api.call("POST", "/v1/holds", Some(body)).await;
        (reply, started.elapsed())
    })
}

/// Creates pools named `{prefix}-N` until `count` of them sit in pairwise different partitions;
/// returns their names (the others are deleted).
pub async fn pools_in_distinct_partitions(
    api: &Api,
    prefix: &str,
    count: usize,
    total: u64,
) -> Vec<String> {
    let mut chosen: HashMap<u64, String> = HashMap::new();
    for n in 0.. {
        let name = format!("{prefix}-{n}");
        let pool = put_pool(api, &name, json!({"total": total})).await;
        let partition = pool["partition"].as_u64().expect("partition");

        if let std::collections::hash_map::Entry::Vacant(slot) = chosen.entry(partition) {
            slot.insert(name);
        } else {
            let (status, _) = api.call("DELETE", &format!("/v1/pools/{name}"), None).await;
            assert_eq!(status, 204);
        }
        if chosen.len() == count {
            break;
        }
    }
    let mut names: Vec<(u64, String)> = chosen.into_iter().collect();
    names.sort();
    names.into_iter().map(|(_, name)| name).collect()
}

pub fn hold_body(hold_id: &str, items: &[(&str, u64)], extra: Value) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|(p, q)| json!({"pool": p, "qty": q}))
        .collect();
    let mut body = json!({"hold_id": hold_id, "items": items});
    for (key, value) in extra.as_object().expect("object") {
        body[key] = value.clone();
    }
    body
}

/// Sends each body to `POST /v1/holds` of server `i % apis.len()`, all at once: every task waits
/// on a barrier, then fires.
pub async fn reserve_all_at_once_over(apis: &[Api], bodies: Vec<Value>) -> Vec<(u16, Value)> {
    let barrier = Arc::new(tokio::sync::Barrier::new(bodies.len()));
    let handles = bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            let (api, barrier) = (apis[i % apis.len()].clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                api.call("POST", "/v1/holds", Some(body)).await
            })
        })
        .collect();
    join_all(handles).await
}

/// After a fault: every hold answered 201 (reserve + confirm) is there, confirmed. Returns how
/// many of the tried hold ids exist, acknowledged or not (a request that failed may have landed).
pub async fn acknowledged_holds_present(api: &Api, tried: &[(String, u16)]) -> u64 {
    let mut present = 0;
    for (hold_id, status) in tried {
        let (got, hold) = api.call("GET", &format!("/v1/holds/{hold_id}"), None).await;
        if *status == 201 {
            assert_eq!(
                (got, &hold["status"]),
                (200, &json!("confirmed")),
                "acknowledged {hold_id} lost: {hold}"
            );
        }
        if got == 200 {
            present += 1;
        }
    }
    present
}
