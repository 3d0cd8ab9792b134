//! Request extractors: JSON bodies, path identifiers and query strings, each failing with an
//! [`ApiError`] and never with one of axum's default rejection bodies.
//!
//! Classification rules of the contract live here: a body over the limit is 413; bytes that are
//! not JSON are 400 `invalid_json`; JSON of the wrong shape (unknown field, wrong type, missing
//! field, bad identifier) is 422 `invalid_request`; a bad path segment or query value is 422.
//! Range rules (ttl bounds, item counts, ...) are not checked here: they belong to
//! `Command::validate`, which the backend runs.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde::de::value::MapAccessDeserializer;
use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::error::Category;
use stockd_core::{HoldId, IdError, LockName, PoolId};
use tower::Service;

use crate::error::ApiError;
use crate::{syntax, wording};

/// State that knows the body limit in force, so that a 413 can say what it is.
pub(crate) trait BodyLimit {
    fn body_limit_bytes(&self) -> usize;
}

/// Reads the whole body, within the body limit. Behind [`Api`] the body is already in memory
/// and within it; the limit is checked again so that no handler depends on that.
pub(crate) async fn read_body<S: BodyLimit + Send + Sync>(
    request: Request,
    state: &S,
) -> Result<Bytes, ApiError> {
    let limit_bytes = state.body_limit_bytes();
    axum::body::to_bytes(request.into_body(), limit_bytes)
        .await
        .map_err(|error| unread_body(&error, limit_bytes))
}

/// Why a body could not be read: over the limit (413), or the connection failed it (400).
fn unread_body(error: &axum::Error, limit_bytes: usize) -> ApiError {
    let too_large = std::error::Error::source(error)
        .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
    if too_large {
        ApiError::PayloadTooLarge { limit_bytes }
    } else {
        ApiError::InvalidJson(format!("could not read the body: {error}"))
    }
}

/// What [`Api`] enforces: the body limit and how long the whole body may take to arrive.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyRules {
    pub(crate) limit_bytes: usize,
    pub(crate) timeout: std::time::Duration,
}

/// The whole HTTP API: the router, behind the reading of each request's whole body (up to the
/// limit) before anything can answer. A 401, a 404, or a 422 for a bad path id would otherwise
/// be sent while the client is still writing its body; hyper then closes the connection, and the
/// client sees a broken pipe instead of the answer, and loses its keep-alive connection.
/// Handlers read whole bodies anyway, so this only moves the read earlier. Over the limit: 413 at
/// once. Not in full within the body timeout (a client that announced 100 bytes and sent 10, or
/// trickles them): 408, and the connection is closed, so that a slow client cannot hold a
/// request open for ever.
///
/// A service around the router rather than a layer in it: a router's layer wraps every route
/// and costs each request a boxed clone of the service and a boxed future (about a tenth of a
/// request's instructions for this one and the body limit's).
#[derive(Clone)]
pub struct Api {
    router: Router,
    rules: BodyRules,
}

impl Api {
    pub(crate) fn new(router: Router, rules: BodyRules) -> Self {
        Api { router, rules }
    }
}

impl Service<Request> for Api {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The router is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let mut router = self.router.clone();
        let rules = self.rules;
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let read = axum::body::to_bytes(body, rules.limit_bytes);
            let answer = match tokio::time::timeout(rules.timeout, read).await {
                Ok(Ok(bytes)) => {
                    let request = Request::from_parts(parts, axum::body::Body::from(bytes));
                    return router.call(request).await;
                }
                Ok(Err(error)) => unread_body(&error, rules.limit_bytes),
                Err(_) => ApiError::RequestTimeout {
                    timeout_ms: u64::try_from(rules.timeout.as_millis()).unwrap_or(u64::MAX),
                },
            };
            Ok(answer.into_response())
        })
    }
}

/// A request body or query type, with the door it arrives at: the few field rules that differ
/// between doors (a lock's `ttl_ms`, the feed's `limit`) are worded by it.
pub(crate) trait Wire: DeserializeOwned {
    /// `lock`, `events`, or empty for the rules every door shares.
    const DOOR: &'static str = "";
}

