//! `put_pool`: creates a pool, or replaces an existing pool's settings and total.
//!
//! It decides whether the write is allowed (a new total may not fall below the units already
//! held or sold) and whether `if_absent` turns it into a plain read. The arithmetic itself
//! (available = total - held - sold) is `apply_record`'s; this file must never touch a counter.
//!
//! Its Lua twin is `crates/stockd-redis/lua/cmd/put_pool.lua`.

use crate::command::{Outcome, PoolSpec, Reply};
use crate::error::Error;
use crate::ids::PoolId;
use crate::record::Change;
use crate::state::{Effects, State};

impl State {
    pub(in crate::state) fn put_pool(
        &mut self,
        pool: PoolId,
        spec: PoolSpec,
        if_absent: bool,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        let created = match self.data.pools.get(&pool) {
            Some(_) if if_absent => {
                let view = self.pool_view(&pool).expect("pool exists");
                return Ok(Reply::Pool {
                    pool: view,
                    created: false,
                    replayed: false,
                });
            }
            Some(existing) => {
                let committed = existing.held + existing.sold;
                if spec.total < committed {
                    return Err(Error::TotalBelowCommitted {
                        pool,
                        total: spec.total,
                        committed,
                    });
                }
                false
            }
            None => true,
        };
        self.commit(
            now_ms,
            Change::PoolUpserted {
                pool: pool.clone(),
                spec,
            },
            effects,
        );
        let view = self.pool_view(&pool).expect("pool was just written");
        Ok(Reply::Pool {
            pool: view,
            created,
            replayed: false,
        })
    }
}
