//! Crash safety: SIGKILL a real `stockd` in the middle of concurrent reserve/confirm/release load,
//! restart it on the same data dir, and check that nothing acknowledged was lost and the stock
//! still adds up. Also: SIGTERM exits 0 and keeps state; expiry still happens after a restart.
//!
//! The load records every request it sent and every acknowledged (2xx) outcome. Requests in
//! flight at the kill may or may not have been applied, so the checks accept either for them,
//! but the pools must agree exactly with the holds that exist after the restart.

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use support::{now_ms, pool_invariant_problem, short, Api, Server};

const POOLS: [&str; 4] = ["k-a", "k-b", "k-c", "k-d"];
/// Units added to every pool before each round, enough that a round's load rarely runs dry.
const STOCK_PER_ROUND: u64 = 5_000;
const LOAD_TASKS: usize = 6;
/// The load runs this long at most; the kill lands in the middle of it.
const LOAD_DURATION: Duration = Duration::from_millis(1_500);
const KILL_AFTER: Duration = Duration::from_millis(1_000);
const CRASH_ROUNDS: usize = 2;

/// How far a hold got, as acknowledged to the client. Confirmed and released are both final here
/// (the load never refunds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Acked {
    Held,
    Confirmed,
    Released,
}

#[derive(Default, Clone)]
struct Ledger {
    /// Every hold the load tried to create, with its items: it may exist after the crash.
    attempted: BTreeMap<String, Vec<(String, u64)>>,
    /// The furthest acknowledged state per hold.
    acked: HashMap<String, Acked>,
}

async fn load_task(
    api: Api,
    id_prefix: String,
    seed: u64,
    ledger: Arc<Mutex<Ledger>>,
    stop_at: Instant,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut index = 0;
    while Instant::now() < stop_at {
        index += 1;
        let hold_id = format!("{id_prefix}-{index}");
        let mut pools: Vec<&str> = POOLS.to_vec();
        let count = rng.gen_range(1..=2);
        let mut items = Vec::new();
        for _ in 0..count {
            let pool = pools.remove(rng.gen_range(0..pools.len()));
            items.push((pool.to_string(), rng.gen_range(1..=3u64)));
        }
        let confirm_now = rng.gen_bool(0.25);
        let body = json!({
            "hold_id": hold_id,
            "items": items.iter().map(|(pool, qty)| json!({"pool": pool, "qty": qty})).collect::<Vec<_>>(),
            "confirm": confirm_now,
        });
        ledger
            .lock()
            .unwrap()
            .attempted
            .insert(hold_id.clone(), items);
        let Ok((status, reply)) = api.try_call("POST", "/v1/holds", Some(body)).await else {
            return;
        };
        if status == 409 {
            continue;
        }
        assert!(
            status == 201 || status == 200,
            "reserve {hold_id}: {status} {reply}"
        );
        let acked = match reply["status"].as_str() {
            Some("held") => Acked::Held,
            Some("confirmed") => Acked::Confirmed,
            other => panic!("reserve {hold_id} answered status {other:?}: {reply}"),
        };
        ledger.lock().unwrap().acked.insert(hold_id.clone(), acked);
        if acked != Acked::Held {
            continue;
        }
        let roll: f64 = rng.gen();
        let (verb, next) = if roll < 0.5 {
            ("confirm", Acked::Confirmed)
        } else if roll < 0.75 {
            ("release", Acked::Released)
        } else {
            continue;
        };
        let Ok((status, reply)) = api
            .try_call("POST", &format!("/v1/holds/{hold_id}/{verb}"), None)
            .await
        else {
            return;
        };
        assert_eq!(status, 200, "{verb} {hold_id}: {reply}");
        ledger.lock().unwrap().acked.insert(hold_id, next);
    }
}

