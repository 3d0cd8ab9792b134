//! The seeds' own stack, the architecture every seed describes: an application server over HTTP
//! in front of Redis, where a sale is one Lua script that checks the stock and deducts it
//! (`if stock >= n then DECRBY n; return ok`), sent with `EVALSHA`, one per request.
//!
//! `stockd bench compare` measures it beside stockd under the flash scenario's load, so it
//! answers that scenario's requests in stockd's shapes (`POST /v1/holds` with one item, 201 or
//! `409 insufficient_stock`) and the few reads its set-up and verdict make (`PUT` and `GET
//! /v1/pools/{pool}`, `GET /v1/holds/{id}`, `/healthz`). It is served by the HTTP stack stockd
//! is served by (axum on hyper, `TCP_NODELAY`, keep-alive), on one multiplexed Redis connection,
//! the way a seed's service shares one Redisson client.
//!
//! It is a baseline, not a second stockd, and must never grow into one: it keeps no holds (a
//! sale is final, `confirm: false` is refused), no idempotency (a retried request sells again;
//! `hold_id` is not even read), no expiry, no per-user limit, no events, no record a lost
//! answer could be looked up in (`GET /v1/holds/{id}` is always 404). Each request costs one
//! `EVALSHA` and nothing else: that is the whole point of the comparison.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use redis::aio::MultiplexedConnection;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use stockd_api::{paths, ErrorCode};

/// The seeds' check-and-deduct (seed 000's "Lua variant", seed 004's stock check reduced to
/// the stock): `KEYS[1]` the pool's counter, `ARGV[1]` the units asked. 1: sold; 0: not enough
/// stock; -1: no such pool.
pub const CHECK_AND_DEDUCT: &str = r#"
local stock = tonumber(redis.call('GET', KEYS[1]))
if stock == nil then return -1 end
local asked = tonumber(ARGV[1])
if stock < asked then return 0 end
redis.call('DECRBY', KEYS[1], asked)
return 1
"#;

/// The counter a pool's sales deduct from.
fn stock_key(pool: &str) -> String {
    format!("seeds:stock:{pool}")
}

/// What the pool was set up with (written once by `PUT`, read by `GET`; never on a sale).
fn total_key(pool: &str) -> String {
    format!("seeds:total:{pool}")
}

/// How the service runs: where it listens, its Redis, and its runtime's worker threads.
#[derive(Clone, Debug)]
pub struct Settings {
    pub listen: SocketAddr,
    /// `redis://HOST:PORT`.
    pub redis_url: String,
    pub worker_threads: usize,
}

#[derive(Clone)]
struct Service {
    redis: MultiplexedConnection,
    script: Arc<redis::Script>,
    worker_threads: usize,
}

/// Connects to Redis, loads the script (so that every sale is one `EVALSHA`), and returns the
/// routes. `worker_threads` is what `/healthz` says the server runs with.
pub async fn router(redis_url: &str, worker_threads: usize) -> Result<Router, String> {
    let client = redis::Client::open(redis_url)
        .map_err(|error| format!("--redis {redis_url:?}: {error}"))?;
    let mut redis = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|error| format!("cannot connect to {redis_url}: {error}"))?;
    let script = redis::Script::new(CHECK_AND_DEDUCT);
    script
        .load_async(&mut redis)
        .await
        .map_err(|error| format!("SCRIPT LOAD on {redis_url}: {error}"))?;
    let service = Service {
        redis,
        script: Arc::new(script),
        worker_threads,
    };
    Ok(Router::new()
        .route(paths::HEALTHZ, get(healthz))
        .route(paths::POOL, get(get_pool).put(put_pool))
        .route(paths::HOLDS, post(reserve))
        .route(paths::HOLD, get(get_hold))
        .fallback(not_routed)
        .with_state(service))
}

/// Serves `router` on `listener` until the process ends, as stockd serves: HTTP/1.1 on hyper,
/// keep-alive, `TCP_NODELAY` on every connection (answers are written whole).
pub async fn serve(listener: tokio::net::TcpListener, router: Router) -> Result<(), String> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    });
    axum::serve(listener, router)
        .await
        .map_err(|error| format!("serving: {error}"))
}

/// `stockd bench seeds-stack`: builds a runtime of `settings.worker_threads` workers (as
/// `stockd serve --worker-threads`), binds, connects and serves until the process ends. Call it
/// on a thread of its own, outside any runtime.
pub fn serve_blocking(settings: Settings) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(settings.worker_threads.max(1))
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the runtime: {error}"))?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .map_err(|error| format!("cannot listen on {}: {error}", settings.listen))?;
        let router = router(&settings.redis_url, settings.worker_threads).await?;
        serve(listener, router).await
    })
}

/// An answer with a JSON body in the contract's error shape.
fn refusal(status: StatusCode, code: &str, message: String) -> Response {
    (status, Json(json!({ "error": code, "message": message }))).into_response()
}

/// 422 `invalid_request`: what the seeds' stack cannot read or does not do.
fn invalid(message: String) -> Response {
    refusal(
        StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::InvalidRequest.as_str(),
        message,
    )
}

