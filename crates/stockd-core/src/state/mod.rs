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
//!
//! This file holds the data (what a snapshot is), `execute` (validate, then dispatch), the
//! views, and the small helpers every decision shares. Each command's decision lives in a file
//! of its own under `cmd/`, beside its Lua twin in the Redis library; `apply` is the single
//! mutation path, `tick` what time does, `waiters` the parked requests, `invariants` the
//! checks run after every batch, and `snapshot` the formats a snapshot is written and read in.

mod apply;
mod cmd;
mod hold_index;
mod hold_items;
mod holds;
mod invariants;
mod sharded;
pub mod snapshot;
mod tick;
mod time_queue;
mod usage;
mod waiters;

pub use snapshot::{SnapshotV3, SnapshotV5};

use cmd::reads::HoldFilter;
use hold_index::HoldIndex;
use hold_items::HoldItems;
use holds::{HoldPages, HoldStore};
use time_queue::TimeQueue;
use usage::Usage;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use hashbrown::HashMap;
use serde::{Deserialize, Serialize};

use crate::command::{Command, LockRequest, Outcome, Reply, ReserveRequest};
use crate::error::Error;
use crate::ids::{HoldId, LockName, OwnerId, PoolId, RequestId, UserId};
use crate::limits::{CONFIRMED_RETENTION_MS_DEFAULT, HOLD_RETENTION_MS_DEFAULT};
use crate::record::{Change, Event, Record};
use crate::view::{HoldStatus, HoldView, PoolView};

/// Tunables of the state machine that are not part of the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateConfig {
    /// How long released, expired and refunded holds are kept after they finish.
    pub hold_retention_ms: u64,
    /// How long confirmed holds are kept after confirmation (the refund window).
    pub confirmed_retention_ms: u64,
}

impl StateConfig {
    /// How long a hold finished in `status` is kept.
    fn retention_ms(&self, status: HoldStatus) -> u64 {
        if status == HoldStatus::Confirmed {
            self.confirmed_retention_ms
        } else {
            self.hold_retention_ms
        }
    }
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
    usage: Usage,
    /// The segments the pool was created with. One state keeps a pool as one segment whatever
    /// the count: it is reported, and it fixes what a later `PUT` may ask.
    segments: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Hold {
    user: Option<UserId>,
    /// Naming the state's own pool ids (`apply_held`): one item inline, several in one
    /// allocation.
    items: HoldItems,
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

/// What a restock's request id is remembered for: the first request, and when it was applied
/// (the retention runs from there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct RestockRequest {
    pool: PoolId,
    delta: i64,
    at_ms: u64,
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
    /// In pages shared copy-on-write with snapshot builds (`holds.rs`), found through an index
    /// sharded so that growing it for millions of holds happens a shard at a time
    /// (`sharded.rs`).
    holds: HoldStore,
    locks: HashMap<LockName, Lock>,
    next_seq: u64,
    next_generation: u64,
    next_fence_token: u64,
    /// Restocks that named a request id, kept for the hold retention from the restock.
    restock_requests: HashMap<RequestId, RestockRequest>,
}

/// What a state derives from its data on load, never stored: the hold index and the time
/// queues. Built from a [`Snapshot`] by [`Snapshot::indexes`], read by nothing else, so that a
/// caller with threads to spare can check the data ([`Snapshot::check_counts`]) meanwhile.
pub struct Indexes {
    hold_index: HoldIndex,
    expiry_queue: TimeQueue<HoldId>,
    purge_queue: TimeQueue<HoldId>,
    request_purge_queue: BinaryHeap<Reverse<(u64, RequestId)>>,
    lock_expiry_queue: BinaryHeap<Reverse<(u64, LockName)>>,
}

impl Snapshot {
    /// The indexes of this data under `config`: the hold index, the expiry queue of held holds,
    /// the retention queue of finished ones, and the queues of restock requests and locks.
    pub fn indexes(&self, config: &StateConfig) -> Indexes {
        let mut indexes = Indexes {
            hold_index: HoldIndex::build(&self.holds),
            expiry_queue: TimeQueue::new(),
            purge_queue: TimeQueue::new(),
            request_purge_queue: BinaryHeap::new(),
            lock_expiry_queue: BinaryHeap::new(),
        };
        for (hold_id, hold) in self.holds.iter() {
            match hold.finished_at_ms {
                None => (indexes.expiry_queue).push(hold.expires_at_ms, hold_id.clone()),
                Some(finished_at_ms) => {
                    let purge_at_ms =
                        finished_at_ms.saturating_add(config.retention_ms(hold.status));
                    indexes.purge_queue.push(purge_at_ms, hold_id.clone());
                }
            }
        }
        for (request_id, request) in &self.restock_requests {
            let forget_at_ms = request.at_ms.saturating_add(config.hold_retention_ms);
            (indexes.request_purge_queue).push(Reverse((forget_at_ms, request_id.clone())));
        }
        for (name, lock) in &self.locks {
            (indexes.lock_expiry_queue).push(Reverse((lock.expires_at_ms, name.clone())));
        }
        indexes
    }
}

/// The durable state at one moment, for a snapshot build to encode while the writer goes on
/// ([`State::freeze`]): the holds' pages and the pools' per-user usage shared copy-on-write,
/// the rest (the pools' counters and settings, locks, counters, restock request ids) copied. Serialised exactly as the
/// [`Snapshot`] it was taken from: the same fields in the same order (postcard is positional).
#[derive(Serialize)]
pub struct FrozenSnapshot {
    pools: BTreeMap<PoolId, Pool>,
    holds: HoldPages,
    locks: HashMap<LockName, Lock>,
    next_seq: u64,
    next_generation: u64,
    next_fence_token: u64,
    restock_requests: HashMap<RequestId, RestockRequest>,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            pools: BTreeMap::new(),
            holds: HoldStore::new(),
            locks: HashMap::new(),
            next_seq: 1,
            next_generation: 1,
            next_fence_token: 1,
            restock_requests: HashMap::new(),
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
    expiry_queue: TimeQueue<HoldId>,
    purge_queue: TimeQueue<HoldId>,
    /// Restock request ids by the time they are forgotten (restock time + hold retention).
    request_purge_queue: BinaryHeap<Reverse<(u64, RequestId)>>,
    lock_expiry_queue: BinaryHeap<Reverse<(u64, LockName)>>,
    /// Hold ids in order: every hold in `data.holds`, and per pool of its items and per user,
    /// for `list_holds` to page through without a scan. Exact, unlike the queues: kept in step
    /// with `data.holds` where a hold is inserted and removed (`apply_record`, `remove_hold`).
    hold_index: HoldIndex,
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
    /// Parked reserves by the hold they would create: a retry of a waiting reserve (the same
    /// hold id) parks too, and is answered as soon as the hold exists, not at its own deadline.
    hold_waiters: HashMap<HoldId, Vec<WaiterId>>,
    /// Holds created while applying records that parked reserves are waiting for.
    created_holds: Vec<HoldId>,
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
        let indexes = data.indexes(&config);
        Self::from_snapshot_and_indexes(config, data, indexes)
    }

