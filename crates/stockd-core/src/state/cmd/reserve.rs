//! `reserve`: makes a hold on one or more pools, all or nothing, and parks it when stock is short
//! and the client asked to wait.
//!
//! It decides replays (the same hold id and request gives the same hold back), id conflicts,
//! and every per-pool rule in request order (pool exists, user required, sale window, enough
//! available, per-user limit). `try_reserve` is also how a parked reserve is served later, so
//! waiting can never bypass a rule. It must never take units itself: the `Held` record does.
//!
//! Its Lua twin is `crates/stockd-redis/lua/cmd/reserve.lua`.

use crate::command::{Outcome, ReserveRequest};
use crate::error::Error;
use crate::record::Change;
use crate::state::{Effects, Hold, State, Step, WaitFor};

impl State {
    pub(in crate::state) fn reserve(
        &mut self,
        request: ReserveRequest,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Step {
        let outcome = self.try_reserve(&request, now_ms, effects);
        if request.wait_ms == 0 || !matches!(outcome, Err(Error::InsufficientStock { .. })) {
            return Step::Done(outcome);
        }
        // Park the request on every pool it names: units coming back to any of them may be
        // what it lacks. A full queue means the crowd is already larger than any stock that
        // could come back soon; answer now rather than grow the queue.
        for item in request.items.iter() {
            if !self.has_waiter_room_on_pool(&item.pool) {
                return Step::Done(outcome);
            }
        }
        let deadline_ms = now_ms + request.wait_ms;
        Step::Waiting(self.park(WaitFor::Stock(request), deadline_ms))
    }

    /// One attempt at a reserve, without waiting: replay, conflict, or check and take.
    pub(in crate::state) fn try_reserve(
        &mut self,
        request: &ReserveRequest,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        // A new id (the common case) costs this one lookup.
        if self.data.holds.contains_key(&request.hold_id) {
            self.forget_if_past_retention(&request.hold_id, now_ms);
            if self.data.holds.contains_key(&request.hold_id) {
                self.expire_if_due(&request.hold_id, now_ms, effects);
                let hold = &self.data.holds[&request.hold_id];
                return if hold_matches(hold, request) {
                    self.hold_reply(&request.hold_id, false)
                } else {
                    Err(Error::HoldIdConflict {
                        hold_id: request.hold_id.clone(),
                    })
                };
            }
        }
        self.check_reserve(request, now_ms)?;
        // The hold shares the request's item list (one list per hold, not a copy).
        let items = request.items.clone();
        self.commit(
            now_ms,
            Change::Held {
                hold_id: request.hold_id.clone(),
                user: request.user.clone(),
                items,
                confirm: request.confirm,
                expires_at_ms: now_ms + request.ttl_ms,
            },
            effects,
        );
        if request.confirm {
            self.commit(
                now_ms,
                Change::Confirmed {
                    hold_id: request.hold_id.clone(),
                },
                effects,
            );
        }
        self.hold_reply(&request.hold_id, true)
    }

    /// Checks a reserve against the state, item by item in the order given; the first failure
    /// wins. Reads only.
    fn check_reserve(&self, request: &ReserveRequest, now_ms: u64) -> Result<(), Error> {
        for item in request.items.iter() {
            let Some(pool) = self.data.pools.get(&item.pool) else {
                return Err(Error::PoolNotFound {
                    pool: item.pool.clone(),
                });
            };
            if pool.per_user_limit.is_some() && request.user.is_none() {
                return Err(Error::UserRequired {
                    pool: item.pool.clone(),
                });
            }
            if let Some(starts_at_ms) = pool.starts_at_ms {
                if now_ms < starts_at_ms {
                    return Err(Error::SaleNotStarted {
                        pool: item.pool.clone(),
                        starts_at_ms,
                    });
                }
            }
            if let Some(ends_at_ms) = pool.ends_at_ms {
                if now_ms >= ends_at_ms {
                    return Err(Error::SaleEnded {
                        pool: item.pool.clone(),
                        ends_at_ms,
                    });
                }
            }
            if pool.available < item.qty {
                return Err(Error::InsufficientStock {
                    pool: item.pool.clone(),
                    available: pool.available,
                    requested: item.qty,
                });
            }
            if let (Some(limit), Some(user)) = (pool.per_user_limit, &request.user) {
                let used = pool.usage.get(user).copied().unwrap_or(0);
                if used + item.qty > limit {
                    return Err(Error::UserLimitExceeded {
                        pool: item.pool.clone(),
                        limit,
                        used,
                        requested: item.qty,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Whether a reserve repeats the one that made `hold`: same user, same items in any order,
/// same confirm flag.
fn hold_matches(hold: &Hold, request: &ReserveRequest) -> bool {
    if hold.user != request.user
        || hold.confirm != request.confirm
        || hold.items.len() != request.items.len()
    {
        return false;
    }
    request.items.iter().all(|item| {
        hold.items
            .iter()
            .any(|held| held.pool == item.pool && held.qty == item.qty)
    })
}
