//! A test-only backend: the core `State` behind a mutex, with a clock the test sets, and helpers
//! to drive the router with `tower::ServiceExt::oneshot`.
//!
//! It never waits: a reserve or lock acquire with `wait_ms` gets the answer it would get at once.
//! It can be switched "unavailable" to exercise 503s, and counts `execute` calls so tests can see
//! that a batch is one call. Its feed can claim several partitions (every event is in partition
//! 0, the others are empty) and can drop its oldest events, to exercise the feed's edges.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use serde_json::Value;
use stockd_core::{
    Backend, BackendError, BackendFuture, BackendStats, Command, Effects, Error, Event, EventPage,
    EventsRequest, Outcome, State, StateConfig, Step,
};
use stockd_server::Api;
use stockd_server::{Role, ServerConfig};
use tower::ServiceExt;

pub const START_MS: u64 = 1_700_000_000_000;
pub const ADMIN_TOKEN: &str = "admin-secret-0123";
pub const CLIENT_TOKEN: &str = "client-secret-4567";

struct Inner {
    state: State,
    events: Vec<Event>,
}

pub struct TestBackend {
    inner: Mutex<Inner>,
    now_ms: AtomicU64,
    unavailable: AtomicBool,
    partitions: AtomicU32,
    stats: Mutex<BackendStats>,
    execute_calls: Mutex<Vec<usize>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl TestBackend {
    pub fn new() -> Arc<Self> {
        Arc::new(TestBackend {
            inner: Mutex::new(Inner {
                state: State::new(StateConfig::default()),
                events: Vec::new(),
            }),
            now_ms: AtomicU64::new(START_MS),
            unavailable: AtomicBool::new(false),
            partitions: AtomicU32::new(1),
            stats: Mutex::new(BackendStats::default()),
            execute_calls: Mutex::new(Vec::new()),
        })
    }

    pub fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }

    pub fn advance_ms(&self, ms: u64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }

    pub fn set_unavailable(&self, unavailable: bool) {
        self.unavailable.store(unavailable, Ordering::SeqCst);
    }

    /// How many partitions the feed claims to have.
    pub fn set_partitions(&self, partitions: u32) {
        self.partitions.store(partitions, Ordering::SeqCst);
    }

    /// Forgets the events with seq < `oldest_seq`, as a bounded window would.
    pub fn drop_events_before(&self, oldest_seq: u64) {
        lock(&self.inner)
            .events
            .retain(|event| event.seq >= oldest_seq);
    }

    pub fn set_stats(&self, stats: BackendStats) {
        *lock(&self.stats) = stats;
    }

    /// The number of commands in each `execute` call so far.
    pub fn execute_calls(&self) -> Vec<usize> {
        lock(&self.execute_calls).clone()
    }

    fn check_available(&self) -> Result<(), BackendError> {
        if self.unavailable.load(Ordering::SeqCst) {
            return Err(BackendError::Unavailable("switched off by the test".into()));
        }
        Ok(())
    }

    fn execute_now(&self, commands: Vec<Command>) -> Result<Vec<Outcome>, BackendError> {
        self.check_available()?;
        lock(&self.execute_calls).push(commands.len());
        let now_ms = self.now_ms();
        let mut inner = lock(&self.inner);
        let Inner { state, events } = &mut *inner;
        let mut effects = Effects::default();
        state.tick(now_ms, &mut effects);
        let outcomes = commands
            .into_iter()
            .map(|mut command| {
                command.validate()?;
                // Never park: the immediate answer is what a test without waiting expects.
                match &mut command {
                    Command::Reserve(request) => request.wait_ms = 0,
                    Command::LockAcquire(request) => request.wait_ms = 0,
                    _ => {}
                }
                match state.execute(command, now_ms, &mut effects) {
                    Step::Done(outcome) => outcome,
                    Step::Waiting(id) => {
                        state.cancel_waiter(id);
                        panic!("the test backend parked a command with wait_ms = 0");
                    }
                }
            })
            .collect();
        events.append(&mut effects.events);
        state.check_invariants().expect("invariants hold");
        Ok(outcomes)
    }
}

