//! The one place where a failure becomes an HTTP status and an error body.
//!
//! [`ApiError`] wraps every core [`Error`] and adds the failures only the HTTP edge can have
//! (malformed JSON, oversized body, unknown route, auth, an unreachable backend). Each variant has
//! exactly one row: a core error's is the core's table (`stockd_core::ERRORS`: code, status,
//! details), an edge error's is [`EDGE_ERRORS`] here; the status, the code and the body's details
//! are read from it. The body is always `{"error": code, "message": text, ...details}`. Nothing
//! else in this crate picks an error status, and nothing here may map an error to a 500: a request
//! that fails is the client's doing (4xx) or the backend's (503).

use std::fmt;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use stockd_api::ErrorCode;
use stockd_core::{BackendError, DetailField, DetailKind, DetailValue, Error, ErrorSpec};

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

/// `name`: an integer `>= min`.
const fn int(name: &'static str, min: u64) -> DetailField {
    DetailField {
        name,
        kind: DetailKind::Int { min },
    }
}

/// Declares each edge error's row as a constant, and [`EDGE_ERRORS`], from one line each:
/// `NAME = (ErrorCode::Code, status, [detail fields], meaning)`.
macro_rules! edge_errors {
    ($($name:ident = ($code:path, $status:literal, [$($field:expr),*], $meaning:literal),)+) => {
        $(pub(crate) const $name: ErrorSpec = ErrorSpec {
            code: $code.as_str(),
            status: $status,
            fields: &[$($field),*],
            meaning: $meaning,
        };)+

        /// The errors only the HTTP edge can have; with the core's (`stockd_core::ERRORS`),
        /// every error the server sends.
        pub(crate) const EDGE_ERRORS: &[ErrorSpec] = &[$($name),+];
    };
}

edge_errors! {
    INVALID_JSON = (ErrorCode::InvalidJson, 400, [],
        "the body is not well-formed JSON, or could not be read"),
    UNAUTHORIZED = (ErrorCode::Unauthorized, 401, [], "missing or unknown bearer token"),
    FORBIDDEN = (ErrorCode::Forbidden, 403, [],
        "the token's role may not do this (pool writes need admin)"),
    NOT_FOUND = (ErrorCode::NotFound, 404, [], "no route has this path"),
    METHOD_NOT_ALLOWED = (ErrorCode::MethodNotAllowed, 405, [],
        "the path exists, not with this method (header Allow)"),
    REQUEST_TIMEOUT = (ErrorCode::RequestTimeout, 408, [int("timeout_ms", 0)],
        "the body did not arrive in full within the body timeout; the connection is closed"),
    PAYLOAD_TOO_LARGE = (ErrorCode::PayloadTooLarge, 413, [int("limit_bytes", 0)],
        "the body is over the limit"),
    PARTITION_REQUIRED = (ErrorCode::PartitionRequired, 422, [int("partitions", 1)],
        "the feed has several partitions and none was named"),
    BACKEND_UNAVAILABLE = (ErrorCode::BackendUnavailable, 503, [],
        "the backend is unreachable or unsure: no change is claimed"),
}

