//! One HTTP/1.1 keep-alive connection to a stockd server, as a load generator needs it: one
//! request at a time, the whole answer read, and a new connection when the old one fails.
//!
//! Written on the bare socket, with `httparse` (the parser hyper itself uses) reading each
//! answer's head. The generator shares the machine with the server it measures, and hyper's
//! client connection cost about 14,000 instructions per request, as much as the server's own
//! HTTP stack (`docs/benchmarks.md`, "What was tried"): CPU taken from the server. A load
//! generator needs only a sliver of HTTP/1.1, the way wrk and redis-benchmark do it: requests it
//! writes itself, one at a time, and answers framed by `Content-Length`, which is how stockd
//! frames every answer. Anything else (a chunked or close-delimited body, an interim answer,
//! bytes nobody asked for) is an error that drops the connection.
//!
//! An `https://` URL (a TLS proxy in front of stockd, docs/security.md) gets the same exchange
//! inside rustls (ring), trusting the system's certificate authorities, or those of
//! `SSL_CERT_FILE` / `SSL_CERT_DIR` when set, as reqwest does for the rest of stockd.

use std::borrow::Cow;
use std::io::ErrorKind;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use http::Method;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::rustls;
use tokio_rustls::TlsConnector;

/// Where the server is: `host:port`, TLS for an `https` URL, and the bearer token to send.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `host:port`, from an `http://` or `https://` URL.
    pub authority: String,
    /// Sent as `Authorization: Bearer ...` on every request when set.
    pub token: Option<String>,
    /// For `https`: how to open TLS and the name the server's certificate must carry.
    tls: Option<Tls>,
}

/// TLS to one server: the connector (shared set-up and trusted roots) and the server's name.
#[derive(Clone)]
struct Tls {
    connector: TlsConnector,
    server_name: rustls::pki_types::ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// `http://host:port` or `https://host:port`: the server's URL, for a client of its own.
    pub fn base_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.authority)
    }

    /// Parses `http://host:port` or `https://host[:port]` (a trailing `/` is fine; no path).
    pub fn parse(url: &str, token: Option<String>) -> Result<Endpoint, String> {
        const SHAPE: &str = "expected http://HOST:PORT or https://HOST[:PORT]";
        let (rest, default_port, tls) = if let Some(rest) = url.strip_prefix("http://") {
            (rest, 80, false)
        } else if let Some(rest) = url.strip_prefix("https://") {
            (rest, 443, true)
        } else {
            return Err(format!("--url {url:?}: {SHAPE}"));
        };
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') {
            return Err(format!("--url {url:?}: {SHAPE} with no path"));
        }
        // A port follows the last ':' unless that ':' is inside an IPv6 address's brackets.
        let has_port = authority
            .rsplit_once(':')
            .is_some_and(|(_, port)| !port.contains(']'));
        let authority = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:{default_port}")
        };
        let tls = match tls {
            true => Some(Tls::to(&authority).map_err(|why| format!("--url {url:?}: {why}"))?),
            false => None,
        };
        Ok(Endpoint {
            authority,
            token: token.filter(|token| !token.is_empty()),
            tls,
        })
    }
}

impl Tls {
    /// TLS to the server of `authority` (`host:port`), trusting the system's roots.
    fn to(authority: &str) -> Result<Tls, String> {
        let host = authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let server_name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|error| format!("{host:?} is not a server name: {error}"))?;
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
            return Err(format!(
                "no trusted certificate authority could be read (the system's, or \
                 SSL_CERT_FILE / SSL_CERT_DIR when set){}",
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(": {}", errors.join("; "))
                }
            ));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| format!("TLS set-up: {error}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
        })
    }
}

/// A connection's byte stream: plain TCP, or TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}

/// One request of a workload.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: Method,
    pub path: String,
    pub body: Bytes,
}

impl Request {
    pub fn get(path: impl Into<String>) -> Request {
        Request {
            method: Method::GET,
            path: path.into(),
            body: Bytes::new(),
        }
    }

    /// A request whose body is `body` as JSON.
    pub fn json(method: Method, path: impl Into<String>, body: &serde_json::Value) -> Request {
        Request {
            method,
            path: path.into(),
            body: Bytes::from(body.to_string()),
        }
    }
}

