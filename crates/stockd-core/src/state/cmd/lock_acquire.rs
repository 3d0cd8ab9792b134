//! `lock_acquire`: takes a lease on a named lock with a fresh fencing token, and parks the
//! request when the lock is taken and the client asked to wait.
//!
//! It decides whether the lock is free (no lease, or a lapsed one) at `now_ms`.
//! `try_lock_acquire` is also how a parked request is served later. It must never hand out a
//! token that is not above every token handed out before.
//!
//! Its Lua twin is `crates/stockd-redis/lua/cmd/lock_acquire.lua`.

use crate::command::{LockRequest, Outcome, Reply};
use crate::error::Error;
use crate::record::Change;
use crate::state::{Effects, State, Step, WaitFor};

impl State {
    pub(in crate::state) fn lock_acquire(
        &mut self,
        request: LockRequest,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Step {
        let outcome = self.try_lock_acquire(&request, now_ms, effects);
        if request.wait_ms == 0 || !matches!(outcome, Err(Error::LockHeld { .. })) {
            return Step::Done(outcome);
        }
        if !self.has_waiter_room_on_lock(&request.name) {
            return Step::Done(outcome);
        }
        let deadline_ms = now_ms + request.wait_ms;
        Step::Waiting(self.park(WaitFor::Lock(request), deadline_ms))
    }

    pub(in crate::state) fn try_lock_acquire(
        &mut self,
        request: &LockRequest,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        if let Some(lock) = self.data.locks.get(&request.name) {
            if now_ms < lock.expires_at_ms {
                return Err(Error::LockHeld {
                    expires_at_ms: lock.expires_at_ms,
                });
            }
        }
        let token = self.data.next_fence_token;
        let expires_at_ms = now_ms + request.ttl_ms;
        self.commit(
            now_ms,
            Change::LockAcquired {
                name: request.name.clone(),
                owner: request.owner.clone(),
                token,
                expires_at_ms,
            },
            effects,
        );
        Ok(Reply::Lock {
            token,
            expires_at_ms,
        })
    }
}
