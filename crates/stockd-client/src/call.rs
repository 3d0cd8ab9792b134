//! Every endpoint's request, declared once: [`Call`] says the method, path, query, body and how
//! long the server may wait before answering; [`Answer`] is a 2xx answer exactly as received.
//!
//! The typed methods of [`crate::Client`] are a `Call` sent and its `Answer` decoded. A caller that
//! must show the server's bytes unchanged (the command line's `--json`) sends the same `Call`
//! with [`crate::Client::call`] and keeps the `Answer`. This module only describes requests; it
//! never sends one and never judges what the server judges.

use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use stockd_api::{self as api, Operation};

use crate::types::{
    BatchBody, ExtendBody, HoldQuery, LockAcquireBody, LockReleaseBody, LockRenewBody,
    PoolSpecBody, RefundBody, ReserveBody, RestockBody,
};
use crate::Result;

/// One request of the API, not yet sent. Build it with the constructor named after its
/// endpoint, send it with [`crate::Client::call`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub(crate) method: Method,
    operation: Operation,
    /// Path segments under the base URL, each percent-encoded when the URL is built.
    pub(crate) segments: Vec<String>,
    pub(crate) query: Vec<(&'static str, String)>,
    /// The JSON body, already encoded.
    pub(crate) body: Option<Vec<u8>>,
    /// How long the server may legitimately wait before answering (`wait_ms`); it extends the
    /// request timeout so that a long poll is never cut short by the client.
    pub(crate) wait_ms: u64,
}

/// A 2xx answer: its status and its body exactly as the server sent it, and what its headers
/// say that the status and body cannot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
    /// The server said `Stockd-Replayed: true`: this was a restock retried with the request id
    /// of one an earlier call applied, and nothing changed (its status and body are the first
    /// run's).
    pub replayed: bool,
}

impl Answer {
    /// The body decoded as `T`; a body that is not the promised JSON is [`crate::ClientError::Decode`].
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        Ok(serde_json::from_slice(&self.body)?)
    }
}

/// Encodes a request body. The bodies of this crate are structs of strings, integers, booleans
/// and JSON values; serde_json fails only on a map with non-string keys or a `Serialize` impl
/// that reports an error, and none of them has either.
fn encode(body: &impl Serialize) -> Vec<u8> {
    serde_json::to_vec(body).expect("request bodies of stockd-client always encode")
}

impl Call {
    /// A call of `operation`, its path's `{name}`s filled with `values` in order.
    fn new(operation: Operation, values: &[&str]) -> Call {
        let segments = operation
            .segments(values)
            .expect("every constructor gives its operation's path values");
        Call {
            method: Method::from_bytes(operation.method.as_bytes())
                .expect("the API's methods are HTTP methods"),
            operation,
            segments: segments.into_iter().map(str::to_owned).collect(),
            query: Vec::new(),
            body: None,
            wait_ms: 0,
        }
    }

    /// The operation of the API this call is.
    pub fn operation(&self) -> Operation {
        self.operation
    }

    fn with_body(mut self, body: &impl Serialize) -> Call {
        self.body = Some(encode(body));
        self
    }

    fn with_query(mut self, name: &'static str, value: Option<String>) -> Call {
        if let Some(value) = value {
            self.query.push((name, value));
        }
        self
    }

    fn waiting(mut self, wait_ms: Option<u64>) -> Call {
        self.wait_ms = wait_ms.unwrap_or(0);
        self
    }

    // ----- pools -----

    /// `PUT /v1/pools/{pool}` (`?if_absent=true` when asked): 201 created, 200 replaced or,
    /// with `if_absent`, left unchanged.
    pub fn put_pool(pool: &str, spec: &PoolSpecBody, if_absent: bool) -> Call {
        Call::new(api::PUT_POOL, &[pool])
            .with_query("if_absent", if_absent.then(|| "true".to_owned()))
            .with_body(spec)
    }

    /// `POST /v1/pools/{pool}/restock`; with a `request_id`, a retry changes nothing.
    pub fn restock(pool: &str, delta: i64, request_id: Option<&str>) -> Call {
        Call::new(api::RESTOCK, &[pool]).with_body(&RestockBody {
            delta,
            request_id: request_id.map(str::to_string),
        })
    }