impl Backend for TestBackend {
    fn execute(&self, commands: Vec<Command>) -> BackendFuture<'_, Vec<Outcome>> {
        let result = self.execute_now(commands);
        Box::pin(async move { result })
    }

    fn partitions(&self) -> u32 {
        self.partitions.load(Ordering::SeqCst)
    }

    fn events(&self, request: EventsRequest) -> BackendFuture<'_, Result<EventPage, Error>> {
        let EventsRequest {
            partition,
            after,
            limit,
            ..
        } = request;
        let result = self.check_available().map(|()| {
            assert!(
                partition < self.partitions(),
                "the server asked for partition {partition} of {}",
                self.partitions()
            );
            if partition > 0 {
                return Ok(EventPage {
                    events: Vec::new(),
                    next_after: after,
                });
            }
            let inner = lock(&self.inner);
            if let Some(oldest) = inner.events.first() {
                if after.saturating_add(1) < oldest.seq {
                    return Err(Error::EventsExpired {
                        after,
                        oldest_seq: oldest.seq,
                    });
                }
            }
            let events: Vec<Event> = inner
                .events
                .iter()
                .filter(|event| event.seq > after)
                .take(limit)
                .cloned()
                .collect();
            let next_after = events.last().map_or(after, |event| event.seq);
            Ok(EventPage { events, next_after })
        });
        Box::pin(async move { result })
    }

    fn ready(&self) -> BackendFuture<'_, ()> {
        let result = self.check_available();
        Box::pin(async move { result })
    }

    fn stats(&self) -> BackendStats {
        lock(&self.stats).clone()
    }

    fn shutdown(&self) -> BackendFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}

/// A router without auth over a fresh backend.
pub fn open_server() -> (Arc<TestBackend>, Api) {
    let backend = TestBackend::new();
    let router = stockd_server::router(backend.clone(), ServerConfig::default());
    (backend, router)
}

/// A router with an admin and a client token.
pub fn secured_server() -> (Arc<TestBackend>, Api) {
    let backend = TestBackend::new();
    let config = ServerConfig {
        tokens: vec![
            (ADMIN_TOKEN.to_string(), Role::Admin),
            (CLIENT_TOKEN.to_string(), Role::Client),
        ],
        ..ServerConfig::default()
    };
    let router = stockd_server::router(backend.clone(), config);
    (backend, router)
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub bytes: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or_else(|error| {
            panic!(
                "body is not JSON ({error}): {:?}",
                String::from_utf8_lossy(&self.bytes)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// The `error` code of an error body.
    pub fn code(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or("<none>")
            .to_string()
    }

    pub fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
    }
}

/// Sends one request; `body` is raw bytes so tests can send anything.
pub async fn send(
    router: &Api,
    method: Method,
    uri: &str,
    token: Option<&str>,
    body: impl Into<Vec<u8>>,
) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let body: Vec<u8> = body.into();
    if !body.is_empty() {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let request = request.body(Body::from(body)).expect("request builds");
    let response = router
        .clone()
        .oneshot(request)
        .await
        .expect("the router is infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body reads")
        .to_vec();
    Answer {
        status,
        headers,
        bytes,
    }
}

pub async fn get(router: &Api, uri: &str) -> Answer {
    send(router, Method::GET, uri, None, Vec::new()).await
}

pub async fn post(router: &Api, uri: &str, body: Value) -> Answer {
    send(router, Method::POST, uri, None, body.to_string()).await
}

pub async fn put(router: &Api, uri: &str, body: Value) -> Answer {
    send(router, Method::PUT, uri, None, body.to_string()).await
}

pub async fn delete(router: &Api, uri: &str) -> Answer {
    send(router, Method::DELETE, uri, None, Vec::new()).await
}