fn unavailable(error: redis::RedisError) -> Response {
    refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        format!("redis: {error}"),
    )
}

async fn healthz(State(service): State<Service>) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "stack": "seeds",
        "worker_threads": service.worker_threads,
    }))
}

async fn not_routed() -> Response {
    refusal(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound.as_str(),
        "the seeds' stack answers only PUT and GET /v1/pools/{pool}, POST /v1/holds, \
         GET /v1/holds/{id} and /healthz"
            .into(),
    )
}

/// A pool's view in stockd's shape, from its counter: nothing is ever held, and what was
/// deducted is sold. A counter below zero (an oversell) is shown as it is.
fn pool_view(pool: &str, total: i64, available: i64) -> Value {
    json!({
        "pool": pool,
        "total": total,
        "available": available,
        "held": 0,
        "sold": total - available,
    })
}

/// `PUT /v1/pools/{pool}` `{"total": N}`: sets the counter (and the total, for the view).
async fn put_pool(
    State(mut service): State<Service>,
    Path(pool): Path<String>,
    body: Bytes,
) -> Response {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(error) => return invalid(format!("the body is not JSON: {error}")),
    };
    let fields = body.as_object().map(|fields| {
        fields
            .iter()
            .filter(|(name, value)| *name != "total" && !value.is_null())
            .map(|(name, _)| name.as_str())
            .collect::<Vec<&str>>()
    });
    let (Some(total), Some(unsupported)) = (body["total"].as_i64().filter(|&n| n >= 0), fields)
    else {
        return invalid("the body is {\"total\": N}, N at least 0".into());
    };
    if !unsupported.is_empty() {
        return invalid(format!(
            "the seeds' stack keeps one counter per pool and nothing else: {} not \
                 supported (run the flash scenario with --per-user-limit 0)",
            unsupported.join(", ")
        ));
    }
    let set: Result<(), _> = redis::cmd("MSET")
        .arg(stock_key(&pool))
        .arg(total)
        .arg(total_key(&pool))
        .arg(total)
        .query_async(&mut service.redis)
        .await;
    match set {
        Ok(()) => (StatusCode::CREATED, Json(pool_view(&pool, total, total))).into_response(),
        Err(error) => unavailable(error),
    }
}

/// `GET /v1/pools/{pool}`.
async fn get_pool(State(mut service): State<Service>, Path(pool): Path<String>) -> Response {
    let read: Result<(Option<i64>, Option<i64>), _> = redis::cmd("MGET")
        .arg(total_key(&pool))
        .arg(stock_key(&pool))
        .query_async(&mut service.redis)
        .await;
    match read {
        Ok((Some(total), Some(available))) => {
            Json(pool_view(&pool, total, available)).into_response()
        }
        Ok(_) => refusal(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound.as_str(),
            format!("no pool {pool}"),
        ),
        Err(error) => unavailable(error),
    }
}

/// `GET /v1/holds/{id}`: the seeds' stack keeps no record of a sale, so a lost answer cannot
/// be looked up: always 404.
async fn get_hold(Path(hold_id): Path<String>) -> Response {
    refusal(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound.as_str(),
        format!("no hold {hold_id}: the seeds' stack keeps no record of a sale"),
    )
}

#[derive(Deserialize)]
struct HoldBody {
    hold_id: String,
    items: Vec<Item>,
    #[serde(default)]
    confirm: bool,
}

#[derive(Deserialize)]
struct Item {
    pool: String,
    qty: u64,
}

#[derive(Serialize)]
struct Sold<'a> {
    hold_id: &'a str,
    status: &'static str,
}

