//! The route table and the state every handler shares.
//!
//! Owns the paths (one constant each, also named by each handler's OpenAPI attribute) and the
//! route table (`route_table!`): every route once, with its handler per method (who may call
//! it is its operation's role), from which the router, the metrics' route label, the auth rules
//! and the OpenAPI document's operations are all generated, so they cannot drift apart; and the
//! single "execute one command" helper. Each resource has its own file of handlers that read
//! the same way: parse (extractors) -> `Backend::execute` -> encode (`reply`). No handler may
//! compute anything about stock; that answer comes from the backend.

/// Declares one handler of a resource named by a path id: its OpenAPI attribute, and a body that
/// extracts the id (and the request body, if any), refuses a query string, executes the one
/// command it builds and encodes the reply. Each use states only what differs: method, path,
/// tag, summary (and description), the id parameter, the request body, the one response and
/// the command; `empty body` stands for a body that may be empty or `{}` (`EmptyBody`, whose
/// schema `EmptyObject` the calling module imports). Defined before the resource modules, which
/// use it.
macro_rules! command_handler {
    (
        $method:ident $path:ident, tag = $tag:literal, summary = $summary:literal, empty body,
        $($rest:tt)*
    ) => {
        command_handler! {
            $method $path, tag = $tag, summary = $summary,
            [request_body(content = Option<EmptyObject>, description = "Empty, or `{}`")],
            $($rest)*
        }
    };
    (
        $method:ident $path:ident, tag = $tag:literal, summary = $summary:literal,
        $(description = $description:literal,)?
        $([$($request_body:tt)*],)?
        fn $name:ident(
            $id:ident: $id_ty:ty = ($param:literal, $param_description:literal)
            $(, $body:ident $(($body_bind:tt))?: $body_ty:ty)?
        ) -> ($status:literal, $response:literal $(, $response_ty:ty)?)
        => $command:expr
    ) => {
        #[utoipa::path(
            $method,
            path = paths::$path,
            tag = $tag,
            summary = $summary,
            $(description = $description,)?
            params(($param = String, Path, description = $param_description)),
            $($($request_body)*,)?
            responses((status = $status, description = $response $(, body = $response_ty)?))
        )]
        pub(crate) async fn $name(
            ::axum::extract::State(app): ::axum::extract::State<$crate::routes::App>,
            $crate::json::PathId($id): $crate::json::PathId<$id_ty>,
            _: $crate::json::NoQuery,
            $($body $(($body_bind))?: $body_ty,)?
        ) -> ::axum::response::Response {
            app.execute($command).await
        }
    };
}

pub(crate) mod batch;
pub(crate) mod console;
pub(crate) mod events;
pub(crate) mod holds;
pub(crate) mod locks;
pub(crate) mod ops;
pub(crate) mod pools;

use std::sync::Arc;

use crate::json::Api;
use axum::body::Bytes;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter};
use axum::Router;
use stockd_api as api;
use stockd_core::{Backend, Command, Reply};

use crate::auth::Auth;
use crate::edge::EdgeLayer;
use crate::error::ApiError;
use crate::json::BodyLimit;
use crate::metrics::Metrics;
use crate::{openapi, reply, ServerConfig};

/// Every path the router matches: the API's ([`stockd_api::paths`], shared with the client) and
/// the console's.
pub(crate) mod paths {
    pub use stockd_api::paths::*;

    pub const CONSOLE: &str = "/ui";
    pub const CONSOLE_PAGE: &str = "/ui/";
    pub const CONSOLE_ASSET: &str = "/ui/assets/{file}";
}

