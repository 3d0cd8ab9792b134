//! The OpenAPI 3 document of the HTTP API, derived with utoipa from the handlers' annotations and
//! the request types, plus schema-only mirrors of the response bodies.
//!
//! Response bodies on the wire are written by the core's views and `reply`; the structs in
//! [`schemas`] exist only to describe them (the core crate knows nothing of OpenAPI). Tests check
//! that real responses and these schemas name the same fields. This module must never be on the
//! request path: the document is serialised once, when the router is built. No UI, no downloads.

use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{Modify, OpenApi};

use crate::dto;
use crate::routes::{batch, events, holds, locks, ops, paths, pools};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "stockd",
        description = "Oversell-proof stock reservation: pools of countable stock, all-or-nothing \
                       holds with deadlines, an ordered event feed and lease locks with fencing."
    ),
    paths(
        ops::healthz,
        ops::readyz,
        ops::metrics,
        ops::openapi_json,
        pools::put_pool,
        pools::get_pool,
        pools::delete_pool,
        pools::list_pools,
        pools::restock_pool,
        holds::reserve,
        holds::get_hold,
        holds::confirm_hold,
        holds::release_hold,
        holds::extend_hold,
        holds::refund_hold,
        batch::batch,
        events::events,
        events::partitions,
        locks::acquire_lock,
        locks::renew_lock,
        locks::release_lock,
    ),
    components(schemas(
        dto::PoolBody,
        dto::RestockBody,
        dto::HoldBody,
        dto::HoldItemBody,
        dto::ExtendBody,
        dto::LockAcquireBody,
        dto::LockRenewBody,
        dto::LockReleaseBody,
        dto::BatchBody,
        dto::BatchOp,
        schemas::EmptyObject,
        schemas::PoolObject,
        schemas::PoolList,
        schemas::HoldStatus,
        schemas::HoldItemObject,
        schemas::HoldObject,
        schemas::LockGrant,
        schemas::LockReleased,
        schemas::BatchResponse,
        schemas::BatchResult,
        schemas::EventType,
        schemas::EventObject,
        schemas::EventPage,
        schemas::EventPartitions,
        schemas::ErrorBody,
        schemas::StatusBody,
    )),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "pools", description = "Countable stock: create, restock, read, list, delete."),
        (name = "holds", description = "All-or-nothing reservations and their lifecycle."),
        (name = "batch", description = "Many hold operations in one request."),
        (name = "events", description = "The ordered feed of every state change."),
        (name = "locks", description = "Lease locks with fencing tokens."),
        (name = "ops", description = "Probes, metrics and this document; no token needed."),
    )
)]
struct ApiDoc;

/// Adds the bearer scheme, and the answers every guarded operation can give (401, 403 for pool
/// writes, 503) so the handlers' annotations list only what is particular to them.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(
                "bearer",
                SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
            );
        for (path, item) in openapi.paths.paths.iter_mut() {
            let is_pool_write = path == paths::POOL || path == paths::POOL_RESTOCK;
            let operations = [
                (&mut item.get, false),
                (&mut item.put, is_pool_write),
                (&mut item.post, is_pool_write),
                (&mut item.delete, is_pool_write),
            ];
            for (operation, admin_only) in operations {
                let Some(operation) = operation.as_mut() else {
                    continue;
                };
                // Operations that opt out of the global requirement carry `security: [{}]`.
                if operation.security.is_some() {
                    continue;
                }
                let responses = &mut operation.responses.responses;
                responses.insert(
                    "401".into(),
                    error_response("`unauthorized`: missing or unknown bearer token"),
                );
                if admin_only {
                    responses.insert(
                        "403".into(),
                        error_response("`forbidden`: needs an admin token"),
                    );
                }
                responses.insert(
                    "503".into(),
                    error_response("`backend_unavailable`: nothing was changed"),
                );
            }
        }
    }
}

fn error_response(description: &str) -> RefOr<Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build(),
    )
}

pub(crate) fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// Schema-only descriptions of response bodies. Never constructed: the wire format comes from
/// the core's views through `reply` and `routes::events`.
#[allow(dead_code)]
pub(crate) mod schemas {
    use serde::Serialize;
    use utoipa::ToSchema;

    /// An empty object; the body of confirm, release and refund may also be left empty.
    #[derive(Serialize, ToSchema)]
    pub(crate) struct EmptyObject {}