/// Parses `bytes` as a JSON object of type `T`; an error names the field, what was sent and
/// what is allowed ([`wording::describe`]). Bytes that are not JSON ([`syntax::check`]) are 400;
/// JSON of the wrong shape or value is 422, a number too large for any field included.
pub(crate) fn parse<T: Wire>(bytes: &[u8]) -> Result<T, ApiError> {
    read::<T>(bytes).map_err(|(path, error)| refusal::<T>(bytes, &path, error))
}

/// serde_json's reading of `bytes` as a `T`, and on failure where it stopped (the field's path)
/// and why.
///
/// A good body, the common case, is read once without tracking the path: the tracking is most
/// of the decoding's cost. Only a body that fails is read again, tracked, for the path of its
/// refusal. Both readings are the same deserializer, so they accept the same bodies.
fn read<T: Wire>(bytes: &[u8]) -> Result<T, (String, serde_json::Error)> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    if let Ok(value) = Object::<T>::deserialize(&mut deserializer) {
        if deserializer.end().is_ok() {
            return Ok(value.0);
        }
    }
    read_tracked(bytes)
}

/// [`read`] with the path tracked.
fn read_tracked<T: Wire>(bytes: &[u8]) -> Result<T, (String, serde_json::Error)> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize::<_, Object<T>>(&mut deserializer)
        .map_err(|error| (error.path().to_string(), error.into_inner()))?;
    // Nothing but white space may follow the object.
    deserializer.end().map_err(|error| (String::new(), error))?;
    Ok(value.0)
}

/// serde_json stops at the first problem it meets, and refuses some JSON as a syntax error (a
/// number beyond a 64-bit float), so its verdict alone cannot say 400 or 422. On this, the error
/// path only, the whole body is checked by [`syntax::check`] first: not JSON anywhere is 400,
/// even after a shape error serde met earlier (`{"ttl": 1,}`), or in a string serde skipped.
/// JSON that serde refused is of the wrong shape or value: 422 in the contract's words.
fn refusal<T: Wire>(bytes: &[u8], path: &str, error: serde_json::Error) -> ApiError {
    let scan = match syntax::check(bytes) {
        Ok(scan) => scan,
        Err(not_json) => return ApiError::InvalidJson(not_json.to_string()),
    };
    if error.classify() == Category::Data {
        return ApiError::invalid(wording::describe(T::DOOR, path, &error.to_string()));
    }
    out_of_range::<T>(bytes, path, &error, &scan.huge_numbers)
}

/// The 422 for a number too large for a 64-bit float, which serde_json stopped at (`error`): the
/// number is put back as the largest float, which every field refuses as it would refuse the
/// number itself, and the request is read again, so that the refusal says what that field takes
/// (`qty: must be an integer from 1 to 1000000000, got 1e400`) as for any other wrong value.
fn out_of_range<T: Wire>(
    bytes: &[u8],
    path: &str,
    error: &serde_json::Error,
    huge_numbers: &[Range<usize>],
) -> ApiError {
    // serde_json reports the line and column (from 0, in bytes) where it stopped: at the end of
    // the number it could not read.
    let stopped = {
        let mut line_start = 0;
        for _ in 1..error.line() {
            match bytes[line_start..].iter().position(|&byte| byte == b'\n') {
                Some(newline) => line_start += newline + 1,
                None => break,
            }
        }
        line_start + error.column()
    };
    let Some(number) = huge_numbers
        .iter()
        .rev()
        .find(|number| number.start < stopped)
        .or(huge_numbers.first())
    else {
        // JSON that serde_json refused for its syntax always holds such a number.
        return ApiError::invalid(wording::describe(T::DOOR, path, &error.to_string()));
    };
    let literal = String::from_utf8_lossy(&bytes[number.clone()]);
    let largest = if literal.starts_with('-') {
        "-1.7976931348623157e308"
    } else {
        "1.7976931348623157e308"
    };
    let mut again = Vec::with_capacity(bytes.len() + largest.len());
    again.extend_from_slice(&bytes[..number.start]);
    again.extend_from_slice(largest.as_bytes());
    again.extend_from_slice(&bytes[number.end..]);
    match read::<T>(&again) {
        Err((path, error)) if error.classify() == Category::Data => {
            let message = error.to_string();
            // "invalid type: floating point `1.7976931348623157e308`, expected u64"
            let message = match message.split_once("floating point `") {
                Some((before, after)) => match after.split_once('`') {
                    Some((_, after)) => format!("{before}floating point `{literal}`{after}"),
                    None => message,
                },
                None => message,
            };
            ApiError::invalid(wording::describe(T::DOOR, &path, &message))
        }
        _ => {
            let text = format!("the number {literal} is out of range");
            ApiError::invalid(match path.trim_start_matches('.') {
                "" => text,
                path => format!("{path}: {text}"),
            })
        }
    }
}

