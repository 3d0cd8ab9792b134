//! Requests parked until stock or a lock comes back: room on a queue, parking, and serving the
//! waiters of whatever a command or a tick freed.
//!
//! Waiters live only in memory (a waiting client is a live connection, gone on restart), so
//! nothing here writes a record of its own: a waiter is served by running its command's decision
//! again (`try_reserve`, `try_lock_acquire`), and only that decision may take units or a lease.
//! Serving must never happen in the middle of a command, only once it is done.

use std::cmp::Reverse;
use std::collections::VecDeque;

use hashbrown::HashMap;

use crate::command::Outcome;
use crate::error::Error;
use crate::ids::{HoldId, LockName, PoolId};
use crate::limits::WAITERS_PER_KEY_MAX;

use super::{Effects, State, WaitFor, Waiter, WaiterId};

impl State {
    /// Whether one more request may park on `pool`'s queue.
    pub(super) fn has_waiter_room_on_pool(&mut self, pool: &PoolId) -> bool {
        match self.pool_waiters.get_mut(pool) {
            Some(queue) => has_waiter_room(queue, &self.waiters),
            None => true,
        }
    }

    /// Whether one more request may park on `name`'s queue.
    pub(super) fn has_waiter_room_on_lock(&mut self, name: &LockName) -> bool {
        match self.lock_waiters.get_mut(name) {
            Some(queue) => has_waiter_room(queue, &self.waiters),
            None => true,
        }
    }

    /// Parks a request until `deadline_ms`, queued on every key it waits for: each pool a
    /// reserve names, or the lock it wants. The caller has checked there is room on each queue.
    pub(super) fn park(&mut self, wait_for: WaitFor, deadline_ms: u64) -> WaiterId {
        let id = self.next_waiter_id;
        self.next_waiter_id += 1;
        match &wait_for {
            WaitFor::Stock(request) => {
                for item in request.items.iter() {
                    self.pool_waiters
                        .entry(item.pool.clone())
                        .or_default()
                        .push_back(id);
                }
                self.hold_waiters
                    .entry(request.hold_id.clone())
                    .or_default()
                    .push(id);
            }
            WaitFor::Lock(request) => {
                self.lock_waiters
                    .entry(request.name.clone())
                    .or_default()
                    .push_back(id);
            }
        }
        self.waiter_deadlines.push(Reverse((deadline_ms, id)));
        self.waiters.insert(id, Waiter { wait_for });
        id
    }

    /// Serves waiters of pools and locks that got something back, in arrival order, skipping a
    /// waiter that still cannot be satisfied. Serving one may free more (a waiter's request can
    /// expire a stale hold), so this loops until nothing is left to serve.
    pub(super) fn serve_freed(&mut self, now_ms: u64, effects: &mut Effects) {
        while !self.freed_pools.is_empty()
            || !self.freed_locks.is_empty()
            || !self.created_holds.is_empty()
        {
            if let Some(hold_id) = self.created_holds.pop() {
                self.serve_hold_waiters(&hold_id, now_ms, effects);
            }
            if !self.freed_pools.is_empty() {
                let mut pools = std::mem::take(&mut self.freed_pools);
                pools.sort_unstable();
                pools.dedup();
                self.serve_pool_waiters(&pools, now_ms, effects);
            }
            if let Some(name) = self.freed_locks.pop() {
                self.serve_lock_waiters(&name, now_ms, effects);
            }
        }
    }

    /// Answers the reserves parked for `hold_id`, which now exists: each is a retry of the
    /// reserve that created it (a replay) or a different request with its id (a conflict), and
    /// `try_reserve` says which, as it would for a retry that arrived now.
    fn serve_hold_waiters(&mut self, hold_id: &HoldId, now_ms: u64, effects: &mut Effects) {
        let Some(ids) = self.hold_waiters.get(hold_id).cloned() else {
            return;
        };
        for id in ids {
            let Some(Waiter {
                wait_for: WaitFor::Stock(request),
            }) = self.waiters.get(&id)
            else {
                continue;
            };
            let request = request.clone();
            let outcome = self.try_reserve(&request, now_ms, effects);
            self.answer_waiter(id, outcome, effects);
        }
    }