/// Declares the route table: each route once, with its handler per operation. An API route
/// names its operations ([`stockd_api`]: each one's method, path and role, declared there once
/// and shared with the client), so the table restates none of them; the console's files, which
/// are not API, have their path and method here. Everything else that lists routes is generated
/// from it: [`RouteId`] (the metrics' route label, [`RouteId::from_path`] for the edge), the
/// access rules [`RouteId::access`] and [`RouteId::is_admin_only`] (auth, from the operations'
/// roles), the router ([`add_routes`]), and the OpenAPI document's
/// operations (`api_handlers!`, which hands the API routes' handlers to `openapi.rs`). A new
/// route is one line here (and its handler); a route missing from the table does not exist.
macro_rules! route_table {
    (
        api { $(
            $id:ident => {
                $first:ident => $first_handler:path
                $(, $operation:ident => $handler:path )* $(,)?
            }
        ),+ $(,)? }
        console { $(
            $console_id:ident $console_path:path => { $( $console_method:ident => $console_handler:path ),+ $(,)? }
        ),+ $(,)? }
    ) => {
        /// A route. The discriminant is the index into [`RouteId::ALL`] (metrics slots).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub(crate) enum RouteId {
            $($id,)+
            $($console_id,)+
        }

        impl RouteId {
            pub(crate) const ALL: &'static [RouteId] = &[
                $(RouteId::$id,)+
                $(RouteId::$console_id,)+
            ];

            /// The path template: an API route's is its operations' (all the same, tested).
            pub(crate) fn path(self) -> &'static str {
                match self {
                    $(RouteId::$id => api::$first.path,)+
                    $(RouteId::$console_id => $console_path,)+
                }
            }

            /// The route whose pattern is `matched` (axum's `MatchedPath`).
            pub(crate) fn from_path(matched: &str) -> Option<RouteId> {
                RouteId::ALL.iter().copied().find(|route| route.path() == matched)
            }

            /// An API route is open when its operations are (they all agree, tested); a route
            /// of operations that do not would need a token.
            pub(crate) fn access(self) -> Access {
                match self {
                    $(RouteId::$console_id => Access::Console,)+
                    _ if self
                        .operations()
                        .iter()
                        .all(|operation| operation.role == api::Role::Open) => Access::Open,
                    _ => Access::Token,
                }
            }

            /// The API's operations this route serves (none for the console's files).
            pub(crate) fn operations(self) -> &'static [api::Operation] {
                match self {
                    $(RouteId::$id => &[api::$first $(, api::$operation)*],)+
                    $(RouteId::$console_id => &[],)+
                }
            }

            /// The methods this route serves.
            #[cfg(test)]
            pub(crate) fn methods(self) -> Vec<&'static str> {
                match self {
                    $(RouteId::$console_id => vec![$(stringify!($console_method)),+],)+
                    _ => self.operations().iter().map(|operation| operation.method).collect(),
                }
            }

            /// Whether `method` on this route needs an admin token: its operation's role.
            pub(crate) fn is_admin_only(self, method: &Method) -> bool {
                self.operations().iter().any(|operation| {
                    operation.method == method.as_str() && operation.role == api::Role::Admin
                })
            }
        }

        /// Every route of the table on `router`, each method to its handler.
        fn add_routes(router: Router<App>) -> Router<App> {
            router
                $(.route(
                    api::$first.path,
                    MethodRouter::new()
                        .on(method_filter(&api::$first), $first_handler)
                        $(.on(method_filter(&api::$operation), $handler))*,
                ))+
                $(.route($console_path, MethodRouter::new() $(.on(MethodFilter::$console_method, $console_handler))+))+
        }

        /// Calls `$callback!` with the handlers of the routes the OpenAPI document describes
        /// (the API's, open or not; not the console's files).
        macro_rules! api_handlers {
            ($callback:ident) => {
                $callback!($($first_handler, $($handler,)*)+);
            };
        }
        pub(crate) use api_handlers;
    };
}

/// The router's filter for `operation`'s method.
fn method_filter(operation: &api::Operation) -> MethodFilter {
    Method::from_bytes(operation.method.as_bytes())
        .ok()
        .and_then(|method| MethodFilter::try_from(method).ok())
        .expect("stockd_api's operations use the standard methods (GET, PUT, POST, DELETE)")
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// No token: probes, scrapers and this document carry none.
    Open,
    /// A token of a role the method allows.
    Token,
    /// No token, and not API (not in the OpenAPI document): the web console's files, which
    /// hold no data (the console asks for a token to call the API).
    Console,
}

