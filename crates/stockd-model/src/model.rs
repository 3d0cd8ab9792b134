//! The model: a second, deliberately naive implementation of the contract (the HTTP API,
//! docs/api.md), written from the contract and not from stockd-core's `state/`.
//!
//! It keeps every hold ever made in a `Vec` and recomputes `held`, `sold` and per-user usage by
//! linear scans, so there is no incremental arithmetic to get wrong. It owns no I/O and no clock
//! (time comes in as `now_ms`), and it must never borrow code from the implementations it judges:
//! a rule shared with the core would be a rule the comparison cannot check.
//!
//! Waiters are not modelled (sequences for the model have `wait_ms` 0); the rule scenarios
//! (`rules/waits.rs`) cover them, on every backend.

use std::collections::BTreeMap;

use stockd_core::{
    Command, Error, Event, EventKind, HoldId, HoldItem, HoldStatus, HoldView, LockName,
    LockRequest, Outcome, OwnerId, PoolId, PoolSpec, PoolView, Reply, RequestId, ReserveRequest,
    SegmentView, StateConfig, UserId,
};

//
// Rules below are transcribed from the contract. Where the contract is silent, the choice made
// is written next to it.

const QTY_MAX: u64 = 1_000_000_000;
const TOTAL_MAX: u64 = 1_000_000_000_000;
const TIME_MS_MAX: u64 = 9_007_199_254_740_991;

#[derive(Debug, Clone)]
struct ModelPool {
    /// A new number per creation: a pool deleted and created again is a new pool.
    instance: u64,
    total: u64,
    per_user_limit: Option<u64>,
    starts_at_ms: Option<u64>,
    ends_at_ms: Option<u64>,
    low_stock_threshold: Option<u64>,
    /// Fixed at creation; the model keeps a pool's units in one place whatever the count.
    segments: u64,
}

#[derive(Debug, Clone)]
struct ModelLine {
    pool: PoolId,
    qty: u64,
    instance: u64,
}

#[derive(Debug, Clone)]
struct ModelHold {
    hold_id: HoldId,
    user: Option<UserId>,
    lines: Vec<ModelLine>,
    confirm: bool,
    status: HoldStatus,
    created_at_ms: u64,
    expires_at_ms: u64,
    finished_at_ms: Option<u64>,
    /// Forgotten: a finished hold is invisible once past retention, whether or not anything
    /// noticed; `purged` says something did (a tick, or a command naming it), so that the
    /// implementations certainly forgot it too. A forgotten confirmed hold stays sold and keeps
    /// counting against the user's limit (the units never came back).
    purged: bool,
}

#[derive(Debug, Clone)]
struct ModelLock {
    owner: OwnerId,
    token: u64,
    expires_at_ms: u64,
}

/// What the model expects a command to answer.
#[derive(Debug)]
pub enum Expect {
    Exact(Outcome),
    /// A lock grant: the token is the core's to choose; it must be above every earlier token
    /// of that lock name.
    LockGranted {
        name: LockName,
        owner: OwnerId,
        expires_at_ms: u64,
    },
}

/// Cloneable, so that a caller can keep the model as of several points in a run (the
/// simulation keeps one per batch a crash may or may not have kept).
#[derive(Debug, Clone)]
pub struct Model {
    config: StateConfig,
    pools: BTreeMap<PoolId, ModelPool>,
    /// Every hold ever made, in creation order; purged ones included.
    holds: Vec<ModelHold>,
    locks: BTreeMap<LockName, ModelLock>,
    /// Highest token ever granted per lock name.
    last_token: BTreeMap<LockName, u64>,
    next_instance: u64,
    next_seq: u64,
    /// Restocks that named a request id: the pool, delta and time of the first. An id is
    /// forgotten once the hold retention from that time has passed, whether or not anything
    /// noticed (forgetting writes nothing, so nothing can tell when it happened).
    restock_requests: BTreeMap<RequestId, (PoolId, i64, u64)>,
    /// Events of the current step.
    events: Vec<Event>,
}

fn blank_event(seq: u64, at_ms: u64, kind: EventKind) -> Event {
    Event {
        seq,
        at_ms,
        kind,
        pool: None,
        hold_id: None,
        user: None,
        items: None,
        available: None,
        total: None,
        delta: None,
        low_stock_threshold: None,
        expires_at_ms: None,
        restock: None,
        request_id: None,
        created_at_ms: None,
        segments: None,
    }
}

