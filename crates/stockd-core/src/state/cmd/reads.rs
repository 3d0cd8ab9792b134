//! The reads: `get_pool`, `get_segments` (one segment: one state keeps a pool whole),
//! `list_pools` (by id prefix, paged by the last id seen), `get_hold`
//! and `list_holds` (by pool, user and status, paged by the last hold id examined).
//!
//! They decide nothing and must never change a pool or take units. `get_hold` alone may write:
//! it settles the hold it reads, so an overdue hold is expired by the read as by any command.
//! `list_holds` writes nothing (a page may hold a thousand holds): it shows each hold as settling
//! would leave it, an overdue hold as `expired` and a hold past retention not at all.
//!
//! Its Lua twin is `crates/stockd-redis/lua/cmd/reads.lua`.

use std::ops::Bound;

use crate::command::{Outcome, Reply};
use crate::error::Error;
use crate::ids::{HoldId, PoolId, UserId};
use crate::limits::HOLD_LIST_EXAMINED_MAX;
use crate::state::{Effects, State};
use crate::view::{HoldStatus, HoldView, PoolView, SegmentView};

/// What `list_holds` keeps: holds with an item in `pool`, of `user`, in `status` (each when
/// given).
#[derive(Debug, Clone, Copy)]
pub(in crate::state) struct HoldFilter<'a> {
    pub pool: Option<&'a str>,
    pub user: Option<&'a UserId>,
    pub status: Option<HoldStatus>,
}

impl State {
    pub(in crate::state) fn get_pool(&self, pool: PoolId) -> Outcome {
        self.pool_view(&pool)
            .map(|pool| Reply::Pool {
                pool,
                created: false,
                replayed: false,
            })
            .ok_or(Error::PoolNotFound { pool })
    }

    /// One segment, 0, with the pool's counts: one state keeps a segmented pool as one.
    pub(in crate::state) fn get_segments(&self, pool: PoolId) -> Outcome {
        let view = self.pool_view(&pool).ok_or(Error::PoolNotFound { pool })?;
        Ok(Reply::Segments {
            segments: vec![SegmentView {
                segment: 0,
                partition: view.partition,
                total: view.total,
                available: view.available,
                held: view.held,
                sold: view.sold,
            }],
        })
    }

    pub(in crate::state) fn list_pools(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Reply {
        let lower = match after {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        let mut pools = Vec::with_capacity(limit.min(self.data.pools.len()));
        let mut next = None;
        for (id, _) in self
            .data
            .pools
            .range::<str, _>((lower, Bound::Unbounded))
            .take_while(|(id, _)| id.as_str().starts_with(prefix))
        {
            if pools.len() == limit {
                next = pools.last().map(|p: &PoolView| p.pool.clone());
                break;
            }
            pools.push(self.pool_view(id).expect("listed pool exists"));
        }
        Reply::PoolList { pools, next }
    }

    /// Settles the hold first, so that a read shows an overdue hold as expired (and writes its
    /// expiry record) exactly as any other command would.
    pub(in crate::state) fn get_hold(
        &mut self,
        hold_id: HoldId,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        self.settle(&hold_id, now_ms, effects);
        self.hold_reply(&hold_id, false)
    }
}

impl State {
    /// Up to `limit` holds after `after` matching `filter`, in hold id order. The page walks one
    /// index (the user's when given, else the pool's, else all holds) and examines at
    /// most `HOLD_LIST_EXAMINED_MAX` entries: when the other filters reject most of them, the
    /// page ends early with `next` at the last hold examined, so that no page scans a million
    /// holds. `next` is `None` only when the index has nothing more.
    pub(in crate::state) fn list_holds(
        &self,
        filter: &HoldFilter,
        after: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Reply {
        // Validated: a cursor is a hold id.
        let after = after.map(|after| HoldId::parse(after).expect("validated cursor"));
        let slots =
            (self.hold_index).walk(&self.data.holds, filter.pool, filter.user, after.as_ref());
        let mut holds: Vec<HoldView> = Vec::with_capacity(limit.min(self.hold_index.len()));
        let mut next = None;
        let mut last_examined: Option<&HoldId> = None;
        for (examined, slot) in slots.enumerate() {
            let hold_id = self.data.holds.at(slot).0;
            if examined == HOLD_LIST_EXAMINED_MAX {
                next = last_examined.cloned();
                break;
            }
            if let Some(hold) = self.listed_hold(hold_id, filter, now_ms) {
                if holds.len() == limit {
                    next = holds.last().map(|hold| hold.hold_id.clone());
                    break;
                }
                holds.push(hold);
            }
            last_examined = Some(hold_id);
        }
        Reply::HoldList { holds, next }
    }

    /// The hold as `get_hold` at `now_ms` would show it, if it matches `filter`: `None` past
    /// retention (forgotten for every command) or when a filter rejects it.
    fn listed_hold(&self, hold_id: &HoldId, filter: &HoldFilter, now_ms: u64) -> Option<HoldView> {
        let hold = &self.data.holds[hold_id];
        let past_retention = hold
            .finished_at_ms
            .is_some_and(|at| at.saturating_add(self.retention_ms(hold.status)) <= now_ms);
        if past_retention {
            return None;
        }
        if filter.user.is_some() && hold.user.as_ref() != filter.user {
            return None;
        }
        if let Some(pool) = filter.pool {
            if !hold.items.iter().any(|item| item.pool.as_str() == pool) {
                return None;
            }
        }
        let mut view = self.hold_view(hold_id).expect("indexed hold exists");
        // Overdue: settling would expire it now, finished at its deadline (apply.rs).
        if view.status == HoldStatus::Held && now_ms >= view.expires_at_ms {
            view.status = HoldStatus::Expired;
            view.finished_at_ms = Some(view.expires_at_ms);
        }
        if filter.status.is_some_and(|status| status != view.status) {
            return None;
        }
        Some(view)
    }
}
