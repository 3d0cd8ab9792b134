//! The one place where a failure becomes an HTTP status and an error body.
//!
//! [`ApiError`] wraps every core [`Error`] and adds the failures only the HTTP edge can have
//! (malformed JSON, oversized body, unknown route, auth, an unreachable backend). Each variant has
//! exactly one status; the body is always `{"error": code, "message": text, ...details}`. Nothing
//! else in this crate picks an error status, and nothing here may map an error to a 500: a request
//! that fails is the client's doing (4xx) or the backend's (503).

use std::fmt;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use stockd_core::{BackendError, Error};

use crate::reply;

/// Every way a request can fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// A refusal decided by the core (or a shape error found while parsing, as
    /// `Error::InvalidRequest`).
    Core(Error),
    /// The body is not JSON at all (syntax error, truncated); 400.
    InvalidJson(String),
    /// The body is larger than the configured limit; 413.
    PayloadTooLarge { limit_bytes: usize },
    /// The body did not arrive in full within the body timeout; 408, and the connection is
    /// closed (what is left of the body would otherwise be read as the next request).
    RequestTimeout { timeout_ms: u64 },
    /// No route has this path; 404. `tried` is the method and path (shortened), `advice` what to
    /// do instead (the route it probably meant, where the routes are listed).
    NotFound { tried: String, advice: String },
    /// The path exists but not with this method; 405.
    MethodNotAllowed,
    /// No token, or a token that is not configured; 401.
    Unauthorized,
    /// The token's role may not do this; 403.
    Forbidden,
    /// The backend could not be reached or could not tell what happened; 503. No state change
    /// may be claimed.
    BackendUnavailable(String),
    /// An events call named no partition of a feed that has several; 422. Defaulting to 0 would
    /// let a consumer miss every other partition without noticing.
    PartitionRequired { partitions: u32 },
}

impl ApiError {
    /// A 422 `invalid_request` with `message`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::Core(Error::invalid(message))
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Core(error) => core_status(error),
            ApiError::InvalidJson(_) => StatusCode::BAD_REQUEST,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden => StatusCode::FORBIDDEN,
            ApiError::BackendUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::PartitionRequired { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }

    /// The `error` field of the body.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Core(error) => error.code(),
            ApiError::InvalidJson(_) => "invalid_json",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::RequestTimeout { .. } => "request_timeout",
            ApiError::NotFound { .. } => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden => "forbidden",
            ApiError::BackendUnavailable(_) => "backend_unavailable",
            ApiError::PartitionRequired { .. } => "partition_required",
        }
    }
}

/// The status of a core refusal. The match is exhaustive on purpose: a new core error does not
/// compile until someone decides its status here.
fn core_status(error: &Error) -> StatusCode {
    match error {
        Error::InvalidRequest { .. } | Error::UserRequired { .. } => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        Error::PoolNotFound { .. } | Error::HoldNotFound { .. } => StatusCode::NOT_FOUND,
        Error::SaleNotStarted { .. }
        | Error::SaleEnded { .. }
        | Error::InsufficientStock { .. }
        | Error::UserLimitExceeded { .. }
        | Error::TotalBelowCommitted { .. }
        | Error::PoolHasActiveHolds { .. }
        | Error::PoolDeleted { .. }
        | Error::HoldIdConflict { .. }
        | Error::HoldExpired { .. }
        | Error::HoldReleased { .. }
        | Error::HoldConfirmed { .. }
        | Error::HoldRefunded { .. }
        | Error::HoldNotConfirmed { .. }
        | Error::RequestIdConflict { .. }
        | Error::LockHeld { .. }
        | Error::NotLockOwner => StatusCode::CONFLICT,
        // The consumer's position is gone for good: 410, not a retryable conflict.
        Error::EventsExpired { .. } => StatusCode::GONE,
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Core(error) => fmt::Display::fmt(error, f),
            ApiError::InvalidJson(why) => write!(f, "request body is not valid JSON: {why}"),
            ApiError::PayloadTooLarge { limit_bytes } => {
                write!(f, "request body is larger than {limit_bytes} bytes")
            }
            ApiError::RequestTimeout { timeout_ms } => write!(
                f,
                "the request body did not arrive in full within {timeout_ms} ms (body_timeout_ms)"
            ),
            ApiError::NotFound { tried, advice } => write!(f, "no route {tried}; {advice}"),
            ApiError::MethodNotAllowed => f.write_str("this route does not allow this method"),
            ApiError::Unauthorized => f.write_str(
                "missing or unknown bearer token: send the header Authorization: Bearer TOKEN \
                 with one of the server's tokens",
            ),
            ApiError::Forbidden => f.write_str(
                "this needs an admin token: the token sent has the client role, which may hold, \
                 lock, read and follow events but not write pools",
            ),
            ApiError::BackendUnavailable(why) => write!(f, "{why}"),
            ApiError::PartitionRequired { partitions } => write!(
                f,
                "this feed has {partitions} partitions; name one with partition=K, K from 0 to {}",
                partitions.saturating_sub(1)
            ),
        }
    }
}

impl std::error::Error for ApiError {}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        ApiError::Core(error)
    }
}

