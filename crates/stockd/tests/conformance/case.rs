//! The case model of the conformance suite: a [`Case`] is a named list of steps (a request, a
//! poll, the case's events, a wait), each with the expected status and an expected subset of
//! the answer, built one line per step; plus the small expected-value helpers the tables share.
//!
//! Cases are data: nothing here talks to a server (the runner does).

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{match_subset, put_pool, short, Api, TimeWindow, Vars};

/// Cases of one group in flight at once: enough to overlap the cases that wait on real time
/// (expiry, lease deadlines), few enough for a 2-core machine.
pub(crate) const CASE_CONCURRENCY: usize = 8;
/// How often a polling step repeats its request.
pub(crate) const POLL_EVERY: Duration = Duration::from_millis(25);
/// A sale bound far in the future (2100-01-01) and one far in the past (2001-09-09).
pub(crate) const FAR_FUTURE_MS: u64 = 4_102_444_800_000;
pub(crate) const LONG_AGO_MS: u64 = 1_000_000_000_000;
/// Expiry: units come back no later than 1 s after `expires_at_ms`; polls allow 0.5 s more.
pub(crate) const EXPIRY_LAG_MAX_MS: u64 = 1_000;
pub(crate) const POLL_SLACK_MS: u64 = 500;
/// The body limit: over 1 MiB is 413.
pub(crate) const BODY_LIMIT_BYTES: usize = 1024 * 1024;
/// The header on the answer to a restock retried with its request id (and on no other answer).
pub(crate) const REPLAYED_HEADER: &str = "stockd-replayed";