    /// A state of `data` and its indexes, built by [`Snapshot::indexes`] with the same
    /// `config` (it decides when finished holds are forgotten).
    pub fn from_snapshot_and_indexes(
        config: StateConfig,
        data: Snapshot,
        indexes: Indexes,
    ) -> Self {
        assert_eq!(
            indexes.hold_index.len(),
            data.holds.len(),
            "indexes built from another snapshot"
        );
        let Indexes {
            hold_index,
            expiry_queue,
            purge_queue,
            request_purge_queue,
            lock_expiry_queue,
        } = indexes;
        State {
            config,
            data,
            expiry_queue,
            purge_queue,
            request_purge_queue,
            lock_expiry_queue,
            hold_index,
            waiters: HashMap::new(),
            pool_waiters: HashMap::new(),
            lock_waiters: HashMap::new(),
            waiter_deadlines: BinaryHeap::new(),
            next_waiter_id: 1,
            freed_pools: Vec::new(),
            freed_locks: Vec::new(),
            hold_waiters: HashMap::new(),
            created_holds: Vec::new(),
            pending_low_stock: Vec::new(),
        }
    }

    /// The durable part of the state, for writing a snapshot.
    pub fn snapshot(&self) -> &Snapshot {
        &self.data
    }

    /// The durable part of the state as it is now, for a snapshot build on another thread.
    /// Costs the writer a reference count per page of holds and per shard of usage, and a copy
    /// of the pools' counters, the locks and the restock request ids, not a copy of the holds:
    /// the changes made after it copy the pages and shards they land on (`holds.rs`,
    /// `usage.rs`).
    pub fn freeze(&self) -> FrozenSnapshot {
        let data = &self.data;
        FrozenSnapshot {
            pools: data.pools.clone(),
            holds: data.holds.frozen(),
            locks: data.locks.clone(),
            next_seq: data.next_seq,
            next_generation: data.next_generation,
            next_fence_token: data.next_fence_token,
            restock_requests: data.restock_requests.clone(),
        }
    }

    pub fn config(&self) -> StateConfig {
        self.config
    }

    /// The seq the next event will get.
    pub fn next_seq(&self) -> u64 {
        self.data.next_seq
    }

