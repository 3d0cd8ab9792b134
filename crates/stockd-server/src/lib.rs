//! stockd's HTTP/JSON edge: routing, request parsing, response encoding, bearer auth, Prometheus
//! metrics and the OpenAPI document.
//!
//! This crate turns HTTP requests into [`stockd_core::Command`]s, hands them to a
//! [`stockd_core::Backend`] and turns the outcomes back into HTTP responses. It must never decide
//! a business rule (stock arithmetic, hold transitions, limits beyond the request's shape): that
//! is the core's job, reached only through the `Backend` trait. It knows nothing of which backend
//! it talks to.
//!
//! Request flow: axum routing -> `edge` (route label, auth, timing) -> a `routes::*` handler
//! (parse with the `json` extractors -> `Backend::execute` -> encode with `reply`). Every failure
//! on the way is an `error::ApiError`, mapped to a status in exactly one place.

mod auth;
mod conn;
mod dto;
mod edge;
mod error;
mod http_errors;
mod json;
mod metrics;
mod openapi;
mod reply;
mod routes;
mod syntax;
mod wire;
mod wording;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use stockd_core::Backend;

pub use auth::Role;
pub use conn::ConnectionLimits;
pub use json::Api;
/// The `/metrics` text formats: in `stockd-api`, which the sink's `/metrics` shares.
pub use stockd_api::exposition;

/// Largest request body accepted by default (1 MiB); larger bodies get 413 `payload_too_large`.
pub const BODY_LIMIT_BYTES_DEFAULT: usize = 1 << 20;

/// How long a request body may take to arrive by default (10 s); slower bodies get 408.
pub const BODY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// How the HTTP layer is set up. Everything about the data lives in the backend.
#[derive(Clone)]
pub struct ServerConfig {
    /// Bearer secrets and the role each grants. Empty means no authentication at all; the binary
    /// decides whether that is allowed on the address it listens on.
    pub tokens: Vec<(String, Role)>,
    /// Largest request body accepted, in bytes.
    pub body_limit_bytes: usize,
    /// How long a request's whole body may take to arrive once its head has (408 after that).
    pub body_timeout: Duration,
    /// Connection limits and timeouts, enforced by [`serve`].
    pub connections: ConnectionLimits,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            tokens: Vec::new(),
            body_limit_bytes: BODY_LIMIT_BYTES_DEFAULT,
            body_timeout: BODY_TIMEOUT_DEFAULT,
            connections: ConnectionLimits::default(),
        }
    }
}

// Secrets must never reach a log line through `{:?}`.
impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let roles: Vec<Role> = self.tokens.iter().map(|(_, role)| *role).collect();
        f.debug_struct("ServerConfig")
            .field(
                "tokens",
                &format_args!("{} redacted ({roles:?})", roles.len()),
            )
            .field("body_limit_bytes", &self.body_limit_bytes)
            .field("body_timeout", &self.body_timeout)
            .field("connections", &self.connections)
            .finish()
    }
}

/// The whole HTTP API over `backend`, as a service to call in process (tests). [`serve`] is how
/// it is served on a socket.
pub fn router(backend: Arc<dyn Backend>, config: ServerConfig) -> Api {
    routes::router(backend, config).0
}

/// Serves the whole HTTP API over `backend` on `listener`, with the connection limits of
/// `config`, until `shutdown` completes; then stops accepting and returns once every open
/// connection has finished its request.
pub async fn serve(
    listener: tokio::net::TcpListener,
    backend: Arc<dyn Backend>,
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    let limits = config.connections;
    let (router, metrics) = routes::router(backend, config);
    conn::serve(listener, router, limits, metrics.connections(), shutdown).await;
}

/// One route of the table the router and the access rules are built from.
#[derive(Debug, Clone)]
pub struct RouteAccess {
    /// The path template, as routed (`/v1/pools/{pool}`).
    pub path: &'static str,
    /// Needs no token (`/healthz`, `/readyz`, `/metrics`, `/openapi.json`, and the web
    /// console's files under `/ui`).
    pub open: bool,
    /// Methods only an admin token may call on it.
    pub admin_only: Vec<axum::http::Method>,
}

/// The route table, for tests that walk every route (who may call it, what it refuses).
pub fn route_table() -> Vec<RouteAccess> {
    use axum::http::Method;
    routes::RouteId::ALL
        .iter()
        .map(|route| RouteAccess {
            path: route.path(),
            open: route.is_open(),
            admin_only: [
                Method::GET,
                Method::POST,
                Method::PUT,
                Method::DELETE,
                Method::PATCH,
            ]
            .into_iter()
            .filter(|method| route.is_admin_only(method))
            .collect(),
        })
        .collect()
}

/// The OpenAPI 3 document of this API; the same one `GET /openapi.json` serves.
pub fn openapi() -> utoipa::openapi::OpenApi {
    openapi::document()
}