/// A `T` that must be written as a JSON object. serde's derived structs also accept an array of
/// field values (`[10]` as `{"total": 10}`); the contract speaks of objects only, and reading
/// fields by position would defeat the unknown-field check, so arrays are refused (422).
#[derive(Debug)]
pub(crate) struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = T;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }

        deserializer
            .deserialize_map(ObjectVisitor(PhantomData))
            .map(Object)
    }
}

/// `deserialize_with` for a list of objects (hold items).
pub(crate) fn objects<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    let objects = Vec::<Object<T>>::deserialize(deserializer)?;
    Ok(objects.into_iter().map(|Object(value)| value).collect())
}

/// A JSON request body of type `T`.
pub(crate) struct JsonBody<T>(pub T);

impl<S: BodyLimit + Send + Sync, T: Wire> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = read_body(request, state).await?;
        parse(&bytes).map(JsonBody)
    }
}

/// The whole request body, not yet read: the batch reads its own (`dto::decode_batch`), in one
/// pass when its ops are good, and checks it whole ([`syntax::check`]) when it refuses an op,
/// since an op's bytes can hide what is not JSON from the body's own reading.
pub(crate) struct BodyBytes(pub Bytes);

impl<S: BodyLimit + Send + Sync> FromRequest<S> for BodyBytes {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        read_body(request, state).await.map(BodyBytes)
    }
}

/// A body that must be empty, `null` or `{}` (confirm, release): `null` is the same as
/// absent, for a body as for a field.
pub(crate) struct EmptyBody;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptyObject {}

impl Wire for EmptyObject {}

impl<S: BodyLimit + Send + Sync> FromRequest<S> for EmptyBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = read_body(request, state).await?;
        if bytes.trim_ascii().is_empty() || bytes.trim_ascii() == b"null" {
            return Ok(EmptyBody);
        }
        parse::<EmptyObject>(&bytes).map(|_| EmptyBody)
    }
}

/// A JSON request body of type `T` that may also be empty or `null`, both meaning `T`'s default
/// (refund's `{"restock"?: bool}`): `null` is the same as absent, for a body as for a field.
pub(crate) struct OptionalBody<T>(pub T);

impl<S: BodyLimit + Send + Sync, T: Wire + Default> FromRequest<S> for OptionalBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = read_body(request, state).await?;
        if bytes.trim_ascii().is_empty() || bytes.trim_ascii() == b"null" {
            return Ok(OptionalBody(T::default()));
        }
        parse(&bytes).map(OptionalBody)
    }
}

/// An identifier type that can come from a path segment.
pub(crate) trait PathSegment: Sized {
    /// What the segment names, for the error message.
    const WHAT: &'static str;
    fn parse_segment(text: &str) -> Result<Self, IdError>;
}

macro_rules! path_segment {
    ($type:ty, $what:literal) => {
        impl PathSegment for $type {
            const WHAT: &'static str = $what;
            fn parse_segment(text: &str) -> Result<Self, IdError> {
                <$type>::parse(text)
            }
        }
    };
}

path_segment!(PoolId, "pool");
path_segment!(HoldId, "hold_id");
path_segment!(LockName, "lock name");

/// The single identifier in the route's path (`{pool}`, `{hold_id}`, `{name}`), percent-decoded
/// and parsed; 422 `invalid_request` when it is not a valid identifier.
pub(crate) struct PathId<T>(pub T);

impl<S: Send + Sync, T: PathSegment> FromRequestParts<S> for PathId<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::invalid(format!("{}: {rejection}", T::WHAT)))?;
        let Some((_, text)) = params.iter().next() else {
            return Err(ApiError::invalid(format!("{} is missing", T::WHAT)));
        };
        T::parse_segment(text)
            .map(PathId)
            .map_err(|why| ApiError::invalid(format!("{}: {text:?}: {why}", T::WHAT)))
    }
}

