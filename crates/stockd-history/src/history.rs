//! What a history is: every request the clients sent, when, and what came back (or that nothing
//! certain did), plus the event feed read at the end. Plain data, serialisable, so that a failing
//! history can be written to a file and checked again as a regression.
//!
//! This module owns the request shapes the recorder sends ([`Request::http`]), so that what is
//! recorded is exactly what went over the wire. It must never interpret answers: that is the
//! checker's job.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One line of a reserve.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Item {
    pub pool: String,
    pub qty: u64,
}

/// A request as the client sent it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    PutPool {
        pool: String,
        total: u64,
        per_user_limit: Option<u64>,
        low_stock_threshold: Option<u64>,
        /// The segment count sent on a create (`None`: not sent, one segment). Histories
        /// recorded before the field existed have none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        segments: Option<u64>,
    },
    Reserve {
        hold_id: String,
        user: Option<String>,
        items: Vec<Item>,
        ttl_ms: u64,
        confirm: bool,
        wait_ms: u64,
    },
    Confirm {
        hold_id: String,
    },
    Release {
        hold_id: String,
    },
    Extend {
        hold_id: String,
        ttl_ms: u64,
    },
    /// `restock: false` sends `{"restock": false}`; true sends no body (the default).
    Refund {
        hold_id: String,
        restock: bool,
    },
    GetHold {
        hold_id: String,
    },
    GetPool {
        pool: String,
    },
    /// With a `request_id`, a retry (same pool and delta) changes nothing.
    Restock {
        pool: String,
        delta: i64,
        request_id: Option<String>,
    },
    LockAcquire {
        name: String,
        owner: String,
        ttl_ms: u64,
    },
    LockRenew {
        name: String,
        owner: String,
        token: u64,
        ttl_ms: u64,
    },
    LockRelease {
        name: String,
        owner: String,
        token: u64,
    },
}

impl Request {
    /// Method, path and JSON body of this request (ids are sent as they are: the recorder only
    /// makes ids of `[A-Za-z0-9.-]`, which need no escaping in a path).
    pub fn http(&self) -> (&'static str, String, Option<Value>) {
        match self {
            Request::PutPool {
                pool,
                total,
                per_user_limit,
                low_stock_threshold,
                segments,
            } => {
                let mut body = json!({"total": total, "per_user_limit": per_user_limit,
                                      "low_stock_threshold": low_stock_threshold});
                if let Some(segments) = segments {
                    body["segments"] = json!(segments);
                }
                ("PUT", format!("/v1/pools/{pool}"), Some(body))
            }
            Request::Reserve {
                hold_id,
                user,
                items,
                ttl_ms,
                confirm,
                wait_ms,
            } => {
                let items: Vec<Value> = items
                    .iter()
                    .map(|item| json!({"pool": item.pool, "qty": item.qty}))
                    .collect();
                (
                    "POST",
                    "/v1/holds".to_string(),
                    Some(json!({"hold_id": hold_id, "user": user, "items": items,
                                "ttl_ms": ttl_ms, "confirm": confirm, "wait_ms": wait_ms})),
                )
            }
            Request::Confirm { hold_id } => ("POST", format!("/v1/holds/{hold_id}/confirm"), None),
            Request::Release { hold_id } => ("POST", format!("/v1/holds/{hold_id}/release"), None),
            Request::Extend { hold_id, ttl_ms } => (
                "POST",
                format!("/v1/holds/{hold_id}/extend"),
                Some(json!({"ttl_ms": ttl_ms})),
            ),
            Request::Refund { hold_id, restock } => (
                "POST",
                format!("/v1/holds/{hold_id}/refund"),
                (!restock).then(|| json!({"restock": false})),
            ),
            Request::GetHold { hold_id } => ("GET", format!("/v1/holds/{hold_id}"), None),
            Request::GetPool { pool } => ("GET", format!("/v1/pools/{pool}"), None),
            Request::Restock {
                pool,
                delta,
                request_id,
            } => (
                "POST",
                format!("/v1/pools/{pool}/restock"),
                Some(match request_id {
                    Some(request_id) => json!({"delta": delta, "request_id": request_id}),
                    None => json!({"delta": delta}),
                }),
            ),
            Request::LockAcquire {
                name,
                owner,
                ttl_ms,
            } => (
                "POST",
                format!("/v1/locks/{name}/acquire"),
                Some(json!({"owner": owner, "ttl_ms": ttl_ms})),
            ),
            Request::LockRenew {
                name,
                owner,
                token,
                ttl_ms,
            } => (
                "POST",
                format!("/v1/locks/{name}/renew"),
                Some(json!({"owner": owner, "token": token, "ttl_ms": ttl_ms})),
            ),
            Request::LockRelease { name, owner, token } => (
                "POST",
                format!("/v1/locks/{name}/release"),
                Some(json!({"owner": owner, "token": token})),
            ),
        }
    }

    /// The hold this request is about, if any.
    pub fn hold_id(&self) -> Option<&str> {
        match self {
            Request::Reserve { hold_id, .. }
            | Request::Confirm { hold_id }
            | Request::Release { hold_id }
            | Request::Extend { hold_id, .. }
            | Request::Refund { hold_id, .. }
            | Request::GetHold { hold_id } => Some(hold_id),
            _ => None,
        }
    }
}

/// What came back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// An HTTP answer. A 503 is kept as it came; the checker treats it as unknown, since the
    /// contract says such a call may or may not have happened.
    Answered { status: u16, body: Value },
    /// No answer the client can trust: a timeout, a connection error, a killed server. The
    /// request may have been applied, at any time after it was sent.
    Unknown { why: String },
}

/// One request and its answer, with wall-clock times (Unix epoch microseconds) taken just before
/// sending and just after the answer arrived (or the client gave up).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// Which client sent it (a client sends one request at a time).
    pub process: u32,
    pub invoke_us: u64,
    pub complete_us: u64,
    pub request: Request,
    pub outcome: Outcome,
}

/// A whole history: the operations in any order, and the event feed, one list per partition
/// in seq order, read after every operation had completed, at `feed_read_us`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    pub ops: Vec<Op>,
    pub feed: Vec<Vec<Value>>,
    pub feed_read_us: u64,
}
