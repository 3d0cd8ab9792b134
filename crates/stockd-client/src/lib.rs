//! A typed async client of the stockd HTTP API (docs/api.md), one method per endpoint.
//!
//! This crate owns the HTTP mapping of the client side: paths, query strings, bearer tokens,
//! status codes and error bodies. It never decides a stock rule and never validates what the
//! server validates: identifiers go out as given and the server's answer, success or refusal,
//! comes back typed. Non-2xx answers become [`ClientError::Api`] with the contract's error code,
//! failures to reach the server become [`ClientError::Transport`]. Each endpoint's request is
//! declared once, as a [`Call`] constructor; [`Client::call`] sends one and returns the
//! [`Answer`] as received, for callers that must show the server's bytes unchanged.
//!
//! ```no_run
//! # async fn demo() -> stockd_client::Result<()> {
//! use stockd_client::{Client, HoldItem, PoolSpecBody, ReserveBody};
//!
//! let client = Client::new("http://127.0.0.1:7070", None);
//! client.put_pool("sku-1", &PoolSpecBody::with_total(100), false).await?;
//! let (hold, created) = client
//!     .reserve(&ReserveBody {
//!         hold_id: "order-1".into(),
//!         items: vec![HoldItem::new("sku-1", 2)],
//!         ..ReserveBody::default()
//!     })
//!     .await?;
//! assert!(created);
//! client.confirm(hold.hold_id.as_str()).await?;
//! # Ok(())
//! # }
//! ```

mod call;
mod error;
mod types;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

pub use call::{Answer, Call};
pub use error::{ClientError, Result};
pub use stockd_api::ErrorCode;
pub use types::{
    BatchAnswer, BatchBody, BatchResult, Event, EventKind, EventPage, EventPartitions, ExtendBody,
    HoldItem, HoldPage, HoldQuery, HoldStatus, HoldView, LockAcquireBody, LockLease,
    LockReleaseBody, LockReleased, LockRenewBody, PoolPage, PoolSpecBody, PoolView, RefundBody,
    ReserveBody, RestockBody, SegmentList, SegmentObject,
};

/// How long to wait for a TCP connection. Short, so that an unreachable server is reported
/// quickly instead of hanging a command-line call.
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;

/// Default bound on one request, connection included. Requests that may wait on the server
/// (`wait_ms` of reserve, events and lock acquire) get their `wait_ms` on top, so a long poll is
/// never cut short by the client.
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// The header by which a server without tokens says it did not check the one sent
/// (`Stockd-Auth: none`, docs/api.md).
const TOKEN_UNCHECKED_HEADER: &str = "stockd-auth";

/// The header by which a server says a restock was a retry that changed nothing
/// (`Stockd-Replayed: true`, docs/api.md).
const REPLAYED_HEADER: &str = "stockd-replayed";

/// How many bytes of a non-JSON error body are kept as the error's message.
const ERROR_TEXT_LEN_MAX: usize = 512;