    /// Answers a parked waiter now: it leaves every queue, and its answer goes out with the
    /// batch's.
    fn answer_waiter(&mut self, id: WaiterId, outcome: Outcome, effects: &mut Effects) {
        self.unpark(id);
        effects.woken.push((id, outcome));
    }

    /// Forgets waiter `id` (served, timed out or cancelled), and its place in the index of
    /// parked reserves by hold id; the pool and lock queues drop it lazily.
    pub(super) fn unpark(&mut self, id: WaiterId) -> Option<Waiter> {
        let waiter = self.waiters.remove(&id)?;
        if let WaitFor::Stock(request) = &waiter.wait_for {
            if let Some(ids) = self.hold_waiters.get_mut(&request.hold_id) {
                ids.retain(|other| *other != id);
                if ids.is_empty() {
                    self.hold_waiters.remove(&request.hold_id);
                }
            }
        }
        Some(waiter)
    }

    /// Serves the waiters of all `pools` together, oldest first (waiter ids grow with arrival):
    /// pool by pool, units freed on several pools at once (a multi-pool hold) could go to a
    /// later waiter queued on one pool before an earlier waiter queued on another.
    fn serve_pool_waiters(&mut self, pools: &[PoolId], now_ms: u64, effects: &mut Effects) {
        let mut candidates: Vec<WaiterId> = pools
            .iter()
            .filter_map(|pool| self.pool_waiters.get(pool))
            .flatten()
            .copied()
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        for id in candidates {
            // Every candidate needs units from one of these pools; none left, none served.
            let exhausted = pools
                .iter()
                .all(|pool| self.data.pools.get(pool).is_some_and(|p| p.available == 0));
            if exhausted {
                break;
            }
            let Some(Waiter {
                wait_for: WaitFor::Stock(request),
            }) = self.waiters.get(&id)
            else {
                continue;
            };
            let request = request.clone();
            match self.try_reserve(&request, now_ms, effects) {
                Err(Error::InsufficientStock { .. }) => {}
                outcome => {
                    self.answer_waiter(id, outcome, effects);
                }
            }
        }
        // Drop ids of waiters that are gone (served, or timed out).
        let waiters = &self.waiters;
        for pool in pools {
            if let Some(queue) = self.pool_waiters.get_mut(pool) {
                queue.retain(|id| waiters.contains_key(id));
                if queue.is_empty() {
                    self.pool_waiters.remove(pool);
                }
            }
        }
    }

    fn serve_lock_waiters(&mut self, name: &LockName, now_ms: u64, effects: &mut Effects) {
        let Some(mut queue) = self.lock_waiters.remove(name) else {
            return;
        };
        while let Some(id) = queue.pop_front() {
            let Some(Waiter {
                wait_for: WaitFor::Lock(request),
                ..
            }) = self.waiters.get(&id)
            else {
                continue;
            };
            let request = request.clone();
            match self.try_lock_acquire(&request, now_ms, effects) {
                Err(Error::LockHeld { .. }) => {
                    queue.push_front(id);
                    break;
                }
                outcome => {
                    self.answer_waiter(id, outcome, effects);
                    // The lock is taken now; the rest keep waiting.
                    break;
                }
            }
        }
        queue.retain(|id| self.waiters.contains_key(id));
        if !queue.is_empty() {
            self.lock_waiters.insert(name.clone(), queue);
        }
    }
}

/// Whether `queue` has room for one more waiter; a full queue is first cleared of waiters
/// already gone (served, timed out or cancelled), since only live ones count.
fn has_waiter_room(queue: &mut VecDeque<WaiterId>, waiters: &HashMap<WaiterId, Waiter>) -> bool {
    if queue.len() >= WAITERS_PER_KEY_MAX {
        queue.retain(|id| waiters.contains_key(id));
    }
    queue.len() < WAITERS_PER_KEY_MAX
}
