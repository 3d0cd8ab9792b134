//! Garbage in, no harm done: random bytes, random JSON, mutated valid bodies, huge numbers, deep
//! nesting and wrong types, sent to every route. The server must never answer 5xx (nor crash), every
//! error must have the contract's shape, and state the garbage could not legally touch must be
//! unchanged afterwards.
//!
//! Two kinds of targets keep "unchanged" checkable. Sentinel pools, holds and a lock are only ever
//! sent bodies that no correct server may accept (unparsable, not an object, or carrying an unknown
//! field), so they must come out exactly as they went in, with no event naming them. Scratch ids
//! get anything, including mutations that may well be valid; for those only the invariant
//! `total = available + held + sold` is checked. The RNG is seeded; the seed is printed and in
//! every failure message (`STOCKD_GARBAGE_SEED` replays a run).

mod support;

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};
use support::{error_shape_problem, percent_encode, pool_invariant_problem, short, Api, Server};
use tokio::sync::Semaphore;

/// Requests in all; a few thousand keeps the run to seconds.
const REQUESTS: usize = 3_000;
const IN_FLIGHT: usize = 16;
/// Bodies over the 1 MiB limit; the server may answer 413 and close before reading them all.
const OVERSIZED_BYTES: usize = 1024 * 1024 + 512 * 1024;

const SENTINEL_POOLS: [&str; 2] = ["s-a", "s-b"];
const SENTINEL_HOLDS: [&str; 2] = ["s-held", "s-conf"];
const SENTINEL_LOCK: &str = "s-lock";
const SCRATCH_POOLS: [&str; 4] = ["x-a", "x-b", "x-c", "x-d"];
const SCRATCH_HOLDS: [&str; 6] = ["xh-0", "xh-1", "xh-2", "xh-3", "xh-4", "xh-5"];
const SCRATCH_LOCKS: [&str; 2] = ["xl-0", "xl-1"];

/// Field names of the API, so random objects hit real fields with wrong values. `wait_ms` is left
/// out on purpose: a valid wait would only slow the run down, it cannot find more bugs here.
const FIELD_NAMES: [&str; 19] = [
    "total",
    "segments",
    "per_user_limit",
    "starts_at_ms",
    "ends_at_ms",
    "low_stock_threshold",
    "delta",
    "hold_id",
    "user",
    "items",
    "pool",
    "qty",
    "ttl_ms",
    "confirm",
    "op",
    "ops",
    "owner",
    "token",
    "zz",
];

/// A field no request type has: a body carrying it must be refused.
const UNKNOWN_FIELD: &str = "zz_garbage_field";

#[derive(Clone, Copy, PartialEq)]
enum Target {
    Sentinel,
    Scratch,
}

#[derive(Clone, Copy)]
enum Route {
    PutPool,
    Restock,
    Reserve,
    Extend,
    Batch,
    LockAcquire,
    LockRenew,
    LockRelease,
    /// Routes without a body: any body sent is garbage on top.
    GetPool,
    GetSegments,
    ListPools,
    GetHold,
    Confirm,
    Release,
    Refund,
    DeletePool,
    Events,
    /// A random method on a random path.
    Random,
}

const ROUTES: [Route; 18] = [
    Route::PutPool,
    Route::Restock,
    Route::Reserve,
    Route::Extend,
    Route::Batch,
    Route::LockAcquire,
    Route::LockRenew,
    Route::LockRelease,
    Route::GetPool,
    Route::GetSegments,
    Route::ListPools,
    Route::GetHold,
    Route::Confirm,
    Route::Release,
    Route::Refund,
    Route::DeletePool,
    Route::Events,
    Route::Random,
];

impl Route {
    /// Whether sending garbage to a sentinel on this route is safe: the route needs a JSON body
    /// (which we make invalid) or only reads.
    fn sentinel_safe(self) -> bool {
        self.has_body() || matches!(self, Route::GetPool | Route::GetSegments | Route::GetHold)
    }

    fn has_body(self) -> bool {
        matches!(
            self,
            Route::PutPool
                | Route::Restock
                | Route::Reserve
                | Route::Extend
                | Route::Batch
                | Route::LockAcquire
                | Route::LockRenew
                | Route::LockRelease
        )
    }
}

struct Request {
    method: String,
    path: String,
    body: Option<Vec<u8>>,
    oversized: bool,
}