fn invalid() -> Error {
    Error::invalid("")
}

fn in_range(value: u64, min: u64, max: u64) -> bool {
    min <= value && value <= max
}

impl Model {
    /// An empty model; retention as in `config`.
    pub fn new(config: StateConfig) -> Self {
        Model {
            config,
            pools: BTreeMap::new(),
            holds: Vec::new(),
            locks: BTreeMap::new(),
            last_token: BTreeMap::new(),
            next_instance: 1,
            next_seq: 1,
            restock_requests: BTreeMap::new(),
            events: Vec::new(),
        }
    }

    /// The events of every change since the last call, in order.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// The seq the next event will get.
    /// A pool's segment count, while it exists.
    pub fn segments_of(&self, pool: &PoolId) -> Option<u64> {
        self.pools.get(pool).map(|p| p.segments)
    }

    /// Every pool with its segment count.
    pub fn segment_counts(&self) -> impl Iterator<Item = (&PoolId, u64)> {
        self.pools.iter().map(|(id, p)| (id, p.segments))
    }

    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The highest fencing token granted so far on `name`.
    pub fn last_token(&self, name: &LockName) -> Option<u64> {
        self.last_token.get(name).copied()
    }

    // ------------------------------------------------------------ derived numbers (linear scans)

    /// Units of live lines of `status` holds on the current instance of `pool`.
    fn units(&self, pool: &PoolId, status: HoldStatus) -> u64 {
        let Some(current) = self.pools.get(pool) else {
            return 0;
        };
        let mut sum = 0;
        for hold in &self.holds {
            if hold.status != status {
                continue;
            }
            for line in &hold.lines {
                if line.pool == *pool && line.instance == current.instance {
                    sum += line.qty;
                }
            }
        }
        sum
    }

    fn held(&self, pool: &PoolId) -> u64 {
        self.units(pool, HoldStatus::Held)
    }

    fn sold(&self, pool: &PoolId) -> u64 {
        self.units(pool, HoldStatus::Confirmed)
    }

    fn available(&self, pool: &PoolId) -> u64 {
        let total = self.pools[pool].total;
        total
            .checked_sub(self.held(pool) + self.sold(pool))
            .expect("model oversold")
    }

    /// Units of `user` in held + confirmed holds on the current instance of `pool`.
    fn usage(&self, pool: &PoolId, user: &UserId) -> u64 {
        let current = &self.pools[pool];
        let mut sum = 0;
        for hold in &self.holds {
            if hold.user.as_ref() != Some(user)
                || !matches!(hold.status, HoldStatus::Held | HoldStatus::Confirmed)
            {
                continue;
            }
            for line in &hold.lines {
                if line.pool == *pool && line.instance == current.instance {
                    sum += line.qty;
                }
            }
        }
        sum
    }

    fn pool_view(&self, id: &PoolId) -> Option<PoolView> {
        let pool = self.pools.get(id)?;
        Some(PoolView {
            pool: id.clone(),
            total: pool.total,
            available: self.available(id),
            held: self.held(id),
            sold: self.sold(id),
            per_user_limit: pool.per_user_limit,
            starts_at_ms: pool.starts_at_ms,
            ends_at_ms: pool.ends_at_ms,
            low_stock_threshold: pool.low_stock_threshold,
            partition: 0,
            segments: pool.segments as u32,
        })
    }

    /// Every pool, ordered by id, as a client would see it.
    pub fn pool_views(&self) -> Vec<PoolView> {
        self.pools
            .keys()
            .map(|id| self.pool_view(id).unwrap())
            .collect()
    }

    fn past_retention(&self, hold: &ModelHold, now_ms: u64) -> bool {
        hold.finished_at_ms
            .is_some_and(|at| at + self.retention_ms(hold.status) <= now_ms)
    }

    /// The one hold named `id` nothing forgot yet, visible or not.
    fn unpurged(&self, id: &HoldId) -> Option<usize> {
        let found: Vec<usize> = (0..self.holds.len())
            .filter(|&i| !self.holds[i].purged && self.holds[i].hold_id == *id)
            .collect();
        assert!(found.len() <= 1, "model has two live holds named {id}");
        found.first().copied()
    }

    /// The hold a command names, forgotten first if past retention (a command naming a hold
    /// forgets it then, whether or not a tick did).
    fn find_hold(&mut self, id: &HoldId, now_ms: u64) -> Option<usize> {
        let index = self.unpurged(id)?;
        if self.past_retention(&self.holds[index], now_ms) {
            self.holds[index].purged = true;
            return None;
        }
        Some(index)
    }

