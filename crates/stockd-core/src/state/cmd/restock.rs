//! `restock`: adds units to a pool, or takes available units away.
//!
//! It decides whether the delta fits: a negative delta may take only available units (never
//! held or sold ones), a positive one may not take the total past `TOTAL_MAX`. It must never
//! change a counter itself; `apply_record` does, from the record.
//!
//! With a request id it first looks the id up: a retry (same pool and delta) answers the pool
//! as it is now, marked `replayed` so that the caller can tell it from the first application,
//! and writes nothing; the id with another pool or delta is a conflict. The id is remembered
//! only by the record of a restock that succeeded, so a refused restock leaves it new.
//!
//! Its Lua twin is `crates/stockd-redis/lua/cmd/restock.lua`.

use crate::command::{Outcome, Reply};
use crate::error::Error;
use crate::ids::{PoolId, RequestId};
use crate::record::Change;
use crate::state::{Effects, State};

impl State {
    pub(in crate::state) fn restock(
        &mut self,
        pool: PoolId,
        delta: i64,
        request_id: Option<RequestId>,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        if let Some(request_id) = &request_id {
            // Past retention the id is forgotten for every command, even before the sweep
            // reaches it, as a replayed state would have it.
            if self.restock_request_past_retention(request_id, now_ms) {
                self.data.restock_requests.remove(request_id);
            }
            if let Some(first) = self.data.restock_requests.get(request_id) {
                if first.pool != pool || first.delta != delta {
                    return Err(Error::RequestIdConflict {
                        request_id: request_id.clone(),
                        pool: first.pool.clone(),
                        delta: first.delta,
                    });
                }
                let view = self.pool_view(&pool).ok_or(Error::PoolNotFound { pool })?;
                return Ok(Reply::Pool {
                    pool: view,
                    created: false,
                    replayed: true,
                });
            }
        }
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
        let change = match request_id {
            None => Change::Restocked {
                pool: pool.clone(),
                delta,
            },
            Some(request_id) => Change::RestockedWithRequestId {
                pool: pool.clone(),
                delta,
                request_id,
            },
        };
        self.commit(now_ms, change, effects);
        let view = self.pool_view(&pool).expect("pool exists");
        Ok(Reply::Pool {
            pool: view,
            created: false,
            replayed: false,
        })
    }
}