route_table! {
    api {
        // Open (every operation's role is `Open`): first, as the metrics' slots have them.
        Healthz => { HEALTHZ => ops::healthz },
        Readyz => { READYZ => ops::readyz },
        Metrics => { METRICS => ops::metrics },
        OpenApi => { OPENAPI => ops::openapi_json },
        Pools => { LIST_POOLS => pools::list_pools },
        Pool => {
            PUT_POOL => pools::put_pool,
            GET_POOL => pools::get_pool,
            DELETE_POOL => pools::delete_pool,
        },
        PoolRestock => { RESTOCK => pools::restock_pool },
        PoolSegments => { GET_POOL_SEGMENTS => pools::get_pool_segments },
        Holds => { LIST_HOLDS => holds::list_holds, RESERVE => holds::reserve },
        Hold => { GET_HOLD => holds::get_hold },
        HoldConfirm => { CONFIRM => holds::confirm_hold },
        HoldRelease => { RELEASE => holds::release_hold },
        HoldExtend => { EXTEND => holds::extend_hold },
        HoldRefund => { REFUND => holds::refund_hold },
        Batch => { BATCH => batch::batch },
        Events => { EVENTS => events::events },
        EventPartitions => { EVENT_PARTITIONS => events::partitions },
        LockAcquire => { LOCK_ACQUIRE => locks::acquire_lock },
        LockRenew => { LOCK_RENEW => locks::renew_lock },
        LockRelease => { LOCK_RELEASE => locks::release_lock },
    }
    console {
        Console paths::CONSOLE => { GET => console::redirect },
        ConsolePage paths::CONSOLE_PAGE => { GET => console::index },
        ConsoleAsset paths::CONSOLE_ASSET => { GET => console::asset },
    }
}

impl RouteId {
    /// Routes that need no token: the open ones and the console's files.
    pub(crate) fn is_open(self) -> bool {
        self.access() != Access::Token
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

pub(crate) fn router(backend: Arc<dyn Backend>, config: ServerConfig) -> (Api, Arc<Metrics>) {
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
    let router = add_routes(Router::new())
        .fallback(not_found)
        // Must come after every route: it replaces the default fallback of the routes present.
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(app)
        .layer(EdgeLayer::new(auth, Arc::clone(&metrics)));
    let rules = crate::json::BodyRules {
        limit_bytes: config.body_limit_bytes,
        timeout: config.body_timeout,
    };
    (Api::new(router, rules), metrics)
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

    /// A route's access is its operations': open when they all are, and then none of them
    /// needs a token, so a route never mixes open and token operations.
    #[test]
    fn a_routes_operations_agree_on_needing_a_token() {
        for route in RouteId::ALL {
            let open = route
                .operations()
                .iter()
                .filter(|operation| operation.role == api::Role::Open)
                .count();
            assert!(open == 0 || open == route.operations().len(), "{route:?}");
            assert_eq!(route.access() == Access::Open, open > 0, "{route:?}");
        }
    }

    /// The API routes of the table are exactly the API's operations, which the client also
    /// builds its calls from: neither can gain or lose one alone. A route's operations share its
    /// path, and each is served once.
    #[test]
    fn the_api_routes_are_the_shared_operations() {
        for route in RouteId::ALL {
            for operation in route.operations() {
                assert_eq!(operation.path, route.path(), "{route:?}");
            }
            let mut methods = route.methods();
            methods.sort_unstable();
            methods.dedup();
            assert_eq!(methods.len(), route.methods().len(), "{route:?}");
        }
        let mut served: Vec<(&str, &str)> = RouteId::ALL
            .iter()
            .filter(|route| route.access() != Access::Console)
            .flat_map(|route| {
                route
                    .methods()
                    .into_iter()
                    .map(|method| (method, route.path()))
            })
            .collect();
        let mut operations: Vec<(&str, &str)> = stockd_api::OPERATIONS
            .iter()
            .map(|operation| (operation.method, operation.path))
            .collect();
        served.sort_unstable();
        operations.sort_unstable();
        assert_eq!(served, operations);
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