/// A whole answer.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The `error` code of an error body, if it has one.
    pub fn error_code(&self) -> Option<Cow<'_, str>> {
        /// Only the code: a refusal's other fields are skipped, not built into a tree.
        #[derive(serde::Deserialize)]
        struct ErrorBody<'a> {
            #[serde(borrow)]
            error: Cow<'a, str>,
        }
        if self.status < 400 {
            return None;
        }
        serde_json::from_slice::<ErrorBody>(&self.body)
            .ok()
            .map(|body| body.error)
    }
}

/// The most an answer's head may take: far more than stockd's (about 150 bytes).
const HEAD_BYTES_MAX: usize = 64 << 10;
/// The most header lines an answer's head may have.
const HEADERS_MAX: usize = 32;
/// The largest answer body taken: a page of holds or a batch's results is far smaller.
const BODY_BYTES_MAX: usize = 256 << 20;
/// What each read asks the socket for, at least.
const READ_CHUNK: usize = 16 << 10;

/// A keep-alive connection that reconnects on the next request after a failure.
pub struct Connection {
    endpoint: Endpoint,
    /// The header lines every request carries (`host`, and `authorization` with a token).
    fixed_headers: Vec<u8>,
    /// The request being sent, encoded; kept with its capacity.
    out: Vec<u8>,
    open: Option<Open>,
    /// When the last request's final byte went into the socket; `None` until one has, and
    /// from the start of each `send` until its request is written.
    written_at: Option<Instant>,
}

struct Open {
    stream: Stream,
    /// Bytes read and not yet part of an answer: only ever the start of the next answer.
    input: BytesMut,
}

impl Connection {
    pub fn new(endpoint: &Endpoint) -> Result<Connection, String> {
        let mut fixed_headers = Vec::new();
        header_line(&mut fixed_headers, "host", &endpoint.authority)
            .map_err(|()| format!("bad host {:?}", endpoint.authority))?;
        if let Some(token) = &endpoint.token {
            header_line(
                &mut fixed_headers,
                "authorization",
                &format!("Bearer {token}"),
            )
            .map_err(|()| "the token has characters a header cannot carry".to_string())?;
        }
        Ok(Connection {
            endpoint: endpoint.clone(),
            fixed_headers,
            out: Vec::new(),
            open: None,
            written_at: None,
        })
    }

    async fn connect(&self) -> Result<Open, String> {
        let stream = TcpStream::connect(&self.endpoint.authority)
            .await
            .map_err(|error| format!("connect {}: {error}", self.endpoint.authority))?;
        let _ = stream.set_nodelay(true);
        let stream = match &self.endpoint.tls {
            None => Stream::Plain(stream),
            Some(tls) => {
                let stream = tls
                    .connector
                    .connect(tls.server_name.clone(), stream)
                    .await
                    .map_err(|error| format!("TLS with {}: {error}", self.endpoint.authority))?;
                Stream::Tls(Box::new(stream))
            }
        };
        Ok(Open {
            stream,
            input: BytesMut::with_capacity(READ_CHUNK),
        })
    }

    /// Opens the connection now if it is not open, so that the first request's latency does
    /// not include the connect. On an error, the next request tries again.
    pub async fn open(&mut self) -> Result<(), String> {
        if self.open.is_none() {
            self.open = Some(self.connect().await?);
        }
        Ok(())
    }

    /// Sends `request` and reads the whole answer. An error means the outcome is unknown (the
    /// request may or may not have reached the server); the next call reconnects.
    pub async fn send(&mut self, request: &Request) -> Result<Answer, String> {
        self.written_at = None;
        if self.open.as_mut().is_some_and(Open::ended) {
            self.open = None;
        }
        let open = match &mut self.open {
            Some(open) => open,
            None => self.open.insert(self.connect().await?),
        };
        encode(request, &self.fixed_headers, &mut self.out);
        let exchanged = exchange(
            open,
            &self.out,
            request.method == Method::HEAD,
            &mut self.written_at,
        )
        .await;
        match exchanged {
            Ok((answer, keep_alive)) => {
                if !keep_alive {
                    self.open = None;
                }
                Ok(answer)
            }
            Err(error) => {
                self.open = None;
                Err(error)
            }
        }
    }

