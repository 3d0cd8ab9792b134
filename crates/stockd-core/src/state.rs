//! The state machine: pools, holds, locks and waiters, and every rule that moves units.
//!
//! Two entry points change state. [`State::execute`] decides a command at `now_ms` and, when it
//! succeeds, turns it into [`Record`]s; [`State::tick`] does what time alone does (expiry, waiter
//! deadlines, lock leases, retention). Both mutate only through [`State::apply_record`], which is
//! also what recovery replays, so a restarted engine reaches the very same state.
//!
//! This module must never do I/O or read a clock, and never leave a pool with
//! `total != available + held + sold`: every decision is checked before its record is applied,
//! and the arithmetic in `apply_record` asserts what the decision guaranteed.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use hashbrown::HashMap;
use serde::{Deserialize, Serialize};

use crate::command::{Command, LockRequest, Outcome, PoolSpec, Reply, ReserveRequest};
use crate::error::Error;
use crate::ids::{HoldId, LockName, OwnerId, PoolId, UserId};
use crate::limits::{
    CONFIRMED_RETENTION_MS_DEFAULT, EXPIRIES_PER_TICK_MAX, HOLD_RETENTION_MS_DEFAULT,
    PURGES_PER_TICK_MAX, WAITERS_PER_KEY_MAX,
};
use crate::record::{Change, Event, EventKind, Record};
use crate::view::{HoldItemView, HoldStatus, HoldView, PoolView};

/// Tunables of the state machine that are not part of the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateConfig {
    /// How long released, expired and refunded holds are kept after they finish.
    pub hold_retention_ms: u64,
    /// How long confirmed holds are kept after confirmation (the refund window).
    pub confirmed_retention_ms: u64,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            hold_retention_ms: HOLD_RETENTION_MS_DEFAULT,
            confirmed_retention_ms: CONFIRMED_RETENTION_MS_DEFAULT,
        }
    }
}

/// Identifies a request parked in a wait queue until stock or a lock frees up.
pub type WaiterId = u64;

/// The result of [`State::execute`]: an answer now, or a parked waiter whose answer comes later
/// through [`Effects::woken`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Done(Outcome),
    Waiting(WaiterId),
}

/// What one call changed: the records to log, the events they produced, and answers for
/// waiters that were served or timed out. The caller must make `records` durable before it
/// shows any of this to anyone.
#[derive(Debug, Default)]
pub struct Effects {
    pub records: Vec<Record>,
    pub events: Vec<Event>,
    pub woken: Vec<(WaiterId, Outcome)>,
}

impl Effects {
    pub fn clear(&mut self) {
        self.records.clear();
        self.events.clear();
        self.woken.clear();
    }
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.events.is_empty() && self.woken.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Pool {
    /// A new number each time a pool is created, so that holds of a deleted pool never touch a
    /// later pool with the same id.
    generation: u64,
    total: u64,
    available: u64,
    held: u64,
    sold: u64,
    per_user_limit: Option<u64>,
    starts_at_ms: Option<u64>,
    ends_at_ms: Option<u64>,
    low_stock_threshold: Option<u64>,
    /// Units per user in held + confirmed holds. Entries at zero are removed.
    usage: HashMap<UserId, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Hold {
    user: Option<UserId>,
    /// Shared with the hold's record, events and views: one allocation per hold.
    items: Arc<[HoldItemView]>,
    /// `next_generation` when the hold was made. Generations come from one counter, so a pool
    /// is the very pool this hold reserved from iff its generation is below this: a pool
    /// deleted and created again since then has a newer one.
    generation_watermark: u64,
    /// The `confirm` flag of the reserve, part of the idempotency identity.
    confirm: bool,
    status: HoldStatus,
    created_at_ms: u64,
    expires_at_ms: u64,
    finished_at_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Lock {
    owner: OwnerId,
    token: u64,
    expires_at_ms: u64,
}

/// Everything that must survive a restart; a snapshot is exactly this, serialised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pools: BTreeMap<PoolId, Pool>,
    /// Boxed so that a table slot is 24 bytes: growing a table of millions of holds then moves
    /// a quarter of the bytes (a shorter pause for the requests queued behind it), and empty
    /// slots cost less memory.
    holds: HashMap<HoldId, Box<Hold>>,
    locks: HashMap<LockName, Lock>,
    next_seq: u64,
    next_generation: u64,
    next_fence_token: u64,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            pools: BTreeMap::new(),
            holds: HashMap::new(),
            locks: HashMap::new(),
            next_seq: 1,
            next_generation: 1,
            next_fence_token: 1,
        }
    }
}

#[derive(Debug)]
enum WaitFor {
    Stock(ReserveRequest),
    Lock(LockRequest),
}

#[derive(Debug)]
struct Waiter {
    wait_for: WaitFor,
}

