//! The API's response bodies: the server's own types, each serialised for clients and described
//! in the OpenAPI document by the same definition, so that the two cannot differ. They are built
//! from the core's views and events; the core's types are not the wire format, so that the core
//! (and the logs and snapshots it writes) and the API can change independently.
//!
//! Request bodies are in [`crate::dto`]; a hold's item (`{"pool", "qty"}`) is [`HoldItem`] in
//! both directions.

use serde::{Deserialize, Serialize};
use stockd_core::{Event, EventKind, HoldId, HoldView, PoolId, PoolView, RequestId, UserId};
use utoipa::ToSchema;

/// An empty object: the body of confirm and release, which may also be absent, empty or `null`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EmptyObject {}

/// A pool. `total = available + held + sold`; rule fields are null when unset.
#[derive(Serialize, ToSchema)]
pub(crate) struct PoolObject {
    #[schema(value_type = String)]
    pub pool: PoolId,
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

impl From<&PoolView> for PoolObject {
    fn from(view: &PoolView) -> Self {
        // Destructured so that a field added to the view fails to compile until it is shown.
        let PoolView {
            pool,
            total,
            available,
            held,
            sold,
            per_user_limit,
            starts_at_ms,
            ends_at_ms,
            low_stock_threshold,
            partition,
        } = view;
        PoolObject {
            pool: pool.clone(),
            total: *total,
            available: *available,
            held: *held,
            sold: *sold,
            per_user_limit: *per_user_limit,
            starts_at_ms: *starts_at_ms,
            ends_at_ms: *ends_at_ms,
            low_stock_threshold: *low_stock_threshold,
            partition: *partition,
        }
    }
}

/// One page of pools, ordered by id.
#[derive(Serialize, ToSchema)]
pub(crate) struct PoolList {
    pub pools: Vec<PoolObject>,
    /// Pass as `after` for the next page; null on the last page.
    #[schema(value_type = Option<String>)]
    pub next: Option<PoolId>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum HoldStatus {
    Held,
    Confirmed,
    Released,
    Expired,
    Refunded,
}

impl From<stockd_core::HoldStatus> for HoldStatus {
    fn from(status: stockd_core::HoldStatus) -> Self {
        use stockd_core::HoldStatus as Core;
        match status {
            Core::Held => HoldStatus::Held,
            Core::Confirmed => HoldStatus::Confirmed,
            Core::Released => HoldStatus::Released,
            Core::Expired => HoldStatus::Expired,
            Core::Refunded => HoldStatus::Refunded,
        }
    }
}

impl HoldStatus {
    /// The status a `?status=` filter names.
    pub(crate) fn into_core(self) -> stockd_core::HoldStatus {
        use stockd_core::HoldStatus as Core;
        match self {
            HoldStatus::Held => Core::Held,
            HoldStatus::Confirmed => Core::Confirmed,
            HoldStatus::Released => Core::Released,
            HoldStatus::Expired => Core::Expired,
            HoldStatus::Refunded => Core::Refunded,
        }
    }
}

/// Units of one pool in a hold: what a reserve asks for, and what a hold and its events show.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HoldItem {
    #[schema(value_type = String)]
    pub pool: PoolId,
    /// 1..=1_000_000_000.
    pub qty: u64,
}

impl From<&stockd_core::HoldItem> for HoldItem {
    fn from(item: &stockd_core::HoldItem) -> Self {
        HoldItem {
            pool: item.pool.clone(),
            qty: item.qty,
        }
    }
}

fn items(items: &[stockd_core::HoldItem]) -> Vec<HoldItem> {
    items.iter().map(HoldItem::from).collect()
}

/// A hold. `finished_at_ms` is null while held, else the time of the latest transition.
#[derive(Serialize, ToSchema)]
pub(crate) struct HoldObject {
    #[schema(value_type = String)]
    pub hold_id: HoldId,
    pub status: HoldStatus,
    #[schema(value_type = Option<String>)]
    pub user: Option<UserId>,
    pub items: Vec<HoldItem>,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub finished_at_ms: Option<u64>,
    /// The event-feed partition that carries this hold's events (0 with one partition).
    pub partition: u32,
}

/// One page of holds, ordered by hold id. A page may hold fewer than `limit` holds, even none,
/// when the filters reject most of the holds it examined: only `next: null` means the end.
#[derive(Serialize, ToSchema)]
pub(crate) struct HoldList {
    pub holds: Vec<HoldObject>,
    /// Pass as `after` for the next page; null on the last page.
    #[schema(value_type = Option<String>)]
    pub next: Option<HoldId>,
}

impl From<&HoldView> for HoldObject {
    fn from(view: &HoldView) -> Self {
        let HoldView {
            hold_id,
            status,
            user,
            items: held,
            created_at_ms,
            expires_at_ms,
            finished_at_ms,
            partition,
        } = view;
        HoldObject {
            hold_id: hold_id.clone(),
            status: (*status).into(),
            user: user.clone(),
            items: items(held),
            created_at_ms: *created_at_ms,
            expires_at_ms: *expires_at_ms,
            finished_at_ms: *finished_at_ms,
            partition: *partition,
        }
    }
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

#[derive(Clone, Copy, Serialize, ToSchema)]
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

impl From<EventKind> for EventType {
    fn from(kind: EventKind) -> Self {
        match kind {
            EventKind::PoolUpserted => EventType::PoolUpserted,
            EventKind::Restocked => EventType::Restocked,
            EventKind::PoolDeleted => EventType::PoolDeleted,
            EventKind::Held => EventType::Held,
            EventKind::Confirmed => EventType::Confirmed,
            EventKind::Released => EventType::Released,
            EventKind::Expired => EventType::Expired,
            EventKind::Refunded => EventType::Refunded,
            EventKind::Extended => EventType::Extended,
            EventKind::LowStock => EventType::LowStock,
        }
    }
}

/// One state change. Fields that do not apply to the type are absent.
#[derive(Serialize, ToSchema)]
pub(crate) struct EventObject {
    pub seq: u64,
    pub at_ms: u64,
    #[serde(rename = "type")]
    pub kind: EventType,
    #[schema(value_type = Option<String>, nullable = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolId>,
    #[schema(value_type = Option<String>, nullable = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_id: Option<HoldId>,
    #[schema(value_type = Option<String>, nullable = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<UserId>,
    #[schema(nullable = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<Vec<HoldItem>>,
    /// Pool events: the pool's available after the change; on `pool_deleted`, as it was when
    /// the pool was deleted.
    #[schema(nullable = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available: Option<u64>,
    /// Pool events: the pool's total after the change; on `pool_deleted`, as it was when the
    /// pool was deleted.
    #[schema(nullable = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// `restocked` and `pool_upserted`: the change of total (and of available), so that a
    /// consumer can keep a pool's numbers by adding deltas; a create's is its total.
    #[schema(nullable = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<i64>,
    #[schema(nullable = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub low_stock_threshold: Option<u64>,
    /// `held` only: the hold's created_at_ms, as GET /v1/holds/{id} shows it. The event's at_ms
    /// on one partition; on a Redis Cluster a hold over several partitions is created a little
    /// before it is held, so it can be earlier than at_ms there.
    #[schema(nullable = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at_ms: Option<u64>,
    #[schema(nullable = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// `refunded` only: true when the units went back to available, false when they left the
    /// pool (sold and total both shrank).
    #[schema(nullable = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restock: Option<bool>,
    /// `restocked` only: the request id the restock named, if it named one.
    #[schema(value_type = Option<String>, nullable = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<RequestId>,
}

impl From<&Event> for EventObject {
    fn from(event: &Event) -> Self {
        // Destructured so that a field added to `Event` fails to compile until it is shown.
        let Event {
            seq,
            at_ms,
            kind,
            pool,
            hold_id,
            user,
            items: held,
            available,
            total,
            delta,
            low_stock_threshold,
            expires_at_ms,
            restock,
            request_id,
            created_at_ms,
        } = event;
        EventObject {
            seq: *seq,
            at_ms: *at_ms,
            kind: (*kind).into(),
            pool: pool.clone(),
            hold_id: hold_id.clone(),
            user: user.clone(),
            items: held.as_deref().map(items),
            available: *available,
            total: *total,
            delta: *delta,
            low_stock_threshold: *low_stock_threshold,
            created_at_ms: *created_at_ms,
            expires_at_ms: *expires_at_ms,
            restock: *restock,
            request_id: request_id.clone(),
        }
    }
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

/// A probe's answer.
#[derive(Serialize, ToSchema)]
pub(crate) struct StatusBody {
    pub status: &'static str,
}

/// `/readyz`'s answer when ready: with what the operator must know about the backend's set-up
/// (on Redis, settings under which a crash loses acknowledged changes), empty when nothing.
#[derive(Serialize, ToSchema)]
pub(crate) struct ReadyBody {
    pub status: &'static str,
    pub warnings: Vec<String>,
}

/// Every error: a stable code, a human message, and details depending on the code (`pool`,
/// `available`, `requested`, `limit`, `used`, `expires_at_ms`, `oldest_seq`, `partitions`, ...).
/// Written by [`crate::error::ApiError`]'s own `Serialize`, which adds the details.
#[derive(ToSchema)]
#[allow(dead_code)] // The document's picture of an error body; `ApiError` writes it.
pub(crate) struct ErrorBody {
    pub error: String,
    pub message: String,
}

/// What the single endpoint would have answered for one op. Written by the batch route.
#[derive(ToSchema)]
#[allow(dead_code)] // The document's picture of a result; `routes::batch` writes it.
pub(crate) struct BatchResult {
    pub status: u16,
    /// A hold object, or an error body.
    #[schema(value_type = Object)]
    pub body: serde_json::Value,
}

/// One result per op, in order.
#[derive(ToSchema)]
#[allow(dead_code)] // The document's picture of the answer; `routes::batch` writes it.
pub(crate) struct BatchResponse {
    pub results: Vec<BatchResult>,
}