struct Garbage {
    rng: StdRng,
    lock_token: u64,
}

impl Garbage {
    fn pick<'a>(&mut self, list: &'a [&'a str]) -> &'a str {
        list.choose(&mut self.rng).expect("non-empty list")
    }

    fn random_string(&mut self) -> String {
        const PIECES: [&str; 24] = [
            "a", "Z", "0", "9", ".", "_", ":", "-", " ", "/", "\\", "\"", "'", "{", "}", "[", "é",
            "✓", "😀", "\u{0}", "\u{7f}", "%", "?", "#",
        ];
        let len = self.rng.gen_range(0..24);
        (0..len)
            .map(|_| *PIECES.choose(&mut self.rng).unwrap())
            .collect()
    }

    /// A scratch-looking identifier, or something that is not an identifier at all. Never starts
    /// with `s-`, so it cannot name a sentinel.
    fn random_id(&mut self) -> String {
        match self.rng.gen_range(0..6) {
            0 => self.pick(&SCRATCH_POOLS).to_string(),
            1 => self.pick(&SCRATCH_HOLDS).to_string(),
            2 => format!("r{}", self.random_string()),
            3 => format!("r{}", "x".repeat(self.rng.gen_range(100..200))),
            4 => String::new(),
            _ => format!("-r{}", self.rng.gen::<u16>()),
        }
    }

    fn huge_number_text(&mut self) -> &'static str {
        [
            "1e400",
            "-1e400",
            "18446744073709551616",
            "-9223372036854775809",
            "1e308",
            "1.7976931348623157e309",
            "-0",
            "0.0",
            "1e-400",
            "00012",
            "1.0",
            "99999999999999999999999999999999999",
            "-1",
        ]
        .choose(&mut self.rng)
        .unwrap()
    }

    fn random_json(&mut self, depth: u32) -> Value {
        let pick = if depth == 0 {
            self.rng.gen_range(0..7)
        } else {
            self.rng.gen_range(0..9)
        };
        match pick {
            0 => Value::Null,
            1 => json!(self.rng.gen::<bool>()),
            2 => json!(self.rng.gen_range(-5i64..2_000)),
            3 => [
                json!(u64::MAX),
                json!(i64::MIN),
                json!(1_000_000_001u64),
                json!(1_000_000_000_001u64),
                json!(0),
            ]
            .choose(&mut self.rng)
            .unwrap()
            .clone(),
            4 => json!(self.rng.gen_range(-1e6..1e6)),
            5 => json!(self.random_string()),
            6 => json!(self.random_id()),
            7 => Value::Array(
                (0..self.rng.gen_range(0..4))
                    .map(|_| self.random_json(depth - 1))
                    .collect(),
            ),
            _ => {
                let mut map = Map::new();
                for _ in 0..self.rng.gen_range(0..4) {
                    let key = if self.rng.gen_bool(0.7) {
                        self.pick(&FIELD_NAMES).to_string()
                    } else {
                        self.random_string()
                    };
                    let value = self.random_json(depth - 1);
                    map.insert(key, value);
                }
                Value::Object(map)
            }
        }
    }

