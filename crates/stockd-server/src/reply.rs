//! Success encoding: a core [`Reply`] becomes a status and a JSON body, the same way for a single
//! endpoint and for an op inside a batch.
//!
//! This module chooses each reply's status and its body among the wire types ([`crate::wire`]),
//! and owns the `json` helper that writes any body. It must never look at what the reply means
//! beyond choosing 200/201/204 and the one header a reply carries: [`REPLAYED`] on a restock
//! retried with its request id, whose status and body the contract fixes as the first run's.
//! The data comes from the core's views as they are.

use axum::body::Body;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use serde::{Serialize, Serializer};
use stockd_core::{HoldStatus, HoldView, Reply};

use crate::wire;

const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");

/// `Stockd-Replayed: true` on the answer to a restock retried with its request id: an earlier
/// call applied it and this one changed nothing. The status and body are the first run's (the
/// contract says so), so this header is the only way a client can tell. docs/api.md, "POST
/// /v1/pools/{pool}/restock".
pub(crate) const REPLAYED: (HeaderName, HeaderValue) = (
    HeaderName::from_static("stockd-replayed"),
    HeaderValue::from_static("true"),
);

/// Most bodies (a pool, a hold) fit in this, so the buffer is allocated once.
const BODY_CAPACITY_BYTES: usize = 256;

/// A response with `body` serialised as JSON.
pub(crate) fn json<T: Serialize + ?Sized>(status: StatusCode, body: &T) -> Response {
    json_with_capacity(status, body, BODY_CAPACITY_BYTES)
}

/// [`json`] for a body expected to take about `capacity_bytes` (a batch's answer), written into
/// a buffer of that size at once rather than one grown (and copied) step by step.
pub(crate) fn json_with_capacity<T: Serialize + ?Sized>(
    status: StatusCode,
    body: &T,
    capacity_bytes: usize,
) -> Response {
    let mut buffer = Vec::with_capacity(capacity_bytes);
    match serde_json::to_writer(&mut buffer, body) {
        Ok(()) => {
            let mut response = Response::new(Body::from(buffer));
            *response.status_mut() = status;
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, APPLICATION_JSON);
            response
        }
        // Unreachable for this crate's types (string keys, no failing Serialize impls); kept
        // so that a future mistake shows as a logged bug, not a panic.
        Err(error) => {
            tracing::error!(%error, "response body failed to serialise");
            let mut response = Response::new(Body::from(
                r#"{"error":"internal_error","message":"response encoding failed"}"#,
            ));
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, APPLICATION_JSON);
            response
        }
    }
}

/// The status a reply gets: 201 when the command created something, 204 for a deletion, else 200.
pub(crate) fn status(reply: &Reply) -> StatusCode {
    match reply {
        Reply::Pool { created: true, .. } | Reply::Hold { created: true, .. } => {
            StatusCode::CREATED
        }
        Reply::PoolDeleted => StatusCode::NO_CONTENT,
        Reply::Pool { .. }
        | Reply::Hold { .. }
        | Reply::PoolList { .. }
        | Reply::Segments { .. }
        | Reply::HoldList { .. }
        | Reply::Lock { .. }
        | Reply::LockReleased => StatusCode::OK,
    }
}

/// The JSON body of a reply. `PoolDeleted` has none (204); inside a batch it would be `null`.
pub(crate) struct ReplyBody<'a>(pub &'a Reply);

impl Serialize for ReplyBody<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Reply::Pool { pool, .. } => wire::pool(pool).serialize(serializer),
            Reply::Hold { hold, .. } => wire::hold(hold).serialize(serializer),
            Reply::PoolList { pools, next } => wire::pool_list(pools, next).serialize(serializer),
            Reply::Segments { segments } => wire::segments(segments).serialize(serializer),
            Reply::HoldList { holds, next } => wire::hold_list(holds, next).serialize(serializer),
            Reply::PoolDeleted => serializer.serialize_unit(),
            Reply::Lock {
                token,
                expires_at_ms,
            } => wire::LockGrant {
                token: *token,
                expires_at_ms: *expires_at_ms,
            }
            .serialize(serializer),
            Reply::LockReleased => wire::LockReleased { released: true }.serialize(serializer),
        }
    }
}

/// The full response for one reply.
pub(crate) fn response(reply: &Reply) -> Response {
    let status = status(reply);
    if status == StatusCode::NO_CONTENT {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = status;
        return response;
    }
    if let Reply::Hold { hold, .. } = reply {
        // The hot path's answer (every reserve and confirm), written by hand.
        let mut buffer = Vec::with_capacity(BODY_CAPACITY_BYTES);
        write_hold(&mut buffer, hold);
        let mut response = Response::new(Body::from(buffer));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, APPLICATION_JSON);
        return response;
    }
    let mut response = json(status, &ReplyBody(reply));
    if let Reply::Pool { replayed: true, .. } = reply {
        let (name, value) = REPLAYED;
        response.headers_mut().insert(name, value);
    }
    response
}