    /// What the state's structures take on the heap, estimated from their sizes and
    /// capacities, each with what it is: for sizing (`stockd bench memory`), not for metrics
    /// (it walks every hold). The allocator rounds allocations up and keeps freed memory, so
    /// a process holds more than the sum.
    pub fn memory_estimate(&self) -> Vec<(&'static str, usize)> {
        use std::mem::size_of;
        let (pages, owned, slots) = self.data.holds.heap_bytes();
        let queues = self.expiry_queue.heap_bytes() + self.purge_queue.heap_bytes();
        // Each user's id is one allocation however many holds and pools name it.
        let mut users = HashMap::new();
        let mut note = |user: &UserId| {
            users.insert(user.as_str().as_ptr(), user.as_str().len());
        };
        let mut usage = 0;
        for pool in self.data.pools.values() {
            usage += pool.usage.heap_bytes();
            pool.usage.keys().for_each(&mut note);
        }
        for (_, hold) in self.data.holds.iter() {
            hold.user.iter().for_each(&mut note);
        }
        // An `Arc<str>`: two counts, then the bytes, rounded up to 16.
        let user_ids: usize = (users.values())
            .map(|len| (2 * size_of::<usize>() + len).div_ceil(16) * 16)
            .sum();
        vec![
            ("hold records (pages)", pages),
            ("hold ids and item lists", owned),
            ("hold id to slot index", slots),
            (
                "hold index for listing (all, by pool, by user)",
                self.hold_index.heap_bytes(),
            ),
            ("expiry and purge queues", queues),
            ("per-user usage of pools", usage),
            ("user ids", user_ids),
        ]
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
        self.config.retention_ms(status)
    }

    // ---------------------------------------------------------------- dispatch

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
                segments,
                if_absent,
            } => Step::Done(self.put_pool(pool, spec, segments, if_absent, now_ms, effects)),
            Command::Restock {
                pool,
                delta,
                request_id,
            } => Step::Done(self.restock(pool, delta, request_id, now_ms, effects)),
            Command::GetPool { pool } => Step::Done(self.get_pool(pool)),
            Command::GetSegments { pool } => Step::Done(self.get_segments(pool)),
            Command::ListPools {
                prefix,
                after,
                limit,
            } => Step::Done(Ok(self.list_pools(&prefix, after.as_deref(), limit))),
            Command::DeletePool { pool } => Step::Done(self.delete_pool(pool, now_ms, effects)),
            Command::Confirm { hold_id } => Step::Done(self.confirm(hold_id, now_ms, effects)),
            Command::Release { hold_id } => Step::Done(self.release(hold_id, now_ms, effects)),
            Command::Refund { hold_id, restock } => {
                Step::Done(self.refund(hold_id, restock, now_ms, effects))
            }
            Command::Extend { hold_id, ttl_ms } => {
                Step::Done(self.extend(hold_id, ttl_ms, now_ms, effects))
            }
            Command::GetHold { hold_id } => Step::Done(self.get_hold(hold_id, now_ms, effects)),
            Command::ListHolds {
                pool,
                user,
                status,
                after,
                limit,
            } => {
                let filter = HoldFilter {
                    pool: pool.as_ref().map(PoolId::as_str),
                    user: user.as_ref(),
                    status,
                };
                Step::Done(Ok(self.list_holds(
                    &filter,
                    after.as_deref(),
                    limit,
                    now_ms,
                )))
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

    // ---------------------------------------------------------------- shared by decisions

    /// Brings one hold up to date before a command looks at it: forgotten if past retention,
    /// expired if held past its deadline, whether or not the sweeps ran.
    fn settle(&mut self, hold_id: &HoldId, now_ms: u64, effects: &mut Effects) {
        self.forget_if_past_retention(hold_id, now_ms);
        self.expire_if_due(hold_id, now_ms, effects);
    }

    /// The status of a hold once settled: what confirm, release, extend and refund decide from.
    fn settled_status(
        &mut self,
        hold_id: &HoldId,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Result<HoldStatus, Error> {
        self.settle(hold_id, now_ms, effects);
        self.hold_status(hold_id)
    }

    /// Commits `change`, a hold's transition, and answers with the hold as it now is.
    fn commit_to_hold(
        &mut self,
        hold_id: &HoldId,
        now_ms: u64,
        change: Change,
        effects: &mut Effects,
    ) -> Outcome {
        self.commit(now_ms, change, effects);
        self.hold_reply(hold_id, false)
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
            self.remove_hold(hold_id);
        }
    }

    /// Forgets a hold, and the index follows. With the replacement of a finished hold by a
    /// new one of the same id (`apply_record`, `Held`, in recovery), which does the same, the
    /// only ways a hold leaves `data.holds`.
    fn remove_hold(&mut self, hold_id: &HoldId) {
        if let Some(slot) = self.data.holds.slot_of(hold_id) {
            self.hold_index.remove(slot, &self.data.holds);
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

    // ---------------------------------------------------------------- views

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
            segments: pool.segments,
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
            items: hold.items.to_arc(),
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

    /// How a decision changes state: applies `change` as a record at `at_ms` through
    /// `apply_record`, and keeps the record for the caller to make durable.
    fn commit(&mut self, at_ms: u64, change: Change, effects: &mut Effects) {
        let record = Record { at_ms, change };
        self.apply_record(&record, &mut effects.events);
        effects.records.push(record);
    }
}