    /// When the last `send`'s request had been written whole into the socket: on loopback, the
    /// moment it had reached the server's receive buffer at the latest. `None` when it was not
    /// all written (the send failed first).
    pub fn written_at(&self) -> Option<Instant> {
        self.written_at
    }
}

impl Open {
    /// Whether the server closed the connection, or sent what nobody asked for (a 408 before
    /// closing an idle connection), since the last answer. Such a connection is replaced before
    /// a request goes into it: sent into a closing connection, the request's outcome would be
    /// unknown for nothing. One non-blocking read, which finds nothing on a healthy connection.
    fn ended(&mut self) -> bool {
        if !self.input.is_empty() {
            return true;
        }
        let mut byte = [0u8; 1];
        match &mut self.stream {
            Stream::Plain(stream) => match stream.try_read(&mut byte) {
                Err(error) => error.kind() != ErrorKind::WouldBlock,
                Ok(_) => true,
            },
            // One poll that must not wait: records that carry no data (a session ticket) are
            // taken in by rustls and leave it pending; data, the end or an error end it.
            Stream::Tls(stream) => {
                let mut buf = ReadBuf::new(&mut byte);
                let mut cx = Context::from_waker(Waker::noop());
                Pin::new(stream.as_mut())
                    .poll_read(&mut cx, &mut buf)
                    .is_ready()
            }
        }
    }
}