/// The whole state of one stockd dataset.
#[derive(Debug)]
pub struct State {
    config: StateConfig,
    data: Snapshot,
    // Indexes below are derived from `data` and rebuilt on load; entries may be stale and are
    // checked against `data` when popped, which keeps extend/confirm O(log n) without removal.
    expiry_queue: BinaryHeap<Reverse<(u64, HoldId)>>,
    purge_queue: BinaryHeap<Reverse<(u64, HoldId)>>,
    lock_expiry_queue: BinaryHeap<Reverse<(u64, LockName)>>,
    // Waiters live only in memory: a waiting client is a live connection, gone on restart.
    waiters: HashMap<WaiterId, Waiter>,
    pool_waiters: HashMap<PoolId, VecDeque<WaiterId>>,
    lock_waiters: HashMap<LockName, VecDeque<WaiterId>>,
    waiter_deadlines: BinaryHeap<Reverse<(u64, WaiterId)>>,
    next_waiter_id: WaiterId,
    /// Pools and locks that got units or freedom back while applying records; their waiters are
    /// served once the current command is done, never in the middle of it.
    freed_pools: Vec<PoolId>,
    freed_locks: Vec<LockName>,
    /// (pool, available before) pairs noted while applying a record, checked for a low-stock
    /// crossing once the record's own event is out.
    pending_low_stock: Vec<(PoolId, u64)>,
}

impl State {
    pub fn new(config: StateConfig) -> Self {
        Self::from_snapshot(config, Snapshot::default())
    }

    /// Rebuilds a state from a snapshot, with its indexes.
    pub fn from_snapshot(config: StateConfig, data: Snapshot) -> Self {
        let mut state = State {
            config,
            data,
            expiry_queue: BinaryHeap::new(),
            purge_queue: BinaryHeap::new(),
            lock_expiry_queue: BinaryHeap::new(),
            waiters: HashMap::new(),
            pool_waiters: HashMap::new(),
            lock_waiters: HashMap::new(),
            waiter_deadlines: BinaryHeap::new(),
            next_waiter_id: 1,
            freed_pools: Vec::new(),
            freed_locks: Vec::new(),
            pending_low_stock: Vec::new(),
        };
        for (hold_id, hold) in &state.data.holds {
            match hold.finished_at_ms {
                None => state
                    .expiry_queue
                    .push(Reverse((hold.expires_at_ms, hold_id.clone()))),
                Some(finished_at_ms) => {
                    let purge_at_ms =
                        finished_at_ms.saturating_add(state.retention_ms(hold.status));
                    state
                        .purge_queue
                        .push(Reverse((purge_at_ms, hold_id.clone())));
                }
            }
        }
        for (name, lock) in &state.data.locks {
            state
                .lock_expiry_queue
                .push(Reverse((lock.expires_at_ms, name.clone())));
        }
        state
    }

    /// The durable part of the state, for writing a snapshot.
    pub fn snapshot(&self) -> &Snapshot {
        &self.data
    }

    pub fn config(&self) -> StateConfig {
        self.config
    }

    /// The seq the next event will get.
    pub fn next_seq(&self) -> u64 {
        self.data.next_seq
    }

    pub fn pool_count(&self) -> usize {
        self.data.pools.len()
    }

    pub fn hold_count(&self) -> usize {
        self.data.holds.len()
    }

    pub fn waiter_count(&self) -> usize {
        self.waiters.len()
    }

    fn retention_ms(&self, status: HoldStatus) -> u64 {
        if status == HoldStatus::Confirmed {
            self.config.confirmed_retention_ms
        } else {
            self.config.hold_retention_ms
        }
    }

    // ---------------------------------------------------------------- commands

    /// Decides `command` at `now_ms`. Records and events land in `effects`; so do answers for
    /// waiters that this command served (a release can satisfy parked reserves).
    pub fn execute(&mut self, command: Command, now_ms: u64, effects: &mut Effects) -> Step {
        if let Err(error) = command.validate() {
            return Step::Done(Err(error));
        }
        let step = match command {
            Command::Reserve(request) => self.reserve(request, now_ms, effects),
            Command::LockAcquire(request) => self.lock_acquire(request, now_ms, effects),
            Command::PutPool {
                pool,
                spec,
                if_absent,
            } => Step::Done(self.put_pool(pool, spec, if_absent, now_ms, effects)),
            Command::Restock { pool, delta } => {
                Step::Done(self.restock(pool, delta, now_ms, effects))
            }
            Command::GetPool { pool } => Step::Done(
                self.pool_view(&pool)
                    .map(|pool| Reply::Pool {
                        pool,
                        created: false,
                    })
                    .ok_or(Error::PoolNotFound { pool }),
            ),
            Command::ListPools {
                prefix,
                after,
                limit,
            } => Step::Done(Ok(self.list_pools(&prefix, after.as_deref(), limit))),
            Command::DeletePool { pool } => Step::Done(self.delete_pool(pool, now_ms, effects)),
            Command::Confirm { hold_id } => Step::Done(self.confirm(hold_id, now_ms, effects)),
            Command::Release { hold_id } => Step::Done(self.release(hold_id, now_ms, effects)),
            Command::Refund { hold_id } => Step::Done(self.refund(hold_id, now_ms, effects)),
            Command::Extend { hold_id, ttl_ms } => {
                Step::Done(self.extend(hold_id, ttl_ms, now_ms, effects))
            }
            Command::GetHold { hold_id } => {
                self.settle(&hold_id, now_ms, effects);
                Step::Done(self.hold_reply(&hold_id, false))
            }
            Command::LockRenew {
                name,
                owner,
                token,
                ttl_ms,
            } => Step::Done(self.lock_renew(name, owner, token, ttl_ms, now_ms, effects)),
            Command::LockRelease { name, owner, token } => {
                Step::Done(self.lock_release(name, owner, token, now_ms, effects))
            }
        };
        self.serve_freed(now_ms, effects);
        step
    }