    /// A valid body for the route, on the given ids (scratch or sentinel).
    fn valid_body(&mut self, route: Route, target: Target) -> Value {
        let pool = |g: &mut Garbage| match target {
            Target::Sentinel => g.pick(&SENTINEL_POOLS).to_string(),
            Target::Scratch => g.pick(&SCRATCH_POOLS).to_string(),
        };
        let hold = |g: &mut Garbage| match target {
            Target::Sentinel => g.pick(&SENTINEL_HOLDS).to_string(),
            Target::Scratch => g.pick(&SCRATCH_HOLDS).to_string(),
        };
        match route {
            Route::PutPool => {
                let mut body = json!({"total": self.rng.gen_range(0..50)});
                if self.rng.gen_bool(0.3) {
                    body["per_user_limit"] = json!(self.rng.gen_range(1..5));
                }
                if self.rng.gen_bool(0.3) {
                    body["low_stock_threshold"] = json!(self.rng.gen_range(0..5));
                }
                if self.rng.gen_bool(0.2) {
                    body["segments"] = json!(self.rng.gen_range(0..4));
                }
                body
            }
            Route::Restock => {
                json!({"delta": *[-3i64, -1, 1, 2, 5].choose(&mut self.rng).unwrap()})
            }
            Route::Reserve => self.reserve_body(&pool, &hold),
            Route::Extend => json!({"ttl_ms": self.rng.gen_range(1_000..60_000)}),
            Route::Batch => {
                let ops: Vec<Value> = (0..self.rng.gen_range(1..5))
                    .map(|_| match self.rng.gen_range(0..5) {
                        0 => {
                            let mut op = self.reserve_body(&pool, &hold);
                            op["op"] = json!("reserve");
                            op
                        }
                        1 => json!({"op": "extend", "hold_id": hold(self), "ttl_ms": 5_000}),
                        2 => json!({"op": "confirm", "hold_id": hold(self)}),
                        3 => json!({"op": "release", "hold_id": hold(self)}),
                        _ => json!({"op": "refund", "hold_id": hold(self)}),
                    })
                    .collect();
                json!({"ops": ops})
            }
            Route::LockAcquire => json!({"owner": "o1", "ttl_ms": self.rng.gen_range(100..5_000)}),
            Route::LockRenew => {
                json!({"owner": "o1", "token": self.token(), "ttl_ms": self.rng.gen_range(100..5_000)})
            }
            Route::LockRelease => json!({"owner": "o1", "token": self.token()}),
            _ => json!({}),
        }
    }

    fn token(&mut self) -> u64 {
        if self.rng.gen_bool(0.5) {
            self.lock_token
        } else {
            self.rng.gen_range(0..100)
        }
    }

    fn reserve_body(
        &mut self,
        pool: &dyn Fn(&mut Garbage) -> String,
        hold: &dyn Fn(&mut Garbage) -> String,
    ) -> Value {
        let mut items = Vec::new();
        for _ in 0..self.rng.gen_range(1..3) {
            items.push(json!({"pool": pool(self), "qty": self.rng.gen_range(1..4)}));
        }
        let mut body = json!({"hold_id": hold(self), "items": items});
        if self.rng.gen_bool(0.3) {
            body["user"] = json!("u1");
        }
        if self.rng.gen_bool(0.3) {
            body["confirm"] = json!(self.rng.gen::<bool>());
        }
        if self.rng.gen_bool(0.3) {
            body["ttl_ms"] = json!(self.rng.gen_range(1_000..10_000));
        }
        body
    }

    /// Structural mutations of a JSON body: drop, retype or add fields, break items.
    fn mutate(&mut self, mut body: Value) -> Value {
        for _ in 0..self.rng.gen_range(1..4) {
            let Some(map) = body.as_object_mut() else {
                break;
            };
            let keys: Vec<String> = map.keys().cloned().collect();
            match self.rng.gen_range(0..6) {
                0 if !keys.is_empty() => {
                    let key = keys.choose(&mut self.rng).unwrap().clone();
                    map.remove(&key);
                }
                1 if !keys.is_empty() => {
                    let key = keys.choose(&mut self.rng).unwrap().clone();
                    let value = self.random_json(2);
                    body.as_object_mut().unwrap().insert(key, value);
                }
                2 => {
                    let key = self.pick(&FIELD_NAMES).to_string();
                    let value = self.random_json(2);
                    map.insert(key, value);
                }
                3 => {
                    if let Some(items) = map.get_mut("items").and_then(Value::as_array_mut) {
                        match self.rng.gen_range(0..4) {
                            0 => items.clear(),
                            1 if !items.is_empty() => {
                                let first = items[0].clone();
                                items.push(first);
                            }
                            // An earlier mutation may have made the item something else.
                            2 if items.first().is_some_and(Value::is_object) => {
                                items[0]["qty"] =
                                    [json!(0), json!(-1), json!(1.5), json!("1"), json!(u64::MAX)]
                                        .choose(&mut self.rng)
                                        .unwrap()
                                        .clone()
                            }
                            _ => items.extend(
                                (0..65).map(|i| json!({"pool": format!("x-{i}"), "qty": 1})),
                            ),
                        }
                    }
                }
                4 => {
                    if let Some(ops) = map.get_mut("ops").and_then(Value::as_array_mut) {
                        let extra = self.random_json(2);
                        ops.push(extra);
                    }
                }
                _ => {
                    let value = self.random_json(3);
                    body = value;
                }
            }
        }
        body
    }