    /// The hold named `id` as a client would see it at `now_ms`, unless it is unknown or
    /// forgotten.
    pub fn hold_view(&self, id: &HoldId, now_ms: u64) -> Option<HoldView> {
        let index = self.unpurged(id)?;
        if self.past_retention(&self.holds[index], now_ms) {
            return None;
        }
        Some(self.view_of(index))
    }

    /// Whether reading the hold named `id` at `now_ms` changes nothing and shows the same
    /// whichever way it is read: false while it is held past its deadline (a read expires it)
    /// or finished past retention with nothing having forgotten it yet (only commands do so
    /// lazily), which happens only when time passed without a sweep.
    pub fn settled(&self, id: &HoldId, now_ms: u64) -> bool {
        self.unpurged(id).is_none_or(|index| {
            let hold = &self.holds[index];
            let due = hold.status == HoldStatus::Held && now_ms >= hold.expires_at_ms;
            !due && !self.past_retention(hold, now_ms)
        })
    }

    fn view_of(&self, index: usize) -> HoldView {
        let hold = &self.holds[index];
        HoldView {
            hold_id: hold.hold_id.clone(),
            status: hold.status,
            user: hold.user.clone(),
            items: hold
                .lines
                .iter()
                .map(|line| HoldItem {
                    pool: line.pool.clone(),
                    qty: line.qty,
                })
                .collect(),
            created_at_ms: hold.created_at_ms,
            expires_at_ms: hold.expires_at_ms,
            finished_at_ms: hold.finished_at_ms,
            partition: 0,
        }
    }

    /// A command's answer shows the hold as the command left it, even one that it expired at a
    /// deadline so long ago that the hold is past retention from now on.
    fn hold_reply(&self, index: usize, created: bool) -> Outcome {
        Ok(Reply::Hold {
            hold: self.view_of(index),
            created,
        })
    }

    /// `replayed`: a restock retried with its request id, which changed nothing.
    fn pool_reply(&self, id: &PoolId, created: bool, replayed: bool) -> Outcome {
        Ok(Reply::Pool {
            pool: self.pool_view(id).unwrap(),
            created,
            replayed,
        })
    }

    // ------------------------------------------------------------ events

    fn emit(&mut self, at_ms: u64, kind: EventKind) -> &mut Event {
        let event = blank_event(self.next_seq, at_ms, kind);
        self.next_seq += 1;
        self.events.push(event);
        self.events.last_mut().unwrap()
    }

    fn emit_pool_event(&mut self, at_ms: u64, kind: EventKind, pool: &PoolId) -> &mut Event {
        let total = self.pools.get(pool).map(|p| p.total);
        let available = self.pools.get(pool).map(|_| self.available(pool));
        let event = self.emit(at_ms, kind);
        event.pool = Some(pool.clone());
        event.total = total;
        event.available = available;
        event
    }

    fn emit_hold_event(&mut self, at_ms: u64, kind: EventKind, index: usize) -> &mut Event {
        let hold = self.holds[index].clone();
        let event = self.emit(at_ms, kind);
        event.hold_id = Some(hold.hold_id.clone());
        event.user = hold.user.clone();
        event.expires_at_ms = Some(hold.expires_at_ms);
        if kind == EventKind::Held {
            event.created_at_ms = Some(hold.created_at_ms);
        }
        event.items = Some(
            hold.lines
                .iter()
                .map(|line| HoldItem {
                    pool: line.pool.clone(),
                    qty: line.qty,
                })
                .collect(),
        );
        event
    }

    fn emit_low_stock(&mut self, at_ms: u64, pool: &PoolId) {
        let threshold = self.pools[pool].low_stock_threshold;
        let event = self.emit_pool_event(at_ms, EventKind::LowStock, pool);
        event.low_stock_threshold = threshold;
    }

    /// `low_stock` fires when available went from above the threshold to at or below it.
    fn low_stock_if_crossed(&mut self, at_ms: u64, pool: &PoolId, before: u64) {
        if let Some(threshold) = self.pools[pool].low_stock_threshold {
            if before > threshold && self.available(pool) <= threshold {
                self.emit_low_stock(at_ms, pool);
            }
        }
    }

    // ------------------------------------------------------------ time