    /// `GET /v1/pools/{pool}`.
    pub fn get_pool(pool: &str) -> Call {
        Call::new(api::GET_POOL, &[pool])
    }

    /// `GET /v1/pools/{pool}/segments`.
    pub fn get_pool_segments(pool: &str) -> Call {
        Call::new(api::GET_POOL_SEGMENTS, &[pool])
    }

    /// `GET /v1/pools?prefix=P&after=CURSOR&limit=N`.
    pub fn list_pools(prefix: Option<&str>, after: Option<&str>, limit: Option<usize>) -> Call {
        Call::new(api::LIST_POOLS, &[])
            .with_query("prefix", prefix.map(str::to_owned))
            .with_query("after", after.map(str::to_owned))
            .with_query("limit", limit.map(|limit| limit.to_string()))
    }

    /// `DELETE /v1/pools/{pool}` (204, no body).
    pub fn delete_pool(pool: &str) -> Call {
        Call::new(api::DELETE_POOL, &[pool])
    }

    // ----- holds -----

    /// `POST /v1/holds`: 201 created, 200 for a retry of the same request.
    pub fn reserve(body: &ReserveBody) -> Call {
        Call::new(api::RESERVE, &[])
            .with_body(body)
            .waiting(body.wait_ms)
    }

    /// `GET /v1/holds?pool=P&user=U&status=S&after=CURSOR&limit=N`.
    pub fn list_holds(query: &HoldQuery) -> Call {
        Call::new(api::LIST_HOLDS, &[])
            .with_query("pool", query.pool.clone())
            .with_query("user", query.user.clone())
            .with_query("status", query.status.map(|s| s.as_str().to_owned()))
            .with_query("after", query.after.clone())
            .with_query("limit", query.limit.map(|limit| limit.to_string()))
    }

    /// `POST /v1/holds/{hold_id}/confirm`.
    pub fn confirm(hold_id: &str) -> Call {
        Call::new(api::CONFIRM, &[hold_id])
    }

    /// `POST /v1/holds/{hold_id}/release`.
    pub fn release(hold_id: &str) -> Call {
        Call::new(api::RELEASE, &[hold_id])
    }

    /// `POST /v1/holds/{hold_id}/refund`: with `restock` (the default, sent as no body) the
    /// sold units go back to available; without, they leave the pool (`{"restock": false}`).
    pub fn refund(hold_id: &str, restock: bool) -> Call {
        let call = Call::new(api::REFUND, &[hold_id]);
        if restock {
            call
        } else {
            call.with_body(&RefundBody { restock })
        }
    }

    /// `POST /v1/holds/{hold_id}/extend`.
    pub fn extend(hold_id: &str, ttl_ms: u64) -> Call {
        Call::new(api::EXTEND, &[hold_id]).with_body(&ExtendBody { ttl_ms })
    }

    /// `GET /v1/holds/{hold_id}`.
    pub fn get_hold(hold_id: &str) -> Call {
        Call::new(api::GET_HOLD, &[hold_id])
    }

    // ----- batch and events -----

    /// `POST /v1/batch` with `{"ops": ops}`.
    pub fn batch(ops: Vec<Value>) -> Call {
        let wait_ms = batch_wait_ms(&ops);
        let mut call = Call::new(api::BATCH, &[]).with_body(&BatchBody { ops });
        call.wait_ms = wait_ms;
        call
    }