impl ApiError {
    /// A 422 `invalid_request` with `message`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::Core(Error::invalid(message))
    }

    /// This error's row: the core's table for a core error, [`EDGE_ERRORS`] for the others. The
    /// match is exhaustive: a new edge error does not compile until it has its row.
    pub(crate) fn spec(&self) -> &'static ErrorSpec {
        match self {
            ApiError::Core(error) => error.spec(),
            ApiError::InvalidJson(_) => &INVALID_JSON,
            ApiError::PayloadTooLarge { .. } => &PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout { .. } => &REQUEST_TIMEOUT,
            ApiError::NotFound { .. } => &NOT_FOUND,
            ApiError::MethodNotAllowed => &METHOD_NOT_ALLOWED,
            ApiError::Unauthorized => &UNAUTHORIZED,
            ApiError::Forbidden => &FORBIDDEN,
            ApiError::BackendUnavailable(_) => &BACKEND_UNAVAILABLE,
            ApiError::PartitionRequired { .. } => &PARTITION_REQUIRED,
        }
    }

    pub fn status(&self) -> StatusCode {
        // Every row's status is a valid 4xx or 503 (tested); the fallback is never taken.
        StatusCode::from_u16(self.spec().status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
    }

    /// The `error` field of the body.
    pub fn code(&self) -> &'static str {
        self.spec().code
    }

    /// The body's details, next to `error` and `message`: the row's detail fields with this
    /// error's values.
    fn details(&self) -> Vec<(&'static DetailField, DetailValue<'_>)> {
        let values = match self {
            ApiError::Core(error) => return error.details().collect(),
            ApiError::PayloadTooLarge { limit_bytes } => {
                vec![DetailValue::Unsigned(*limit_bytes as u64)]
            }
            ApiError::RequestTimeout { timeout_ms } => vec![DetailValue::Unsigned(*timeout_ms)],
            ApiError::PartitionRequired { partitions } => {
                vec![DetailValue::Unsigned(u64::from(*partitions))]
            }
            ApiError::InvalidJson(_)
            | ApiError::NotFound { .. }
            | ApiError::MethodNotAllowed
            | ApiError::Unauthorized
            | ApiError::Forbidden
            | ApiError::BackendUnavailable(_) => Vec::new(),
        };
        self.spec().fields.iter().zip(values).collect()
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

/// The error body: the code, the message, and the row's details flat next to them.
impl Serialize for ApiError {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("error", self.code())?;
        map.serialize_entry("message", &Message(self))?;
        for (field, value) in self.details() {
            map.serialize_entry(field.name, &value)?;
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
    use stockd_core::ERRORS;

    use super::*;

    /// Every core error, built from its row with a value of each field's kind, answers the
    /// row's status with a flat body: the code, the message, and exactly the row's details.
    #[test]
    fn every_core_error_has_its_rows_status_and_a_flat_body() {
        for spec in ERRORS {
            let error = Error::from_details(spec.code, |_, kind| {
                Some(match kind {
                    DetailKind::Message | DetailKind::Id => DetailValue::Text("x-1"),
                    DetailKind::Int { min } => DetailValue::Unsigned(min + 2),
                    DetailKind::Delta => DetailValue::Signed(-2),
                })
            })
            .unwrap();
            let api = ApiError::Core(error.clone());
            assert_eq!(api.status().as_u16(), spec.status, "{}", spec.code);
            let body = serde_json::to_value(&api).unwrap();
            assert_eq!(body["error"], spec.code);
            assert_eq!(body["message"], error.to_string());
            let object = body.as_object().unwrap();
            let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
            let mut expected = vec!["error", "message"];
            expected.extend(spec.details().map(|field| field.name));
            keys.sort_unstable();
            expected.sort_unstable();
            assert_eq!(keys, expected, "{}", spec.code);
            for key in keys {
                assert!(!body[key].is_null(), "{} {key}", spec.code);
            }
        }
    }

    /// A status the server can send is a 4xx or a 503, never a 500; codes are distinct.
    #[test]
    fn every_row_has_a_4xx_or_503_and_its_own_code() {
        let all: Vec<&ErrorSpec> = ERRORS.iter().chain(EDGE_ERRORS).collect();
        for (index, spec) in all.iter().enumerate() {
            let status = StatusCode::from_u16(spec.status).unwrap();
            assert!(
                status.is_client_error() || status == StatusCode::SERVICE_UNAVAILABLE,
                "{}",
                spec.code
            );
            assert!(all[index + 1..].iter().all(|other| other.code != spec.code));
        }
    }

    /// The codes of the core's table and of the edge table are exactly the contract's list of
    /// codes, each once.
    #[test]
    fn the_two_tables_have_every_error_code_once() {
        let mut codes: Vec<ErrorCode> = ERRORS
            .iter()
            .chain(EDGE_ERRORS)
            .map(|spec| ErrorCode::parse(spec.code).unwrap())
            .collect();
        codes.sort_unstable();
        assert_eq!(codes, ErrorCode::ALL);
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