    /// Deadline passed: `now >= expires_at_ms` (the deadline is the first instant it is gone,
    /// like a lease's).
    fn expire_if_due(&mut self, index: usize, now_ms: u64) {
        let hold = &mut self.holds[index];
        if hold.status == HoldStatus::Held && now_ms >= hold.expires_at_ms {
            hold.status = HoldStatus::Expired;
            // An expired hold finished at its deadline, whenever the sweep noticed.
            hold.finished_at_ms = Some(hold.expires_at_ms);
            self.emit_hold_event(now_ms, EventKind::Expired, index);
        }
    }

    fn retention_ms(&self, status: HoldStatus) -> u64 {
        if status == HoldStatus::Confirmed {
            self.config.confirmed_retention_ms
        } else {
            self.config.hold_retention_ms
        }
    }

    /// Expires every hold past its deadline, in deadline order (ties by hold id, as a sorted
    /// set keyed by deadline would give), then forgets finished holds past retention.
    pub fn tick(&mut self, now_ms: u64) {
        let mut due: Vec<(u64, HoldId, usize)> = Vec::new();
        for (index, hold) in self.holds.iter().enumerate() {
            if hold.status == HoldStatus::Held && hold.expires_at_ms <= now_ms {
                due.push((hold.expires_at_ms, hold.hold_id.clone(), index));
            }
        }
        due.sort();
        for (_, _, index) in due {
            self.expire_if_due(index, now_ms);
        }
        for index in 0..self.holds.len() {
            if self.past_retention(&self.holds[index], now_ms) {
                self.holds[index].purged = true;
            }
        }
    }

    // ------------------------------------------------------------ commands

    /// Decides `command` at `now_ms`: what it must answer, with its events in `take_events`.
    /// A lock grant is settled by [`Model::granted`] once the token chosen is known.
    pub fn execute(&mut self, command: &Command, now_ms: u64) -> Expect {
        match command {
            Command::PutPool {
                pool,
                spec,
                segments,
                if_absent,
            } => Expect::Exact(self.put_pool(pool, spec, *segments, *if_absent, now_ms)),
            Command::Restock {
                pool,
                delta,
                request_id,
            } => Expect::Exact(self.restock(pool, *delta, request_id.as_ref(), now_ms)),
            Command::DeletePool { pool } => Expect::Exact(self.delete_pool(pool, now_ms)),
            Command::GetPool { pool } => Expect::Exact(match self.pool_view(pool) {
                Some(view) => Ok(Reply::Pool {
                    pool: view,
                    created: false,
                    replayed: false,
                }),
                None => Err(Error::PoolNotFound { pool: pool.clone() }),
            }),
            Command::GetSegments { pool } => Expect::Exact(match self.pool_view(pool) {
                Some(view) => Ok(Reply::Segments {
                    segments: vec![SegmentView {
                        segment: 0,
                        partition: 0,
                        total: view.total,
                        available: view.available,
                        held: view.held,
                        sold: view.sold,
                    }],
                }),
                None => Err(Error::PoolNotFound { pool: pool.clone() }),
            }),
            Command::ListPools {
                prefix,
                after,
                limit,
            } => Expect::Exact(self.list_pools(prefix, after.as_deref(), *limit)),
            Command::Reserve(request) => Expect::Exact(self.reserve(request, now_ms)),
            Command::Confirm { hold_id } => Expect::Exact(self.confirm(hold_id, now_ms)),
            Command::Release { hold_id } => Expect::Exact(self.release(hold_id, now_ms)),
            Command::Refund { hold_id, restock } => {
                Expect::Exact(self.refund(hold_id, *restock, now_ms))
            }
            Command::Extend { hold_id, ttl_ms } => {
                Expect::Exact(self.extend(hold_id, *ttl_ms, now_ms))
            }
            Command::GetHold { hold_id } => Expect::Exact(match self.find_hold(hold_id, now_ms) {
                Some(index) => {
                    self.expire_if_due(index, now_ms);
                    self.hold_reply(index, false)
                }
                None => Err(Error::HoldNotFound {
                    hold_id: hold_id.clone(),
                }),
            }),
            Command::ListHolds {
                pool,
                user,
                status,
                after,
                limit,
            } => Expect::Exact(self.list_holds(
                pool.as_ref(),
                user.as_ref(),
                *status,
                after.as_deref(),
                *limit,
                now_ms,
            )),
            Command::LockAcquire(request) => self.lock_acquire(request, now_ms),
            Command::LockRenew {
                name,
                owner,
                token,
                ttl_ms,
            } => Expect::Exact(self.lock_renew(name, owner, *token, *ttl_ms, now_ms)),
            Command::LockRelease { name, owner, token } => {
                Expect::Exact(self.lock_release(name, owner, *token, now_ms))
            }
        }
    }

