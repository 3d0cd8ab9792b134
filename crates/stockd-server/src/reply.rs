//! Success encoding: a core [`Reply`] becomes a status and a JSON body, the same way for a single
//! endpoint and for an op inside a batch.
//!
//! This module chooses each reply's status and its body among the wire types ([`crate::wire`]),
//! and owns the `json` helper that writes any body. It must never look at what the reply means
//! beyond choosing 200/201/204: the data comes from the core's views as they are.

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde::{Serialize, Serializer};
use stockd_core::Reply;

use crate::wire;

const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");

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
            Reply::Pool { pool, .. } => wire::PoolObject::from(pool).serialize(serializer),
            Reply::Hold { hold, .. } => wire::HoldObject::from(hold).serialize(serializer),
            Reply::PoolList { pools, next } => wire::PoolList {
                pools: pools.iter().map(wire::PoolObject::from).collect(),
                next: next.clone(),
            }
            .serialize(serializer),
            Reply::HoldList { holds, next } => wire::HoldList {
                holds: holds.iter().map(wire::HoldObject::from).collect(),
                next: next.clone(),
            }
            .serialize(serializer),
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
    json(status, &ReplyBody(reply))
}