impl From<BackendError> for ApiError {
    fn from(error: BackendError) -> Self {
        ApiError::BackendUnavailable(error.to_string())
    }
}

/// Writes `Display` output straight into the serializer, with no intermediate `String`.
struct Message<'a>(&'a dyn fmt::Display);

impl Serialize for Message<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self.0)
    }
}

/// A core error's details, written flat next to `error` and `message`: the contract's names for
/// them, here and not in the core, so that the core's types are not the wire format. The match
/// is exhaustive: a new refusal does not compile until its details are decided.
fn core_details<M: SerializeMap>(error: &Error, map: &mut M) -> Result<(), M::Error> {
    match error {
        Error::InvalidRequest { .. } | Error::NotLockOwner => {}
        Error::PoolNotFound { pool }
        | Error::UserRequired { pool }
        | Error::PoolDeleted { pool } => map.serialize_entry("pool", pool)?,
        Error::SaleNotStarted { pool, starts_at_ms } => {
            map.serialize_entry("pool", pool)?;
            map.serialize_entry("starts_at_ms", starts_at_ms)?;
        }
        Error::SaleEnded { pool, ends_at_ms } => {
            map.serialize_entry("pool", pool)?;
            map.serialize_entry("ends_at_ms", ends_at_ms)?;
        }
        Error::InsufficientStock {
            pool,
            available,
            requested,
        } => {
            map.serialize_entry("pool", pool)?;
            map.serialize_entry("available", available)?;
            map.serialize_entry("requested", requested)?;
        }
        Error::UserLimitExceeded {
            pool,
            limit,
            used,
            requested,
        } => {
            map.serialize_entry("pool", pool)?;
            map.serialize_entry("limit", limit)?;
            map.serialize_entry("used", used)?;
            map.serialize_entry("requested", requested)?;
        }
        Error::TotalBelowCommitted {
            pool,
            total,
            committed,
        } => {
            map.serialize_entry("pool", pool)?;
            map.serialize_entry("total", total)?;
            map.serialize_entry("committed", committed)?;
        }
        Error::PoolHasActiveHolds { pool, held } => {
            map.serialize_entry("pool", pool)?;
            map.serialize_entry("held", held)?;
        }
        Error::HoldNotFound { hold_id }
        | Error::HoldIdConflict { hold_id }
        | Error::HoldExpired { hold_id }
        | Error::HoldReleased { hold_id }
        | Error::HoldConfirmed { hold_id }
        | Error::HoldRefunded { hold_id }
        | Error::HoldNotConfirmed { hold_id } => map.serialize_entry("hold_id", hold_id)?,
        Error::RequestIdConflict {
            request_id,
            pool,
            delta,
        } => {
            map.serialize_entry("request_id", request_id)?;
            map.serialize_entry("pool", pool)?;
            map.serialize_entry("delta", delta)?;
        }
        Error::LockHeld { expires_at_ms } => map.serialize_entry("expires_at_ms", expires_at_ms)?,
        Error::EventsExpired { after, oldest_seq } => {
            map.serialize_entry("after", after)?;
            map.serialize_entry("oldest_seq", oldest_seq)?;
        }
    }
    Ok(())
}

