//! The `decode_request` target: arbitrary bytes as a sequence of HTTP requests, each sent to the
//! in-process router (`stockd_server::router`) over a [`FuzzBackend`], through the same routing,
//! auth, extractors, handlers and error mapping a socket would reach.
//!
//! Input format (text, so that seeds are readable and mutations of JSON stay close to JSON):
//! requests are separated by a line `===`; each is a request line `METHOD /path?query`, header
//! lines `Name: value` up to an empty line, then the body. A chunk `TICK <ms>` moves the clock
//! instead. Bytes that cannot form a request on the wire (a bad method or URI, a non-origin
//! target) skip that chunk; `Content-Length` and `Transfer-Encoding` are left to the harness.
//!
//! Oracles, for every request: no panic; no 5xx; every error (4xx) body is
//! `{"error": string, "message": string, ...}` and every JSON body parses; a refused request
//! (4xx, or a batch whose every op is refused) and a successful read change nothing; and the
//! server does exactly what [`naive::expect`] predicts: the same refusal status without calling
//! the backend, or exactly the same commands (or feed read) sent to the backend.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{header, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::BodyExt;
use serde_json::Value;
use stockd_server::Api;
use stockd_server::{Role, ServerConfig};
use tower::ServiceExt;

use crate::backend::{Call, FuzzBackend};
use crate::naive::{self, Expect, ADMIN_TOKEN, BODY_LIMIT_BYTES, CLIENT_TOKEN};

/// Requests served per input at most, so that one input stays fast.
const REQUESTS_MAX: usize = 32;
/// The longest a `TICK` may move the clock: past every retention and ttl of the contract.
const TICK_MS_MAX: u64 = 40 * 86_400_000;

struct Harness {
    runtime: tokio::runtime::Runtime,
    backend: Arc<FuzzBackend>,
    router: Api,
}

/// Built once per process: the router serialises its OpenAPI document when built, which would
/// dominate every execution. Each input starts from `FuzzBackend::reset`.
fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime");
        let backend = Arc::new(FuzzBackend::default());
        let config = ServerConfig {
            tokens: vec![
                (ADMIN_TOKEN.to_string(), Role::Admin),
                (CLIENT_TOKEN.to_string(), Role::Client),
            ],
            body_limit_bytes: BODY_LIMIT_BYTES,
            ..ServerConfig::default()
        };
        let router = stockd_server::router(backend.clone(), config);
        Harness {
            runtime,
            backend,
            router,
        }
    })
}

/// Runs one fuzz input.
pub fn run(data: &[u8]) {
    let harness = harness();
    harness.backend.reset();
    for chunk in split(data, b"\n===\n").take(REQUESTS_MAX) {
        if let Some(ms) = tick(chunk) {
            harness.backend.advance_and_settle(ms);
            continue;
        }
        if let Some(parsed) = parse(chunk) {
            serve(harness, &parsed);
        }
    }
}