/// Appends `name: value\r\n`; refuses a value a header line cannot carry.
fn header_line(out: &mut Vec<u8>, name: &str, value: &str) -> Result<(), ()> {
    if value
        .bytes()
        .any(|byte| (byte < 0x20 && byte != b'\t') || byte == 0x7f)
    {
        return Err(());
    }
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// A request's bytes: its line, the fixed headers, its body's framing, its body.
fn encode(request: &Request, fixed_headers: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(request.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(request.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    out.extend_from_slice(fixed_headers);
    if !request.body.is_empty() {
        out.extend_from_slice(b"content-type: application/json\r\n");
    }
    if !request.body.is_empty() || !matches!(request.method, Method::GET | Method::HEAD) {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(request.body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&request.body);
}

/// Writes the request (noting when it was all written in `written_at`), reads its answer;
/// returns it, and whether the connection stays open.
async fn exchange(
    open: &mut Open,
    request: &[u8],
    head_only: bool,
    written_at: &mut Option<Instant>,
) -> Result<(Answer, bool), String> {
    open.stream
        .write_all(request)
        .await
        .map_err(|error| format!("sending the request: {error}"))?;
    // Nothing for plain TCP; over TLS, the last record out of rustls and into the socket.
    open.stream
        .flush()
        .await
        .map_err(|error| format!("sending the request: {error}"))?;
    *written_at = Some(Instant::now());
    let head = loop {
        if let Some(head) = Head::parse(&open.input, head_only)? {
            break head;
        }
        read_more(open, 0).await?;
    };
    let total = head.len + head.body_len;
    while open.input.len() < total {
        read_more(open, total - open.input.len()).await?;
    }
    let body = open.input.split_to(total).freeze().slice(head.len..);
    Ok((
        Answer {
            status: head.status,
            body,
        },
        head.keep_alive,
    ))
}

/// Reads what the socket has (at least `want` bytes of room); the server closing the connection
/// before the answer is complete is an error.
async fn read_more(open: &mut Open, want: usize) -> Result<(), String> {
    open.input.reserve(want.max(READ_CHUNK));
    match open.stream.read_buf(&mut open.input).await {
        Ok(0) => Err("the server closed the connection".to_string()),
        Ok(_) => Ok(()),
        Err(error) => Err(format!("reading the answer: {error}")),
    }
}

/// An answer's head, as far as framing it goes.
#[derive(Debug, PartialEq)]
struct Head {
    status: u16,
    /// Bytes of the status line and headers, the blank line included.
    len: usize,
    body_len: usize,
    keep_alive: bool,
}

impl Head {
    /// The head at the start of `input`, `None` if it is not all there yet. `head_only`: the
    /// answer to a HEAD request, which has no body whatever its `Content-Length` says.
    fn parse(input: &[u8], head_only: bool) -> Result<Option<Head>, String> {
        let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
        let mut response = httparse::Response::new(&mut headers);
        let len = match response.parse(input) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if input.len() > HEAD_BYTES_MAX => {
                return Err(format!(
                    "an answer's head longer than {HEAD_BYTES_MAX} bytes"
                ))
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(error) => return Err(format!("a malformed answer: {error}")),
        };
        let status = response.code.unwrap_or_default();
        if (100..200).contains(&status) {
            return Err(format!(
                "an interim answer ({status}), which the load generator never asks for"
            ));
        }
        let mut keep_alive = response.version == Some(1);
        let mut content_length = None;
        for header in response.headers.iter() {
            let name = header.name.as_bytes();
            if name.eq_ignore_ascii_case(b"content-length") {
                let parsed = std::str::from_utf8(header.value)
                    .ok()
                    .and_then(|value| value.trim().parse::<usize>().ok())
                    .ok_or_else(|| {
                        format!(
                            "an answer with Content-Length {:?}",
                            String::from_utf8_lossy(header.value)
                        )
                    })?;
                if content_length.is_some_and(|seen| seen != parsed) {
                    return Err("an answer with two different Content-Lengths".to_string());
                }
                content_length = Some(parsed);
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                return Err(format!(
                    "an answer with Transfer-Encoding {:?}: the load generator reads answers \
                     framed by Content-Length, as stockd sends them",
                    String::from_utf8_lossy(header.value)
                ));
            } else if name.eq_ignore_ascii_case(b"connection") {
                for option in header.value.split(|&byte| byte == b',') {
                    let option = option.trim_ascii();
                    if option.eq_ignore_ascii_case(b"close") {
                        keep_alive = false;
                    } else if option.eq_ignore_ascii_case(b"keep-alive") {
                        keep_alive = true;
                    }
                }
            }
        }
        let body_len = if head_only || status == 204 || status == 304 {
            0
        } else {
            content_length.ok_or_else(|| {
                format!("an answer ({status}) with no Content-Length, which stockd always sends")
            })?
        };
        if body_len > BODY_BYTES_MAX {
            return Err(format!(
                "an answer of {body_len} bytes, more than the {BODY_BYTES_MAX} taken"
            ));
        }
        Ok(Some(Head {
            status,
            len,
            body_len,
            keep_alive,
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    fn head(text: &str) -> Result<Option<Head>, String> {
        Head::parse(text.as_bytes(), false)
    }

    #[test]
    fn urls_are_http_or_https_with_a_default_port() {
        let authority = |url: &str| Endpoint::parse(url, None).map(|endpoint| endpoint.authority);
        assert_eq!(
            authority("http://127.0.0.1:7070/").unwrap(),
            "127.0.0.1:7070"
        );
        assert_eq!(
            authority("http://stock.internal").unwrap(),
            "stock.internal:80"
        );
        assert_eq!(authority("http://[::1]").unwrap(), "[::1]:80");
        assert_eq!(authority("http://[::1]:7070").unwrap(), "[::1]:7070");
        assert!(Endpoint::parse("http://h:1", None).unwrap().tls.is_none());
        for bad in ["ftp://h:1", "h:1", "http://", "http://h:1/prefix"] {
            let error = authority(bad).expect_err(bad);
            assert!(error.contains("https://HOST[:PORT]"), "{bad}: {error}");
        }
    }

    #[test]
    fn a_head_is_framed_by_its_content_length() {
        let text = "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: 12\r\n\r\n{\"a\":";
        assert_eq!(
            head(text).unwrap(),
            Some(Head {
                status: 201,
                len: text.len() - 5,
                body_len: 12,
                keep_alive: true,
            })
        );
        // Not all there yet.
        assert_eq!(head("HTTP/1.1 201 Created\r\ncontent-le").unwrap(), None);
        // Closing, in any case and among other options; HTTP/1.0 closes unless asked not to.
        let closing = "HTTP/1.1 200 OK\r\nConnection: Upgrade, CLOSE\r\nContent-Length: 0\r\n\r\n";
        assert!(!head(closing).unwrap().unwrap().keep_alive);
        assert!(
            !head("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n")
                .unwrap()
                .unwrap()
                .keep_alive
        );
        let kept = "HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n";
        assert!(head(kept).unwrap().unwrap().keep_alive);
    }

    #[test]
    fn answers_without_a_body_have_none_whatever_they_say() {
        let no_content = "HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(head(no_content).unwrap().unwrap().body_len, 0);
        let to_head = "HTTP/1.1 200 OK\r\ncontent-length: 99\r\n\r\n";
        assert_eq!(
            Head::parse(to_head.as_bytes(), true)
                .unwrap()
                .unwrap()
                .body_len,
            0
        );
    }

    #[test]
    fn framings_the_generator_does_not_read_are_errors() {
        for (text, expected) in [
            ("HTTP/1.1 200 OK\r\n\r\n", "no Content-Length"),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
                "Transfer-Encoding",
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
                "two different",
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
                "Content-Length \"-1\"",
            ),
            ("HTTP/1.1 100 Continue\r\n\r\n", "interim"),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 999999999999\r\n\r\n",
                "more than",
            ),
            ("SMTP ready\r\n\r\n", "malformed"),
        ] {
            let error = head(text).unwrap_err();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
        let endless = format!("HTTP/1.1 200 OK\r\nx: {}", "y".repeat(HEAD_BYTES_MAX));
        assert!(head(&endless).unwrap_err().contains("longer than"));
    }

    #[test]
    fn an_answer_may_have_as_many_headers_as_the_limit_and_no_more() {
        let with = |headers: usize| {
            let lines: String = (1..headers).map(|n| format!("x-{n}: y\r\n")).collect();
            format!("HTTP/1.1 200 OK\r\n{lines}content-length: 0\r\n\r\n")
        };
        assert_eq!(head(&with(HEADERS_MAX)).unwrap().unwrap().body_len, 0);
        let error = head(&with(HEADERS_MAX + 1)).unwrap_err();
        assert!(error.contains("malformed"), "{error}");
        // The largest body taken, and one byte more.
        let sized = |len: usize| format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n");
        assert_eq!(
            head(&sized(BODY_BYTES_MAX)).unwrap().unwrap().body_len,
            BODY_BYTES_MAX
        );
        assert!(head(&sized(BODY_BYTES_MAX + 1))
            .unwrap_err()
            .contains("more than"));
    }

    #[test]
    fn a_request_is_its_line_the_fixed_headers_and_its_body_framed() {
        let endpoint = Endpoint::parse("http://127.0.0.1:9", Some("s3cret".into())).unwrap();
        let connection = Connection::new(&endpoint).unwrap();
        let mut out = Vec::new();
        let post = Request {
            method: Method::POST,
            path: "/v1/holds".into(),
            body: Bytes::from_static(b"{\"x\":1}"),
        };
        encode(&post, &connection.fixed_headers, &mut out);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "POST /v1/holds HTTP/1.1\r\nhost: 127.0.0.1:9\r\nauthorization: Bearer s3cret\r\n\
             content-type: application/json\r\ncontent-length: 7\r\n\r\n{\"x\":1}"
        );
        // A GET has no body framing; an empty POST says its length is 0.
        encode(&Request::get("/healthz"), b"", &mut out);
        assert_eq!(out, b"GET /healthz HTTP/1.1\r\n\r\n");
        let confirm = Request {
            method: Method::POST,
            path: "/v1/holds/h/confirm".into(),
            body: Bytes::new(),
        };
        encode(&confirm, b"", &mut out);
        assert_eq!(
            out,
            b"POST /v1/holds/h/confirm HTTP/1.1\r\ncontent-length: 0\r\n\r\n"
        );
        // A token that would end the header line is refused.
        let bad = Endpoint::parse("http://127.0.0.1:9", Some("a\r\nx: y".into())).unwrap();
        assert!(Connection::new(&bad).is_err());
    }

    /// A server that answers each request on a connection with the next of `answers` (written
    /// in pieces, to make the client read several times), then does what `after` says.
    #[derive(Clone, Copy)]
    enum After {
        /// Keep the connection open for the next request.
        Stay,
        /// Close it right after the answer.
        Close,
        /// Send an unasked 408 and close, as a server timing out an idle connection does.
        TimeOut,
    }

    async fn server(answers: Vec<(&'static str, After)>) -> (Endpoint, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint =
            Endpoint::parse(&format!("http://{}", listener.local_addr().unwrap()), None).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            let mut answers = answers.into_iter();
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                counter.fetch_add(1, Ordering::SeqCst);
                loop {
                    if !read_request(&mut stream).await {
                        break;
                    }
                    let Some((answer, after)) = answers.next() else {
                        return;
                    };
                    let (first, rest) = answer.split_at(answer.len() / 2);
                    stream.write_all(first.as_bytes()).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    stream.write_all(rest.as_bytes()).await.unwrap();
                    match after {
                        After::Stay => {}
                        After::Close => break,
                        After::TimeOut => {
                            stream
                                .write_all(
                                    b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\n\r\n",
                                )
                                .await
                                .unwrap();
                            break;
                        }
                    }
                }
            }
        });
        (endpoint, accepted)
    }

    /// Reads one request (head, and a body by its Content-Length); false at the end of input.
    async fn read_request(stream: &mut TcpStream) -> bool {
        let mut input = Vec::new();
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut request = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(len)) = request.parse(&input) {
                let body_len: usize = request
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .map_or(0, |h| {
                        std::str::from_utf8(h.value).unwrap().parse().unwrap()
                    });
                if input.len() >= len + body_len {
                    return true;
                }
            }
            let mut buffer = [0u8; 4096];
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => input.extend_from_slice(&buffer[..n]),
            }
        }
    }

    fn post() -> Request {
        Request {
            method: Method::POST,
            path: "/v1/holds".into(),
            body: Bytes::from_static(b"{}"),
        }
    }

    const CREATED: &str = "HTTP/1.1 201 Created\r\ncontent-length: 11\r\n\r\n{\"id\":\"a\"}\n";

    #[tokio::test]
    async fn answers_come_whole_over_one_kept_connection() {
        let (endpoint, accepted) =
            server(vec![(CREATED, After::Stay), (CREATED, After::Stay)]).await;
        let mut connection = Connection::new(&endpoint).unwrap();
        for _ in 0..2 {
            let answer = connection.send(&post()).await.unwrap();
            assert_eq!(answer.status, 201);
            assert_eq!(&answer.body[..], b"{\"id\":\"a\"}\n");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_the_server_ended_is_replaced_before_the_next_request() {
        let closing = "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";
        let (endpoint, accepted) = server(vec![
            (closing, After::Close),
            (CREATED, After::Close),
            (CREATED, After::TimeOut),
            (CREATED, After::Stay),
        ])
        .await;
        let mut connection = Connection::new(&endpoint).unwrap();
        // Said so in the answer.
        assert_eq!(connection.send(&post()).await.unwrap().status, 200);
        // Closed without a word, then timed out with an unasked 408: each is noticed before
        // the next request goes out, which then gets its answer on a new connection.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(connection.send(&post()).await.unwrap().status, 201);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn an_answer_cut_short_or_unreadable_is_an_unknown_outcome() {
        let cut = "HTTP/1.1 201 Created\r\ncontent-length: 50\r\n\r\n{\"id\":";
        let chunked = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n";
        let (endpoint, accepted) = server(vec![
            (cut, After::Close),
            (chunked, After::Stay),
            (CREATED, After::Stay),
        ])
        .await;
        let mut connection = Connection::new(&endpoint).unwrap();
        let error = connection.send(&post()).await.unwrap_err();
        assert!(error.contains("closed the connection"), "{error}");
        let error = connection.send(&post()).await.unwrap_err();
        assert!(error.contains("Transfer-Encoding"), "{error}");
        // Each failure dropped its connection; the next request opens a fresh one.
        assert_eq!(connection.send(&post()).await.unwrap().status, 201);
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }
}