    /// Text mutations of a serialized body: truncation, stray bytes, huge number literals.
    fn mutate_text(&mut self, text: Vec<u8>) -> Vec<u8> {
        let mut bytes = text;
        match self.rng.gen_range(0..4) {
            0 if bytes.len() > 1 => {
                let cut = self.rng.gen_range(1..bytes.len());
                bytes.truncate(cut);
            }
            1 => {
                let at = self.rng.gen_range(0..=bytes.len());
                bytes.insert(at, self.rng.gen());
            }
            2 => {
                // Replace the first number with a huge or odd literal.
                if let Some(start) = bytes.iter().position(|b| b.is_ascii_digit()) {
                    let end = bytes[start..]
                        .iter()
                        .position(|b| !b.is_ascii_digit())
                        .map_or(bytes.len(), |i| start + i);
                    let literal = self.huge_number_text().as_bytes().to_vec();
                    bytes.splice(start..end, literal);
                }
            }
            _ => {
                // A duplicate key in front.
                if bytes.first() == Some(&b'{') {
                    let key = self.pick(&FIELD_NAMES);
                    let dup = format!("{{\"{key}\":1,");
                    bytes.splice(0..1, dup.into_bytes());
                }
            }
        }
        bytes
    }

    fn random_bytes(&mut self) -> Vec<u8> {
        let len = self.rng.gen_range(0..200);
        (0..len).map(|_| self.rng.gen()).collect()
    }

    fn deep_nesting(&mut self) -> Vec<u8> {
        let depth = *[64usize, 129, 1_000, 100_000]
            .choose(&mut self.rng)
            .unwrap();
        if self.rng.gen_bool(0.5) {
            let mut text = "[".repeat(depth);
            text.push_str(&"]".repeat(depth));
            text.into_bytes()
        } else {
            let mut text = "{\"a\":".repeat(depth);
            text.push('1');
            text.push_str(&"}".repeat(depth));
            text.into_bytes()
        }
    }

    /// A body that no correct server may accept: unparsable, not an object, or with an unknown
    /// field. Used on sentinels.
    fn refused_body(&mut self, route: Route) -> Vec<u8> {
        match self.rng.gen_range(0..6) {
            0 => {
                let mut bytes = self.random_bytes();
                bytes.insert(0, b'#'); // never valid JSON
                bytes
            }
            1 => {
                let value = match self.random_json(3) {
                    Value::Object(_) => json!([]),
                    other => other,
                };
                serde_json::to_vec(&value).unwrap()
            }
            2 => self.deep_nesting(),
            3 => {
                let text = serde_json::to_vec(&self.valid_body(route, Target::Sentinel)).unwrap();
                let cut = self.rng.gen_range(1..text.len());
                text[..cut].to_vec()
            }
            _ => {
                let valid = self.valid_body(route, Target::Sentinel);
                let mut body = match self.mutate(valid) {
                    Value::Object(map) => Value::Object(map),
                    _ => json!({}),
                };
                body[UNKNOWN_FIELD] = self.random_json(1);
                serde_json::to_vec(&body).unwrap()
            }
        }
    }

    /// Anything at all, for scratch targets.
    fn any_body(&mut self, route: Route) -> Vec<u8> {
        match self.rng.gen_range(0..8) {
            0 => self.random_bytes(),
            1 => serde_json::to_vec(&self.random_json(4)).unwrap(),
            2 => self.deep_nesting(),
            3 => {
                let valid = self.valid_body(route, Target::Scratch);
                serde_json::to_vec(&valid).unwrap()
            }
            4 | 5 => {
                let valid = self.valid_body(route, Target::Scratch);
                serde_json::to_vec(&self.mutate(valid)).unwrap()
            }
            _ => {
                let valid = self.valid_body(route, Target::Scratch);
                let text = serde_json::to_vec(&valid).unwrap();
                self.mutate_text(text)
            }
        }
    }