    /// `POST /v1/batch` with `body` sent byte for byte, as a caller read it (a file the server
    /// must judge as written: a repeated field, for one, would not survive a re-encoding).
    pub fn batch_body(body: Vec<u8>) -> Call {
        let ops = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|value| value.get("ops").and_then(Value::as_array).cloned())
            .unwrap_or_default();
        let mut call = Call::new(api::BATCH, &[]);
        call.wait_ms = batch_wait_ms(&ops);
        call.body = Some(body);
        call
    }

    /// `GET /v1/events/partitions`.
    pub fn partitions() -> Call {
        Call::new(api::EVENT_PARTITIONS, &[])
    }

    /// `GET /v1/events?partition=K&after=SEQ&limit=N&wait_ms=N`; `partition` may be left out
    /// only when the feed has one partition.
    pub fn events(
        partition: Option<u32>,
        after: u64,
        limit: Option<usize>,
        wait_ms: Option<u64>,
    ) -> Call {
        Call::new(api::EVENTS, &[])
            .with_query(
                "partition",
                partition.map(|partition| partition.to_string()),
            )
            .with_query("after", Some(after.to_string()))
            .with_query("limit", limit.map(|limit| limit.to_string()))
            .with_query("wait_ms", wait_ms.map(|wait_ms| wait_ms.to_string()))
            .waiting(wait_ms)
    }

    // ----- locks -----

    /// `POST /v1/locks/{name}/acquire`.
    pub fn lock_acquire(name: &str, owner: &str, ttl_ms: u64, wait_ms: Option<u64>) -> Call {
        let body = LockAcquireBody {
            owner: owner.to_owned(),
            ttl_ms,
            wait_ms,
        };
        Call::new(api::LOCK_ACQUIRE, &[name])
            .with_body(&body)
            .waiting(wait_ms)
    }

    /// `POST /v1/locks/{name}/renew`.
    pub fn lock_renew(name: &str, owner: &str, token: u64, ttl_ms: u64) -> Call {
        let body = LockRenewBody {
            owner: owner.to_owned(),
            token,
            ttl_ms,
        };
        Call::new(api::LOCK_RENEW, &[name]).with_body(&body)
    }

    /// `POST /v1/locks/{name}/release`.
    pub fn lock_release(name: &str, owner: &str, token: u64) -> Call {
        let body = LockReleaseBody {
            owner: owner.to_owned(),
            token,
        };
        Call::new(api::LOCK_RELEASE, &[name]).with_body(&body)
    }

    // ----- operations -----

    /// `GET /healthz`.
    pub fn healthz() -> Call {
        Call::new(api::HEALTHZ, &[])
    }

    /// `GET /readyz`.
    pub fn readyz() -> Call {
        Call::new(api::READYZ, &[])
    }

    /// `GET /metrics`.
    pub fn metrics() -> Call {
        Call::new(api::METRICS, &[])
    }
}

/// Reserve ops may wait; a batch as a whole may take as long as all their waits.
fn batch_wait_ms(ops: &[Value]) -> u64 {
    ops.iter()
        .filter_map(|op| op.get("wait_ms").and_then(Value::as_u64))
        .fold(0u64, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One call of each constructor: together they must cover every operation of the API
    /// (`stockd_api::OPERATIONS`, which the server's route table is checked against), but the
    /// OpenAPI document, which a client reads with any HTTP client, not through this one.
    #[test]
    fn the_client_can_call_every_operation_of_the_api() {
        let reserve = ReserveBody {
            hold_id: "h".into(),
            user: None,
            items: vec![crate::HoldItem::new("p", 1)],
            ttl_ms: None,
            confirm: false,
            wait_ms: None,
        };
        let calls = [
            Call::put_pool("p", &PoolSpecBody::default(), false),
            Call::restock("p", 1, None),
            Call::get_pool("p"),
            Call::get_pool_segments("p"),
            Call::list_pools(None, None, None),
            Call::delete_pool("p"),
            Call::reserve(&reserve),
            Call::confirm("h"),
            Call::release("h"),
            Call::refund("h", true),
            Call::extend("h", 1_000),
            Call::get_hold("h"),
            Call::list_holds(&HoldQuery::default()),
            Call::batch(Vec::new()),
            Call::batch_body(b"{}".to_vec()),
            Call::partitions(),
            Call::events(None, 0, None, None),
            Call::lock_acquire("l", "o", 100, None),
            Call::lock_renew("l", "o", 1, 100),
            Call::lock_release("l", "o", 1),
            Call::healthz(),
            Call::readyz(),
            Call::metrics(),
        ];
        for call in &calls {
            assert_eq!(call.method.as_str(), call.operation().method);
        }
        let mut covered: Vec<Operation> = calls.iter().map(Call::operation).collect();
        covered.push(api::OPENAPI);
        for operation in api::OPERATIONS {
            assert!(covered.contains(&operation), "no call for {operation:?}");
        }
    }
}
