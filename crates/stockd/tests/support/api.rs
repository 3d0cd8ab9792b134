//! The JSON-over-HTTP handle on one `stockd` ([`Api`]): requests with or without a token, raw
//! bodies and headers, and the event feed read partition by partition with its paging checked.
//!
//! It owns the client side of the contract only: it knows paths, methods and the error shape,
//! never how the process was started ([`super::server`]) nor what an answer should contain (the
//! suites and [`super::matching`] decide that).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;

use super::feed::FeedEvent;

/// Per-request timeout; above the largest `wait_ms` (30 s) any test uses, so a long-poll is never
/// cut short by the client.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(45);

/// JSON-over-HTTP handle on one server. Cloning is cheap (the connection pool is shared).
#[derive(Clone)]
pub struct Api {
    client: reqwest::Client,
    base_url: String,
    default_token: Option<String>,
    /// The server's event-feed partition count, learned on first use (see [`Api::partitions`]),
    /// shared by clones and kept across restarts of the same [`Server`].
    pub(super) partitions: Arc<OnceLock<u32>>,
}

/// A response: status code and body (JSON when it parses, the text as a JSON string otherwise,
/// `null` when empty).
pub type Reply = (u16, Value);

impl Api {
    pub fn new(port: u16, default_token: Option<String>) -> Api {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .expect("build reqwest client");
        Api {
            client,
            base_url: format!("http://127.0.0.1:{port}"),
            default_token,
            partitions: Arc::new(OnceLock::new()),
        }
    }