#[derive(Clone, Copy, Debug)]
pub(crate) enum Auth {
    /// The server's default token (admin on an auth server, none otherwise).
    Default,
    NoToken,
    Bearer(&'static str),
    /// A raw `Authorization` header value.
    Header(&'static str),
}

#[derive(Clone, Debug)]
pub(crate) enum Body {
    None,
    Json(Value),
    Raw(Vec<u8>),
}

impl From<Option<Value>> for Body {
    fn from(body: Option<Value>) -> Body {
        body.map_or(Body::None, Body::Json)
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Action {
    Request {
        method: &'static str,
        path: String,
        body: Body,
        auth: Auth,
    },
    /// Repeat a GET until the answer matches, for at most `within_ms` (real time under test).
    Poll { path: String, within_ms: u64 },
    /// The events of this case so far (those naming a pool or hold with the case's prefix), read
    /// from every partition and compared with the expected array in order within each partition
    /// (see `support::match_events`; element-wise with one partition).
    Events,
    /// Wait until the wall clock has passed the saved deadline `var` (real time under test).
    WaitPast { var: &'static str },
}

#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub(crate) action: Action,
    pub(crate) status: u16,
    pub(crate) expect: Value,
    /// The answer carries `Stockd-Replayed: true` (a restock retried with its request id);
    /// every other answer must not carry that header.
    pub(crate) replayed: bool,
}

/// Which servers a case applies to, by their event-feed partition count P.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum When {
    Always,
    /// P == 1 (the embedded engine, a single Redis).
    OnePartition,
    /// P > 1 (a Redis Cluster).
    ManyPartitions,
}

impl When {
    pub(crate) fn applies(self, partitions: u32) -> bool {
        match self {
            When::Always => true,
            When::OnePartition => partitions == 1,
            When::ManyPartitions => partitions > 1,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub(crate) name: String,
    pub(crate) when: When,
    pub(crate) steps: Vec<Step>,
}

pub(crate) fn case(name: &str) -> Case {
    Case {
        name: name.to_string(),
        when: When::Always,
        steps: Vec::new(),
    }
}

/// Builders: each appends one step; they keep the table one line per step.
impl Case {
    /// Run this case only on servers whose partition count fits.
    pub(crate) fn only(mut self, when: When) -> Case {
        self.when = when;
        self
    }

    /// A request with the default token; `body` is `Option<Value>` (JSON or none) or a [`Body`].
    pub(crate) fn req(
        mut self,
        method: &'static str,
        path: &str,
        body: impl Into<Body>,
        status: u16,
        expect: Value,
    ) -> Case {
        let action = Action::Request {
            method,
            path: path.to_string(),
            body: body.into(),
            auth: Auth::Default,
        };
        self.steps.push(Step {
            action,
            status,
            expect,
            replayed: false,
        });
        self
    }

    /// The last step's request is sent with `auth` instead of the default token.
    pub(crate) fn by(mut self, auth: Auth) -> Case {
        match &mut self.steps.last_mut().expect("a step to send as").action {
            Action::Request {
                auth: step_auth, ..
            } => *step_auth = auth,
            _ => panic!("only a request carries a token"),
        }
        self
    }

    /// The last step's answer says it was a replay: `Stockd-Replayed: true`.
    pub(crate) fn replayed(mut self) -> Case {
        let step = self.steps.last_mut().expect("a step to mark");
        assert!(
            matches!(step.action, Action::Request { .. }),
            "only a request's answer has headers"
        );
        step.replayed = true;
        self
    }

    pub(crate) fn raw(
        self,
        method: &'static str,
        path: &str,
        body: impl Into<Vec<u8>>,
        status: u16,
        expect: Value,
    ) -> Case {
        self.req(method, path, Body::Raw(body.into()), status, expect)
    }

    pub(crate) fn get(self, path: &str, status: u16, expect: Value) -> Case {
        self.req("GET", path, None, status, expect)
    }

    pub(crate) fn put_pool(self, pool: &str, body: Value, status: u16, expect: Value) -> Case {
        self.req(
            "PUT",
            &format!("/v1/pools/{pool}"),
            Some(body),
            status,
            expect,
        )
    }

    pub(crate) fn get_pool(self, pool: &str, expect: Value) -> Case {
        self.get(&format!("/v1/pools/{pool}"), 200, expect)
    }

    pub(crate) fn restock(self, pool: &str, delta: i64, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/pools/{pool}/restock"),
            Some(json!({ "delta": delta })),
            status,
            expect,
        )
    }

    /// A restock with a whole body (a `request_id`, or a bad one).
    pub(crate) fn restock_with(self, pool: &str, body: Value, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/pools/{pool}/restock"),
            Some(body),
            status,
            expect,
        )
    }

    pub(crate) fn delete_pool(self, pool: &str, status: u16, expect: Value) -> Case {
        self.req("DELETE", &format!("/v1/pools/{pool}"), None, status, expect)
    }

    pub(crate) fn reserve(self, body: Value, status: u16, expect: Value) -> Case {
        self.req("POST", "/v1/holds", Some(body), status, expect)
    }

    pub(crate) fn get_hold(self, hold: &str, status: u16, expect: Value) -> Case {
        self.get(&format!("/v1/holds/{hold}"), status, expect)
    }

    pub(crate) fn confirm(self, hold: &str, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/holds/{hold}/confirm"),
            None,
            status,
            expect,
        )
    }

    pub(crate) fn release(self, hold: &str, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/holds/{hold}/release"),
            None,
            status,
            expect,
        )
    }

    pub(crate) fn refund(self, hold: &str, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/holds/{hold}/refund"),
            None,
            status,
            expect,
        )
    }

    /// A refund with a body (`{"restock": false}`, or a bad one).
    pub(crate) fn refund_with(self, hold: &str, body: Value, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/holds/{hold}/refund"),
            Some(body),
            status,
            expect,
        )
    }

    pub(crate) fn extend(self, hold: &str, ttl_ms: u64, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/holds/{hold}/extend"),
            Some(json!({ "ttl_ms": ttl_ms })),
            status,
            expect,
        )
    }

    pub(crate) fn batch(self, ops: Value, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            "/v1/batch",
            Some(json!({ "ops": ops })),
            status,
            expect,
        )
    }

    pub(crate) fn lock(
        self,
        name: &str,
        verb: &str,
        body: Value,
        status: u16,
        expect: Value,
    ) -> Case {
        self.req(
            "POST",
            &format!("/v1/locks/{name}/{verb}"),
            Some(body),
            status,
            expect,
        )
    }

    pub(crate) fn poll(mut self, path: &str, within_ms: u64, expect: Value) -> Case {
        let action = Action::Poll {
            path: path.to_string(),
            within_ms,
        };
        self.steps.push(Step {
            action,
            status: 200,
            expect,
            replayed: false,
        });
        self
    }

    /// Poll a pool until its units are back (expiry), within the contract's bound.
    pub(crate) fn poll_pool(self, pool: &str, ttl_ms: u64, expect: Value) -> Case {
        self.poll(
            &format!("/v1/pools/{pool}"),
            ttl_ms + EXPIRY_LAG_MAX_MS + POLL_SLACK_MS,
            expect,
        )
    }

    pub(crate) fn events(mut self, expect: Value) -> Case {
        assert!(expect.is_array(), "events expects an array");
        self.steps.push(Step {
            action: Action::Events,
            status: 200,
            expect,
            replayed: false,
        });
        self
    }

    pub(crate) fn wait_past(mut self, var: &'static str) -> Case {
        self.steps.push(Step {
            action: Action::WaitPast { var },
            status: 200,
            expect: Value::Null,
            replayed: false,
        });
        self
    }
}

