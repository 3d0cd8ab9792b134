//! Commands: what a client can ask of a backend, and what it gets back.
//!
//! A command carries already-parsed identifiers; [`Command::validate`] checks every range and
//! shape rule of the contract without looking at any state, so that validation always comes
//! before lookup. The core calls it first thing; a backend that does not run the core (Redis)
//! must call it too.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::ids::{is_id_byte, HoldId, LockName, OwnerId, PoolId, RequestId, UserId};
use crate::limits::*;
use crate::view::{HoldStatus, HoldView, PoolView, SegmentView};

/// The rule fields and total of a pool, as given to `PUT /v1/pools/{pool}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSpec {
    pub total: u64,
    pub per_user_limit: Option<u64>,
    pub starts_at_ms: Option<u64>,
    pub ends_at_ms: Option<u64>,
    pub low_stock_threshold: Option<u64>,
}

/// Units of one pool in a hold: what a reserve asks for, and what a hold and its events carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldItem {
    pub pool: PoolId,
    pub qty: u64,
}

/// A reserve (`POST /v1/holds`). `ttl_ms`, `confirm` and `wait_ms` carry their defaults already.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReserveRequest {
    pub hold_id: HoldId,
    pub user: Option<UserId>,
    pub items: Arc<[HoldItem]>,
    pub ttl_ms: u64,
    pub confirm: bool,
    pub wait_ms: u64,
}

/// A lock acquisition (`POST /v1/locks/{name}/acquire`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRequest {
    pub name: LockName,
    pub owner: OwnerId,
    pub ttl_ms: u64,
    pub wait_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// `segments`: how many segments the pool is split into (1..=[`SEGMENTS_MAX`]), fixed when
    /// the pool is created. `None` creates a pool of one segment and leaves an existing pool's
    /// count as it is; another count than the existing pool's is `segments_fixed`.
    PutPool {
        pool: PoolId,
        spec: PoolSpec,
        segments: Option<u64>,
        if_absent: bool,
    },
    /// `request_id`: a retry (the same id, pool and delta) changes nothing, while the id is
    /// remembered (the hold retention from the restock).
    Restock {
        pool: PoolId,
        delta: i64,
        request_id: Option<RequestId>,
    },
    GetPool {
        pool: PoolId,
    },
    /// The pool's segments with their counts (`GET /v1/pools/{pool}/segments`).
    GetSegments {
        pool: PoolId,
    },
    ListPools {
        prefix: String,
        after: Option<String>,
        limit: usize,
    },
    DeletePool {
        pool: PoolId,
    },
    Reserve(ReserveRequest),
    Confirm {
        hold_id: HoldId,
    },
    Release {
        hold_id: HoldId,
    },
    /// `restock`: the sold units go back to available (true, the default) or leave the pool
    /// (false: sold and total both shrink).
    Refund {
        hold_id: HoldId,
        restock: bool,
    },
    Extend {
        hold_id: HoldId,
        ttl_ms: u64,
    },
    GetHold {
        hold_id: HoldId,
    },
    /// The retained holds in hold id order, after `after`, matching every filter given.
    ListHolds {
        pool: Option<PoolId>,
        user: Option<UserId>,
        status: Option<HoldStatus>,
        after: Option<String>,
        limit: usize,
    },
    LockAcquire(LockRequest),
    LockRenew {
        name: LockName,
        owner: OwnerId,
        token: u64,
        ttl_ms: u64,
    },
    LockRelease {
        name: LockName,
        owner: OwnerId,
        token: u64,
    },
}

/// A successful answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `created` is true when the command created the pool. `replayed` is true when the command
    /// was a restock retried with the request id of one already applied: it changed nothing
    /// (and wrote no record), the pool is as it is now. Only a restock ever sets it.
    Pool {
        pool: PoolView,
        created: bool,
        replayed: bool,
    },
    Segments {
        segments: Vec<SegmentView>,
    },
    PoolList {
        pools: Vec<PoolView>,
        next: Option<PoolId>,
    },
    PoolDeleted,
    /// A page of holds; `next` is the cursor of the following page, `None` at the end. A page
    /// may hold fewer than `limit` holds (even none) and still have a `next`.
    HoldList {
        holds: Vec<HoldView>,
        next: Option<HoldId>,
    },
    /// `created` is true when this command created the hold (201), false on a replay (200).
    Hold {
        hold: HoldView,
        created: bool,
    },
    Lock {
        token: u64,
        expires_at_ms: u64,
    },
    LockReleased,
}

pub type Outcome = Result<Reply, Error>;

