//! What clients see of pools and holds: plain data, built from the state on demand.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::command::HoldItem;
use crate::ids::{HoldId, PoolId, UserId};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolView {
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
    /// How many segments the pool is split into (1 unless it was created with more).
    pub segments: u32,
}

/// One segment of a pool and its counts (`GET /v1/pools/{pool}/segments`). A backend that keeps
/// a segmented pool as one (the embedded engine, a single Redis) has one segment, 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentView {
    pub segment: u32,
    /// The event-feed partition the segment lives in.
    pub partition: u32,
    pub total: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
}

/// A hold's status as the core keeps it (state, snapshots). The API's twin is
/// `stockd_api::wire::HoldStatus`, kept apart on purpose (persistence and contract may change
/// independently); the server converts between the two in one place (its `wire` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldStatus {
    Held,
    Confirmed,
    Released,
    Expired,
    Refunded,
}

impl HoldStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            HoldStatus::Held => "held",
            HoldStatus::Confirmed => "confirmed",
            HoldStatus::Released => "released",
            HoldStatus::Expired => "expired",
            HoldStatus::Refunded => "refunded",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldView {
    pub hold_id: HoldId,
    pub status: HoldStatus,
    pub user: Option<UserId>,
    pub items: Arc<[HoldItem]>,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub finished_at_ms: Option<u64>,
    /// The event-feed partition that carries this hold's events (0 with one partition).
    pub partition: u32,
}