/// A handle on one stockd server. Cloning is cheap and clones share one keep-alive connection
/// pool, so make one per server and clone it into tasks.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// The base URL without its trailing slashes, e.g. `http://127.0.0.1:7070`.
    base_url: Arc<str>,
    token: Option<Arc<str>>,
    request_timeout: Duration,
    /// Set once a server answered that it checks no tokens, to a request that sent one.
    token_unchecked: Arc<AtomicBool>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is a credential: never print it.
        f.debug_struct("Client")
            .field("base_url", &self.base_url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl Client {
    /// A client of the server at `base_url` (`http://host:port` or `https://host:port`,
    /// optionally with a path prefix), sending `token` as a bearer token when given.
    ///
    /// `https` goes through rustls and trusts the system's certificate authorities; the
    /// variables `SSL_CERT_FILE` (a PEM file) and `SSL_CERT_DIR` replace them, as they do for
    /// OpenSSL and curl, for a server whose certificate a private CA signed.
    ///
    /// A malformed `base_url` is not reported here but by every request, as
    /// [`ClientError::Transport`], so that constructing a client cannot fail.
    pub fn new(base_url: &str, token: Option<String>) -> Client {
        let builder = || {
            reqwest::Client::builder().connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
        };
        let http = builder()
            .build()
            // Building fails only when the trusted certificates cannot be read (SSL_CERT_FILE
            // names a file of none that parse): then a client without them, whose https
            // requests fail naming the unknown issuer, and whose plain http ones still work.
            .or_else(|_| builder().tls_built_in_native_certs(false).build())
            .unwrap_or_default();
        Client {
            http,
            base_url: Arc::from(base_url.trim_end_matches('/')),
            token: token.map(Arc::from),
            request_timeout: Duration::from_millis(REQUEST_TIMEOUT_MS_DEFAULT),
            token_unchecked: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Replaces the bound on one request (default [`REQUEST_TIMEOUT_MS_DEFAULT`]).
    pub fn with_request_timeout_ms(mut self, request_timeout_ms: u64) -> Client {
        self.request_timeout = Duration::from_millis(request_timeout_ms);
        self
    }

    /// Whether the server answered that it has no tokens and so did not check the one this
    /// client sends (`Stockd-Auth: none`): anyone who can reach it may do what the token
    /// would allow. Shared by the clones of this client.
    pub fn token_unchecked(&self) -> bool {
        self.token_unchecked.load(Ordering::Relaxed)
    }

    /// The base URL requests go to, without trailing slashes.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    // ----- pools -----

    /// `PUT /v1/pools/{pool}`: creates or replaces the pool. Returns the pool and whether this
    /// call created it (201). With `if_absent`, an existing pool is returned unchanged.
    pub async fn put_pool(
        &self,
        pool: &str,
        spec: &PoolSpecBody,
        if_absent: bool,
    ) -> Result<(PoolView, bool)> {
        let answer = self.call(&Call::put_pool(pool, spec, if_absent)).await?;
        Ok((answer.decode()?, answer.status == 201))
    }

    /// `POST /v1/pools/{pool}/restock`: moves total and available by `delta` (may be negative).
    /// Returns the pool and whether this call applied the delta; `false` means a restock with
    /// the same `request_id` (same pool and delta) was already applied by an earlier call (the
    /// server's `Stockd-Replayed: true`), nothing changed, and the pool is returned as it is
    /// now. The id with another pool or delta is `request_id_conflict`.
    pub async fn restock(
        &self,
        pool: &str,
        delta: i64,
        request_id: Option<&str>,
    ) -> Result<(PoolView, bool)> {
        let answer = self.call(&Call::restock(pool, delta, request_id)).await?;
        Ok((answer.decode()?, !answer.replayed))
    }

    /// `GET /v1/pools/{pool}`.
    pub async fn get_pool(&self, pool: &str) -> Result<PoolView> {
        self.call(&Call::get_pool(pool)).await?.decode()
    }

    /// `GET /v1/pools/{pool}/segments`: the pool's segments with their counts.
    pub async fn get_pool_segments(&self, pool: &str) -> Result<SegmentList> {
        self.call(&Call::get_pool_segments(pool)).await?.decode()
    }

    /// `GET /v1/pools`: one page of pools whose id starts with `prefix`, after the cursor
    /// `after`, at most `limit` (server default 100, max 1000).
    pub async fn list_pools(
        &self,
        prefix: Option<&str>,
        after: Option<&str>,
        limit: Option<usize>,
    ) -> Result<PoolPage> {
        self.call(&Call::list_pools(prefix, after, limit))
            .await?
            .decode()
    }

    /// `DELETE /v1/pools/{pool}` (204).
    pub async fn delete_pool(&self, pool: &str) -> Result<()> {
        self.call(&Call::delete_pool(pool)).await?;
        Ok(())
    }

    // ----- holds -----

    /// `GET /v1/holds`: one page of the retained holds matching `query`, in hold id order.
    pub async fn list_holds(&self, query: &HoldQuery) -> Result<HoldPage> {
        self.call(&Call::list_holds(query)).await?.decode()
    }

    /// `POST /v1/holds`: reserves all items or none. Returns the hold and whether this call
    /// created it (201); `false` means the same request was already made (a retry), and the
    /// hold is returned in its current state.
    pub async fn reserve(&self, body: &ReserveBody) -> Result<(HoldView, bool)> {
        let answer = self.call(&Call::reserve(body)).await?;
        Ok((answer.decode()?, answer.status == 201))
    }

    /// `POST /v1/holds/{hold_id}/confirm`: held -> confirmed.
    pub async fn confirm(&self, hold_id: &str) -> Result<HoldView> {
        self.call(&Call::confirm(hold_id)).await?.decode()
    }

    /// `POST /v1/holds/{hold_id}/release`: held -> released.
    pub async fn release(&self, hold_id: &str) -> Result<HoldView> {
        self.call(&Call::release(hold_id)).await?.decode()
    }

    /// `POST /v1/holds/{hold_id}/refund`: confirmed -> refunded; the sold units go back to
    /// available with `restock`, or leave the pool without.
    pub async fn refund(&self, hold_id: &str, restock: bool) -> Result<HoldView> {
        self.call(&Call::refund(hold_id, restock)).await?.decode()
    }

    /// `POST /v1/holds/{hold_id}/extend`: a held hold now expires `ttl_ms` from now.
    pub async fn extend(&self, hold_id: &str, ttl_ms: u64) -> Result<HoldView> {
        self.call(&Call::extend(hold_id, ttl_ms)).await?.decode()
    }

    /// `GET /v1/holds/{hold_id}`.
    pub async fn get_hold(&self, hold_id: &str) -> Result<HoldView> {
        self.call(&Call::get_hold(hold_id)).await?.decode()
    }

    // ----- batch and events -----

    /// `POST /v1/batch`: applies `ops` in order, each independently. The batch itself succeeds
    /// (200) even when ops fail: each op's status and body are in its [`BatchResult`].
    pub async fn batch(&self, ops: Vec<Value>) -> Result<Vec<BatchResult>> {
        let batch: BatchAnswer = self.call(&Call::batch(ops)).await?.decode()?;
        Ok(batch.results)
    }

    /// `GET /v1/events/partitions`: how many partitions the event feed has (P >= 1). A consumer
    /// reads each of `0..P` with [`Client::events`].
    pub async fn partitions(&self) -> Result<u32> {
        let count: EventPartitions = self.call(&Call::partitions()).await?.decode()?;
        Ok(count.partitions)
    }

    /// `GET /v1/events`: events of `partition` with seq > `after`, at most `limit`; with
    /// `wait_ms`, long-polls until at least one arrives or the wait ends. `partition` may be left
    /// out only when the feed has one partition (else `partition_required`). A consumer whose
    /// `after` is older than the kept window gets an `Api` error of status 410, code
    /// [`ErrorCode::EventsExpired`], with the `oldest_seq` detail: repair, then resume from
    /// `oldest_seq - 1`.
    pub async fn events(
        &self,
        partition: Option<u32>,
        after: u64,
        limit: Option<usize>,
        wait_ms: Option<u64>,
    ) -> Result<EventPage> {
        self.call(&Call::events(partition, after, limit, wait_ms))
            .await?
            .decode()
    }

    // ----- locks -----

    /// `POST /v1/locks/{name}/acquire`: a lease for `ttl_ms`, waiting up to `wait_ms` for a
    /// held lock to become free. A held lock is an `Api` error of code [`ErrorCode::LockHeld`].
    pub async fn lock_acquire(
        &self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        wait_ms: Option<u64>,
    ) -> Result<LockLease> {
        self.call(&Call::lock_acquire(name, owner, ttl_ms, wait_ms))
            .await?
            .decode()
    }

    /// `POST /v1/locks/{name}/renew`: extends the lease held with `token` by `ttl_ms` from now.
    pub async fn lock_renew(
        &self,
        name: &str,
        owner: &str,
        token: u64,
        ttl_ms: u64,
    ) -> Result<LockLease> {
        self.call(&Call::lock_renew(name, owner, token, ttl_ms))
            .await?
            .decode()
    }

    /// `POST /v1/locks/{name}/release`: frees the lease held with `token`.
    pub async fn lock_release(&self, name: &str, owner: &str, token: u64) -> Result<()> {
        let _: LockReleased = self
            .call(&Call::lock_release(name, owner, token))
            .await?
            .decode()?;
        Ok(())
    }

    // ----- operations -----

    /// `GET /healthz`: Ok when the process is up.
    pub async fn healthz(&self) -> Result<()> {
        self.call(&Call::healthz()).await?;
        Ok(())
    }

    /// `GET /readyz`: Ok when the backend is reachable; `Api { status: 503, .. }` otherwise.
    pub async fn readyz(&self) -> Result<()> {
        self.call(&Call::readyz()).await?;
        Ok(())
    }

    /// `GET /metrics`: the Prometheus text exposition.
    pub async fn metrics(&self) -> Result<String> {
        let answer = self.call(&Call::metrics()).await?;
        Ok(String::from_utf8_lossy(&answer.body).into_owned())
    }

    // ----- plumbing -----

    /// Sends `call` and returns its 2xx answer as received; any other status becomes
    /// [`ClientError::Api`], with the body as received in `raw_body`.
    pub async fn call(&self, call: &Call) -> Result<Answer> {
        let mut request = self
            .http
            .request(call.method.clone(), self.url(&call.segments))
            .timeout(self.request_timeout + Duration::from_millis(call.wait_ms));
        if !call.query.is_empty() {
            request = request.query(&call.query);
        }
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = &call.body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        if self.token.is_some()
            && response
                .headers()
                .get(TOKEN_UNCHECKED_HEADER)
                .is_some_and(|value| value == "none")
        {
            self.token_unchecked.store(true, Ordering::Relaxed);
        }
        let replayed = response
            .headers()
            .get(REPLAYED_HEADER)
            .is_some_and(|value| value == "true");
        let body: Vec<u8> = response.bytes().await?.into();
        let answer = Answer {
            status,
            body,
            replayed,
        };
        if (200..300).contains(&status) {
            Ok(answer)
        } else {
            Err(api_error(answer))
        }
    }

    /// The URL of `segments` under the base URL, each segment percent-encoded so that an
    /// identifier can never change the route (`a/b` stays one segment).
    fn url(&self, segments: &[String]) -> String {
        let mut url = String::with_capacity(self.base_url.len() + 64);
        url.push_str(&self.base_url);
        for segment in segments {
            url.push('/');
            push_encoded_segment(&mut url, segment);
        }
        url
    }
}

/// Turns a non-2xx answer into [`ClientError::Api`], keeping the contract's error body whole,
/// and the bytes as received.
fn api_error(answer: Answer) -> ClientError {
    let status = answer.status;
    let parsed: Option<Value> = serde_json::from_slice(&answer.body).ok();
    let code = parsed
        .as_ref()
        .and_then(|body| body.get("error"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    match (code, parsed) {
        (Some(code), Some(body)) => {
            let message = body
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            ClientError::Api {
                status,
                code,
                message,
                body,
                raw_body: answer.body,
            }
        }
        // Not a contract error body: an intermediary answered, or the server broke the
        // contract. Keep what there is so the caller can see it.
        (_, parsed) => ClientError::Api {
            status,
            code: format!("http_{status}"),
            message: error_text(&answer.body),
            body: parsed.unwrap_or(Value::Null),
            raw_body: answer.body,
        },
    }
}

/// The start of a body as text, cut at a character boundary.
fn error_text(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.len() <= ERROR_TEXT_LEN_MAX {
        return text.to_owned();
    }
    let mut end = ERROR_TEXT_LEN_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// Appends `segment` percent-encoded: every byte but unreserved ones (RFC 3986) and `:` (legal in
/// a path segment, and part of the identifier grammar) becomes `%XX`.
fn push_encoded_segment(url: &mut String, segment: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &byte in segment.as_bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~' | b':') {
            url.push(char::from(byte));
        } else {
            url.push('%');
            url.push(char::from(HEX[usize::from(byte >> 4)]));
            url.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
    }
}

#[cfg(test)]
mod tests;