    fn random_query(&mut self) -> String {
        let keys = ["after", "limit", "wait_ms", "prefix", "if_absent", "x"];
        let mut parts = Vec::new();
        for _ in 0..self.rng.gen_range(0..4) {
            let key = *keys.choose(&mut self.rng).unwrap();
            let value = match (key, self.rng.gen_range(0..5)) {
                // A valid wait would only slow the run: keep it 0 or invalid.
                ("wait_ms", 0) => "0".to_string(),
                ("wait_ms", _) => ["-1", "30001", "1.5", "x", ""]
                    .choose(&mut self.rng)
                    .unwrap()
                    .to_string(),
                (_, 0) => self.rng.gen_range(0..2_000).to_string(),
                (_, 1) => self.huge_number_text().to_string(),
                _ => percent_encode(&self.random_string()),
            };
            parts.push(format!("{key}={value}"));
        }
        parts.join("&")
    }

    /// A request that would change a sentinel, made harmless only by a query parameter its route
    /// does not take: the route must refuse it (422) before doing anything.
    fn unknown_query_request(&mut self) -> Request {
        let pool = self.pick(&SENTINEL_POOLS).to_string();
        let hold = self.pick(&SENTINEL_HOLDS).to_string();
        let query = *[
            "wait_ms=3000",
            "x=1",
            "dry_run=true&force=1",
            "if_absent=true",
        ]
        .choose(&mut self.rng)
        .unwrap();
        let (method, path, route) = match self.rng.gen_range(0..8) {
            0 => ("POST", format!("/v1/pools/{pool}/restock"), Route::Restock),
            1 => ("DELETE", format!("/v1/pools/{pool}"), Route::DeletePool),
            2 => ("POST", format!("/v1/holds/{hold}/confirm"), Route::Confirm),
            3 => ("POST", format!("/v1/holds/{hold}/release"), Route::Release),
            4 => ("POST", format!("/v1/holds/{hold}/refund"), Route::Refund),
            5 => ("POST", format!("/v1/holds/{hold}/extend"), Route::Extend),
            6 => ("POST", "/v1/holds".to_string(), Route::Reserve),
            _ => (
                "POST",
                format!("/v1/locks/{SENTINEL_LOCK}/release"),
                Route::LockRelease,
            ),
        };
        let body = self.valid_body(route, Target::Sentinel);
        Request {
            method: method.to_string(),
            path: format!("{path}?{query}"),
            body: Some(serde_json::to_vec(&body).unwrap()),
            oversized: false,
        }
    }