/// Query parameters of type `T`; a bad value is 422, and so is an unknown parameter (the query
/// types refuse them): a typo such as `?ifabsent=true` must not turn a create-only PUT into a
/// replace.
pub(crate) struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: Wire> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        let deserializer =
            serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize::<_, T>(deserializer)
            .map(QueryParams)
            .map_err(|error| {
                let path = error.path().to_string();
                let message = wording::describe(T::DOOR, &path, &error.inner().to_string());
                // A query has parameters, not fields.
                let message = message
                    .replace("unknown field", "unknown query parameter")
                    .replace("the fields are", "the parameters are")
                    .replace("this object takes no fields", "this route takes none");
                // The parsers of values do not say what they read: the query does.
                let sent = form_urlencoded::parse(query.as_bytes())
                    .find(|(name, _)| *name == path)
                    .map(|(_, value)| value);
                match sent {
                    Some(sent) if message.starts_with(&format!("{path}: must be ")) => {
                        ApiError::invalid(format!("{message}, got {sent:?}"))
                    }
                    _ => ApiError::invalid(message),
                }
            })
    }
}

/// The query string of a route that takes no parameters: any parameter is 422, so that
/// `POST /v1/holds?wait_ms=3000` is refused instead of silently not waiting, and
/// `DELETE /v1/pools/p?dry_run=1` does not delete. An empty query (`/healthz?`) is no parameter.
pub(crate) struct NoQuery;

