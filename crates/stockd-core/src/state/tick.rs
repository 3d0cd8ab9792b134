//! What the passing of time does: holds expire, leases lapse, waits run out, finished holds and
//! restock request ids are forgotten past retention, and when the next of these is due.
//!
//! Only `tick` writes records (expiries, and whatever the waiters it answers decide); forgetting
//! writes none, so recovery can redo it with `forget_past_retention`. Nothing here may read a
//! clock (time is `now_ms`) or decide a command's rules itself: a waiter's last attempt goes
//! through the command's own decision.

use std::cmp::Reverse;

use crate::limits::{EXPIRIES_PER_TICK_MAX, PURGES_PER_TICK_MAX};

use super::{Effects, State, WaitFor, WaiterId};

impl State {
    /// Does what the passing of time does, up to `now_ms`: expires holds past their deadline,
    /// frees lapsed leases, answers waiters whose wait is over, and forgets finished holds past
    /// retention.
    pub fn tick(&mut self, now_ms: u64, effects: &mut Effects) {
        // Bounded, so that one tick's records fit in a log frame and its pause stays short even
        // when a million holds lapse at once (after downtime or a clock step): the rest are
        // still due, so the caller's next tick comes at once. Commands meanwhile see any such
        // hold as expired anyway (lazy expiry).
        let mut expired = 0;
        while let Some(expires_at_ms) = self.expiry_queue.peek_ms() {
            if expires_at_ms > now_ms || expired == EXPIRIES_PER_TICK_MAX {
                break;
            }
            let (queued_ms, hold_id) = self.expiry_queue.pop().expect("peeked");
            // Skip stale entries (the hold was extended or its id reused): the current deadline
            // has an entry of its own, so holds expire in deadline order, as after a restart.
            let current = self
                .data
                .holds
                .get(&hold_id)
                .is_some_and(|hold| hold.expires_at_ms == queued_ms);
            if current {
                self.expire_if_due(&hold_id, now_ms, effects);
                expired += 1;
            }
        }
        self.drop_lapsed_locks(now_ms);
        self.serve_freed(now_ms, effects);
        while let Some(Reverse((deadline_ms, _))) = self.waiter_deadlines.peek() {
            if *deadline_ms > now_ms {
                break;
            }
            let Reverse((_, id)) = self.waiter_deadlines.pop().expect("peeked");
            let Some(waiter) = self.unpark(id) else {
                continue;
            };
            // The wait is over: one last attempt gives the final answer, success included.
            let outcome = match &waiter.wait_for {
                WaitFor::Stock(request) => self.try_reserve(request, now_ms, effects),
                WaitFor::Lock(request) => self.try_lock_acquire(request, now_ms, effects),
            };
            effects.woken.push((id, outcome));
        }
        self.purge_retained(now_ms, PURGES_PER_TICK_MAX);
        self.forget_restock_requests(now_ms, PURGES_PER_TICK_MAX);
        self.serve_freed(now_ms, effects);
    }

    /// What time does without a record: forgets finished holds and restock request ids past
    /// retention and lapsed leases, all of them. Recovery calls it after replaying records (replay alone keeps them, since forgetting writes nothing to the log);
    /// it answers no waiter.
    pub fn forget_past_retention(&mut self, now_ms: u64) {
        self.drop_lapsed_locks(now_ms);
        self.freed_locks.clear();
        self.purge_retained(now_ms, usize::MAX);
        self.forget_restock_requests(now_ms, usize::MAX);
    }

    fn drop_lapsed_locks(&mut self, now_ms: u64) {
        while let Some(Reverse((expires_at_ms, _))) = self.lock_expiry_queue.peek() {
            if *expires_at_ms > now_ms {
                break;
            }
            let Reverse((_, name)) = self.lock_expiry_queue.pop().expect("peeked");
            // A lapsed lease is free by the clock already; dropping it from memory needs no
            // record, since a replayed copy is just as lapsed.
            if self
                .data
                .locks
                .get(&name)
                .is_some_and(|lock| lock.expires_at_ms <= now_ms)
            {
                self.data.locks.remove(&name);
                self.freed_locks.push(name);
            }
        }
    }

    fn purge_retained(&mut self, now_ms: u64, purges_max: usize) {
        let mut purged = 0;
        while let Some(purge_at_ms) = self.purge_queue.peek_ms() {
            if purge_at_ms > now_ms || purged == purges_max {
                break;
            }
            let (_, hold_id) = self.purge_queue.pop().expect("peeked");
            let purge = self.data.holds.get(&hold_id).is_some_and(|hold| {
                hold.finished_at_ms
                    .is_some_and(|at| at.saturating_add(self.retention_ms(hold.status)) <= now_ms)
            });
            if purge {
                self.remove_hold(&hold_id);
                purged += 1;
            }
        }
    }

    /// Forgets restock request ids past retention (a forgotten id is new again). Like a hold,
    /// an id is forgotten without a record: a replay remembers it from its record, then
    /// forgets it the same way.
    fn forget_restock_requests(&mut self, now_ms: u64, forgets_max: usize) {
        let mut forgotten = 0;
        while let Some(Reverse((forget_at_ms, _))) = self.request_purge_queue.peek() {
            if *forget_at_ms > now_ms || forgotten == forgets_max {
                break;
            }
            let Reverse((_, request_id)) = self.request_purge_queue.pop().expect("peeked");
            // Skip a stale entry: the id was forgotten and used again, and its new use has an
            // entry of its own.
            if self.restock_request_past_retention(&request_id, now_ms) {
                self.data.restock_requests.remove(&request_id);
                forgotten += 1;
            }
        }
    }

    /// Whether a remembered request id is due to be forgotten at `now_ms`.
    pub(in crate::state) fn restock_request_past_retention(
        &self,
        request_id: &crate::ids::RequestId,
        now_ms: u64,
    ) -> bool {
        self.data
            .restock_requests
            .get(request_id)
            .is_some_and(|request| {
                request.at_ms.saturating_add(self.config.hold_retention_ms) <= now_ms
            })
    }

    /// The earliest time at which [`State::tick`] has something to do, if any.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        [
            self.expiry_queue.peek_ms(),
            self.lock_expiry_queue.peek().map(|Reverse((t, _))| *t),
            self.waiter_deadlines.peek().map(|Reverse((t, _))| *t),
            self.purge_queue.peek_ms(),
            self.request_purge_queue.peek().map(|Reverse((t, _))| *t),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Forgets a waiter whose client went away. Returns whether it was still waiting.
    pub fn cancel_waiter(&mut self, id: WaiterId) -> bool {
        self.unpark(id).is_some()
    }
}
