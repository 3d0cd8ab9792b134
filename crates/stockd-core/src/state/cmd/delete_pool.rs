//! `delete_pool`: removes a pool.
//!
//! It decides whether the pool may go: never while units of it are held (those holds would have
//! nowhere to return them). Sold units do not block it; confirmed holds of a deleted pool can no
//! longer be refunded (see `refund`). It must never touch the holds themselves.
//!
//! Its Lua twin is `crates/stockd-redis/lua/cmd/delete_pool.lua`.

use crate::command::{Outcome, Reply};
use crate::error::Error;
use crate::ids::PoolId;
use crate::record::Change;
use crate::state::{Effects, State};

impl State {
    pub(in crate::state) fn delete_pool(
        &mut self,
        pool: PoolId,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        let Some(existing) = self.data.pools.get(&pool) else {
            return Err(Error::PoolNotFound { pool });
        };
        if existing.held > 0 {
            return Err(Error::PoolHasActiveHolds {
                held: existing.held,
                pool,
            });
        }
        self.commit(now_ms, Change::PoolDeleted { pool }, effects);
        Ok(Reply::PoolDeleted)
    }
}