    fn put_pool(
        &mut self,
        id: &PoolId,
        spec: &PoolSpec,
        segments: Option<u64>,
        if_absent: bool,
        now_ms: u64,
    ) -> Outcome {
        let valid = spec.total <= TOTAL_MAX
            && segments.is_none_or(|s| in_range(s, 1, 64))
            && spec.per_user_limit.is_none_or(|l| in_range(l, 1, QTY_MAX))
            && spec.starts_at_ms.is_none_or(|t| t <= TIME_MS_MAX)
            && spec.ends_at_ms.is_none_or(|t| t <= TIME_MS_MAX)
            && spec.low_stock_threshold.is_none_or(|t| t <= TOTAL_MAX);
        if !valid {
            return Err(invalid());
        }
        let created = !self.pools.contains_key(id);
        if !created {
            if if_absent {
                return self.pool_reply(id, false, false);
            }
            let fixed = self.pools[id].segments;
            if let Some(requested) = segments.filter(|&s| s != fixed) {
                return Err(Error::SegmentsFixed {
                    pool: id.clone(),
                    segments: fixed,
                    requested,
                });
            }
            let committed = self.held(id) + self.sold(id);
            if spec.total < committed {
                return Err(Error::TotalBelowCommitted {
                    pool: id.clone(),
                    total: spec.total,
                    committed,
                });
            }
        }
        // A create moves the total from nothing, as if from 0.
        let total_before = self.pools.get(id).map_or(0, |p| p.total);
        let (instance, segments) = match self.pools.get(id) {
            Some(existing) => (existing.instance, existing.segments),
            None => {
                self.next_instance += 1;
                (self.next_instance, segments.unwrap_or(1))
            }
        };
        self.pools.insert(
            id.clone(),
            ModelPool {
                instance,
                total: spec.total,
                per_user_limit: spec.per_user_limit,
                starts_at_ms: spec.starts_at_ms,
                ends_at_ms: spec.ends_at_ms,
                low_stock_threshold: spec.low_stock_threshold,
                segments,
            },
        );
        let event = self.emit_pool_event(now_ms, EventKind::PoolUpserted, id);
        event.delta = Some(spec.total as i64 - total_before as i64);
        // Created or updated at or below the threshold: fires whatever it was before.
        if let Some(threshold) = spec.low_stock_threshold {
            if self.available(id) <= threshold {
                self.emit_low_stock(now_ms, id);
            }
        }
        self.pool_reply(id, created, false)
    }

    /// With a request id remembered (within the hold retention of its restock): the same pool
    /// and delta answer the pool as it is, marked replayed; anything else is a conflict;
    /// nothing changes.
    fn restock(
        &mut self,
        id: &PoolId,
        delta: i64,
        request_id: Option<&RequestId>,
        now_ms: u64,
    ) -> Outcome {
        if delta == 0 || delta.unsigned_abs() > TOTAL_MAX {
            return Err(invalid());
        }
        let retention_ms = self.config.hold_retention_ms;
        let remembered = request_id.and_then(|request_id| {
            self.restock_requests
                .get(request_id)
                .filter(|(_, _, at_ms)| at_ms.saturating_add(retention_ms) > now_ms)
                .map(|(pool, first_delta, _)| (request_id, pool.clone(), *first_delta))
        });
        if let Some((request_id, pool, first_delta)) = remembered {
            if pool != *id || first_delta != delta {
                return Err(Error::RequestIdConflict {
                    request_id: request_id.clone(),
                    pool,
                    delta: first_delta,
                });
            }
            if !self.pools.contains_key(id) {
                return Err(Error::PoolNotFound { pool: id.clone() });
            }
            return self.pool_reply(id, false, true);
        }
        if !self.pools.contains_key(id) {
            return Err(Error::PoolNotFound { pool: id.clone() });
        }
        let before = self.available(id);
        if delta < 0 && delta.unsigned_abs() > before {
            return Err(Error::InsufficientStock {
                pool: id.clone(),
                available: before,
                requested: delta.unsigned_abs(),
            });
        }
        // The contract bounds `total` (0..=TOTAL_MAX) and is silent on a restock that would
        // cross it; stockd refuses it as `invalid_request`, so that a pool's total stays a value
        // a PUT could have set.
        if delta > 0 && self.pools[id].total + delta.unsigned_abs() > TOTAL_MAX {
            return Err(invalid());
        }
        let pool = self.pools.get_mut(id).unwrap();
        pool.total = (pool.total as i64 + delta) as u64;
        let event = self.emit_pool_event(now_ms, EventKind::Restocked, id);
        event.delta = Some(delta);
        event.request_id = request_id.cloned();
        if let Some(request_id) = request_id {
            self.restock_requests
                .insert(request_id.clone(), (id.clone(), delta, now_ms));
        }
        self.low_stock_if_crossed(now_ms, id, before);
        self.pool_reply(id, false, false)
    }