    fn put_pool(
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
        })
    }

    fn restock(&mut self, pool: PoolId, delta: i64, now_ms: u64, effects: &mut Effects) -> Outcome {
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

    fn delete_pool(&mut self, pool: PoolId, now_ms: u64, effects: &mut Effects) -> Outcome {
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

    fn list_pools(&self, prefix: &str, after: Option<&str>, limit: usize) -> Reply {
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

    /// Checks a reserve against the state, item by item in the order given; the first failure
    /// wins. Reads only.
    fn check_reserve(&self, request: &ReserveRequest, now_ms: u64) -> Result<(), Error> {
        for item in &request.items {
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

    /// One attempt at a reserve, without waiting: replay, conflict, or check and take.
    fn try_reserve(
        &mut self,
        request: &ReserveRequest,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
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
        self.check_reserve(request, now_ms)?;
        let items = request
            .items
            .iter()
            .map(|item| HoldItemView {
                pool: item.pool.clone(),
                qty: item.qty,
            })
            .collect();
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

    fn reserve(&mut self, request: ReserveRequest, now_ms: u64, effects: &mut Effects) -> Step {
        let outcome = self.try_reserve(&request, now_ms, effects);
        if request.wait_ms == 0 || !matches!(outcome, Err(Error::InsufficientStock { .. })) {
            return Step::Done(outcome);
        }
        // Park the request on every pool it names: units coming back to any of them may be
        // what it lacks. A full queue means the crowd is already larger than any stock that
        // could come back soon; answer now rather than grow the queue.
        for item in &request.items {
            if !self.has_waiter_room_on_pool(&item.pool) {
                return Step::Done(outcome);
            }
        }
        let id = self.next_waiter_id;
        self.next_waiter_id += 1;
        for item in &request.items {
            self.pool_waiters
                .entry(item.pool.clone())
                .or_default()
                .push_back(id);
        }
        let deadline_ms = now_ms + request.wait_ms;
        self.waiter_deadlines.push(Reverse((deadline_ms, id)));
        self.waiters.insert(
            id,
            Waiter {
                wait_for: WaitFor::Stock(request),
            },
        );
        Step::Waiting(id)
    }

    fn has_waiter_room_on_pool(&mut self, pool: &PoolId) -> bool {
        let Some(queue) = self.pool_waiters.get_mut(pool) else {
            return true;
        };
        if queue.len() >= WAITERS_PER_KEY_MAX {
            let waiters = &self.waiters;
            queue.retain(|id| waiters.contains_key(id));
        }
        queue.len() < WAITERS_PER_KEY_MAX
    }

    fn confirm(&mut self, hold_id: HoldId, now_ms: u64, effects: &mut Effects) -> Outcome {
        self.settle(&hold_id, now_ms, effects);
        let status = self.hold_status(&hold_id)?;
        match status {
            HoldStatus::Held => {
                self.commit(
                    now_ms,
                    Change::Confirmed {
                        hold_id: hold_id.clone(),
                    },
                    effects,
                );
                self.hold_reply(&hold_id, false)
            }
            HoldStatus::Confirmed => self.hold_reply(&hold_id, false),
            HoldStatus::Expired => Err(Error::HoldExpired { hold_id }),
            HoldStatus::Released => Err(Error::HoldReleased { hold_id }),
            HoldStatus::Refunded => Err(Error::HoldRefunded { hold_id }),
        }
    }

    fn release(&mut self, hold_id: HoldId, now_ms: u64, effects: &mut Effects) -> Outcome {
        self.settle(&hold_id, now_ms, effects);
        match self.hold_status(&hold_id)? {
            HoldStatus::Held => {
                self.commit(
                    now_ms,
                    Change::Released {
                        hold_id: hold_id.clone(),
                    },
                    effects,
                );
                self.hold_reply(&hold_id, false)
            }
            // Released, or expired: the stock is back either way.
            HoldStatus::Released | HoldStatus::Expired => self.hold_reply(&hold_id, false),
            HoldStatus::Confirmed => Err(Error::HoldConfirmed { hold_id }),
            HoldStatus::Refunded => Err(Error::HoldRefunded { hold_id }),
        }
    }

    fn refund(&mut self, hold_id: HoldId, now_ms: u64, effects: &mut Effects) -> Outcome {
        self.settle(&hold_id, now_ms, effects);
        match self.hold_status(&hold_id)? {
            HoldStatus::Confirmed => {
                let hold = &self.data.holds[&hold_id];
                for item in hold.items.iter() {
                    let alive = self
                        .data
                        .pools
                        .get(&item.pool)
                        .is_some_and(|pool| pool.generation < hold.generation_watermark);
                    if !alive {
                        return Err(Error::PoolDeleted {
                            pool: item.pool.clone(),
                        });
                    }
                }
                self.commit(
                    now_ms,
                    Change::Refunded {
                        hold_id: hold_id.clone(),
                    },
                    effects,
                );
                self.hold_reply(&hold_id, false)
            }
            HoldStatus::Refunded => self.hold_reply(&hold_id, false),
            HoldStatus::Held | HoldStatus::Released | HoldStatus::Expired => {
                Err(Error::HoldNotConfirmed { hold_id })
            }
        }
    }

    fn extend(
        &mut self,
        hold_id: HoldId,
        ttl_ms: u64,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        self.settle(&hold_id, now_ms, effects);
        match self.hold_status(&hold_id)? {
            HoldStatus::Held => {
                self.commit(
                    now_ms,
                    Change::Extended {
                        hold_id: hold_id.clone(),
                        expires_at_ms: now_ms + ttl_ms,
                    },
                    effects,
                );
                self.hold_reply(&hold_id, false)
            }
            HoldStatus::Expired => Err(Error::HoldExpired { hold_id }),
            HoldStatus::Confirmed => Err(Error::HoldConfirmed { hold_id }),
            HoldStatus::Released => Err(Error::HoldReleased { hold_id }),
            HoldStatus::Refunded => Err(Error::HoldRefunded { hold_id }),
        }
    }

    fn lock_acquire(&mut self, request: LockRequest, now_ms: u64, effects: &mut Effects) -> Step {
        let outcome = self.try_lock_acquire(&request, now_ms, effects);
        if request.wait_ms == 0 || !matches!(outcome, Err(Error::LockHeld { .. })) {
            return Step::Done(outcome);
        }
        let queue = self.lock_waiters.entry(request.name.clone()).or_default();
        if queue.len() >= WAITERS_PER_KEY_MAX {
            let waiters = &self.waiters;
            queue.retain(|id| waiters.contains_key(id));
            if queue.len() >= WAITERS_PER_KEY_MAX {
                return Step::Done(outcome);
            }
        }
        let id = self.next_waiter_id;
        self.next_waiter_id += 1;
        queue.push_back(id);
        let deadline_ms = now_ms + request.wait_ms;
        self.waiter_deadlines.push(Reverse((deadline_ms, id)));
        self.waiters.insert(
            id,
            Waiter {
                wait_for: WaitFor::Lock(request),
            },
        );
        Step::Waiting(id)
    }

    fn try_lock_acquire(
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

    /// Whether `owner` with `token` holds the unexpired lease on `name`.
    fn owns_lock(&self, name: &LockName, owner: &OwnerId, token: u64, now_ms: u64) -> bool {
        self.data.locks.get(name).is_some_and(|lock| {
            now_ms < lock.expires_at_ms && lock.owner == *owner && lock.token == token
        })
    }

    fn lock_renew(
        &mut self,
        name: LockName,
        owner: OwnerId,
        token: u64,
        ttl_ms: u64,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        if !self.owns_lock(&name, &owner, token, now_ms) {
            return Err(Error::NotLockOwner);
        }
        let expires_at_ms = now_ms + ttl_ms;
        self.commit(
            now_ms,
            Change::LockRenewed {
                name,
                expires_at_ms,
            },
            effects,
        );
        Ok(Reply::Lock {
            token,
            expires_at_ms,
        })
    }

    fn lock_release(
        &mut self,
        name: LockName,
        owner: OwnerId,
        token: u64,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        if !self.owns_lock(&name, &owner, token, now_ms) {
            return Err(Error::NotLockOwner);
        }
        self.commit(now_ms, Change::LockReleased { name }, effects);
        Ok(Reply::LockReleased)
    }

    // ---------------------------------------------------------------- time

    /// Does what the passing of time does, up to `now_ms`: expires holds past their deadline,
    /// frees lapsed leases, answers waiters whose wait is over, and forgets finished holds past
    /// retention.
    pub fn tick(&mut self, now_ms: u64, effects: &mut Effects) {
        // Bounded, so that one tick's records fit in a log frame and its pause stays short even
        // when a million holds lapse at once (after downtime or a clock step): the rest are
        // still due, so the caller's next tick comes at once. Commands meanwhile see any such
        // hold as expired anyway (lazy expiry).
        let mut expired = 0;
        while let Some(Reverse((expires_at_ms, _))) = self.expiry_queue.peek() {
            if *expires_at_ms > now_ms || expired == EXPIRIES_PER_TICK_MAX {
                break;
            }
            let Reverse((queued_ms, hold_id)) = self.expiry_queue.pop().expect("peeked");
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
            let Some(waiter) = self.waiters.remove(&id) else {
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
        self.serve_freed(now_ms, effects);
    }

    /// What time does without a record: forgets finished holds past retention and lapsed
    /// leases, all of them. Recovery and the snapshot builder call it after replaying records
    /// (replay alone keeps them, since forgetting writes nothing to the log); it answers no
    /// waiter.
    pub fn forget_past_retention(&mut self, now_ms: u64) {
        self.drop_lapsed_locks(now_ms);
        self.freed_locks.clear();
        self.purge_retained(now_ms, usize::MAX);
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
        while let Some(Reverse((purge_at_ms, _))) = self.purge_queue.peek() {
            if *purge_at_ms > now_ms || purged == purges_max {
                break;
            }
            let Reverse((_, hold_id)) = self.purge_queue.pop().expect("peeked");
            let purge = self.data.holds.get(&hold_id).is_some_and(|hold| {
                hold.finished_at_ms
                    .is_some_and(|at| at.saturating_add(self.retention_ms(hold.status)) <= now_ms)
            });
            if purge {
                self.data.holds.remove(&hold_id);
                purged += 1;
            }
        }
    }

    /// The earliest time at which [`State::tick`] has something to do, if any.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        [
            self.expiry_queue.peek().map(|Reverse((t, _))| *t),
            self.lock_expiry_queue.peek().map(|Reverse((t, _))| *t),
            self.waiter_deadlines.peek().map(|Reverse((t, _))| *t),
            self.purge_queue.peek().map(|Reverse((t, _))| *t),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Forgets a waiter whose client went away. Returns whether it was still waiting.
    pub fn cancel_waiter(&mut self, id: WaiterId) -> bool {
        self.waiters.remove(&id).is_some()
    }

    /// Brings one hold up to date before a command looks at it: forgotten if past retention,
    /// expired if held past its deadline, whether or not the sweeps ran.
    fn settle(&mut self, hold_id: &HoldId, now_ms: u64, effects: &mut Effects) {
        self.forget_if_past_retention(hold_id, now_ms);
        self.expire_if_due(hold_id, now_ms, effects);
    }

    /// A finished hold past retention is gone for every command, even before the purge sweep
    /// (which is bounded per tick) reaches it. This keeps live behaviour equal to a state
    /// rebuilt by replay, which forgets all of them at once: no command can write a record
    /// (a refund) about a hold that a snapshot may already have dropped.
    fn forget_if_past_retention(&mut self, hold_id: &HoldId, now_ms: u64) {
        let past = self.data.holds.get(hold_id).is_some_and(|hold| {
            hold.finished_at_ms
                .is_some_and(|at| at.saturating_add(self.retention_ms(hold.status)) <= now_ms)
        });
        if past {
            self.data.holds.remove(hold_id);
        }
    }

    /// A held hold whose deadline has passed is expired now, whether or not a sweep ran.
    fn expire_if_due(&mut self, hold_id: &HoldId, now_ms: u64, effects: &mut Effects) {
        let due =
            self.data.holds.get(hold_id).is_some_and(|hold| {
                hold.status == HoldStatus::Held && now_ms >= hold.expires_at_ms
            });
        if due {
            self.commit(
                now_ms,
                Change::Expired {
                    hold_id: hold_id.clone(),
                },
                effects,
            );
        }
    }

    /// Serves waiters of pools and locks that got something back, in arrival order, skipping a
    /// waiter that still cannot be satisfied. Serving one may free more (a waiter's request can
    /// expire a stale hold), so this loops until nothing is left to serve.
    fn serve_freed(&mut self, now_ms: u64, effects: &mut Effects) {
        while !self.freed_pools.is_empty() || !self.freed_locks.is_empty() {
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
                    self.waiters.remove(&id);
                    effects.woken.push((id, outcome));
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
                    self.waiters.remove(&id);
                    effects.woken.push((id, outcome));
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

    // ---------------------------------------------------------------- reads

    fn pool_view(&self, id: &PoolId) -> Option<PoolView> {
        let pool = self.data.pools.get(id)?;
        Some(PoolView {
            pool: id.clone(),
            total: pool.total,
            available: pool.available,
            held: pool.held,
            sold: pool.sold,
            per_user_limit: pool.per_user_limit,
            starts_at_ms: pool.starts_at_ms,
            ends_at_ms: pool.ends_at_ms,
            low_stock_threshold: pool.low_stock_threshold,
            // One state feeds one event partition; a partitioned backend sets its own.
            partition: 0,
        })
    }

    fn hold_status(&self, hold_id: &HoldId) -> Result<HoldStatus, Error> {
        self.data
            .holds
            .get(hold_id)
            .map(|hold| hold.status)
            .ok_or_else(|| Error::HoldNotFound {
                hold_id: hold_id.clone(),
            })
    }

    fn hold_reply(&self, hold_id: &HoldId, created: bool) -> Outcome {
        let hold = self.hold_view(hold_id).ok_or_else(|| Error::HoldNotFound {
            hold_id: hold_id.clone(),
        })?;
        Ok(Reply::Hold { hold, created })
    }

    pub fn hold_view(&self, hold_id: &HoldId) -> Option<HoldView> {
        let hold = self.data.holds.get(hold_id)?;
        Some(HoldView {
            hold_id: hold_id.clone(),
            status: hold.status,
            user: hold.user.clone(),
            items: hold.items.clone(),
            created_at_ms: hold.created_at_ms,
            expires_at_ms: hold.expires_at_ms,
            finished_at_ms: hold.finished_at_ms,
            // One state feeds one event partition; a partitioned backend sets its own.
            partition: 0,
        })
    }

    /// A pool as clients see it (for tests and tools; commands go through `execute`).
    pub fn pool(&self, id: &PoolId) -> Option<PoolView> {
        self.pool_view(id)
    }

    /// Every pool, ordered by id (for tests and tools).
    pub fn pools(&self) -> impl Iterator<Item = PoolView> + '_ {
        self.data
            .pools
            .keys()
            .map(|id| self.pool_view(id).expect("key exists"))
    }

    // ---------------------------------------------------------------- mutation

    fn commit(&mut self, at_ms: u64, change: Change, effects: &mut Effects) {
        let record = Record { at_ms, change };
        self.apply_record(&record, &mut effects.events);
        effects.records.push(record);
    }

    /// Applies one record: the single path by which state changes, live and in recovery.
    /// Events it yields are appended to `events`.
    ///
    /// Panics if the record contradicts the state (a hold that does not exist, units that are
    /// not there): live, the decision that made the record ruled that out; in recovery it
    /// means the log does not belong to this state, and running on would be worse than
    /// stopping.
    pub fn apply_record(&mut self, record: &Record, events: &mut Vec<Event>) {
        let at_ms = record.at_ms;
        match &record.change {
            Change::PoolUpserted { pool: id, spec } => {
                let created = !self.data.pools.contains_key(id);
                if created {
                    let generation = self.data.next_generation;
                    self.data.next_generation += 1;
                    self.data.pools.insert(
                        id.clone(),
                        Pool {
                            generation,
                            total: 0,
                            available: 0,
                            held: 0,
                            sold: 0,
                            per_user_limit: None,
                            starts_at_ms: None,
                            ends_at_ms: None,
                            low_stock_threshold: None,
                            usage: HashMap::new(),
                        },
                    );
                }
                let pool = self.data.pools.get_mut(id).expect("inserted above");
                let before = pool.available;
                let committed = pool.held + pool.sold;
                assert!(spec.total >= committed, "pool total below committed units");
                pool.total = spec.total;
                pool.available = spec.total - committed;
                pool.per_user_limit = spec.per_user_limit;
                pool.starts_at_ms = spec.starts_at_ms;
                pool.ends_at_ms = spec.ends_at_ms;
                pool.low_stock_threshold = spec.low_stock_threshold;
                let (total, available, threshold) =
                    (pool.total, pool.available, pool.low_stock_threshold);
                let mut event = self.event(at_ms, EventKind::PoolUpserted);
                event.pool = Some(id.clone());
                event.total = Some(total);
                event.available = Some(available);
                events.push(event);
                // Created or updated at or below the threshold fires, whatever it was before.
                if threshold.is_some_and(|t| available <= t) {
                    self.push_low_stock(id, at_ms, events);
                }
                if available > before {
                    self.freed_pools.push(id.clone());
                }
            }
            Change::Restocked { pool: id, delta } => {
                let pool = self.data.pools.get_mut(id).expect("restocked pool exists");
                let before = pool.available;
                if *delta >= 0 {
                    pool.total += delta.unsigned_abs();
                    pool.available += delta.unsigned_abs();
                } else {
                    assert!(pool.available >= delta.unsigned_abs(), "restock below zero");
                    pool.total -= delta.unsigned_abs();
                    pool.available -= delta.unsigned_abs();
                }
                let (total, available) = (pool.total, pool.available);
                let mut event = self.event(at_ms, EventKind::Restocked);
                event.pool = Some(id.clone());
                event.delta = Some(*delta);
                event.total = Some(total);
                event.available = Some(available);
                events.push(event);
                self.note_available(id, before, at_ms, events);
            }
            Change::PoolDeleted { pool: id } => {
                let pool = self.data.pools.remove(id).expect("deleted pool exists");
                assert_eq!(pool.held, 0, "deleted a pool with held units");
                let mut event = self.event(at_ms, EventKind::PoolDeleted);
                event.pool = Some(id.clone());
                events.push(event);
                // Waiters on it get their answer (pool_not_found) now rather than at timeout.
                self.freed_pools.push(id.clone());
            }
            Change::Held {
                hold_id,
                user,
                items,
                confirm,
                expires_at_ms,
            } => {
                for item in items.iter() {
                    let pool = self
                        .data
                        .pools
                        .get_mut(&item.pool)
                        .expect("held pool exists");
                    let before = pool.available;
                    assert!(pool.available >= item.qty, "held more than available");
                    pool.available -= item.qty;
                    pool.held += item.qty;
                    if let Some(user) = user {
                        *pool.usage.entry(user.clone()).or_insert(0) += item.qty;
                    }
                    self.note_available_later(&item.pool, before);
                }
                // A finished hold with this id may still be here in recovery: live, it had
                // been forgotten (past retention) before the id was used again.
                self.data.holds.insert(
                    hold_id.clone(),
                    Box::new(Hold {
                        user: user.clone(),
                        items: items.clone(),
                        generation_watermark: self.data.next_generation,
                        confirm: *confirm,
                        status: HoldStatus::Held,
                        created_at_ms: at_ms,
                        expires_at_ms: *expires_at_ms,
                        finished_at_ms: None,
                    }),
                );
                // A hold confirmed on creation is confirmed by the very next record of the
                // same command; it never needs an expiry slot.
                if !*confirm {
                    self.expiry_queue
                        .push(Reverse((*expires_at_ms, hold_id.clone())));
                }
                let mut event = self.event(at_ms, EventKind::Held);
                event.hold_id = Some(hold_id.clone());
                event.user = user.clone();
                event.items = Some(items.clone());
                event.expires_at_ms = Some(*expires_at_ms);
                events.push(event);
                self.flush_low_stock(at_ms, events);
            }
            Change::Confirmed { hold_id } => {
                let hold = self
                    .data
                    .holds
                    .get_mut(hold_id)
                    .expect("confirmed hold exists");
                assert_eq!(hold.status, HoldStatus::Held, "confirmed a hold not held");
                hold.status = HoldStatus::Confirmed;
                hold.finished_at_ms = Some(at_ms);
                for line in hold.items.iter() {
                    let pool = self
                        .data
                        .pools
                        .get_mut(&line.pool)
                        .expect("pool of held hold");
                    pool.held -= line.qty;
                    pool.sold += line.qty;
                }
                self.purge_queue.push(Reverse((
                    at_ms.saturating_add(self.config.confirmed_retention_ms),
                    hold_id.clone(),
                )));
                self.push_hold_event(at_ms, EventKind::Confirmed, hold_id, events);
            }
            Change::Released { hold_id } | Change::Expired { hold_id } => {
                let (status, kind) = match &record.change {
                    Change::Released { .. } => (HoldStatus::Released, EventKind::Released),
                    _ => (HoldStatus::Expired, EventKind::Expired),
                };
                let hold = self
                    .data
                    .holds
                    .get_mut(hold_id)
                    .expect("released hold exists");
                assert_eq!(hold.status, HoldStatus::Held, "released a hold not held");
                hold.status = status;
                // An expired hold finished at its deadline, however late the sweep ran: the
                // answer does not depend on sweep timing (nor on the backend).
                let finished_at_ms = match status {
                    HoldStatus::Expired => hold.expires_at_ms.min(at_ms),
                    _ => at_ms,
                };
                hold.finished_at_ms = Some(finished_at_ms);
                for line in hold.items.iter() {
                    let pool = self
                        .data
                        .pools
                        .get_mut(&line.pool)
                        .expect("pool of held hold");
                    let before = pool.available;
                    pool.held -= line.qty;
                    pool.available += line.qty;
                    give_back_usage(pool, hold.user.as_ref(), line.qty);
                    self.freed_pools.push(line.pool.clone());
                    self.pending_low_stock.push((line.pool.clone(), before));
                }
                self.purge_queue.push(Reverse((
                    finished_at_ms.saturating_add(self.config.hold_retention_ms),
                    hold_id.clone(),
                )));
                self.push_hold_event(at_ms, kind, hold_id, events);
                self.flush_low_stock(at_ms, events);
            }
            Change::Refunded { hold_id } => {
                let hold = self
                    .data
                    .holds
                    .get_mut(hold_id)
                    .expect("refunded hold exists");
                assert_eq!(
                    hold.status,
                    HoldStatus::Confirmed,
                    "refunded unconfirmed hold"
                );
                hold.status = HoldStatus::Refunded;
                hold.finished_at_ms = Some(at_ms);
                for line in hold.items.iter() {
                    let pool = self.data.pools.get_mut(&line.pool).expect("pool of refund");
                    assert!(
                        pool.generation < hold.generation_watermark,
                        "refund into a new pool"
                    );
                    let before = pool.available;
                    pool.sold -= line.qty;
                    pool.available += line.qty;
                    give_back_usage(pool, hold.user.as_ref(), line.qty);
                    self.freed_pools.push(line.pool.clone());
                    self.pending_low_stock.push((line.pool.clone(), before));
                }
                self.purge_queue.push(Reverse((
                    at_ms.saturating_add(self.config.hold_retention_ms),
                    hold_id.clone(),
                )));
                self.push_hold_event(at_ms, EventKind::Refunded, hold_id, events);
                self.flush_low_stock(at_ms, events);
            }
            Change::Extended {
                hold_id,
                expires_at_ms,
            } => {
                let hold = self
                    .data
                    .holds
                    .get_mut(hold_id)
                    .expect("extended hold exists");
                assert_eq!(hold.status, HoldStatus::Held, "extended a hold not held");
                hold.expires_at_ms = *expires_at_ms;
                self.expiry_queue
                    .push(Reverse((*expires_at_ms, hold_id.clone())));
                let mut event = self.event(at_ms, EventKind::Extended);
                event.hold_id = Some(hold_id.clone());
                event.expires_at_ms = Some(*expires_at_ms);
                events.push(event);
            }
            Change::LockAcquired {
                name,
                owner,
                token,
                expires_at_ms,
            } => {
                self.data.locks.insert(
                    name.clone(),
                    Lock {
                        owner: owner.clone(),
                        token: *token,
                        expires_at_ms: *expires_at_ms,
                    },
                );
                self.data.next_fence_token = self.data.next_fence_token.max(token + 1);
                self.lock_expiry_queue
                    .push(Reverse((*expires_at_ms, name.clone())));
            }
            Change::LockRenewed {
                name,
                expires_at_ms,
            } => {
                let lock = self.data.locks.get_mut(name).expect("renewed lock exists");
                lock.expires_at_ms = *expires_at_ms;
                self.lock_expiry_queue
                    .push(Reverse((*expires_at_ms, name.clone())));
            }
            Change::LockReleased { name } => {
                self.data.locks.remove(name);
                self.freed_locks.push(name.clone());
            }
        }
    }

    /// Takes the next seq for an event.
    fn event(&mut self, at_ms: u64, kind: EventKind) -> Event {
        let seq = self.data.next_seq;
        self.data.next_seq += 1;
        Event::new(seq, at_ms, kind)
    }

    fn push_hold_event(
        &mut self,
        at_ms: u64,
        kind: EventKind,
        hold_id: &HoldId,
        events: &mut Vec<Event>,
    ) {
        let hold = &self.data.holds[hold_id];
        let user = hold.user.clone();
        let expires_at_ms = hold.expires_at_ms;
        let items = hold.items.clone();
        let mut event = self.event(at_ms, kind);
        event.hold_id = Some(hold_id.clone());
        event.user = user;
        event.items = Some(items);
        event.expires_at_ms = Some(expires_at_ms);
        events.push(event);
    }

    /// Remembers a pool's available before a change, to check the low-stock crossing after the
    /// record's own event is out (so `low_stock` follows the event that caused it).
    fn note_available_later(&mut self, pool: &PoolId, before: u64) {
        self.pending_low_stock.push((pool.clone(), before));
    }

    fn note_available(&mut self, pool: &PoolId, before: u64, at_ms: u64, events: &mut Vec<Event>) {
        self.pending_low_stock.push((pool.clone(), before));
        self.flush_low_stock(at_ms, events);
        if self
            .data
            .pools
            .get(pool)
            .is_some_and(|p| p.available > before)
        {
            self.freed_pools.push(pool.clone());
        }
    }

    /// Fires `low_stock` for every noted pool whose available went from above its threshold to
    /// at or below it.
    fn flush_low_stock(&mut self, at_ms: u64, events: &mut Vec<Event>) {
        let pending = std::mem::take(&mut self.pending_low_stock);
        for (id, before) in &pending {
            let crossed = self.data.pools.get(id).is_some_and(|pool| {
                pool.low_stock_threshold
                    .is_some_and(|t| *before > t && pool.available <= t)
            });
            if crossed {
                self.push_low_stock(id, at_ms, events);
            }
        }
        self.pending_low_stock = pending;
        self.pending_low_stock.clear();
    }

    fn push_low_stock(&mut self, id: &PoolId, at_ms: u64, events: &mut Vec<Event>) {
        let pool = &self.data.pools[id];
        let (total, available, threshold) = (pool.total, pool.available, pool.low_stock_threshold);
        let mut event = self.event(at_ms, EventKind::LowStock);
        event.pool = Some(id.clone());
        event.total = Some(total);
        event.available = Some(available);
        event.low_stock_threshold = threshold;
        events.push(event);
    }

    // ---------------------------------------------------------------- invariants

    /// Checks every invariant the state must hold; used after each batch in debug builds and in
    /// tests. `total == available + held + sold` for every pool, held units equal the units of
    /// held holds, usage equals the units of held + confirmed holds per user.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut held: HashMap<&PoolId, u64> = HashMap::new();
        let mut usage: HashMap<(&PoolId, &UserId), u64> = HashMap::new();
        for (hold_id, hold) in &self.data.holds {
            for line in hold.items.iter() {
                let alive = self
                    .data
                    .pools
                    .get(&line.pool)
                    .is_some_and(|p| p.generation < hold.generation_watermark);
                if hold.status == HoldStatus::Held {
                    if !alive {
                        return Err(format!("held hold {hold_id} on a missing pool"));
                    }
                    *held.entry(&line.pool).or_default() += line.qty;
                }
                if alive && matches!(hold.status, HoldStatus::Held | HoldStatus::Confirmed) {
                    if let Some(user) = &hold.user {
                        *usage.entry((&line.pool, user)).or_default() += line.qty;
                    }
                }
            }
        }
        for (id, pool) in &self.data.pools {
            let sum = pool
                .available
                .checked_add(pool.held)
                .and_then(|s| s.checked_add(pool.sold));
            if sum != Some(pool.total) {
                return Err(format!(
                    "pool {id}: total {} != available {} + held {} + sold {}",
                    pool.total, pool.available, pool.held, pool.sold
                ));
            }
            let expected_held = held.get(id).copied().unwrap_or(0);
            if pool.held != expected_held {
                return Err(format!(
                    "pool {id}: held {} but held holds have {expected_held}",
                    pool.held
                ));
            }
            for (user, used) in &pool.usage {
                if *used == 0 {
                    return Err(format!("pool {id}: zero usage entry for {user}"));
                }
                // Purged confirmed holds keep their usage, so usage may exceed what the
                // retained holds show, never fall below it.
                let seen = usage.get(&(id, user)).copied().unwrap_or(0);
                if *used < seen {
                    return Err(format!("pool {id}: usage of {user} is {used} < {seen}"));
                }
            }
        }
        Ok(())
    }
}

fn give_back_usage(pool: &mut Pool, user: Option<&UserId>, qty: u64) {
    if let Some(user) = user {
        if let Some(used) = pool.usage.get_mut(user) {
            *used -= qty.min(*used);
            if *used == 0 {
                pool.usage.remove(user);
            }
        }
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
