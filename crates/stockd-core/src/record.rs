//! Records and events.
//!
//! A [`Record`] is one durable state change: what the write-ahead log stores and what recovery
//! replays. Replaying the same records in the same order rebuilds the same state, event seqs
//! included, because [`crate::State::apply_record`] is deterministic.
//!
//! An [`Event`] is what the ordered feed (`GET /v1/events`) shows. Events are derived from
//! records while they are applied; a record may yield none (locks), one, or several (a hold that
//! brings a pool to its low-stock threshold yields `held` then `low_stock`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::command::HoldItem;
use crate::command::PoolSpec;
use crate::ids::{HoldId, LockName, OwnerId, PoolId, RequestId, UserId};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub at_ms: u64,
    pub change: Change,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    PoolUpserted {
        pool: PoolId,
        spec: PoolSpec,
    },
    Restocked {
        pool: PoolId,
        delta: i64,
    },
    PoolDeleted {
        pool: PoolId,
    },
    Held {
        hold_id: HoldId,
        user: Option<UserId>,
        items: Arc<[HoldItem]>,
        confirm: bool,
        expires_at_ms: u64,
    },
    Confirmed {
        hold_id: HoldId,
    },
    Released {
        hold_id: HoldId,
    },
    Expired {
        hold_id: HoldId,
    },
    Refunded {
        hold_id: HoldId,
    },
    Extended {
        hold_id: HoldId,
        expires_at_ms: u64,
    },
    LockAcquired {
        name: LockName,
        owner: OwnerId,
        token: u64,
        expires_at_ms: u64,
    },
    LockRenewed {
        name: LockName,
        expires_at_ms: u64,
    },
    LockReleased {
        name: LockName,
    },
    // Variants are appended, never inserted: the log encodes a variant by its position, so a log
    // written by an earlier release still decodes.
    /// A refund whose sold units leave the pool (`restock: false`): sold and total both shrink.
    /// `Refunded` is the refund with restock.
    RefundedWithoutRestock {
        hold_id: HoldId,
    },
    /// A restock that named a request id: `Restocked`, and the id is remembered (pool, delta,
    /// the record's time) for the hold retention, so that a retry changes nothing.
    RestockedWithRequestId {
        pool: PoolId,
        delta: i64,
        request_id: RequestId,
    },
    /// A pool created split into `segments` (> 1): `PoolUpserted`, and the count is kept for
    /// the pool's life. A pool of one segment is created by `PoolUpserted`.
    PoolCreatedWithSegments {
        pool: PoolId,
        spec: PoolSpec,
        segments: u32,
    },
}

/// What an event records, as the core keeps it (snapshots, the Redis library's JSON). The API's
/// twin is `stockd_api::wire::EventType`, kept apart on purpose (persistence and contract may
/// change independently); the server converts between the two in one place (its `wire` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
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

/// One entry of the ordered event feed. Fields that do not apply to the event's type are absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    pub at_ms: u64,
    #[serde(rename = "type")]
    pub kind: EventKind,
    pub pool: Option<PoolId>,
    pub hold_id: Option<HoldId>,
    pub user: Option<UserId>,
    pub items: Option<Arc<[HoldItem]>>,
    pub available: Option<u64>,
    pub total: Option<u64>,
    pub delta: Option<i64>,
    pub low_stock_threshold: Option<u64>,
    pub expires_at_ms: Option<u64>,
    /// `refunded` only: whether the units went back to available.
    pub restock: Option<bool>,
    /// `restocked` only: the request id the restock named, if any.
    pub request_id: Option<RequestId>,
    /// `held` only: the hold's created_at_ms, the event's at_ms (a hold over several partitions
    /// of a Redis Cluster committed by library `stockd_v10` or older was created earlier, when
    /// its attempt began).
    pub created_at_ms: Option<u64>,
    /// A hold's events, when its units came from segments of a pool spread over partitions (a
    /// Redis Cluster): which segment gave how many, per pool. Never set by the core, which keeps
    /// every pool whole; snapshots do not store it.
    #[serde(default)]
    pub segments: Option<Vec<SegmentTake>>,
}

/// Units a hold took from one segment of a pool (an event's `segments`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentTake {
    pub pool: PoolId,
    pub segment: u32,
    pub qty: u64,
}

impl Event {
    /// An event of `kind` with none of the optional fields set: the core sets those that apply.
    pub fn new(seq: u64, at_ms: u64, kind: EventKind) -> Self {
        Event {
            seq,
            at_ms,
            kind,
            pool: None,
            hold_id: None,
            user: None,
            items: None,
            available: None,
            total: None,
            delta: None,
            low_stock_threshold: None,
            expires_at_ms: None,
            restock: None,
            request_id: None,
            created_at_ms: None,
            segments: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// postcard writes a variant as its index: the variants a previous release logged must keep
    /// theirs, so that its log still decodes; new variants go at the end.
    #[test]
    fn logged_variants_keep_their_tags() {
        let hold_id = HoldId::parse("h").unwrap();
        let name = LockName::parse("l").unwrap();
        let encoded = |change: &Change| postcard::to_allocvec(change).unwrap();
        assert_eq!(
            encoded(&Change::Refunded {
                hold_id: hold_id.clone()
            }),
            [7, 1, b'h']
        );
        assert_eq!(encoded(&Change::LockReleased { name }), [11, 1, b'l']);
        assert_eq!(
            encoded(&Change::RefundedWithoutRestock { hold_id }),
            [12, 1, b'h']
        );
        assert_eq!(
            encoded(&Change::RestockedWithRequestId {
                pool: PoolId::parse("p").unwrap(),
                delta: -1,
                request_id: RequestId::parse("r").unwrap(),
            }),
            [13, 1, b'p', 1, 1, b'r']
        );
    }
}