/// Whether a status seen after the restart is at least as far as the acknowledged one.
fn at_least(acked: Acked, status: &str) -> bool {
    match acked {
        Acked::Held => matches!(status, "held" | "confirmed" | "released" | "expired"),
        Acked::Confirmed => status == "confirmed",
        Acked::Released => status == "released",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_load_loses_no_acknowledged_change() {
    let seed: u64 = std::env::var("STOCKD_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("crash test seed: {seed} (rerun with STOCKD_CRASH_SEED={seed})");
    let mut server = Server::start().await;
    for pool in POOLS {
        let (status, body) = server
            .api()
            .call(
                "PUT",
                &format!("/v1/pools/{pool}"),
                Some(json!({"total": 0})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }

    // Two rounds: the second crash hits a server that has itself recovered from a crash.
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    for round in 0..CRASH_ROUNDS {
        for pool in POOLS {
            let path = format!("/v1/pools/{pool}/restock");
            let body = json!({"delta": STOCK_PER_ROUND});
            let (status, reply) = server.api().call("POST", &path, Some(body)).await;
            assert_eq!(status, 200, "{reply}");
        }
        let pool_total = STOCK_PER_ROUND * (round as u64 + 1);
        let stop_at = Instant::now() + LOAD_DURATION;
        let tasks: Vec<_> = (0..LOAD_TASKS)
            .map(|task| {
                let id_prefix = format!("k-r{round}-t{task}");
                let task_seed = seed ^ ((round * LOAD_TASKS + task) as u64);
                tokio::spawn(load_task(
                    server.api(),
                    id_prefix,
                    task_seed,
                    ledger.clone(),
                    stop_at,
                ))
            })
            .collect();
        // The load's duration is real time; the kill must land while requests are in flight.
        tokio::time::sleep(KILL_AFTER).await;
        server.kill();
        for task in tasks {
            task.await.expect("load task panicked");
        }
        let snapshot = ledger.lock().unwrap().clone();
        let acked_this_round = snapshot
            .acked
            .keys()
            .filter(|id| id.starts_with(&format!("k-r{round}-")))
            .count();
        assert!(
            acked_this_round >= 20,
            "seed {seed}: round {round} barely ran ({acked_this_round} acknowledged holds): nothing was tested"
        );
        eprintln!(
            "round {round}: {} holds attempted, {} acknowledged so far",
            snapshot.attempted.len(),
            snapshot.acked.len()
        );

        server.restart().await;
        verify_after_crash(&server.api(), &snapshot, pool_total, seed, round).await;
    }
}

/// After a restart: acknowledged holds exist at least as far as acknowledged, pools add up and
/// agree with the holds, the feed is strictly increasing with every acknowledged transition in it,
/// and it continues above the old head.
async fn verify_after_crash(api: &Api, ledger: &Ledger, pool_total: u64, seed: u64, round: usize) {
    let fail = |why: String| -> ! { panic!("seed {seed}, round {round}: {why}") };

    let mut held_units: HashMap<String, u64> = HashMap::new();
    let mut sold_units: HashMap<String, u64> = HashMap::new();
    let replies = get_holds(api, ledger.attempted.keys().cloned().collect()).await;
    for ((hold_id, items), (status, hold)) in ledger.attempted.iter().zip(replies) {
        match (status, ledger.acked.get(hold_id)) {
            (404, None) => continue,
            (404, Some(acked)) => fail(format!(
                "acknowledged hold {hold_id} ({acked:?}) is gone after the restart"
            )),
            (200, _) => {}
            (other, _) => fail(format!("GET hold {hold_id}: {other} {hold}")),
        }
        let state = hold["status"]
            .as_str()
            .unwrap_or_else(|| fail(format!("hold without status: {hold}")))
            .to_string();
        if let Some(acked) = ledger.acked.get(hold_id) {
            if !at_least(*acked, &state) {
                fail(format!(
                    "hold {hold_id} was acknowledged {acked:?} but is {state} after the restart"
                ));
            }
        }
        let mut got: Vec<(String, u64)> = hold["items"]
            .as_array()
            .unwrap_or_else(|| fail(format!("hold without items: {hold}")))
            .iter()
            .map(|item| {
                let pool = item["pool"].as_str().unwrap_or("").to_string();
                (pool, item["qty"].as_u64().unwrap_or(0))
            })
            .collect();
        let mut want = items.clone();
        got.sort();
        want.sort();
        if got != want {
            fail(format!(
                "hold {hold_id} items changed: sent {want:?}, now {got:?}"
            ));
        }
        let bucket = match state.as_str() {
            "held" => Some(&mut held_units),
            "confirmed" => Some(&mut sold_units),
            "released" | "expired" | "refunded" => None,
            other => fail(format!("hold {hold_id} has unknown status {other}")),
        };
        if let Some(bucket) = bucket {
            for (pool, qty) in items {
                *bucket.entry(pool.clone()).or_insert(0) += qty;
            }
        }
    }

    for pool in POOLS {
        let body = api.pool(pool).await;
        if let Some(problem) = pool_invariant_problem(&body) {
            fail(problem);
        }
        let expected = (
            pool_total,
            *held_units.get(pool).unwrap_or(&0),
            *sold_units.get(pool).unwrap_or(&0),
        );
        let got = (
            body["total"].as_u64().unwrap(),
            body["held"].as_u64().unwrap(),
            body["sold"].as_u64().unwrap(),
        );
        if got != expected {
            fail(format!(
                "pool {pool}: (total, held, sold) = {got:?}, but the holds add up to {expected:?}: {body}"
            ));
        }
    }

    let events = api.events_after(0).await;
    check_strictly_increasing(&events).unwrap_or_else(|why| fail(why));
    let seen: HashSet<(String, String)> = events
        .iter()
        .filter_map(|e| {
            Some((
                e["type"].as_str()?.to_string(),
                e["hold_id"].as_str()?.to_string(),
            ))
        })
        .collect();
    for (hold_id, acked) in &ledger.acked {
        let mut needed = vec!["held"];
        match acked {
            Acked::Held => {}
            Acked::Confirmed => needed.push("confirmed"),
            Acked::Released => needed.push("released"),
        }
        for kind in needed {
            if !seen.contains(&(kind.to_string(), hold_id.clone())) {
                fail(format!(
                    "acknowledged {kind} of {hold_id} has no event after the restart"
                ));
            }
        }
    }

    // The server keeps working, and the feed continues above every earlier seq.
    let head = events.last().map_or(0, |e| e["seq"].as_u64().unwrap());
    let (status, body) = api
        .call("POST", "/v1/pools/k-a/restock", Some(json!({"delta": 1})))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = api
        .call("POST", "/v1/pools/k-a/restock", Some(json!({"delta": -1})))
        .await;
    assert_eq!(status, 200, "{body}");
    let after = api.events_after(head).await;
    assert_eq!(
        after.len(),
        2,
        "two new events: {}",
        short(&Value::Array(after.clone()))
    );
    assert!(
        after[0]["seq"].as_u64().unwrap() > head,
        "seq continues after the restart"
    );
    assert_eq!(after[0]["type"], "restocked");
}

/// GET every hold, a few dozen at a time (thousands of holds; one by one would be slow).
async fn get_holds(api: &Api, hold_ids: Vec<String>) -> Vec<(u16, Value)> {
    let slots = Arc::new(tokio::sync::Semaphore::new(32));
    let tasks: Vec<_> = hold_ids
        .into_iter()
        .map(|hold_id| {
            let (api, slots) = (api.clone(), slots.clone());
            tokio::spawn(async move {
                let _slot = slots.acquire_owned().await.expect("semaphore");
                api.call("GET", &format!("/v1/holds/{hold_id}"), None).await
            })
        })
        .collect();
    let mut replies = Vec::with_capacity(tasks.len());
    for task in tasks {
        replies.push(task.await.expect("GET hold task"));
    }
    replies
}

fn check_strictly_increasing(events: &[Value]) -> Result<(), String> {
    let mut last = 0;
    for event in events {
        let seq = event["seq"]
            .as_u64()
            .ok_or_else(|| format!("event without seq: {event}"))?;
        if seq <= last {
            return Err(format!("seq {seq} after {last}: not strictly increasing"));
        }
        last = seq;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_zero_and_state_survives() {
    let mut server = Server::start().await;
    let api = server.api();
    let call = |method: &'static str, path: String, body: Option<Value>, want: u16| {
        let api = api.clone();
        async move {
            let (status, reply) = api.call(method, &path, body).await;
            assert_eq!(status, want, "{method} {path}: {reply}");
            reply
        }
    };
    call(
        "PUT",
        "/v1/pools/g-a".into(),
        Some(json!({"total": 20, "per_user_limit": 5, "low_stock_threshold": 2})),
        201,
    )
    .await;
    call(
        "PUT",
        "/v1/pools/g-b".into(),
        Some(json!({"total": 7})),
        201,
    )
    .await;
    let holds = [
        ("g-held", false),
        ("g-confirmed", true),
        ("g-released", false),
        ("g-refunded", true),
        ("g-written-off", true),
    ];
    for (hold, confirm) in holds {
        let body = json!({"hold_id": hold, "user": "u1", "items": [{"pool": "g-a", "qty": 1}, {"pool": "g-b", "qty": 1}], "confirm": confirm});
        call("POST", "/v1/holds".into(), Some(body), 201).await;
    }
    call("POST", "/v1/holds/g-released/release".into(), None, 200).await;
    call("POST", "/v1/holds/g-refunded/refund".into(), None, 200).await;
    call(
        "POST",
        "/v1/holds/g-written-off/refund".into(),
        Some(json!({"restock": false})),
        200,
    )
    .await;
    // The written-off unit left both pools.
    assert_eq!(api.pool("g-b").await["total"], json!(6));
    let lock = call(
        "POST",
        "/v1/locks/g-lock/acquire".into(),
        Some(json!({"owner": "o1", "ttl_ms": 60_000})),
        200,
    )
    .await;

    let pools_before = [api.pool("g-a").await, api.pool("g-b").await];
    let mut holds_before = Vec::new();
    for (hold, _) in holds {
        holds_before.push(call("GET", format!("/v1/holds/{hold}"), None, 200).await);
    }
    let events_before = api.events_after(0).await;
    assert!(!events_before.is_empty());

    server.stop_graceful().await;
    server.start_again().await;
    let api = server.api();

    assert_eq!(
        [api.pool("g-a").await, api.pool("g-b").await],
        pools_before,
        "pools changed across SIGTERM"
    );
    for (index, (hold, _)) in holds.iter().enumerate() {
        let (status, body) = api.call("GET", &format!("/v1/holds/{hold}"), None).await;
        assert_eq!(
            (status, &body),
            (200, &holds_before[index]),
            "hold {hold} changed across SIGTERM"
        );
    }
    assert_eq!(
        api.events_after(0).await,
        events_before,
        "the event feed changed across SIGTERM"
    );
    let (status, body) = api
        .call(
            "POST",
            "/v1/locks/g-lock/acquire",
            Some(json!({"owner": "o2", "ttl_ms": 1000})),
        )
        .await;
    assert_eq!(
        (status, &body["error"]),
        (409, &json!("lock_held")),
        "lease lost across SIGTERM: {body}"
    );

    // Per-user usage survived too: u1 has 2 units of g-a (held + confirmed), limit 5.
    let (status, body) = api
        .call(
            "POST",
            "/v1/holds",
            Some(json!({"hold_id": "g-more", "user": "u1", "items": [{"pool": "g-a", "qty": 4}]})),
        )
        .await;
    assert_eq!(
        (status, &body["error"], &body["used"]),
        (409, &json!("user_limit_exceeded"), &json!(2)),
        "{body}"
    );
    // Transitions still work, and the feed continues.
    let (status, body) = api.call("POST", "/v1/holds/g-held/confirm", None).await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("confirmed")),
        "{body}"
    );
    let head = events_before.last().unwrap()["seq"].as_u64().unwrap();
    let after = api.events_after(head).await;
    assert_eq!(after.len(), 1, "{}", short(&Value::Array(after.clone())));
    assert!(after[0]["seq"].as_u64().unwrap() > head);
    let (status, body) = api
        .call(
            "POST",
            "/v1/locks/g-lock/release",
            Some(json!({"owner": "o1", "token": lock["token"]})),
        )
        .await;
    assert_eq!((status, &body["released"]), (200, &json!(true)), "{body}");
    server.stop_graceful().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_happens_after_a_restart() {
    let mut server = Server::start().await;
    let api = server.api();
    let (status, _) = api
        .call("PUT", "/v1/pools/e-a", Some(json!({"total": 4})))
        .await;
    assert_eq!(status, 201);
    let (status, hold) = api
        .call(
            "POST",
            "/v1/holds",
            Some(json!({"hold_id": "e-h", "items": [{"pool": "e-a", "qty": 3}], "ttl_ms": 1000})),
        )
        .await;
    assert_eq!(status, 201, "{hold}");
    let expires_at_ms = hold["expires_at_ms"].as_u64().unwrap();

    server.restart().await;
    let ready_at_ms = now_ms();
    let api = server.api();
    // Units back no later than 1 s after the deadline, or after the restart if that came later.
    let limit_ms = expires_at_ms.max(ready_at_ms) + 1_000 + 500;
    loop {
        let pool = api.pool("e-a").await;
        if let Some(problem) = pool_invariant_problem(&pool) {
            panic!("{problem}");
        }
        if pool["held"] == 0 {
            assert_eq!(pool["available"], 4, "{pool}");
            break;
        }
        assert!(
            now_ms() < limit_ms,
            "hold not expired after the restart: deadline {expires_at_ms}, now {}: {pool}",
            now_ms()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, hold) = api.call("GET", "/v1/holds/e-h", None).await;
    assert_eq!(
        (status, &hold["status"]),
        (200, &json!("expired")),
        "{hold}"
    );
    let expired = api
        .events_after(0)
        .await
        .into_iter()
        .filter(|e| e["type"] == "expired" && e["hold_id"] == "e-h")
        .count();
    assert_eq!(expired, 1, "exactly one expired event");
}

/// A restock whose answer the client never saw (the server SIGKILLed right after it was durable
/// and answered) is retried with its request id on the restarted server: 200, the stock added
/// once, one `restocked` event; another delta is still a conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restock_retried_after_a_restart_adds_once() {
    let mut server = Server::start().await;
    let api = server.api();
    let (status, _) = api
        .call("PUT", "/v1/pools/r-a", Some(json!({"total": 10})))
        .await;
    assert_eq!(status, 201);
    let body = json!({"delta": 5, "request_id": "r-r1"});
    let (status, pool) = api
        .call("POST", "/v1/pools/r-a/restock", Some(body.clone()))
        .await;
    assert_eq!((status, &pool["total"]), (200, &json!(15)), "{pool}");

    server.restart().await;
    let api = server.api();
    for _ in 0..2 {
        let (status, pool) = api
            .call("POST", "/v1/pools/r-a/restock", Some(body.clone()))
            .await;
        assert_eq!(
            (status, &pool["total"], &pool["available"]),
            (200, &json!(15), &json!(15)),
            "{pool}"
        );
    }
    let (status, refused) = api
        .call(
            "POST",
            "/v1/pools/r-a/restock",
            Some(json!({"delta": 4, "request_id": "r-r1"})),
        )
        .await;
    assert_eq!(
        (status, &refused["error"]),
        (409, &json!("request_id_conflict")),
        "{refused}"
    );
    let restocked: Vec<Value> = api
        .events_after(0)
        .await
        .into_iter()
        .filter(|e| e["type"] == "restocked" && e["pool"] == "r-a")
        .collect();
    assert_eq!(restocked.len(), 1, "{restocked:?}");
    assert_eq!(restocked[0]["request_id"], "r-r1");
}

/// Readiness is the server's own listener, never another test's on the same port: the test
/// support tells a process's listening socket from another process's (`listens_on`).
#[test]
fn a_listening_socket_is_told_from_another_processes() {
    let ours = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = ours.local_addr().expect("address").port();
    let me = std::process::id();
    assert!(support::process::listens_on(me, port));
    assert!(!support::process::listens_on(1, port));
    drop(ours);
    assert!(!support::process::listens_on(me, port));
}
