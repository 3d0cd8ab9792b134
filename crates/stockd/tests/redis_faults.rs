//! Redis faults, against a real `redis-server`: Redis killed with SIGKILL under load and
//! restarted (AOF `appendfsync always`), Redis unreachable for 5 s, Redis back with less than it
//! had (restarted empty), and a dataset of a layout the server does not know. After each, the
//! invariant holds and every acknowledged change is there; while Redis cannot be trusted, stockd
//! answers 503 `backend_unavailable` and `/readyz` 503, and it comes back by itself when Redis
//! does (or, after data loss, once an operator accepts the dataset).
//!
//! These tests always run (they start their own Redis, whatever `STOCKD_TEST_BACKEND` says).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{
    acknowledged_holds_present, put_pool, redis_accept, Api, RedisBackend, Server, ServerConfig,
};

async fn server_on(redis: &Arc<RedisBackend>) -> Server {
    Server::start_with(ServerConfig::on(redis.clone())).await
}

fn durable_redis() -> Arc<RedisBackend> {
    Arc::new(RedisBackend::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]))
}

async fn readyz(api: &Api) -> u16 {
    api.try_call("GET", "/readyz", None)
        .await
        .map(|(status, _)| status)
        .unwrap_or(0)
}

/// Polls until `/readyz` answers `want`, for at most `within`.
async fn wait_ready(api: &Api, want: u16, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let status = readyz(api).await;
        if status == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz is {status}, expected {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reserve-and-confirm requests with unique ids from `workers` tasks until `stop`; returns
/// every hold id tried, with the status it was answered.
fn spawn_load(
    api: &Api,
    workers: usize,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<(String, u16)>>> {
    (0..workers)
        .map(|worker| {
            let (api, stop) = (api.clone(), stop.clone());
            tokio::spawn(async move {
                let mut tried = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let hold_id = format!("load-{worker}-{i}");
                    i += 1;
                    let body = json!({"hold_id": hold_id, "items": [{"pool": "sale", "qty": 1}],
                                      "confirm": true});
                    let status = match api.try_call("POST", "/v1/holds", Some(body)).await {
                        Ok((status, _)) => status,
                        Err(_) => 0,
                    };
                    assert!(
                        matches!(status, 0 | 201 | 409 | 503),
                        "unexpected status {status} for {hold_id}"
                    );
                    tried.push((hold_id, status));
                }
                tried
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_under_load_loses_no_acknowledged_change() {
    let redis = durable_redis();
    let server = server_on(&redis).await;
    let api = server.api();
    put_pool(&api, "sale", json!({"total": 1_000_000})).await;

    let stop = Arc::new(AtomicBool::new(false));
    let load = spawn_load(&api, 16, stop.clone());
    tokio::time::sleep(Duration::from_millis(700)).await;
    redis.redis.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.redis.start_again();
    wait_ready(&api, 200, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);

    let mut tried = Vec::new();
    for handle in load {
        tried.extend(handle.await.expect("load task"));
    }
    let acknowledged: Vec<&String> = tried
        .iter()
        .filter(|(_, s)| *s == 201)
        .map(|(h, _)| h)
        .collect();
    assert!(
        acknowledged.len() > 50,
        "too little load to mean anything: {}",
        acknowledged.len()
    );
    assert!(
        tried.iter().any(|(_, s)| *s == 503 || *s == 0),
        "the kill was not seen"
    );
    let present = acknowledged_holds_present(&api, &tried).await;
    // Every unit sold is a hold that exists, acknowledged or not (a 503 may have landed).
    let pool = api.pool("sale").await;
    assert_eq!(pool["sold"], json!(present), "{pool}");
    assert_eq!(pool["held"], json!(0), "{pool}");
    assert_eq!(pool["available"], json!(1_000_000 - present), "{pool}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_unreachable_for_five_seconds_gives_503_then_service_resumes() {
    let redis = durable_redis();
    let server = server_on(&redis).await;
    let api = server.api();
    put_pool(&api, "p", json!({"total": 10})).await;

    redis.redis.kill();
    let down_at = Instant::now();
    wait_ready(&api, 503, Duration::from_secs(5)).await;
    let body = json!({"hold_id": "h-down", "items": [{"pool": "p", "qty": 1}]});
    let (status, reply) = api.call("POST", "/v1/holds", Some(body.clone())).await;
    assert_eq!(
        (status, &reply["error"]),
        (503, &json!("backend_unavailable")),
        "{reply}"
    );
    let (status, reply) = api.call("GET", "/v1/pools/p", None).await;
    assert_eq!(
        (status, &reply["error"]),
        (503, &json!("backend_unavailable")),
        "{reply}"
    );
    let (status, _) = api.call("GET", "/healthz", None).await;
    assert_eq!(status, 200, "the process is up");
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(down_at.elapsed())).await;

    redis.redis.start_again();
    wait_ready(&api, 200, Duration::from_secs(10)).await;
    // The request that failed changed nothing; sent again, it succeeds.
    let (status, hold) = api.call("GET", "/v1/holds/h-down", None).await;
    assert_eq!(status, 404, "{hold}");
    let (status, hold) = api.call("POST", "/v1/holds", Some(body)).await;
    assert_eq!(status, 201, "{hold}");
    assert_eq!(api.pool("p").await["available"], json!(9));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_back_empty_is_refused_until_an_operator_accepts_it() {
    // No persistence: a restart loses everything.
    let redis = Arc::new(RedisBackend::start());
    let server = server_on(&redis).await;
    let api = server.api();
    put_pool(&api, "p", json!({"total": 10})).await;
    let body = json!({"hold_id": "h1", "items": [{"pool": "p", "qty": 1}], "confirm": true});
    let (status, _) = api.call("POST", "/v1/holds", Some(body.clone())).await;
    assert_eq!(status, 201);

    redis.redis.kill();
    redis.redis.start_again();
    // Serving this Redis would forget h1 and sell its unit again.
    wait_ready(&api, 503, Duration::from_secs(5)).await;
    let (status, reply) = api.call("POST", "/v1/holds", Some(body.clone())).await;
    assert_eq!(
        (status, &reply["error"]),
        (503, &json!("backend_unavailable")),
        "{reply}"
    );
    assert!(
        reply["message"]
            .as_str()
            .unwrap_or("")
            .contains("stockd redis accept"),
        "the message names the way out: {reply}"
    );
    assert_eq!(
        redis.redis.cli(&["DBSIZE"]),
        "0",
        "a refused call writes nothing"
    );

    redis_accept(&redis.redis.url(), &[]);
    wait_ready(&api, 200, Duration::from_secs(5)).await;
    let (status, reply) = api.call("GET", "/v1/pools/p", None).await;
    assert_eq!(
        (status, &reply["error"]),
        (404, &json!("pool_not_found")),
        "the data is gone: {reply}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refuses_a_layout_it_does_not_know() {
    let redis = Arc::new(RedisBackend::start());
    let server = server_on(&redis).await;
    put_pool(&server.api(), "p", json!({"total": 1})).await;
    drop(server);
    assert_eq!(
        redis
            .redis
            .cli(&["HSET", "stockd:{p0.0}:meta", "layout", "3"]),
        "0"
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_stockd"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--backend",
            &redis.redis.url(),
        ])
        .output()
        .expect("run stockd serve");
    assert!(!output.status.success(), "started on an unknown layout");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("layout version 3"), "{stderr}");
}
