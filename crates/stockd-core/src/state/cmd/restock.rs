//! `restock`: adds units to a pool, or takes available units away.
//!
//! It decides whether the delta fits: a negative delta may take only available units (never
//! held or sold ones), a positive one may not take the total past `TOTAL_MAX`. It must never
//! change a counter itself; `apply_record` does, from the record.
//!
//! Its Lua twin is `crates/stockd-redis/lua/cmd/restock.lua`.

use crate::command::{Outcome, Reply};
use crate::error::Error;
use crate::ids::PoolId;
use crate::record::Change;
use crate::state::{Effects, State};

impl State {
    pub(in crate::state) fn restock(
        &mut self,
        pool: PoolId,
        delta: i64,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        let Some(existing) = self.data.pools.get(&pool) else {
            return Err(Error::PoolNotFound { pool });
        };
        if delta < 0 && delta.unsigned_abs() > existing.available {
            return Err(Error::InsufficientStock {
                available: existing.available,
                requested: delta.unsigned_abs(),
                pool,
            });
        }
        if delta > 0 && existing.total + delta.unsigned_abs() > crate::limits::TOTAL_MAX {
            return Err(Error::invalid(format!(
                "restock would take total of pool {pool} above {}",
                crate::limits::TOTAL_MAX
            )));
        }
        self.commit(
            now_ms,
            Change::Restocked {
                pool: pool.clone(),
                delta,
            },
            effects,
        );
        let view = self.pool_view(&pool).expect("pool exists");
        Ok(Reply::Pool {
            pool: view,
            created: false,
        })
    }
}