fn split<'a>(data: &'a [u8], separator: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut rest = Some(data);
    std::iter::from_fn(move || {
        let current = rest?;
        match find(current, separator) {
            Some(at) => {
                rest = Some(&current[at + separator.len()..]);
                Some(&current[..at])
            }
            None => {
                rest = None;
                Some(current)
            }
        }
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn tick(chunk: &[u8]) -> Option<u64> {
    let digits = chunk.strip_prefix(b"TICK ")?.trim_ascii();
    let text = std::str::from_utf8(digits).ok()?;
    text.parse::<u64>().ok().map(|ms| ms.min(TICK_MS_MAX))
}

/// One request of the input.
struct Parsed<'a> {
    method: Method,
    uri: Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: &'a [u8],
}

fn parse(chunk: &[u8]) -> Option<Parsed<'_>> {
    let (head, body) = match find(chunk, b"\n\n") {
        Some(at) => (&chunk[..at], &chunk[at + 2..]),
        None => (chunk, &b""[..]),
    };
    let mut lines = head
        .split(|&byte| byte == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    let request_line = lines.next()?;
    let space = request_line.iter().position(|&byte| byte == b' ')?;
    let method = Method::from_bytes(&request_line[..space]).ok()?;
    let target = &request_line[space + 1..];
    if !target.starts_with(b"/") {
        return None;
    }
    let uri = Uri::try_from(target).ok()?;
    let mut headers = Vec::new();
    for line in lines {
        let Some(colon) = line.iter().position(|&byte| byte == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        // Framing is the connection's business: in process, the body is what it is.
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING {
            continue;
        }
        headers.push((name, value));
    }
    Some(Parsed {
        method,
        uri,
        headers,
        body,
    })
}

fn serve(harness: &Harness, parsed: &Parsed) {
    let backend = &harness.backend;
    let method = parsed.method.as_str();
    let naive_request = naive::Request {
        method,
        path: parsed.uri.path(),
        query: parsed.uri.query(),
        authorization: parsed
            .headers
            .iter()
            .filter(|(name, _)| name == header::AUTHORIZATION)
            .map(|(_, value)| value.as_bytes())
            .collect(),
        if_none_match: parsed
            .headers
            .iter()
            .any(|(name, _)| name == header::IF_NONE_MATCH),
        body: parsed.body,
    };
    let expected = naive::expect(&naive_request);

    let mut builder = Request::builder()
        .method(parsed.method.clone())
        .uri(parsed.uri.clone());
    for (name, value) in &parsed.headers {
        builder = builder.header(name, value);
    }
    let request = builder
        .body(Body::from(parsed.body.to_vec()))
        .expect("parts that parsed make a request");

    let before = backend.observe();
    backend.take_calls();
    let (status, content_type, body) = harness.runtime.block_on(async {
        let response = harness
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let status = response.status();
        let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("an in-memory body")
            .to_bytes();
        (status, content_type, body)
    });
    let calls = backend.take_calls();
    let after = backend.observe();
    if trace() {
        eprintln!(
            "{method} {} -> {status} {}\n    naive: {expected:?}\n    calls: {calls:?}",
            parsed.uri,
            String::from_utf8_lossy(&body[..body.len().min(200)])
        );
    }

    let what = || {
        format!(
            "{method} {} -> {status} {}",
            parsed.uri,
            String::from_utf8_lossy(&body)
        )
    };
    assert!(!status.is_server_error(), "a server error: {}", what());
    let head = parsed.method == Method::HEAD;
    let is_json = content_type
        .as_ref()
        .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
    let json: Option<Value> = if is_json && !head {
        Some(serde_json::from_slice(&body).unwrap_or_else(|e| panic!("bad JSON ({e}): {}", what())))
    } else {
        None
    };
    if status.is_client_error() && !head {
        let json = json
            .as_ref()
            .unwrap_or_else(|| panic!("an error without a JSON body: {}", what()));
        check_error_body(json, &what);
    }
    if status.is_client_error() {
        assert_eq!(before, after, "a refused request changed state: {}", what());
    }
    if status.is_success() && matches!(parsed.method, Method::GET | Method::HEAD) {
        assert_eq!(before, after, "a read changed state: {}", what());
    }
    if let (Some(json), Expect::Execute { batch: true, .. }) = (&json, &expected) {
        check_batch(json, before == after, &what);
    }
    check_expectation(&expected, status, &calls, &what);
}

/// `STOCKD_FUZZ_TRACE=1` prints each request, its answer, the naive decoder's expectation and
/// the backend calls: how to read a reproducer.
fn trace() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("STOCKD_FUZZ_TRACE").is_some_and(|value| value == "1"))
}

fn check_error_body(json: &Value, what: &dyn Fn() -> String) {
    let is_text = |key: &str| json.get(key).and_then(Value::as_str).is_some();
    assert!(
        json.is_object() && is_text("error") && is_text("message"),
        "an error body without {{\"error\", \"message\"}}: {}",
        what()
    );
}

/// Each result of a batch is a status and a body of the single endpoint; when every op was
/// refused, nothing may have changed.
fn check_batch(json: &Value, unchanged: bool, what: &dyn Fn() -> String) {
    let results = json
        .get("results")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("a batch answer without results: {}", what()));
    let mut all_refused = true;
    for result in results {
        let status = result
            .get("status")
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("a batch result without a status: {}", what()));
        assert!(status < 500, "a server error in a batch: {}", what());
        if status >= 400 {
            let body = result
                .get("body")
                .unwrap_or_else(|| panic!("a batch result without a body: {}", what()));
            check_error_body(body, what);
        } else {
            all_refused = false;
        }
    }
    if all_refused {
        assert!(
            unchanged,
            "a batch of refused ops changed state: {}",
            what()
        );
    }
}

fn check_expectation(
    expected: &Expect,
    status: StatusCode,
    calls: &[Call],
    what: &dyn Fn() -> String,
) {
    let status = status.as_u16();
    match expected {
        Expect::Unsure => {}
        Expect::Refused(want) | Expect::Served(want) => {
            assert_eq!(
                status,
                *want,
                "status differs from the naive decoder's: {}",
                what()
            );
            assert!(
                calls.is_empty(),
                "expected no backend call, got {calls:?}: {}",
                what()
            );
        }
        Expect::File => {
            assert!(
                matches!(status, 200 | 404),
                "a console file answered {status}: {}",
                what()
            );
            assert!(
                calls.is_empty(),
                "expected no backend call, got {calls:?}: {}",
                what()
            );
        }
        Expect::Execute { commands, batch } => {
            if *batch {
                assert_eq!(status, 200, "a batch not answered 200: {}", what());
            }
            let want: Vec<Call> = if commands.is_empty() {
                Vec::new()
            } else {
                vec![Call::Execute(commands.clone())]
            };
            assert_eq!(
                calls,
                want.as_slice(),
                "the backend got other commands than the naive decoder's: {}",
                what()
            );
        }
        Expect::Events {
            after,
            limit,
            wait_ms,
        } => {
            let want = Call::Events {
                partition: 0,
                after: *after,
                limit: *limit,
                wait_ms: *wait_ms,
            };
            assert_eq!(
                calls,
                std::slice::from_ref(&want),
                "the feed was read otherwise than the naive decoder's: {}",
                what()
            );
        }
    }
}
