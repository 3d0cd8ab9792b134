//! `put_pool`: creates a pool, or replaces an existing pool's settings and total.
//!
//! It decides whether the write is allowed (a new total may not fall below the units already
//! held or sold) and whether `if_absent` turns it into a plain read. The arithmetic itself
//! (available = total - held - sold) is `apply_record`'s; this file must never touch a counter.
//! A pool's segment count is fixed when it is created: a `PUT` naming another is refused even
//! with `if_absent` unset, and one naming none keeps it.
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
        segments: Option<u64>,
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
                if let Some(requested) = segments.filter(|&s| s != u64::from(existing.segments)) {
                    return Err(Error::SegmentsFixed {
                        pool,
                        segments: u64::from(existing.segments),
                        requested,
                    });
                }
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
        let change = match segments {
            Some(segments) if created && segments > 1 => Change::PoolCreatedWithSegments {
                pool: pool.clone(),
                spec,
                segments: u32::try_from(segments).expect("validated to at most SEGMENTS_MAX"),
            },
            _ => Change::PoolUpserted {
                pool: pool.clone(),
                spec,
            },
        };
        self.commit(now_ms, change, effects);
        let view = self.pool_view(&pool).expect("pool was just written");
        Ok(Reply::Pool {
            pool: view,
            created,
            replayed: false,
        })
    }
}
