//! The route table and the state every handler shares.
//!
//! Owns the list of paths (one constant each, used by the router, the route label of metrics and
//! the auth rules alike, so they cannot drift apart), the router assembly, and the single
//! "execute one command" helper. Each resource has its own file of handlers that read the same
//! way: parse (extractors) -> `Backend::execute` -> encode (`reply`). No handler may compute
//! anything about stock; that answer comes from the backend.

pub(crate) mod batch;
pub(crate) mod console;
pub(crate) mod events;
pub(crate) mod holds;
pub(crate) mod locks;
pub(crate) mod ops;
pub(crate) mod pools;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use stockd_core::{Backend, Command, Reply};

use crate::auth::Auth;
use crate::edge::EdgeLayer;
use crate::error::ApiError;
use crate::json::BodyLimit;
use crate::metrics::Metrics;
use crate::{openapi, reply, ServerConfig};

/// Every path of the API, exactly as the router matches it.
pub(crate) mod paths {
    pub const HEALTHZ: &str = "/healthz";
    pub const READYZ: &str = "/readyz";
    pub const METRICS: &str = "/metrics";
    pub const OPENAPI: &str = "/openapi.json";
    pub const POOLS: &str = "/v1/pools";
    pub const POOL: &str = "/v1/pools/{pool}";
    pub const POOL_RESTOCK: &str = "/v1/pools/{pool}/restock";
    pub const HOLDS: &str = "/v1/holds";
    pub const HOLD: &str = "/v1/holds/{hold_id}";
    pub const HOLD_CONFIRM: &str = "/v1/holds/{hold_id}/confirm";
    pub const HOLD_RELEASE: &str = "/v1/holds/{hold_id}/release";
    pub const HOLD_EXTEND: &str = "/v1/holds/{hold_id}/extend";
    pub const HOLD_REFUND: &str = "/v1/holds/{hold_id}/refund";
    pub const BATCH: &str = "/v1/batch";
    pub const EVENTS: &str = "/v1/events";
    pub const EVENT_PARTITIONS: &str = "/v1/events/partitions";
    pub const LOCK_ACQUIRE: &str = "/v1/locks/{name}/acquire";
    pub const LOCK_RENEW: &str = "/v1/locks/{name}/renew";
    pub const LOCK_RELEASE: &str = "/v1/locks/{name}/release";
    pub const CONSOLE: &str = "/ui";
    pub const CONSOLE_PAGE: &str = "/ui/";
    pub const CONSOLE_ASSET: &str = "/ui/assets/{file}";
}

/// A route of the API. The discriminant is the index into [`RouteId::ALL`] (metrics slots).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum RouteId {
    Healthz,
    Readyz,
    Metrics,
    OpenApi,
    Pools,
    Pool,
    PoolRestock,
    Holds,
    Hold,
    HoldConfirm,
    HoldRelease,
    HoldExtend,
    HoldRefund,
    Batch,
    Events,
    EventPartitions,
    LockAcquire,
    LockRenew,
    LockRelease,
    Console,
    ConsolePage,
    ConsoleAsset,
}

impl RouteId {
    pub(crate) const ALL: [RouteId; 22] = [
        RouteId::Healthz,
        RouteId::Readyz,
        RouteId::Metrics,
        RouteId::OpenApi,
        RouteId::Pools,
        RouteId::Pool,
        RouteId::PoolRestock,
        RouteId::Holds,
        RouteId::Hold,
        RouteId::HoldConfirm,
        RouteId::HoldRelease,
        RouteId::HoldExtend,
        RouteId::HoldRefund,
        RouteId::Batch,
        RouteId::Events,
        RouteId::EventPartitions,
        RouteId::LockAcquire,
        RouteId::LockRenew,
        RouteId::LockRelease,
        RouteId::Console,
        RouteId::ConsolePage,
        RouteId::ConsoleAsset,
    ];