    fn request(&mut self) -> Request {
        if self.rng.gen_ratio(1, 20) {
            return self.unknown_query_request();
        }
        let route = *ROUTES.choose(&mut self.rng).unwrap();
        let target = if route.sentinel_safe() && self.rng.gen_bool(0.4) {
            Target::Sentinel
        } else {
            Target::Scratch
        };
        let pool = match target {
            Target::Sentinel => self.pick(&SENTINEL_POOLS).to_string(),
            Target::Scratch => percent_encode(&self.random_id()),
        };
        let hold = match target {
            Target::Sentinel => self.pick(&SENTINEL_HOLDS).to_string(),
            Target::Scratch => percent_encode(&self.random_id()),
        };
        let lock = match target {
            Target::Sentinel => SENTINEL_LOCK.to_string(),
            Target::Scratch => {
                if self.rng.gen_bool(0.7) {
                    self.pick(&SCRATCH_LOCKS).to_string()
                } else {
                    percent_encode(&format!("r{}", self.random_string()))
                }
            }
        };
        let (method, path) = match route {
            Route::PutPool => (
                "PUT",
                format!(
                    "/v1/pools/{pool}{}",
                    if self.rng.gen_bool(0.2) {
                        "?if_absent=true"
                    } else {
                        ""
                    }
                ),
            ),
            Route::Restock => ("POST", format!("/v1/pools/{pool}/restock")),
            Route::Reserve => ("POST", "/v1/holds".to_string()),
            Route::Extend => ("POST", format!("/v1/holds/{hold}/extend")),
            Route::Batch => ("POST", "/v1/batch".to_string()),
            Route::LockAcquire => ("POST", format!("/v1/locks/{lock}/acquire")),
            Route::LockRenew => ("POST", format!("/v1/locks/{lock}/renew")),
            Route::LockRelease => ("POST", format!("/v1/locks/{lock}/release")),
            Route::GetPool => ("GET", format!("/v1/pools/{pool}")),
            Route::GetSegments => ("GET", format!("/v1/pools/{pool}/segments")),
            Route::ListPools => ("GET", format!("/v1/pools?{}", self.random_query())),
            Route::GetHold => ("GET", format!("/v1/holds/{hold}")),
            Route::Confirm => ("POST", format!("/v1/holds/{hold}/confirm")),
            Route::Release => ("POST", format!("/v1/holds/{hold}/release")),
            Route::Refund => ("POST", format!("/v1/holds/{hold}/refund")),
            Route::DeletePool => ("DELETE", format!("/v1/pools/{pool}")),
            Route::Events => ("GET", format!("/v1/events?{}", self.random_query())),
            Route::Random => {
                let method = *["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]
                    .choose(&mut self.rng)
                    .unwrap();
                let segments = [
                    "v1", "pools", "holds", "locks", "batch", "events", "confirm", "acquire",
                    "healthz", "metrics",
                ];
                let mut path = String::new();
                for _ in 0..self.rng.gen_range(1..5) {
                    path.push('/');
                    if self.rng.gen_bool(0.6) {
                        path.push_str(segments.choose(&mut self.rng).unwrap());
                    } else {
                        path.push_str(&percent_encode(&format!("r{}", self.random_string())));
                    }
                }
                (method, path)
            }
        };
        let oversized = self.rng.gen_ratio(1, 1_000);
        let body = if oversized {
            Some(vec![b' '; OVERSIZED_BYTES])
        } else if target == Target::Sentinel && route.has_body() {
            Some(self.refused_body(route))
        } else if route.has_body() || self.rng.gen_bool(0.3) {
            Some(self.any_body(route))
        } else {
            None
        };
        Request {
            method: method.to_string(),
            path,
            body,
            oversized,
        }
    }
}

/// Everything about the sentinels that garbage must not change.
async fn sentinel_snapshot(api: &Api) -> Vec<Value> {
    let mut snapshot = Vec::new();
    for pool in SENTINEL_POOLS {
        snapshot.push(api.pool(pool).await);
    }
    for hold in SENTINEL_HOLDS {
        let (status, body) = api.call("GET", &format!("/v1/holds/{hold}"), None).await;
        assert_eq!(status, 200, "{body}");
        snapshot.push(body);
    }
    snapshot
}

fn names_sentinel(event: &Value) -> bool {
    let sentinel = |value: &Value| value.as_str().is_some_and(|text| text.starts_with("s-"));
    sentinel(&event["pool"])
        || sentinel(&event["hold_id"])
        || event["items"]
            .as_array()
            .is_some_and(|items| items.iter().any(|item| sentinel(&item["pool"])))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn garbage_never_gets_a_server_error_nor_changes_what_it_must_not() {
    let seed: u64 = std::env::var("STOCKD_GARBAGE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("garbage seed: {seed} (rerun with STOCKD_GARBAGE_SEED={seed})");
    let mut server = Server::start().await;
    let api = server.api();

    // Sentinels: two pools with rules, a held and a confirmed hold, a held lock.
    let setup: [(&str, String, Value); 4] = [
        (
            "PUT",
            "/v1/pools/s-a".into(),
            json!({"total": 50, "per_user_limit": 10, "low_stock_threshold": 3}),
        ),
        ("PUT", "/v1/pools/s-b".into(), json!({"total": 5})),
        (
            "POST",
            "/v1/holds".into(),
            json!({"hold_id": "s-held", "user": "u1", "items": [{"pool": "s-a", "qty": 2}]}),
        ),
        (
            "POST",
            "/v1/holds".into(),
            json!({"hold_id": "s-conf", "user": "u1", "items": [{"pool": "s-a", "qty": 1}, {"pool": "s-b", "qty": 1}], "confirm": true}),
        ),
    ];
    for (method, path, body) in setup {
        let (status, reply) = api.call(method, &path, Some(body)).await;
        assert_eq!(status, 201, "{method} {path}: {reply}");
    }
    let (status, lock) = api
        .call(
            "POST",
            &format!("/v1/locks/{SENTINEL_LOCK}/acquire"),
            Some(json!({"owner": "o1", "ttl_ms": 600_000})),
        )
        .await;
    assert_eq!(status, 200, "{lock}");
    let lock_token = lock["token"].as_u64().expect("token");
    let before = sentinel_snapshot(&api).await;
    // Where each partition of the feed stands now.
    let mut heads = vec![0; api.partitions().await as usize];
    for seen in api.all_events().await {
        let seq = seen.event["seq"].as_u64().expect("seq");
        let head = &mut heads[seen.partition as usize];
        *head = (*head).max(seq);
    }

    let mut garbage = Garbage {
        rng: StdRng::seed_from_u64(seed),
        lock_token,
    };
    let requests: Vec<Request> = (0..REQUESTS).map(|_| garbage.request()).collect();
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = Vec::new();
    let fresh_connections = api.without_connection_reuse();
    for (index, request) in requests.into_iter().enumerate() {
        let (api, slots) = (fresh_connections.clone(), slots.clone());
        tasks.push(tokio::spawn(async move {
            let _slot = slots.acquire_owned().await.unwrap();
            let shown = request.body.as_ref().map_or(String::new(), |bytes| {
                short(&Value::String(
                    String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned(),
                ))
            });
            let what = format!("#{index} {} {} {shown}", request.method, request.path);
            let content_type = Some("application/json");
            let token = api.default_token().map(str::to_string);
            let result = api
                .send(
                    token.as_deref(),
                    &request.method,
                    &request.path,
                    request.body,
                    content_type,
                )
                .await;
            match result {
                Err(_) if request.oversized => None,
                Err(error) => Some(format!("{what}: {error}")),
                Ok((status, body)) if status >= 500 => {
                    Some(format!("{what}: server error {status} {}", short(&body)))
                }
                Ok((status, body)) if request.method == "HEAD" => {
                    (status >= 500).then(|| format!("{what}: {status} {body}"))
                }
                Ok((status, body)) => {
                    error_shape_problem(status, &body).map(|problem| format!("{what}: {problem}"))
                }
            }
        }));
    }
    let mut failures = Vec::new();
    for task in tasks {
        if let Some(failure) = task.await.expect("request task") {
            failures.push(failure);
        }
    }

    assert!(
        server.is_running(),
        "seed {seed}: stockd died during the garbage run\n{}",
        server.log_tail()
    );
    let (status, _) =
        tokio::time::timeout(Duration::from_secs(10), api.call("GET", "/healthz", None))
            .await
            .unwrap_or_else(|_| panic!("seed {seed}: /healthz hangs after the garbage run"));
    assert_eq!(status, 200, "seed {seed}: /healthz after the garbage run");
    if !failures.is_empty() {
        let shown: Vec<&String> = failures.iter().take(25).collect();
        panic!(
            "seed {seed}: {} of {REQUESTS} garbage requests got a wrong answer (first 25):\n{}\n{}",
            failures.len(),
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            server.log_tail_bytes(4096)
        );
    }

    // Sentinels exactly as before, and no event names them.
    let after = sentinel_snapshot(&api).await;
    assert_eq!(
        after, before,
        "seed {seed}: garbage changed a sentinel pool or hold"
    );
    let new_events = api.events_since(&heads).await;
    let touching: Vec<&Value> = new_events
        .iter()
        .map(|seen| &seen.event)
        .filter(|event| names_sentinel(event))
        .collect();
    assert!(
        touching.is_empty(),
        "seed {seed}: events name sentinels: {touching:?}"
    );
    let (status, body) = api
        .call(
            "POST",
            &format!("/v1/locks/{SENTINEL_LOCK}/acquire"),
            Some(json!({"owner": "o2", "ttl_ms": 1000})),
        )
        .await;
    assert_eq!(
        (status, &body["error"]),
        (409, &json!("lock_held")),
        "seed {seed}: sentinel lock lost: {body}"
    );
    let (status, body) = api
        .call(
            "POST",
            &format!("/v1/locks/{SENTINEL_LOCK}/renew"),
            Some(json!({"owner": "o1", "token": lock_token, "ttl_ms": 1000})),
        )
        .await;
    assert_eq!(
        (status, &body["token"]),
        (200, &json!(lock_token)),
        "seed {seed}: sentinel lock changed hands: {body}"
    );

    // Whatever garbage did to scratch pools, every pool still adds up.
    let (status, list) = api.call("GET", "/v1/pools?limit=1000", None).await;
    assert_eq!(status, 200, "{list}");
    for pool in list["pools"].as_array().expect("pools array") {
        if let Some(problem) = pool_invariant_problem(pool) {
            panic!("seed {seed}: {problem}");
        }
    }
    eprintln!(
        "garbage: {REQUESTS} requests, {} events appended by scratch traffic",
        new_events.len()
    );
}