    fn delete_pool(&mut self, id: &PoolId, now_ms: u64) -> Outcome {
        if !self.pools.contains_key(id) {
            return Err(Error::PoolNotFound { pool: id.clone() });
        }
        let held = self.held(id);
        if held > 0 {
            return Err(Error::PoolHasActiveHolds {
                pool: id.clone(),
                held,
            });
        }
        // The event carries the pool's last total and available, so it is written first.
        self.emit_pool_event(now_ms, EventKind::PoolDeleted, id);
        self.pools.remove(id);
        Ok(Reply::PoolDeleted)
    }

    fn list_pools(&self, prefix: &str, after: Option<&str>, limit: usize) -> Outcome {
        if !in_range(limit as u64, 1, 1000) {
            return Err(invalid());
        }
        let matching: Vec<&PoolId> = self
            .pools
            .keys()
            .filter(|id| id.as_str().starts_with(prefix))
            .filter(|id| after.is_none_or(|after| id.as_str() > after))
            .collect();
        let page: Vec<PoolView> = matching
            .iter()
            .take(limit)
            .map(|id| self.pool_view(id).unwrap())
            .collect();
        let next = if matching.len() > limit {
            Some(page.last().unwrap().pool.clone())
        } else {
            None
        };
        Ok(Reply::PoolList { pools: page, next })
    }