    pub(crate) fn path(self) -> &'static str {
        match self {
            RouteId::Healthz => paths::HEALTHZ,
            RouteId::Readyz => paths::READYZ,
            RouteId::Metrics => paths::METRICS,
            RouteId::OpenApi => paths::OPENAPI,
            RouteId::Pools => paths::POOLS,
            RouteId::Pool => paths::POOL,
            RouteId::PoolRestock => paths::POOL_RESTOCK,
            RouteId::Holds => paths::HOLDS,
            RouteId::Hold => paths::HOLD,
            RouteId::HoldConfirm => paths::HOLD_CONFIRM,
            RouteId::HoldRelease => paths::HOLD_RELEASE,
            RouteId::HoldExtend => paths::HOLD_EXTEND,
            RouteId::HoldRefund => paths::HOLD_REFUND,
            RouteId::Batch => paths::BATCH,
            RouteId::Events => paths::EVENTS,
            RouteId::EventPartitions => paths::EVENT_PARTITIONS,
            RouteId::LockAcquire => paths::LOCK_ACQUIRE,
            RouteId::LockRenew => paths::LOCK_RENEW,
            RouteId::LockRelease => paths::LOCK_RELEASE,
            RouteId::Console => paths::CONSOLE,
            RouteId::ConsolePage => paths::CONSOLE_PAGE,
            RouteId::ConsoleAsset => paths::CONSOLE_ASSET,
        }
    }

    /// The route whose pattern is `matched` (axum's `MatchedPath`).
    pub(crate) fn from_path(matched: &str) -> Option<RouteId> {
        Some(match matched {
            paths::HEALTHZ => RouteId::Healthz,
            paths::READYZ => RouteId::Readyz,
            paths::METRICS => RouteId::Metrics,
            paths::OPENAPI => RouteId::OpenApi,
            paths::POOLS => RouteId::Pools,
            paths::POOL => RouteId::Pool,
            paths::POOL_RESTOCK => RouteId::PoolRestock,
            paths::HOLDS => RouteId::Holds,
            paths::HOLD => RouteId::Hold,
            paths::HOLD_CONFIRM => RouteId::HoldConfirm,
            paths::HOLD_RELEASE => RouteId::HoldRelease,
            paths::HOLD_EXTEND => RouteId::HoldExtend,
            paths::HOLD_REFUND => RouteId::HoldRefund,
            paths::BATCH => RouteId::Batch,
            paths::EVENTS => RouteId::Events,
            paths::EVENT_PARTITIONS => RouteId::EventPartitions,
            paths::LOCK_ACQUIRE => RouteId::LockAcquire,
            paths::LOCK_RENEW => RouteId::LockRenew,
            paths::LOCK_RELEASE => RouteId::LockRelease,
            paths::CONSOLE => RouteId::Console,
            paths::CONSOLE_PAGE => RouteId::ConsolePage,
            paths::CONSOLE_ASSET => RouteId::ConsoleAsset,
            _ => return None,
        })
    }

    /// Routes that need no token: operational ones (probes and scrapers carry none) and the
    /// console's files, which hold no data (the console asks for a token to call the API).
    pub(crate) fn is_open(self) -> bool {
        matches!(
            self,
            RouteId::Healthz | RouteId::Readyz | RouteId::Metrics | RouteId::OpenApi
        ) || self.is_console()
    }

    /// The web console's page and files: served by stockd, but not part of the API (not in
    /// the OpenAPI document).
    pub(crate) fn is_console(self) -> bool {
        matches!(
            self,
            RouteId::Console | RouteId::ConsolePage | RouteId::ConsoleAsset
        )
    }

    /// Pool writes and deletes: admin only.
    pub(crate) fn is_admin_only(self, method: &Method) -> bool {
        match self {
            RouteId::Pool => method == Method::PUT || method == Method::DELETE,
            RouteId::PoolRestock => method == Method::POST,
            _ => false,
        }
    }
}

/// What every handler shares.
pub(crate) struct AppState {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) metrics: Arc<Metrics>,
    /// `/openapi.json`, serialised once.
    pub(crate) openapi_json: Bytes,
    pub(crate) body_limit_bytes: usize,
}

pub(crate) type App = Arc<AppState>;

impl BodyLimit for App {
    fn body_limit_bytes(&self) -> usize {
        self.body_limit_bytes
    }
}

impl AppState {
    /// Sends one command as a batch of one and encodes its outcome.
    pub(crate) async fn execute(&self, command: Command) -> Response {
        match self.execute_one(command).await {
            Ok(reply) => reply::response(&reply),
            Err(error) => error.into_response(),
        }
    }

    async fn execute_one(&self, command: Command) -> Result<Reply, ApiError> {
        let mut outcomes = self.backend.execute(vec![command]).await?;
        match (outcomes.pop(), outcomes.is_empty()) {
            (Some(outcome), true) => outcome.map_err(ApiError::Core),
            // A backend that miscounts cannot be trusted to have done anything in particular.
            _ => Err(ApiError::BackendUnavailable(
                "backend answered with the wrong number of outcomes".into(),
            )),
        }
    }
}