    /// The same server, through a client that opens a new connection for every request. Garbage
    /// can leave a connection in a state the server closes; with a fresh connection each time a
    /// transport error belongs to the request that got it, not to whatever came before it.
    pub fn without_connection_reuse(&self) -> Api {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .pool_max_idle_per_host(0)
            .build()
            .expect("build reqwest client");
        Api {
            client,
            base_url: self.base_url.clone(),
            default_token: self.default_token.clone(),
            partitions: self.partitions.clone(),
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub fn default_token(&self) -> Option<&str> {
        self.default_token.as_deref()
    }

    /// The `Authorization` header the plain calls send (`Bearer` and the default token).
    pub fn default_authorization(&self) -> Option<String> {
        self.default_token().map(|token| format!("Bearer {token}"))
    }

    /// Send JSON (or no body) with the default token; panics on a transport error.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Reply {
        self.call_as(self.default_token(), method, path, body).await
    }

    /// Like [`Api::call`] with an explicit bearer token (`None`: no Authorization header).
    pub async fn call_as(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Reply {
        match self.try_call_as(token, method, path, body).await {
            Ok(reply) => reply,
            Err(error) => panic!("{method} {path}: {error}"),
        }
    }

    /// Like [`Api::call`], returning transport errors instead of panicking.
    pub async fn try_call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Reply, String> {
        self.try_call_as(self.default_token(), method, path, body)
            .await
    }

    pub async fn try_call_as(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Reply, String> {
        let bytes = body.map(|value| serde_json::to_vec(&value).expect("serialise body"));
        self.send(token, method, path, bytes, Some("application/json"))
            .await
    }

    /// The general form: any token, any body bytes, any content type (`None`: no header).
    pub async fn send(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: Option<&str>,
    ) -> Result<Reply, String> {
        let authorization = token.map(|token| format!("Bearer {token}"));
        let (status, _, body) = self
            .send_with_headers(authorization.as_deref(), method, path, body, content_type)
            .await?;
        Ok((status, body))
    }

    /// Like [`Api::send`] with a raw `Authorization` header value (for malformed schemes), with
    /// the answer's headers.
    pub async fn send_with_headers(
        &self,
        authorization: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: Option<&str>,
    ) -> Result<(u16, reqwest::header::HeaderMap, Value), String> {
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|error| format!("bad method {method:?}: {error}"))?;
        let mut request = self
            .client
            .request(method, format!("{}{}", self.base_url, path));
        if let Some(authorization) = authorization {
            request = request.header("authorization", authorization);
        }
        if let Some(bytes) = body {
            if let Some(content_type) = content_type {
                request = request.header("content-type", content_type);
            }
            request = request.body(bytes);
        }
        let response = request
            .send()
            .await
            .map_err(|error| format!("transport error: {error:?}"))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response
            .bytes()
            .await
            .map_err(|error| format!("reading body: {error:?}"))?;
        Ok((status, headers, parse_body(&bytes)))
    }

    /// GET a pool and return its object, panicking unless the answer is 200.
    pub async fn pool(&self, pool: &str) -> Value {
        let (status, body) = self.call("GET", &format!("/v1/pools/{pool}"), None).await;
        assert_eq!(status, 200, "GET pool {pool}: {body}");
        body
    }

    /// The server's event-feed partition count P (`GET /v1/events/partitions`), asked once per
    /// server and cached. Panics unless the answer is 200 `{"partitions": P}` with P >= 1.
    pub async fn partitions(&self) -> u32 {
        if let Some(partitions) = self.partitions.get() {
            return *partitions;
        }
        let (status, body) = self.call("GET", "/v1/events/partitions", None).await;
        assert_eq!(status, 200, "GET /v1/events/partitions: {body}");
        let partitions = body["partitions"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p >= 1)
            .unwrap_or_else(|| panic!("GET /v1/events/partitions: no integer P >= 1: {body}"));
        *self.partitions.get_or_init(|| partitions)
    }

    /// The path reading partition `partition` of the feed with the query `query` (`after=...`,
    /// `limit=...`, ...). With one partition the `partition` parameter is left out, as a consumer
    /// of a one-partition feed may (it defaults to 0); with P > 1 it is always named.
    pub async fn events_path(&self, partition: u32, query: &str) -> String {
        let partitions = self.partitions().await;
        assert!(
            partition < partitions,
            "partition {partition} of a feed with {partitions}"
        );
        match (partitions, query) {
            (1, "") => "/v1/events".to_string(),
            (1, _) => format!("/v1/events?{query}"),
            (_, "") => format!("/v1/events?partition={partition}"),
            _ => format!("/v1/events?partition={partition}&{query}"),
        }
    }

    /// Every event of one partition after `after`, paging with the largest page. Checks on every
    /// page that `next_after` is the last seq returned, or the given `after` when none is.
    pub async fn events_in(&self, partition: u32, after: u64) -> Vec<Value> {
        let mut events = Vec::new();
        let mut cursor = after;
        loop {
            let path = self
                .events_path(partition, &format!("after={cursor}&limit=1000"))
                .await;
            let (status, body) = self.call("GET", &path, None).await;
            assert_eq!(status, 200, "GET {path}: {body}");
            let page = body["events"]
                .as_array()
                .cloned()
                .unwrap_or_else(|| panic!("no events array: {body}"));
            let next = body["next_after"]
                .as_u64()
                .unwrap_or_else(|| panic!("no next_after: {body}"));
            let Some(last) = page.last() else {
                assert_eq!(
                    next, cursor,
                    "GET {path}: next_after of an empty page must be the given after"
                );
                return events;
            };
            assert_eq!(
                Some(next),
                last["seq"].as_u64(),
                "GET {path}: next_after must be the seq of the last event returned: {}",
                short(&body)
            );
            cursor = next;
            events.extend(page);
        }
    }

    /// Every event of every partition K after `cursors[K]` (one cursor per partition: seqs are
    /// per partition), each with the partition it came from; partition 0's first, each partition's
    /// in feed order. Order between partitions means nothing.
    pub async fn events_since(&self, cursors: &[u64]) -> Vec<FeedEvent> {
        let partitions = self.partitions().await;
        assert_eq!(
            cursors.len(),
            partitions as usize,
            "one cursor per partition of the feed"
        );
        let mut events = Vec::new();
        for (partition, after) in (0..partitions).zip(cursors) {
            events.extend(
                self.events_in(partition, *after)
                    .await
                    .into_iter()
                    .map(|event| FeedEvent { partition, event }),
            );
        }
        events
    }

    /// Every event of every partition, each with its partition.
    pub async fn all_events(&self) -> Vec<FeedEvent> {
        let partitions = self.partitions().await;
        self.events_since(&vec![0; partitions as usize]).await
    }

    /// Every event after `after`, without the partition it came from: with one partition, the
    /// feed after `after`; with P > 1 only `after = 0` means something (every event of every
    /// partition, partition by partition), since seqs are per partition. New code should use
    /// [`Api::events_since`] / [`Api::all_events`], which keep the partition.
    pub async fn events_after(&self, after: u64) -> Vec<Value> {
        let partitions = self.partitions().await;
        assert!(
            partitions == 1 || after == 0,
            "events_after({after}) on a feed with {partitions} partitions: seqs are per \
             partition, so one cursor cannot say where every partition stands; use events_since"
        );
        self.events_since(&vec![after; partitions as usize])
            .await
            .into_iter()
            .map(|read| read.event)
            .collect()
    }
}

pub fn parse_body(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// Checks the contract's error shape: `{"error": CODE, "message": TEXT, ...}`.
pub fn error_shape_problem(status: u16, body: &Value) -> Option<String> {
    if status < 400 {
        return None;
    }
    let ok = body.get("error").is_some_and(Value::is_string)
        && body.get("message").is_some_and(Value::is_string);
    (!ok).then(|| {
        format!(
            "error body of a {status} must have string \"error\" and \"message\": {}",
            short(body)
        )
    })
}

/// A compact rendering of a JSON value for messages, cut at 600 characters.
pub fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.len() <= 600 {
        return text;
    }
    let cut = (0..=600)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}...({} bytes)", &text[..cut], text.len())
}

/// Percent-encodes everything but unreserved characters, for ids and cursors in paths and queries.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