    /// Every retained hold, sorted, filtered, then cut: no index, no examination bound (the
    /// sequences never come near it).
    fn list_holds(
        &self,
        pool: Option<&PoolId>,
        user: Option<&UserId>,
        status: Option<HoldStatus>,
        after: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Outcome {
        if !in_range(limit as u64, 1, 1000) || after.is_some_and(|a| HoldId::parse(a).is_err()) {
            return Err(invalid());
        }
        let mut matching: Vec<HoldView> = (0..self.holds.len())
            .filter(|&i| !self.holds[i].purged && !self.past_retention(&self.holds[i], now_ms))
            .map(|i| {
                let mut view = self.view_of(i);
                if view.status == HoldStatus::Held && now_ms >= view.expires_at_ms {
                    view.status = HoldStatus::Expired;
                    view.finished_at_ms = Some(view.expires_at_ms);
                }
                view
            })
            .filter(|view| after.is_none_or(|after| view.hold_id.as_str() > after))
            .filter(|view| pool.is_none_or(|pool| view.items.iter().any(|i| i.pool == *pool)))
            .filter(|view| user.is_none_or(|user| view.user.as_ref() == Some(user)))
            .filter(|view| status.is_none_or(|status| view.status == status))
            .collect();
        matching.sort_by(|a, b| a.hold_id.cmp(&b.hold_id));
        let next = (matching.len() > limit).then(|| matching[limit - 1].hold_id.clone());
        matching.truncate(limit);
        Ok(Reply::HoldList {
            holds: matching,
            next,
        })
    }

    fn reserve(&mut self, request: &ReserveRequest, now_ms: u64) -> Outcome {
        // Validation before any lookup.
        let mut pools_seen: Vec<&PoolId> = Vec::new();
        for item in request.items.iter() {
            if !in_range(item.qty, 1, QTY_MAX) || pools_seen.contains(&&item.pool) {
                return Err(invalid());
            }
            pools_seen.push(&item.pool);
        }
        if !in_range(request.items.len() as u64, 1, 64)
            || !in_range(request.ttl_ms, 1_000, 86_400_000)
            || !in_range(request.wait_ms, 0, 30_000)
        {
            return Err(invalid());
        }
        // Same hold id: replay or conflict.
        if let Some(index) = self.find_hold(&request.hold_id, now_ms) {
            self.expire_if_due(index, now_ms);
            let hold = &self.holds[index];
            let mut stored: Vec<(PoolId, u64)> =
                hold.lines.iter().map(|l| (l.pool.clone(), l.qty)).collect();
            let mut asked: Vec<(PoolId, u64)> = request
                .items
                .iter()
                .map(|i| (i.pool.clone(), i.qty))
                .collect();
            stored.sort();
            asked.sort();
            return if hold.user == request.user
                && hold.confirm == request.confirm
                && stored == asked
            {
                self.hold_reply(index, false)
            } else {
                Err(Error::HoldIdConflict {
                    hold_id: request.hold_id.clone(),
                })
            };
        }
        // Item by item, in the order given, first failure wins.
        for item in request.items.iter() {
            let Some(pool) = self.pools.get(&item.pool) else {
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
            let available = self.available(&item.pool);
            if available < item.qty {
                return Err(Error::InsufficientStock {
                    pool: item.pool.clone(),
                    available,
                    requested: item.qty,
                });
            }
            if let (Some(limit), Some(user)) = (pool.per_user_limit, &request.user) {
                let used = self.usage(&item.pool, user);
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
        let before: Vec<u64> = request
            .items
            .iter()
            .map(|i| self.available(&i.pool))
            .collect();
        self.holds.push(ModelHold {
            hold_id: request.hold_id.clone(),
            user: request.user.clone(),
            lines: request
                .items
                .iter()
                .map(|i| ModelLine {
                    pool: i.pool.clone(),
                    qty: i.qty,
                    instance: self.pools[&i.pool].instance,
                })
                .collect(),
            confirm: request.confirm,
            status: HoldStatus::Held,
            created_at_ms: now_ms,
            expires_at_ms: now_ms + request.ttl_ms,
            finished_at_ms: None,
            purged: false,
        });
        let index = self.holds.len() - 1;
        self.emit_hold_event(now_ms, EventKind::Held, index);
        // low_stock follows the event of the change that caused it, in item order.
        for (item, before) in request.items.iter().zip(before) {
            self.low_stock_if_crossed(now_ms, &item.pool, before);
        }
        if request.confirm {
            let hold = &mut self.holds[index];
            hold.status = HoldStatus::Confirmed;
            hold.finished_at_ms = Some(now_ms);
            self.emit_hold_event(now_ms, EventKind::Confirmed, index);
        }
        self.hold_reply(index, true)
    }

    /// Finds a live hold, expiring it first if its deadline passed.
    fn lookup(&mut self, id: &HoldId, now_ms: u64) -> Result<usize, Error> {
        let index = self
            .find_hold(id, now_ms)
            .ok_or_else(|| Error::HoldNotFound {
                hold_id: id.clone(),
            })?;
        self.expire_if_due(index, now_ms);
        Ok(index)
    }

    fn finish(&mut self, index: usize, status: HoldStatus, kind: EventKind, now_ms: u64) {
        let hold = &mut self.holds[index];
        hold.status = status;
        hold.finished_at_ms = Some(now_ms);
        self.emit_hold_event(now_ms, kind, index);
    }

    fn confirm(&mut self, id: &HoldId, now_ms: u64) -> Outcome {
        let index = self.lookup(id, now_ms)?;
        let hold_id = id.clone();
        match self.holds[index].status {
            HoldStatus::Held => {
                self.finish(index, HoldStatus::Confirmed, EventKind::Confirmed, now_ms);
                self.hold_reply(index, false)
            }
            HoldStatus::Confirmed => self.hold_reply(index, false),
            HoldStatus::Expired => Err(Error::HoldExpired { hold_id }),
            HoldStatus::Released => Err(Error::HoldReleased { hold_id }),
            HoldStatus::Refunded => Err(Error::HoldRefunded { hold_id }),
        }
    }

    fn release(&mut self, id: &HoldId, now_ms: u64) -> Outcome {
        let index = self.lookup(id, now_ms)?;
        let hold_id = id.clone();
        match self.holds[index].status {
            HoldStatus::Held => {
                self.finish(index, HoldStatus::Released, EventKind::Released, now_ms);
                self.hold_reply(index, false)
            }
            HoldStatus::Released | HoldStatus::Expired => self.hold_reply(index, false),
            HoldStatus::Confirmed => Err(Error::HoldConfirmed { hold_id }),
            HoldStatus::Refunded => Err(Error::HoldRefunded { hold_id }),
        }
    }

    /// `restock: false`: the units leave their pools (total shrinks with sold, which the model
    /// recomputes from the holds). A repeat answers the hold whatever it asks.
    fn refund(&mut self, id: &HoldId, restock: bool, now_ms: u64) -> Outcome {
        let index = self.lookup(id, now_ms)?;
        match self.holds[index].status {
            HoldStatus::Confirmed => {
                for line in &self.holds[index].lines {
                    let alive = self
                        .pools
                        .get(&line.pool)
                        .is_some_and(|p| p.instance == line.instance);
                    if !alive {
                        return Err(Error::PoolDeleted {
                            pool: line.pool.clone(),
                        });
                    }
                }
                if !restock {
                    for line in &self.holds[index].lines {
                        let pool = self.pools.get_mut(&line.pool).expect("checked alive");
                        pool.total -= line.qty;
                    }
                }
                self.finish(index, HoldStatus::Refunded, EventKind::Refunded, now_ms);
                self.events.last_mut().expect("refunded event").restock = Some(restock);
                self.hold_reply(index, false)
            }
            HoldStatus::Refunded => self.hold_reply(index, false),
            _ => Err(Error::HoldNotConfirmed {
                hold_id: id.clone(),
            }),
        }
    }

    fn extend(&mut self, id: &HoldId, ttl_ms: u64, now_ms: u64) -> Outcome {
        if !in_range(ttl_ms, 1_000, 86_400_000) {
            return Err(invalid());
        }
        let index = self.lookup(id, now_ms)?;
        let hold_id = id.clone();
        match self.holds[index].status {
            HoldStatus::Held => {
                self.holds[index].expires_at_ms = now_ms + ttl_ms;
                let event = self.emit(now_ms, EventKind::Extended);
                event.hold_id = Some(hold_id);
                event.expires_at_ms = Some(now_ms + ttl_ms);
                self.hold_reply(index, false)
            }
            HoldStatus::Expired => Err(Error::HoldExpired { hold_id }),
            HoldStatus::Confirmed => Err(Error::HoldConfirmed { hold_id }),
            HoldStatus::Released => Err(Error::HoldReleased { hold_id }),
            HoldStatus::Refunded => Err(Error::HoldRefunded { hold_id }),
        }
    }

    fn lock_acquire(&mut self, request: &LockRequest, now_ms: u64) -> Expect {
        if !in_range(request.ttl_ms, 100, 3_600_000) || !in_range(request.wait_ms, 0, 30_000) {
            return Expect::Exact(Err(invalid()));
        }
        if let Some(lock) = self.locks.get(&request.name) {
            if now_ms < lock.expires_at_ms {
                return Expect::Exact(Err(Error::LockHeld {
                    expires_at_ms: lock.expires_at_ms,
                }));
            }
        }
        Expect::LockGranted {
            name: request.name.clone(),
            owner: request.owner.clone(),
            expires_at_ms: now_ms + request.ttl_ms,
        }
    }

    /// Records the lease an implementation granted for an [`Expect::LockGranted`].
    pub fn granted(&mut self, name: LockName, owner: OwnerId, token: u64, expires_at_ms: u64) {
        self.last_token.insert(name.clone(), token);
        self.locks.insert(
            name,
            ModelLock {
                owner,
                token,
                expires_at_ms,
            },
        );
    }

    fn owns(&self, name: &LockName, owner: &OwnerId, token: u64, now_ms: u64) -> bool {
        self.locks.get(name).is_some_and(|lock| {
            now_ms < lock.expires_at_ms && lock.owner == *owner && lock.token == token
        })
    }

    fn lock_renew(
        &mut self,
        name: &LockName,
        owner: &OwnerId,
        token: u64,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Outcome {
        if !in_range(ttl_ms, 100, 3_600_000) {
            return Err(invalid());
        }
        if !self.owns(name, owner, token, now_ms) {
            return Err(Error::NotLockOwner);
        }
        self.locks.get_mut(name).unwrap().expires_at_ms = now_ms + ttl_ms;
        Ok(Reply::Lock {
            token,
            expires_at_ms: now_ms + ttl_ms,
        })
    }

    fn lock_release(
        &mut self,
        name: &LockName,
        owner: &OwnerId,
        token: u64,
        now_ms: u64,
    ) -> Outcome {
        if !self.owns(name, owner, token, now_ms) {
            return Err(Error::NotLockOwner);
        }
        self.locks.remove(name);
        Ok(Reply::LockReleased)
    }
}