    /// A pool. `total = available + held + sold`; rule fields are null when unset.
    #[derive(Serialize, ToSchema)]
    pub(crate) struct PoolObject {
        pub pool: String,
        pub total: u64,
        pub available: u64,
        pub held: u64,
        pub sold: u64,
        pub per_user_limit: Option<u64>,
        pub starts_at_ms: Option<u64>,
        pub ends_at_ms: Option<u64>,
        pub low_stock_threshold: Option<u64>,
        /// The event-feed partition that carries this pool's events (0 with one partition).
        pub partition: u32,
    }

    /// One page of pools, ordered by id.
    #[derive(Serialize, ToSchema)]
    pub(crate) struct PoolList {
        pub pools: Vec<PoolObject>,
        /// Pass as `after` for the next page; null on the last page.
        pub next: Option<String>,
    }

    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub(crate) enum HoldStatus {
        Held,
        Confirmed,
        Released,
        Expired,
        Refunded,
    }

    #[derive(Serialize, ToSchema)]
    pub(crate) struct HoldItemObject {
        pub pool: String,
        pub qty: u64,
    }

    /// A hold. `finished_at_ms` is null while held, else the time of the latest transition.
    #[derive(Serialize, ToSchema)]
    pub(crate) struct HoldObject {
        pub hold_id: String,
        pub status: HoldStatus,
        pub user: Option<String>,
        pub items: Vec<HoldItemObject>,
        pub created_at_ms: u64,
        pub expires_at_ms: u64,
        pub finished_at_ms: Option<u64>,
        /// The event-feed partition that carries this hold's events (0 with one partition).
        pub partition: u32,
    }

    /// A granted lease: `token` is the fencing token, strictly increasing per lock name.
    #[derive(Serialize, ToSchema)]
    pub(crate) struct LockGrant {
        pub token: u64,
        pub expires_at_ms: u64,
    }

    #[derive(Serialize, ToSchema)]
    pub(crate) struct LockReleased {
        pub released: bool,
    }

    /// What the single endpoint would have answered for one op.
    #[derive(Serialize, ToSchema)]
    pub(crate) struct BatchResult {
        pub status: u16,
        /// A hold object, or an error body.
        #[schema(value_type = Object)]
        pub body: serde_json::Value,
    }

    /// One result per op, in order.
    #[derive(Serialize, ToSchema)]
    pub(crate) struct BatchResponse {
        pub results: Vec<BatchResult>,
    }

    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub(crate) enum EventType {
        PoolUpserted,
        Restocked,
        PoolDeleted,
        Held,
        Confirmed,
        Released,
        Expired,
        Refunded,
        Extended,
        LowStock,
    }

    /// One state change. Fields that do not apply to the type are absent.
    #[derive(Serialize, ToSchema)]
    pub(crate) struct EventObject {
        pub seq: u64,
        pub at_ms: u64,
        #[serde(rename = "type")]
        pub kind: EventType,
        #[schema(nullable = false)]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub pool: Option<String>,
        #[schema(nullable = false)]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub hold_id: Option<String>,
        #[schema(nullable = false)]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub user: Option<String>,
        #[schema(nullable = false)]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub items: Option<Vec<HoldItemObject>>,
        #[schema(nullable = false)]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub available: Option<u64>,
        #[schema(nullable = false)]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub total: Option<u64>,
        #[schema(nullable = false)]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub delta: Option<i64>,
        #[schema(nullable = false)]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub low_stock_threshold: Option<u64>,
        #[schema(nullable = false)]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub expires_at_ms: Option<u64>,
    }

    /// One page of one partition of the feed.
    #[derive(Serialize, ToSchema)]
    pub(crate) struct EventPage {
        pub events: Vec<EventObject>,
        /// Seq of the last event returned, or the `after` given when none is.
        pub next_after: u64,
    }

    /// How many partitions the feed has (P >= 1); read each with `partition=0..P-1`.
    #[derive(Serialize, ToSchema)]
    pub(crate) struct EventPartitions {
        pub partitions: u32,
    }

    /// Every error: a stable code, a human message, and details depending on the code
    /// (`pool`, `available`, `requested`, `limit`, `used`, `expires_at_ms`, `oldest_seq`,
    /// `partitions`, ...).
    #[derive(Serialize, ToSchema)]
    pub(crate) struct ErrorBody {
        pub error: String,
        pub message: String,
    }

    #[derive(Serialize, ToSchema)]
    pub(crate) struct StatusBody {
        pub status: String,
    }
}