fn check_range(name: &str, value: u64, min: u64, max: u64) -> Result<(), Error> {
    if value < min || value > max {
        return Err(Error::invalid(format!(
            "{name} must be from {min} to {max}, got {value}"
        )));
    }
    Ok(())
}

impl PoolSpec {
    pub fn validate(&self) -> Result<(), Error> {
        check_range("total", self.total, 0, TOTAL_MAX)?;
        if let Some(limit) = self.per_user_limit {
            check_range("per_user_limit", limit, 1, PER_USER_LIMIT_MAX)?;
        }
        if let Some(t) = self.starts_at_ms {
            check_range("starts_at_ms", t, 0, TIME_MS_MAX)?;
        }
        if let Some(t) = self.ends_at_ms {
            check_range("ends_at_ms", t, 0, TIME_MS_MAX)?;
        }
        if let Some(threshold) = self.low_stock_threshold {
            check_range("low_stock_threshold", threshold, 0, TOTAL_MAX)?;
        }
        Ok(())
    }
}

impl ReserveRequest {
    pub fn validate(&self) -> Result<(), Error> {
        if self.items.is_empty() || self.items.len() > HOLD_ITEMS_MAX {
            return Err(Error::invalid(format!(
                "items must have from 1 to {HOLD_ITEMS_MAX} entries, got {}",
                self.items.len()
            )));
        }
        for (index, item) in self.items.iter().enumerate() {
            check_range("qty", item.qty, 1, QTY_MAX)?;
            // At most 64 items: a quadratic scan without allocation beats a hash set here.
            if self.items[..index]
                .iter()
                .any(|earlier| earlier.pool == item.pool)
            {
                return Err(Error::invalid(format!(
                    "pool {} appears more than once in items",
                    item.pool
                )));
            }
        }
        check_range("ttl_ms", self.ttl_ms, HOLD_TTL_MS_MIN, HOLD_TTL_MS_MAX)?;
        check_range("wait_ms", self.wait_ms, 0, WAIT_MS_MAX)
    }
}

impl Command {
    /// Checks every rule that needs no state. Validation comes before any lookup.
    pub fn validate(&self) -> Result<(), Error> {
        match self {
            Command::PutPool { spec, segments, .. } => {
                spec.validate()?;
                match segments {
                    Some(segments) => check_range("segments", *segments, 1, SEGMENTS_MAX),
                    None => Ok(()),
                }
            }
            Command::Restock { delta, .. } => {
                if *delta == 0 || delta.unsigned_abs() > TOTAL_MAX {
                    return Err(Error::invalid(format!(
                        "delta must be non-zero and from -{TOTAL_MAX} to {TOTAL_MAX}, got {delta}"
                    )));
                }
                Ok(())
            }
            Command::ListPools {
                prefix,
                after,
                limit,
            } => {
                if prefix.len() > ID_LEN_MAX || !prefix.bytes().all(is_id_byte) {
                    return Err(Error::invalid(format!(
                        "prefix must be at most {ID_LEN_MAX} bytes of ASCII letters, digits, \
                         '.', '_', ':' and '-', got {prefix:?}"
                    )));
                }
                if let Some(after) = after {
                    PoolId::parse(after).map_err(|e| Error::invalid(format!("after: {e}")))?;
                }
                check_range("limit", *limit as u64, 1, POOL_LIST_LIMIT_MAX as u64)
            }
            Command::ListHolds { after, limit, .. } => {
                if let Some(after) = after {
                    HoldId::parse(after).map_err(|e| Error::invalid(format!("after: {e}")))?;
                }
                check_range("limit", *limit as u64, 1, HOLD_LIST_LIMIT_MAX as u64)
            }
            Command::Reserve(request) => request.validate(),
            Command::Extend { ttl_ms, .. } => {
                check_range("ttl_ms", *ttl_ms, HOLD_TTL_MS_MIN, HOLD_TTL_MS_MAX)
            }
            Command::LockAcquire(request) => {
                check_range("ttl_ms", request.ttl_ms, LOCK_TTL_MS_MIN, LOCK_TTL_MS_MAX)?;
                check_range("wait_ms", request.wait_ms, 0, WAIT_MS_MAX)
            }
            Command::LockRenew { ttl_ms, .. } => {
                check_range("ttl_ms", *ttl_ms, LOCK_TTL_MS_MIN, LOCK_TTL_MS_MAX)
            }
            Command::GetPool { .. }
            | Command::GetSegments { .. }
            | Command::DeletePool { .. }
            | Command::Confirm { .. }
            | Command::Release { .. }
            | Command::Refund { .. }
            | Command::GetHold { .. }
            | Command::LockRelease { .. } => Ok(()),
        }
    }
}