// Small expected-value helpers.

pub(crate) fn err(code: &str) -> Value {
    json!({ "error": code })
}

pub(crate) fn counts(total: u64, available: u64, held: u64, sold: u64) -> Value {
    json!({ "total": total, "available": available, "held": held, "sold": sold })
}

pub(crate) fn status(hold_status: &str) -> Value {
    json!({ "status": hold_status })
}

/// `{"$unordered": [...]}`: hold items may come back in any order.
pub(crate) fn items(list: Value) -> Value {
    json!({ "$unordered": list })
}

/// An identifier of exactly `len` bytes once `{p}` (five bytes) is substituted.
pub(crate) fn id_of_len(len: usize) -> String {
    format!("{{p}}{}", "x".repeat(len - 5))
}

pub(crate) fn ev(kind: &str, fields: Value) -> Value {
    let mut event = json!({ "seq": "$int", "at_ms": "$int", "type": kind });
    for (key, value) in fields.as_object().expect("event fields").clone() {
        event[key] = value;
    }
    event
}

/// `{"hold_id": ..., "items": [...]}` plus optional extra fields, ids written with `{p}`.
pub(crate) fn hold_req(hold_id: &str, items: &[(&str, u64)], extra: Value) -> Value {
    let list: Vec<Value> = items
        .iter()
        .map(|(pool, qty)| json!({"pool": pool, "qty": qty}))
        .collect();
    let mut body = json!({"hold_id": hold_id, "items": list});
    for (key, value) in extra.as_object().expect("extra fields").clone() {
        body[key] = value;
    }
    body
}

/// Asserts a 200 whose body contains `expected` (see `match_subset`).
pub(crate) fn expect_subset(status: u16, body: &Value, expected: Value, what: &str) {
    assert_eq!(status, 200, "{what}: {}", short(body));
    let window = TimeWindow {
        before_ms: 0,
        after_ms: u64::MAX / 2,
    };
    if let Err(why) = match_subset(&expected, body, &mut Vars::new(), window) {
        panic!("{what}: {why}");
    }
}

/// Every partition of a fresh server's feed is empty (and has dropped nothing).
pub(crate) async fn expect_empty_feed(api: &Api) {
    let partitions = api.partitions().await;
    expect_empty_partitions(api, 0..partitions, "an empty feed").await;
}

/// Each of `partitions` of the feed is empty (and has dropped nothing); `what` names the check.
pub(crate) async fn expect_empty_partitions(
    api: &Api,
    partitions: impl IntoIterator<Item = u32>,
    what: &str,
) {
    for partition in partitions {
        let path = api.events_path(partition, "after=0").await;
        let (status, body) = api.call("GET", &path, None).await;
        expect_subset(
            status,
            &body,
            json!({"events": [], "next_after": 0}),
            &format!("{what}: {path}"),
        );
    }
}

/// Creates `pool` with `total` units (201 expected) and returns its partition, in 0..P.
pub(crate) async fn create_pool_in_partition(
    api: &Api,
    pool: &str,
    total: u64,
    partitions: u32,
) -> u32 {
    let body = put_pool(api, pool, json!({"total": total})).await;
    partition_of(&body, partitions)
}

/// The `"partition"` of a pool or hold object, checked to be in 0..P.
pub(crate) fn partition_of(object: &Value, partitions: u32) -> u32 {
    let partition = object["partition"]
        .as_u64()
        .and_then(|k| u32::try_from(k).ok())
        .unwrap_or_else(|| panic!("no integer partition: {object}"));
    assert!(
        partition < partitions,
        "partition {partition} of {partitions}: {object}"
    );
    partition
}