/// Writes a hold as JSON: byte for byte what serde_json writes for [`wire::HoldObject`] (a
/// proptest compares them), without building that object (it copies the items) and without
/// serde_json's scan of every string for characters to escape. Ids are `[A-Za-z0-9._:-]`
/// (`stockd_core::ids`), none of which JSON escapes, so they are copied as they are.
pub(crate) fn write_hold(out: &mut Vec<u8>, hold: &HoldView) {
    out.extend_from_slice(b"{\"hold_id\":\"");
    out.extend_from_slice(hold.hold_id.as_str().as_bytes());
    out.extend_from_slice(b"\",\"status\":\"");
    out.extend_from_slice(status_name(hold.status).as_bytes());
    out.extend_from_slice(b"\",\"user\":");
    match &hold.user {
        Some(user) => {
            out.push(b'"');
            out.extend_from_slice(user.as_str().as_bytes());
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"items\":[");
    for (index, item) in hold.items.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"pool\":\"");
        out.extend_from_slice(item.pool.as_str().as_bytes());
        out.extend_from_slice(b"\",\"qty\":");
        write_number(out, item.qty);
        out.push(b'}');
    }
    out.extend_from_slice(b"],\"created_at_ms\":");
    write_number(out, hold.created_at_ms);
    out.extend_from_slice(b",\"expires_at_ms\":");
    write_number(out, hold.expires_at_ms);
    out.extend_from_slice(b",\"finished_at_ms\":");
    match hold.finished_at_ms {
        Some(at_ms) => write_number(out, at_ms),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"partition\":");
    write_number(out, u64::from(hold.partition));
    out.push(b'}');
}

fn write_number(out: &mut Vec<u8>, number: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(number).as_bytes());
}

/// A status as the wire names it (`wire::HoldStatus`, snake_case).
fn status_name(status: HoldStatus) -> &'static str {
    match status {
        HoldStatus::Held => "held",
        HoldStatus::Confirmed => "confirmed",
        HoldStatus::Released => "released",
        HoldStatus::Expired => "expired",
        HoldStatus::Refunded => "refunded",
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;
    use stockd_core::{HoldId, HoldItem, PoolId, UserId};

    use super::*;

    fn id() -> impl Strategy<Value = String> {
        "[A-Za-z0-9][A-Za-z0-9._:-]{0,40}"
    }

    fn status() -> impl Strategy<Value = HoldStatus> {
        prop_oneof![
            Just(HoldStatus::Held),
            Just(HoldStatus::Confirmed),
            Just(HoldStatus::Released),
            Just(HoldStatus::Expired),
            Just(HoldStatus::Refunded),
        ]
    }

    fn view() -> impl Strategy<Value = HoldView> {
        (
            (id(), status(), prop::option::of(id())),
            prop::collection::vec((id(), any::<u64>()), 1..5),
            (
                any::<u64>(),
                any::<u64>(),
                prop::option::of(any::<u64>()),
                any::<u32>(),
            ),
        )
            .prop_map(
                |((hold_id, status, user), items, (created, expires, finished, partition))| {
                    HoldView {
                        hold_id: HoldId::parse(&hold_id).unwrap(),
                        status,
                        user: user.map(|user| UserId::parse(&user).unwrap()),
                        items: items
                            .into_iter()
                            .map(|(pool, qty)| HoldItem {
                                pool: PoolId::parse(&pool).unwrap(),
                                qty,
                            })
                            .collect::<Vec<_>>()
                            .into(),
                        created_at_ms: created,
                        expires_at_ms: expires,
                        finished_at_ms: finished,
                        partition,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn a_hand_written_hold_is_what_serde_writes(hold in view()) {
            let mut written = Vec::new();
            write_hold(&mut written, &hold);
            let serde = serde_json::to_vec(&wire::hold(&hold)).unwrap();
            prop_assert_eq!(String::from_utf8(written).unwrap(), String::from_utf8(serde).unwrap());
        }
    }

    #[test]
    fn the_hold_response_carries_the_hand_written_body() {
        let hold = HoldView {
            hold_id: HoldId::parse("h-1").unwrap(),
            status: HoldStatus::Held,
            user: None,
            items: Arc::from(vec![HoldItem {
                pool: PoolId::parse("p").unwrap(),
                qty: 2,
            }]),
            created_at_ms: 5,
            expires_at_ms: 9,
            finished_at_ms: None,
            partition: 0,
        };
        let response = response(&Reply::Hold {
            hold,
            created: true,
        });
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
    }

    /// A restock's retry answers as its first run did (200, the pool) plus `Stockd-Replayed`,
    /// which no other answer carries.
    #[tokio::test]
    async fn only_a_replayed_restock_says_so_in_a_header() {
        use stockd_core::PoolView;
        let pool = PoolView {
            pool: PoolId::parse("p").unwrap(),
            total: 5,
            available: 5,
            held: 0,
            sold: 0,
            per_user_limit: None,
            starts_at_ms: None,
            ends_at_ms: None,
            low_stock_threshold: None,
            partition: 0,
            segments: 1,
        };
        let mut answers = Vec::new();
        for (created, replayed) in [(false, false), (false, true), (true, false)] {
            let response = response(&Reply::Pool {
                pool: pool.clone(),
                created,
                replayed,
            });
            let status = response.status();
            let header = response.headers().get("Stockd-Replayed").cloned();
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            answers.push((status, header, body));
        }
        let (applied, replay, created) = (&answers[0], &answers[1], &answers[2]);
        assert_eq!(applied.1, None);
        assert_eq!(created.1, None);
        assert_eq!(replay.1, Some(REPLAYED.1));
        assert_eq!(REPLAYED.0.as_str(), "stockd-replayed");
        assert_eq!((replay.0, &replay.2), (applied.0, &applied.2));
        assert_eq!(replay.0, StatusCode::OK);
    }
}
