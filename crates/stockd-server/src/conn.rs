//! Connections: the accept loop, and the limits that keep slow and idle clients from holding the
//! server's sockets and memory (slowloris and its kin).
//!
//! Every connection is in one of three phases, and each phase has one deadline:
//! - **idle** (keep-alive, no request in progress, no byte of the next one yet): closed after
//!   `idle_timeout`;
//! - **head** (the first byte of a request has arrived, its head is not complete): closed after
//!   `header_timeout`, counted from that first byte;
//! - **busy** (a request is with the router): no deadline here; the body must arrive within
//!   `body_timeout` (408, enforced where bodies are read, `json::Api`), and handlers end
//!   by themselves (long polls are bounded by their `wait_ms`).
//!
//! In any phase, a write that cannot make progress (the client does not read its answers) for
//! `write_timeout` closes the connection. At most `max_connections` are open at once: past that
//! the listener stops accepting until one closes, and new clients wait in the kernel's backlog.
//! A head larger than `max_header_bytes` gets hyper's 431, with the contract's JSON body
//! ([`crate::http_errors`]), as every answer hyper sends by itself has.
//!
//! The phases are tracked by two thin wrappers, around the socket (the first byte while idle,
//! stalled writes) and around the router (a request in progress), and enforced by one timer per
//! connection, re-armed only when its deadline changes. hyper polls the socket, the router's
//! future and this timer from the same task, so the deadline read after each poll is current.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::json::Api;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::{Instant, Sleep};
use tower::Service;

use crate::metrics::ConnectionMetrics;

/// The connection limits, each a setting of `stockd serve` (see `docs/operations.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once; past it, new ones wait in the listen backlog.
    pub max_connections: usize,
    /// How long a request's head may take to arrive, from its first byte.
    pub header_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// How long a write to the client may stay blocked (a client that does not read).
    pub write_timeout: Duration,
    /// Largest request head (request line and headers), in bytes; larger gets 431.
    pub max_header_bytes: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 10_000,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
        }
    }
}

/// Why the server closed a connection itself (a metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    Idle = 0,
    HeaderTimeout = 1,
    WriteTimeout = 2,
}

impl Closed {
    pub(crate) const ALL: [Closed; 3] = [Closed::Idle, Closed::HeaderTimeout, Closed::WriteTimeout];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Closed::Idle => "idle_timeout",
            Closed::HeaderTimeout => "header_timeout",
            Closed::WriteTimeout => "write_timeout",
        }
    }
}

const IDLE: u8 = 0;
const HEAD: u8 = 1;
const BUSY: u8 = 2;
const NOT_STALLED: u64 = u64::MAX;

/// One connection's phase, shared by its socket wrapper, its service wrapper and its watchdog.
/// Times are nanoseconds since `started`.
struct Phase {
    started: Instant,
    phase: AtomicU8,
    since: AtomicU64,
    stalled_since: AtomicU64,
}

impl Phase {
    /// A new connection is timed like a request head: one that never sends a byte is closed
    /// after `header_timeout`, not kept as long as an idle keep-alive connection.
    fn new() -> Self {
        Phase {
            started: Instant::now(),
            phase: AtomicU8::new(HEAD),
            since: AtomicU64::new(0),
            stalled_since: AtomicU64::new(NOT_STALLED),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX - 1)
    }

    fn enter(&self, phase: u8) {
        self.since.store(self.now(), Ordering::Relaxed);
        self.phase.store(phase, Ordering::Relaxed);
    }