/// The error body. Core errors carry their details; edge errors carry a code and a message
/// (and `limit_bytes` for 413, `partitions` for `partition_required`).
impl Serialize for ApiError {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("error", self.code())?;
        map.serialize_entry("message", &Message(self))?;
        match self {
            ApiError::Core(error) => core_details(error, &mut map)?,
            ApiError::PayloadTooLarge { limit_bytes } => {
                map.serialize_entry("limit_bytes", limit_bytes)?;
            }
            ApiError::PartitionRequired { partitions } => {
                map.serialize_entry("partitions", partitions)?;
            }
            ApiError::RequestTimeout { timeout_ms } => {
                map.serialize_entry("timeout_ms", timeout_ms)?;
            }
            _ => {}
        }
        map.end()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = reply::json(self.status(), &self);
        response
            .extensions_mut()
            .insert(crate::metrics::ErrorCode(self.code()));
        if matches!(self, ApiError::Unauthorized) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if matches!(self, ApiError::RequestTimeout { .. }) {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use stockd_core::{HoldId, PoolId};

    use super::*;

    fn pool() -> PoolId {
        PoolId::parse("sku-1").unwrap()
    }

    fn hold() -> HoldId {
        HoldId::parse("order-1").unwrap()
    }

    /// Every core error variant with the status the contract gives it.
    fn core_table() -> Vec<(Error, u16)> {
        vec![
            (Error::invalid("bad"), 422),
            (Error::UserRequired { pool: pool() }, 422),
            (Error::PoolNotFound { pool: pool() }, 404),
            (Error::HoldNotFound { hold_id: hold() }, 404),
            (
                Error::SaleNotStarted {
                    pool: pool(),
                    starts_at_ms: 5,
                },
                409,
            ),
            (
                Error::SaleEnded {
                    pool: pool(),
                    ends_at_ms: 5,
                },
                409,
            ),
            (
                Error::InsufficientStock {
                    pool: pool(),
                    available: 1,
                    requested: 2,
                },
                409,
            ),
            (
                Error::UserLimitExceeded {
                    pool: pool(),
                    limit: 1,
                    used: 1,
                    requested: 1,
                },
                409,
            ),
            (
                Error::TotalBelowCommitted {
                    pool: pool(),
                    total: 1,
                    committed: 2,
                },
                409,
            ),
            (
                Error::PoolHasActiveHolds {
                    pool: pool(),
                    held: 1,
                },
                409,
            ),
            (Error::PoolDeleted { pool: pool() }, 409),
            (Error::HoldIdConflict { hold_id: hold() }, 409),
            (Error::HoldExpired { hold_id: hold() }, 409),
            (Error::HoldReleased { hold_id: hold() }, 409),
            (Error::HoldConfirmed { hold_id: hold() }, 409),
            (Error::HoldRefunded { hold_id: hold() }, 409),
            (Error::HoldNotConfirmed { hold_id: hold() }, 409),
            (
                Error::RequestIdConflict {
                    request_id: stockd_core::RequestId::parse("r").unwrap(),
                    pool: pool(),
                    delta: 3,
                },
                409,
            ),
            (Error::LockHeld { expires_at_ms: 9 }, 409),
            (Error::NotLockOwner, 409),
            (
                Error::EventsExpired {
                    after: 0,
                    oldest_seq: 3,
                },
                410,
            ),
        ]
    }

    #[test]
    fn every_core_error_has_its_status_and_a_flat_body() {
        for (error, status) in core_table() {
            let api = ApiError::Core(error.clone());
            assert_eq!(api.status().as_u16(), status, "{}", error.code());
            let body = serde_json::to_value(&api).unwrap();
            assert_eq!(body["error"], error.code());
            assert_eq!(body["message"], error.to_string());
            // Details sit next to the code, not nested: the contract's table of details.
            let expected: &[&str] = match error.code() {
                "invalid_request" | "not_lock_owner" => &[],
                "pool_not_found" | "user_required" | "pool_deleted" => &["pool"],
                "sale_not_started" => &["pool", "starts_at_ms"],
                "sale_ended" => &["pool", "ends_at_ms"],
                "insufficient_stock" => &["pool", "available", "requested"],
                "user_limit_exceeded" => &["pool", "limit", "used", "requested"],
                "total_below_committed" => &["pool", "total", "committed"],
                "pool_has_active_holds" => &["pool", "held"],
                "lock_held" => &["expires_at_ms"],
                "events_expired" => &["after", "oldest_seq"],
                "request_id_conflict" => &["request_id", "pool", "delta"],
                code if code.starts_with("hold_") => &["hold_id"],
                code => panic!("{code}: no details in the contract's table"),
            };
            let mut keys: Vec<&str> = body
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .filter(|key| !["error", "message"].contains(key))
                .collect();
            keys.sort_unstable();
            let mut expected = expected.to_vec();
            expected.sort_unstable();
            assert_eq!(keys, expected, "{}", error.code());
            for key in keys {
                assert!(!body[key].is_null(), "{} {key}", error.code());
            }
        }
    }

    #[test]
    fn edge_errors_have_their_status_and_code() {
        let table = [
            (ApiError::InvalidJson("x".into()), 400, "invalid_json"),
            (
                ApiError::PayloadTooLarge { limit_bytes: 10 },
                413,
                "payload_too_large",
            ),
            (
                ApiError::NotFound {
                    tried: "GET /x".into(),
                    advice: "x".into(),
                },
                404,
                "not_found",
            ),
            (ApiError::MethodNotAllowed, 405, "method_not_allowed"),
            (ApiError::Unauthorized, 401, "unauthorized"),
            (ApiError::Forbidden, 403, "forbidden"),
            (
                ApiError::BackendUnavailable("down".into()),
                503,
                "backend_unavailable",
            ),
            (
                ApiError::PartitionRequired { partitions: 4 },
                422,
                "partition_required",
            ),
        ];
        for (error, status, code) in table {
            assert_eq!(error.status().as_u16(), status);
            let body = serde_json::to_value(&error).unwrap();
            assert_eq!(body["error"], code);
            assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
        }
    }

    #[test]
    fn events_expired_says_where_to_resume_and_partition_required_how_many() {
        let expired = ApiError::Core(Error::EventsExpired {
            after: 4,
            oldest_seq: 10,
        });
        let body = serde_json::to_value(&expired).unwrap();
        assert_eq!(body["error"], "events_expired");
        assert_eq!(body["oldest_seq"], 10);
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("after=9"), "{message}");
        // Never an underflow, even for a value no backend should send.
        let odd = Error::EventsExpired {
            after: 0,
            oldest_seq: 0,
        };
        assert!(odd.to_string().contains("after=0"), "{odd}");

        let required = serde_json::to_value(ApiError::PartitionRequired { partitions: 4 }).unwrap();
        assert_eq!(required["partitions"], 4);
        let message = required["message"].as_str().unwrap();
        assert!(message.contains("4 partitions"), "{message}");
        assert!(message.contains("0 to 3"), "{message}");
    }
}