/// `POST /v1/holds`: one `EVALSHA` of [`CHECK_AND_DEDUCT`] on the one item's pool. The body is
/// parsed with serde, as a seed's service would; `hold_id` is only echoed.
async fn reserve(State(mut service): State<Service>, body: Bytes) -> Response {
    let hold: HoldBody = match serde_json::from_slice(&body) {
        Ok(hold) => hold,
        Err(error) => return invalid(format!("{error}")),
    };
    let [item] = hold.items.as_slice() else {
        return invalid("the seeds' check-and-deduct takes one item (one pool) per request".into());
    };
    if !hold.confirm {
        return invalid(
            "the seeds' stack has no holds: every deduction is a sale, send confirm: true".into(),
        );
    }
    let outcome: Result<i64, _> = service
        .script
        .key(stock_key(&item.pool))
        .arg(item.qty)
        .invoke_async(&mut service.redis)
        .await;
    match outcome {
        Ok(1) => (
            StatusCode::CREATED,
            Json(Sold {
                hold_id: &hold.hold_id,
                status: "confirmed",
            }),
        )
            .into_response(),
        Ok(0) => (
            StatusCode::CONFLICT,
            Json(json!({
                "error": ErrorCode::InsufficientStock.as_str(),
                "pool": item.pool,
                "requested": item.qty,
                "message": format!("pool {} has fewer than {} available", item.pool, item.qty),
            })),
        )
            .into_response(),
        Ok(_) => refusal(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound.as_str(),
            format!("no pool {}", item.pool),
        ),
        Err(error) => unavailable(error),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use stockd_api::{self as api, Operation};

    use super::*;
    use crate::http::{Connection, Endpoint};
    use crate::lab::servers::{LabDir, RedisServer};
    use crate::load::{self, LoadConfig, Pace};
    use crate::scenario::{Admin, Run, Scenario};

    /// The seeds' stack on a fresh Redis, in this process; its URL, and the guards.
    async fn start() -> (String, RedisServer, LabDir) {
        let dir = LabDir::create().unwrap();
        let redis = RedisServer::start(&dir.subdir("redis").unwrap())
            .await
            .unwrap();
        let router = router(&redis.url(), 1).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(serve(listener, router));
        (url, redis, dir)
    }

    #[tokio::test]
    async fn the_flash_scenario_sells_exactly_the_stock_and_passes_its_verdict() {
        let (url, _redis, _dir) = start().await;
        let endpoint = Endpoint::parse(&url, None).unwrap();
        let mut admin = Admin::new(&endpoint).unwrap();
        let scenario = Scenario::Flash {
            stock: 200,
            buyers: 50,
            per_user_limit: None,
            segments: None,
        };
        let run = Arc::new(
            Run::set_up(&mut admin, scenario, "seeds-test", 8)
                .await
                .unwrap(),
        );
        let config = LoadConfig {
            connections: 8,
            pace: Pace::Closed,
            duration: Some(Duration::from_millis(700)),
            requests: None,
            warmup: Duration::ZERO,
            seed: 1,
            progress: false,
        };
        let load = load::run(&[endpoint], Arc::clone(&run), &config)
            .await
            .unwrap();
        assert_eq!(load.recorded.outcomes.get("201"), Some(&200));
        assert!(load.recorded.outcomes["409 insufficient_stock"] > 0);
        let verdict = run.verdict(&mut admin).await.unwrap();
        assert!(verdict.ok, "{verdict:?}");
        let pool = admin.pool(&run.pools()[0]).await.unwrap();
        assert_eq!((pool.total, pool.available, pool.sold), (200, 0, 200));
    }

    /// One request of `operation` on the path its `values` make; its status and body as
    /// text. `Value::Null`: no body (a GET).
    async fn send(
        connection: &mut Connection,
        operation: Operation,
        values: &[&str],
        body: Value,
    ) -> (u16, String) {
        let body = match body {
            Value::Null => Bytes::new(),
            body => Bytes::from(body.to_string()),
        };
        let request = crate::paths::request(operation, values, body);
        let answer = connection.send(&request).await.unwrap();
        (
            answer.status,
            String::from_utf8_lossy(&answer.body).to_string(),
        )
    }

    #[tokio::test]
    async fn what_it_does_not_do_is_refused_in_words() {
        let (url, _redis, _dir) = start().await;
        let mut connection = Connection::new(&Endpoint::parse(&url, None).unwrap()).unwrap();
        let connection = &mut connection;
        let (status, text) = send(
            connection,
            api::PUT_POOL,
            &["p"],
            json!({"total": 5, "per_user_limit": 2}),
        )
        .await;
        assert_eq!(status, 422, "{text}");
        assert!(text.contains("per_user_limit not supported"), "{text}");
        let (status, _) = send(connection, api::PUT_POOL, &["p"], json!({"total": 5})).await;
        assert_eq!(status, 201);
        let two_items = json!({"hold_id": "h", "confirm": true,
            "items": [{"pool": "p", "qty": 1}, {"pool": "q", "qty": 1}]});
        let (status, text) = send(connection, api::RESERVE, &[], two_items).await;
        assert_eq!(status, 422, "{text}");
        assert!(text.contains("one item"), "{text}");
        let unconfirmed = json!({"hold_id": "h", "items": [{"pool": "p", "qty": 1}]});
        let (status, text) = send(connection, api::RESERVE, &[], unconfirmed).await;
        assert_eq!(status, 422, "{text}");
        assert!(text.contains("no holds"), "{text}");
        // No idempotency: the same hold_id sells twice.
        let sale = json!({"hold_id": "h", "confirm": true, "items": [{"pool": "p", "qty": 2}]});
        for _ in 0..2 {
            let (status, text) = send(connection, api::RESERVE, &[], sale.clone()).await;
            assert_eq!(status, 201, "{text}");
        }
        let (status, text) = send(connection, api::RESERVE, &[], sale).await;
        assert_eq!(status, 409, "{text}");
        assert!(text.contains("insufficient_stock"), "{text}");
        let (status, text) = send(connection, api::GET_POOL, &["p"], Value::Null).await;
        assert_eq!(status, 200, "{text}");
        let view: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            view,
            json!({"pool": "p", "total": 5, "available": 1, "held": 0, "sold": 4})
        );
        let (status, text) = send(connection, api::GET_HOLD, &["h"], Value::Null).await;
        assert_eq!(status, 404, "{text}");
    }
}
