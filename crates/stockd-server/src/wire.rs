//! The API's response bodies as the server writes them. The pools, holds, events, leases and
//! pages are the contract's types ([`stockd_api::wire`], declared once for the server and the
//! client), serialised for clients and described in the OpenAPI document by the same
//! definitions, so that the two cannot differ. This module builds them from the core's views
//! and events, one conversion per type, with ids borrowed from the views; the core's types are
//! not the wire format, so that the core (and the logs and snapshots it writes) and the API can
//! change independently. The bodies only the server has (probes, errors) are declared here.
//!
//! Request bodies are in [`crate::dto`].

use serde::Serialize;
use stockd_core::{Event, EventKind, HoldView, PoolId, PoolView, SegmentView};
use utoipa::ToSchema;

pub(crate) use stockd_api::wire::{
    BatchResponse, BatchResult, EventObject, EventPage, EventPartitions, EventType, HoldItem,
    HoldList, HoldObject, HoldStatus, LockGrant, LockReleased, PoolList, PoolObject, SegmentList,
    SegmentObject, SegmentTake,
};

/// An empty object: the body of confirm and release, which may also be absent, empty or `null`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EmptyObject {}

/// A pool as the API shows it.
pub(crate) fn pool(view: &PoolView) -> PoolObject<&str> {
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
        segments,
    } = view;
    PoolObject {
        pool: pool.as_str(),
        total: *total,
        available: *available,
        held: *held,
        sold: *sold,
        per_user_limit: *per_user_limit,
        starts_at_ms: *starts_at_ms,
        ends_at_ms: *ends_at_ms,
        low_stock_threshold: *low_stock_threshold,
        partition: *partition,
        segments: *segments,
    }
}

/// A pool's segments as the API shows them.
pub(crate) fn segments(views: &[SegmentView]) -> SegmentList {
    SegmentList {
        segments: views
            .iter()
            .map(|view| {
                let SegmentView {
                    segment,
                    partition,
                    total,
                    available,
                    held,
                    sold,
                } = *view;
                SegmentObject {
                    segment,
                    partition,
                    total,
                    available,
                    held,
                    sold,
                }
            })
            .collect(),
    }
}

/// One page of pools; `next` is the cursor of the following page.
pub(crate) fn pool_list<'a>(pools: &'a [PoolView], next: &'a Option<PoolId>) -> PoolList<&'a str> {
    PoolList {
        pools: pools.iter().map(pool).collect(),
        next: next.as_ref().map(PoolId::as_str),
    }
}

// The core's status and the API's meet here, and only here: the core's is what it stores, the
// API's what clients see and filter on.
pub(crate) fn status(status: stockd_core::HoldStatus) -> HoldStatus {
    use stockd_core::HoldStatus as Core;
    match status {
        Core::Held => HoldStatus::Held,
        Core::Confirmed => HoldStatus::Confirmed,
        Core::Released => HoldStatus::Released,
        Core::Expired => HoldStatus::Expired,
        Core::Refunded => HoldStatus::Refunded,
    }
}

/// The status a `?status=` filter names.
pub(crate) fn core_status(status: HoldStatus) -> stockd_core::HoldStatus {
    use stockd_core::HoldStatus as Core;
    match status {
        HoldStatus::Held => Core::Held,
        HoldStatus::Confirmed => Core::Confirmed,
        HoldStatus::Released => Core::Released,
        HoldStatus::Expired => Core::Expired,
        HoldStatus::Refunded => Core::Refunded,
    }
}

fn items(items: &[stockd_core::HoldItem]) -> Vec<HoldItem<&str>> {
    items
        .iter()
        .map(|item| {
            let stockd_core::HoldItem { pool, qty } = item;
            HoldItem {
                pool: pool.as_str(),
                qty: *qty,
            }
        })
        .collect()
}

/// A hold as the API shows it.
pub(crate) fn hold(view: &HoldView) -> HoldObject<&str> {
    // Destructured so that a field added to the view fails to compile until it is shown.
    let HoldView {
        hold_id,
        status: held_status,
        user,
        items: held,
        created_at_ms,
        expires_at_ms,
        finished_at_ms,
        partition,
    } = view;
    HoldObject {
        hold_id: hold_id.as_str(),
        status: status(*held_status),
        user: user.as_ref().map(|user| user.as_str()),
        items: items(held),
        created_at_ms: *created_at_ms,
        expires_at_ms: *expires_at_ms,
        finished_at_ms: *finished_at_ms,
        partition: *partition,
    }
}

/// One page of holds; `next` is the cursor of the following page.
pub(crate) fn hold_list<'a>(
    holds: &'a [HoldView],
    next: &'a Option<stockd_core::HoldId>,
) -> HoldList<&'a str> {
    HoldList {
        holds: holds.iter().map(hold).collect(),
        next: next.as_ref().map(|next| next.as_str()),
    }
}

// The core's event kinds and the API's meet here: the core's is what it logs and snapshots.
fn event_type(kind: EventKind) -> EventType {
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

/// An event as the feed shows it.
pub(crate) fn event(event: &Event) -> EventObject<&str> {
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
        segments,
    } = event;
    EventObject {
        seq: *seq,
        at_ms: *at_ms,
        kind: event_type(*kind),
        pool: pool.as_ref().map(|pool| pool.as_str()),
        hold_id: hold_id.as_ref().map(|hold_id| hold_id.as_str()),
        user: user.as_ref().map(|user| user.as_str()),
        items: held.as_deref().map(items),
        available: *available,
        total: *total,
        delta: *delta,
        low_stock_threshold: *low_stock_threshold,
        created_at_ms: *created_at_ms,
        expires_at_ms: *expires_at_ms,
        restock: *restock,
        request_id: request_id.as_ref().map(|request_id| request_id.as_str()),
        segments: segments.as_ref().map(|takes| {
            takes
                .iter()
                .map(|take| SegmentTake {
                    pool: take.pool.as_str(),
                    segment: take.segment,
                    qty: take.qty,
                })
                .collect()
        }),
    }
}

/// One page of one partition of the feed.
pub(crate) fn event_page(page: &stockd_core::EventPage) -> EventPage<&str> {
    let stockd_core::EventPage { events, next_after } = page;
    EventPage {
        events: events.iter().map(event).collect(),
        next_after: *next_after,
    }
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
