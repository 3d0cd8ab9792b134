//! The reads: `get_pool`, `list_pools` (by id prefix, paged by the last id seen) and
//! `get_hold`.
//!
//! They decide nothing and must never change a pool or take units. `get_hold` alone may write:
//! it settles the hold it reads, so an overdue hold is expired by the read as by any command.
//!
//! Its Lua twin is `crates/stockd-redis/lua/cmd/reads.lua`.

use std::ops::Bound;

use crate::command::{Outcome, Reply};
use crate::error::Error;
use crate::ids::{HoldId, PoolId};
use crate::state::{Effects, State};
use crate::view::PoolView;

impl State {
    pub(in crate::state) fn get_pool(&self, pool: PoolId) -> Outcome {
        self.pool_view(&pool)
            .map(|pool| Reply::Pool {
                pool,
                created: false,
            })
            .ok_or(Error::PoolNotFound { pool })
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