pub(crate) fn router(backend: Arc<dyn Backend>, config: ServerConfig) -> (Router, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new(Arc::clone(&backend)));
    let auth = Arc::new(Auth::new(&config.tokens));
    let openapi_json = match serde_json::to_vec(&openapi::document()) {
        Ok(json) => Bytes::from(json),
        Err(error) => {
            tracing::error!(%error, "the OpenAPI document failed to serialise");
            Bytes::from_static(b"{}")
        }
    };
    let app: App = Arc::new(AppState {
        backend,
        metrics: Arc::clone(&metrics),
        openapi_json,
        body_limit_bytes: config.body_limit_bytes,
    });
    let router = Router::new()
        .route(paths::HEALTHZ, get(ops::healthz))
        .route(paths::READYZ, get(ops::readyz))
        .route(paths::METRICS, get(ops::metrics))
        .route(paths::OPENAPI, get(ops::openapi_json))
        .route(paths::POOLS, get(pools::list_pools))
        .route(
            paths::POOL,
            put(pools::put_pool)
                .get(pools::get_pool)
                .delete(pools::delete_pool),
        )
        .route(paths::POOL_RESTOCK, post(pools::restock_pool))
        .route(paths::HOLDS, post(holds::reserve))
        .route(paths::HOLD, get(holds::get_hold))
        .route(paths::HOLD_CONFIRM, post(holds::confirm_hold))
        .route(paths::HOLD_RELEASE, post(holds::release_hold))
        .route(paths::HOLD_EXTEND, post(holds::extend_hold))
        .route(paths::HOLD_REFUND, post(holds::refund_hold))
        .route(paths::BATCH, post(batch::batch))
        .route(paths::EVENTS, get(events::events))
        .route(paths::EVENT_PARTITIONS, get(events::partitions))
        .route(paths::LOCK_ACQUIRE, post(locks::acquire_lock))
        .route(paths::LOCK_RENEW, post(locks::renew_lock))
        .route(paths::LOCK_RELEASE, post(locks::release_lock))
        .route(paths::CONSOLE, get(console::redirect))
        .route(paths::CONSOLE_PAGE, get(console::index))
        .route(paths::CONSOLE_ASSET, get(console::asset))
        .fallback(not_found)
        // Must come after every route: it replaces the default fallback of the routes present.
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(app)
        .layer(DefaultBodyLimit::max(config.body_limit_bytes))
        .layer(EdgeLayer::new(auth, Arc::clone(&metrics)))
        .layer(axum::middleware::from_fn_with_state(
            crate::json::BodyRules {
                limit_bytes: config.body_limit_bytes,
                timeout: config.body_timeout,
            },
            crate::json::buffer_body,
        ));
    (router, metrics)
}

/// A 404 that says what was asked for and, when it is close to a route, which one.
async fn not_found(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    let path = uri.path();
    let shown: String = path.chars().take(200).collect();
    let ellipsis = if shown.len() < path.len() { "..." } else { "" };
    ApiError::NotFound {
        tried: format!("{method} {shown}{ellipsis}"),
        advice: match suggest(path) {
            Some(route) => format!("did you mean {route}?"),
            None => "the routes are listed at /openapi.json".to_string(),
        },
    }
}

/// The route `path` probably meant, with the caller's own ids in it: the same path without a
/// trailing or doubled slash, with a static segment's case or plural fixed (`/v1/Pool/p` is
/// `/v1/pools/p`), or with `/v1` added or taken away. `None` when no route is that close.
pub(crate) fn suggest(path: &str) -> Option<String> {
    let given: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
    let mut tries = vec![given.clone()];
    match given.first() {
        Some(first) if first.eq_ignore_ascii_case("v1") => tries.push(given[1..].to_vec()),
        _ => tries.push([&["v1"][..], &given[..]].concat()),
    }
    for parts in tries {
        for route in RouteId::ALL {
            let pattern: Vec<&str> = route.path().split('/').skip(1).collect();
            if pattern.len() != parts.len() {
                continue;
            }
            let fits = pattern.iter().zip(&parts).all(|(want, have)| {
                want.starts_with('{')
                    || want.eq_ignore_ascii_case(have)
                    || want.eq_ignore_ascii_case(&format!("{have}s"))
            });
            if fits {
                let fixed: Vec<&str> = pattern
                    .iter()
                    .zip(&parts)
                    .map(|(want, have)| if want.starts_with('{') { *have } else { *want })
                    .collect();
                let suggestion = format!("/{}", fixed.join("/"));
                return (suggestion != path).then_some(suggestion);
            }
        }
    }
    None
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_table_is_consistent() {
        for (index, route) in RouteId::ALL.iter().enumerate() {
            assert_eq!(*route as usize, index, "{route:?} out of order in ALL");
            assert_eq!(RouteId::from_path(route.path()), Some(*route));
        }
        assert_eq!(RouteId::from_path("/nope"), None);
    }

    #[test]
    fn a_path_close_to_a_route_gets_that_route_with_its_own_ids() {
        for (path, expected) in [
            ("/v1/pools/", Some("/v1/pools")),
            ("/v1/pools/p1/", Some("/v1/pools/p1")),
            ("//v1//holds/h1/confirm", Some("/v1/holds/h1/confirm")),
            ("/v1/pool/Sku-1", Some("/v1/pools/Sku-1")),
            ("/V1/Holds/H1", Some("/v1/holds/H1")),
            ("/pools/p1/restock", Some("/v1/pools/p1/restock")),
            ("/v1/healthz", Some("/healthz")),
            ("/v1/lock/l/acquire", Some("/v1/locks/l/acquire")),
            ("/v1/event/partitions/", Some("/v1/events/partitions")),
            ("/nowhere", None),
            ("/v1/pools/p/q/r", None),
            ("/", None),
        ] {
            assert_eq!(suggest(path).as_deref(), expected, "{path}");
        }
    }
}