    /// The earliest deadline in force, and what passing it means.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<(Instant, Closed)> {
        let since = Duration::from_nanos(self.since.load(Ordering::Relaxed));
        let phase = match self.phase.load(Ordering::Relaxed) {
            IDLE => Some((self.started + since + limits.idle_timeout, Closed::Idle)),
            HEAD => Some((
                self.started + since + limits.header_timeout,
                Closed::HeaderTimeout,
            )),
            _ => None,
        };
        let stalled = self.stalled_since.load(Ordering::Relaxed);
        let write = (stalled != NOT_STALLED).then(|| {
            (
                self.started + Duration::from_nanos(stalled) + limits.write_timeout,
                Closed::WriteTimeout,
            )
        });
        match (phase, write) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

/// Accepts connections on `listener` and serves `api` on each until `shutdown` completes;
/// then stops accepting and waits for the open connections to finish their requests.
pub(crate) async fn serve(
    listener: TcpListener,
    api: Api,
    limits: ConnectionLimits,
    metrics: ConnectionMetrics,
    shutdown: impl Future<Output = ()> + Send,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.max_header_size(limits.max_header_bytes)
        // Heads are timed by the watchdog, from their first byte rather than from the end of
        // the previous request, so that idle and head have limits of their own.
        .header_read_timeout(None);
    let http = Arc::new(http);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break, // never closed
            },
        };
        let (stream, _peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    accept_failed(&error).await;
                    continue;
                }
            },
        };
        // Answers are written whole; waiting to coalesce them only adds latency.
        let _ = stream.set_nodelay(true);
        let phase = Arc::new(Phase::new());
        let io = TokioIo::new(Watched {
            io: stream,
            phase: Arc::clone(&phase),
            max_header_bytes: limits.max_header_bytes,
            replacement: Vec::new(),
            replaced_sent: 0,
        });
        let service = Tracked {
            api: api.clone(),
            phase: Arc::clone(&phase),
        };
        let connection = Box::pin(graceful.watch(http.serve_connection(io, service)));
        let metrics = metrics.clone();
        tokio::spawn(async move {
            metrics.opened();
            let outcome = Watchdog {
                connection,
                phase,
                limits,
                timer: None,
            }
            .await;
            match outcome {
                Ok(Ok(())) => {}
                // Resets, broken pipes, bad requests hyper answered itself: the client's doing.
                Ok(Err(error)) => tracing::debug!(%error, "connection ended with an error"),
                Err(reason) => {
                    tracing::debug!(reason = reason.label(), "connection closed by the server");
                    metrics.closed_by_server(reason);
                }
            }
            metrics.closed();
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Out of file descriptors or a network hiccup: say so, and wait a little instead of spinning.
async fn accept_failed(error: &io::Error) {
    tracing::warn!(%error, "accept failed; retrying in 50 ms");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// The socket, noting the first byte of a request that arrives while idle, and writes that stall;
/// and giving hyper's own error answers their JSON body.
struct Watched {
    io: TcpStream,
    phase: Arc<Phase>,
    max_header_bytes: usize,
    /// An answer written in place of hyper's own error answer, and how much of it is sent.
    replacement: Vec<u8>,
    replaced_sent: usize,
}

impl Watched {
    /// Takes `head` in place of hyper's error answer if it is one: hyper is told it was
    /// written, and the replacement goes out instead (here, or from the next write or flush).
    fn replaces(&mut self, head: &[u8]) -> bool {
        if self.phase.phase.load(Ordering::Relaxed) == BUSY || !self.replacement.is_empty() {
            return false;
        }
        match crate::http_errors::replace(head, self.max_header_bytes) {
            Some(answer) => {
                self.replacement = answer;
                true
            }
            None => false,
        }
    }

    /// Writes what is left of a replacement answer; ready when nothing is left.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.replaced_sent < self.replacement.len() {
            let rest = &self.replacement[self.replaced_sent..];
            let poll = Pin::new(&mut self.io).poll_write(cx, rest);
            self.wrote(&poll);
            match poll {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.replaced_sent += n,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    fn wrote<T>(&self, poll: &Poll<io::Result<T>>) {
        let stalled = &self.phase.stalled_since;
        match poll {
            Poll::Pending => {
                if stalled.load(Ordering::Relaxed) == NOT_STALLED {
                    stalled.store(self.phase.now(), Ordering::Relaxed);
                }
            }
            Poll::Ready(_) => {
                if stalled.load(Ordering::Relaxed) != NOT_STALLED {
                    stalled.store(NOT_STALLED, Ordering::Relaxed);
                }
            }
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before && this.phase.phase.load(Ordering::Relaxed) == IDLE {
            this.phase.enter(HEAD);
        }
        poll
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.replaces(buf) {
            // Taken: what could not be written yet goes out with the flush hyper does next.
            if let Poll::Ready(Err(error)) = this.drain(cx) {
                return Poll::Ready(Err(error));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        // Nothing may overtake a replacement still being written.
        std::task::ready!(this.drain(cx))?;
        let poll = Pin::new(&mut this.io).poll_write(cx, buf);
        this.wrote(&poll);
        poll
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let first = bufs.iter().find(|buf| !buf.is_empty());
        if first.is_some_and(|first| this.replaces(first)) {
            if let Poll::Ready(Err(error)) = this.drain(cx) {
                return Poll::Ready(Err(error));
            }
            return Poll::Ready(Ok(bufs.iter().map(|buf| buf.len()).sum()));
        }
        std::task::ready!(this.drain(cx))?;
        let poll = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.wrote(&poll);
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.drain(cx))?;
        let poll = Pin::new(&mut this.io).poll_flush(cx);
        this.wrote(&poll);
        poll
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.drain(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// The API, marking the connection busy from a request's head until its answer is ready.
#[derive(Clone)]
struct Tracked {
    api: Api,
    phase: Arc<Phase>,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Tracked {
    type Response = Response;
    type Error = Infallible;
    type Future = TrackedFuture;

    fn call(&self, request: hyper::Request<Incoming>) -> TrackedFuture {
        self.phase.phase.store(BUSY, Ordering::Relaxed);
        let mut api = self.api.clone();
        TrackedFuture {
            inner: api.call(request.map(Body::new)),
            busy: Busy(Arc::clone(&self.phase)),
        }
    }
}

/// Back to idle when hyper is done with the request: answered (it drops the future as soon as
/// the answer is ready) or dropped unanswered.
struct Busy(Arc<Phase>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.enter(IDLE);
    }
}

struct TrackedFuture {
    inner: <Api as Service<Request>>::Future,
    #[allow(dead_code)] // held for its Drop
    busy: Busy,
}

impl Future for TrackedFuture {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.get_mut().inner).poll(cx)
    }
}

/// Drives one connection and closes it (by dropping it) when its phase's deadline passes.
struct Watchdog<C> {
    connection: C,
    phase: Arc<Phase>,
    limits: ConnectionLimits,
    /// The armed timer and the deadline it is set to.
    timer: Option<(Pin<Box<Sleep>>, Instant)>,
}

impl<C, E> Future for Watchdog<C>
where
    C: Future<Output = Result<(), E>> + Unpin,
{
    type Output = Result<Result<(), E>, Closed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Poll::Ready(done) = Pin::new(&mut this.connection).poll(cx) {
            return Poll::Ready(Ok(done));
        }
        let Some((deadline, reason)) = this.phase.deadline(&this.limits) else {
            return Poll::Pending;
        };
        let timer = match &mut this.timer {
            Some((sleep, armed)) => {
                if *armed != deadline {
                    sleep.as_mut().reset(deadline);
                    *armed = deadline;
                }
                sleep
            }
            None => {
                &mut this
                    .timer
                    .insert((Box::pin(tokio::time::sleep_until(deadline)), deadline))
                    .0
            }
        };
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(reason)),
            Poll::Pending => Poll::Pending,
        }
    }
}