impl<S: Send + Sync> FromRequestParts<S> for NoQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let Some(query) = parts.uri.query().filter(|query| !query.is_empty()) else {
            return Ok(NoQuery);
        };
        let names: Vec<String> = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let name = pair.split('=').next().unwrap_or(pair);
                let shown: String = name.chars().take(64).collect();
                format!("{shown:?}")
            })
            .collect();
        if names.is_empty() {
            return Ok(NoQuery);
        }
        Err(ApiError::invalid(format!(
            "unknown query parameter {}: this route takes no query parameters",
            names.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Sample {
        n: u64,
        opt: Option<u64>,
    }

    impl Wire for Sample {}

    fn code(bytes: &str) -> &'static str {
        parse::<Sample>(bytes.as_bytes()).unwrap_err().code()
    }

    #[test]
    fn syntax_is_400_and_shape_is_422() {
        assert_eq!(code(""), "invalid_json");
        assert_eq!(code("{"), "invalid_json");
        assert_eq!(code("{\"n\": 1,}"), "invalid_json");
        assert_eq!(code("nope"), "invalid_json");
        assert_eq!(code("{\"n\": 1} x"), "invalid_json");
        assert_eq!(code("{\"n\": -1}"), "invalid_request");
        assert_eq!(code("{\"n\": 1.5}"), "invalid_request");
        assert_eq!(code("{\"n\": \"1\"}"), "invalid_request");
        assert_eq!(code("{\"n\": 1, \"x\": 1}"), "invalid_request");
        assert_eq!(code("{\"n\": 1, \"n\": 2}"), "invalid_request");
        assert_eq!(code("{}"), "invalid_request");
        assert_eq!(code("[]"), "invalid_request");
        assert_eq!(code("{\"n\": 99999999999999999999999}"), "invalid_request");
        assert_eq!(code("[1]"), "invalid_request");
        assert_eq!(code("[1, 2]"), "invalid_request");
        assert!(parse::<Sample>(b"{\"n\": 1, \"opt\": null}").is_ok());
    }

    /// The untracked first reading accepts what the tracked one accepts, with the same value;
    /// a refusal always comes from the tracked one.
    #[test]
    fn both_readings_agree() {
        let bodies: [&[u8]; 14] = [
            b"{\"n\": 1}",
            b" {\"opt\": 2, \"n\": 1} \n",
            b"{\"n\": 1, \"opt\": null}",
            b"{\"n\": 1} x",
            b"{\"n\": 1}{}",
            b"{\"n\": 1, \"n\": 2}",
            b"{\"n\": 1, \"x\": 1}",
            b"[1]",
            b"{\"n\": \"1\"}",
            b"{\"n\": 1e400}",
            b"{\"n\": 1,}",
            b"{}",
            b"",
            b"{\"n\": 18446744073709551615}",
        ];
        for body in bodies {
            let first = read::<Sample>(body);
            let tracked = read_tracked::<Sample>(body);
            match (&first, &tracked) {
                (Ok(a), Ok(b)) => assert_eq!(a, b),
                (Err((path_a, a)), Err((path_b, b))) => {
                    assert_eq!((path_a, a.to_string()), (path_b, b.to_string()));
                }
                _ => panic!(
                    "{:?}: {first:?} against {tracked:?}",
                    String::from_utf8_lossy(body)
                ),
            }
        }
    }

    fn message(bytes: &str) -> String {
        let error = parse::<Sample>(bytes.as_bytes()).unwrap_err();
        assert_eq!(error.code(), "invalid_request", "{bytes}");
        match error {
            ApiError::Core(stockd_core::Error::InvalidRequest { message }) => message,
            other => panic!("{bytes}: {other:?}"),
        }
    }

    /// A number too large for a 64-bit float is JSON (RFC 8259 puts no bound on numbers), so it
    /// is a wrong value for its field, worded as any other, and not a syntax error.
    #[test]
    fn a_number_beyond_a_float_is_a_wrong_value() {
        assert_eq!(
            message(r#"{"n": 1e400}"#),
            "n: must be a non-negative integer, got 1e400"
        );
        assert_eq!(
            message("{\n  \"opt\": -1e999,\n  \"n\": 1}"),
            "opt: must be a non-negative integer, got -1e999"
        );
        let long = format!(r#"{{"n": 1, "opt": {}}}"#, "9".repeat(400));
        assert_eq!(
            message(&long),
            format!(
                "opt: must be a non-negative integer, got {}",
                "9".repeat(400)
            )
        );
        assert_eq!(message("1e400"), "must be an object, got 1e400");
        assert_eq!(message("[1e400]"), "must be an object, got a list");
        // The first problem in reading order is the one named.
        assert_eq!(
            message(r#"{"n": 1, "x": 1e400}"#),
            "unknown field \"x\": the fields are n, opt"
        );
        assert_eq!(
            message(r#"{"n": 1e400, "opt": 1e401}"#),
            "n: must be a non-negative integer, got 1e400"
        );
        // Not JSON elsewhere in the body still makes it 400.
        assert_eq!(code(r#"{"n": 1e400, "x": "\ud800"}"#), "invalid_json");
        assert_eq!(code(r#"{"n": 1e400,}"#), "invalid_json");
        assert_eq!(code(r#"{"n": 1e400} 1"#), "invalid_json");
    }

    /// Found by the decode_request fuzz target: a byte that is not UTF-8 inside a string the
    /// shape check never reads (here after an unknown field) is still not JSON.
    #[test]
    fn bytes_that_are_not_utf8_are_400_wherever_they_are() {
        let code = |bytes: &[u8]| parse::<Sample>(bytes).unwrap_err().code();
        assert_eq!(code(b"{\"x\": \"\xe8\"}"), "invalid_json");
        assert_eq!(code(b"{\"n\": 1, \"x\": \"\xff\"}"), "invalid_json");
        assert_eq!(code(b"{\"n\": \"\xe8\"}"), "invalid_json");
        assert_eq!(code("{\"x\": \"\u{e8}\"}".as_bytes()), "invalid_request");
    }

    /// Found by the decode_request fuzz target: a lone surrogate is a 400 in a field serde reads
    /// (it cannot become a Rust string), so it is a 400 anywhere.
    #[test]
    fn a_lone_surrogate_is_400_wherever_it_is() {
        assert_eq!(code(r#"{"n": "\ud800"}"#), "invalid_json");
        assert_eq!(code(r#"{"x": "\ud800", "n": 1}"#), "invalid_json");
        assert_eq!(code(r#"{"n": 1, "x": "\udc00"}"#), "invalid_json");
        assert_eq!(code(r#"{"x": "\ud83d\ude00", "n": 1}"#), "invalid_request");
    }
}
