//! `apply_record`, the single path by which state changes, live and in recovery, and the events
//! it yields (seqs, hold events, `low_stock` crossings). `apply_record` only dispatches: each
//! kind of change is one function below it.
//!
//! Nothing here decides: a record reaching this module was already checked by the decision that
//! made it (or, in recovery, by the decision that made it before the restart). It must never
//! refuse a record or read anything but the record and the state; it asserts what the decision
//! guaranteed and panics on a contradiction. It only notes freed pools and locks; serving their
//! waiters happens after the command, in `waiters`.

use std::cmp::Reverse;
use std::sync::Arc;

use super::usage::Usage;

use crate::command::{HoldItem, PoolSpec};
use crate::ids::{HoldId, LockName, OwnerId, PoolId, RequestId, UserId};
use crate::record::{Change, Event, EventKind, Record};
use crate::view::HoldStatus;

use super::holds::HoldStore;
use super::{Hold, HoldItems, Lock, Pool, RestockRequest, State};

impl State {
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
            Change::PoolUpserted { pool, spec } => {
                self.apply_pool_upserted(at_ms, pool, spec, 1, events)
            }
            Change::PoolCreatedWithSegments {
                pool,
                spec,
                segments,
            } => self.apply_pool_upserted(at_ms, pool, spec, *segments, events),
            Change::Restocked { pool, delta } => {
                self.apply_restocked(at_ms, pool, *delta, None, events)
            }
            Change::RestockedWithRequestId {
                pool,
                delta,
                request_id,
            } => self.apply_restocked(at_ms, pool, *delta, Some(request_id), events),
            Change::PoolDeleted { pool } => self.apply_pool_deleted(at_ms, pool, events),
            Change::Held {
                hold_id,
                user,
                items,
                confirm,
                expires_at_ms,
            } => self.apply_held(
                at_ms,
                hold_id,
                user.as_ref(),
                items,
                *confirm,
                *expires_at_ms,
                events,
            ),
            Change::Confirmed { hold_id } => self.apply_confirmed(at_ms, hold_id, events),
            Change::Released { hold_id } => {
                self.apply_ended(at_ms, hold_id, HoldStatus::Released, events)
            }
            Change::Expired { hold_id } => {
                self.apply_ended(at_ms, hold_id, HoldStatus::Expired, events)
            }
            Change::Refunded { hold_id } => self.apply_refunded(at_ms, hold_id, true, events),
            Change::RefundedWithoutRestock { hold_id } => {
                self.apply_refunded(at_ms, hold_id, false, events)
            }
            Change::Extended {
                hold_id,
                expires_at_ms,
            } => self.apply_extended(at_ms, hold_id, *expires_at_ms, events),
            Change::LockAcquired {
                name,
                owner,
                token,
                expires_at_ms,
            } => self.apply_lock_acquired(name, owner, *token, *expires_at_ms),
            Change::LockRenewed {
                name,
                expires_at_ms,
            } => self.apply_lock_renewed(name, *expires_at_ms),
            Change::LockReleased { name } => self.apply_lock_released(name),
        }
    }

    /// `PoolUpserted`: a pool created (with `segments`), or its total and rules replaced (its
    /// segments kept).
    fn apply_pool_upserted(
        &mut self,
        at_ms: u64,
        id: &PoolId,
        spec: &PoolSpec,
        segments: u32,
        events: &mut Vec<Event>,
    ) {
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
                    usage: Usage::default(),
                    segments,
                },
            );
        }
        let pool = self.data.pools.get_mut(id).expect("inserted above");
        let before = pool.available;
        // On a create the old total is the 0 inserted above, so the delta is the total.
        let delta = total_as_i64(spec.total) - total_as_i64(pool.total);
        let committed = pool.held + pool.sold;
        assert!(spec.total >= committed, "pool total below committed units");
        pool.total = spec.total;
        pool.available = spec.total - committed;
        pool.per_user_limit = spec.per_user_limit;
        pool.starts_at_ms = spec.starts_at_ms;
        pool.ends_at_ms = spec.ends_at_ms;
        pool.low_stock_threshold = spec.low_stock_threshold;
        let (total, available, threshold) = (pool.total, pool.available, pool.low_stock_threshold);
        let mut event = self.event(at_ms, EventKind::PoolUpserted);
        event.pool = Some(id.clone());
        event.delta = Some(delta);
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

    /// `Restocked` and `RestockedWithRequestId`: units added to (or taken from) a pool's total
    /// and available; a named request is remembered for the hold retention.
    fn apply_restocked(
        &mut self,
        at_ms: u64,
        id: &PoolId,
        delta: i64,
        request_id: Option<&RequestId>,
        events: &mut Vec<Event>,
    ) {
        if let Some(request_id) = request_id {
            self.data.restock_requests.insert(
                request_id.clone(),
                RestockRequest {
                    pool: id.clone(),
                    delta,
                    at_ms,
                },
            );
            self.request_purge_queue.push(Reverse((
                at_ms.saturating_add(self.config.hold_retention_ms),
                request_id.clone(),
            )));
        }
        let pool = self.data.pools.get_mut(id).expect("restocked pool exists");
        let before = pool.available;
        if delta >= 0 {
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
        event.delta = Some(delta);
        event.total = Some(total);
        event.available = Some(available);
        event.request_id = request_id.cloned();
        events.push(event);
        self.note_available(id, before, at_ms, events);
    }

    /// `PoolDeleted`: a pool with nothing held goes; its waiters are answered.
    fn apply_pool_deleted(&mut self, at_ms: u64, id: &PoolId, events: &mut Vec<Event>) {
        let pool = self.data.pools.remove(id).expect("deleted pool exists");
        assert_eq!(pool.held, 0, "deleted a pool with held units");
        let mut event = self.event(at_ms, EventKind::PoolDeleted);
        event.pool = Some(id.clone());
        // Its last numbers, so that a consumer summing deltas can take them out.
        event.total = Some(pool.total);
        event.available = Some(pool.available);
        events.push(event);
        // Waiters on it get their answer (pool_not_found) now rather than at timeout.
        self.freed_pools.push(id.clone());
    }

    /// `Held`: a new hold takes its units from available into held.
    // One argument per field of `Change::Held`.
    #[allow(clippy::too_many_arguments)]
    fn apply_held(
        &mut self,
        at_ms: u64,
        hold_id: &HoldId,
        user: Option<&UserId>,
        items: &Arc<[HoldItem]>,
        confirm: bool,
        expires_at_ms: u64,
        events: &mut Vec<Event>,
    ) {
        if self.hold_waiters.contains_key(hold_id) {
            self.created_holds.push(hold_id.clone());
        }
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
                pool.usage.add(user, item.qty);
            }
            // Only a pool with a threshold can cross it (the record changes no threshold
            // before its flush below).
            if pool.low_stock_threshold.is_some() {
                self.note_available_later(&item.pool, before);
            }
        }
        // The hold keeps the ids the state already has (the pools' own, the user's in the
        // first pool's usage) rather than the request's copies: retained a week, a million
        // holds would otherwise keep a million copies of a few pool and user ids.
        let user = user.map(|user| match items.first() {
            Some(item) => self.canonical_user(&item.pool, user),
            None => user.clone(),
        });
        let user = user.as_ref();
        let hold = Hold {
            user: user.cloned(),
            items: self.canonical_items(items),
            generation_watermark: self.data.next_generation,
            confirm,
            status: HoldStatus::Held,
            created_at_ms: at_ms,
            expires_at_ms,
            finished_at_ms: None,
        };
        // A finished hold with this id may still be here in recovery: live, it had been
        // forgotten (past retention) before the id was used again. It leaves the index as it
        // leaves the table (`State::remove_hold`'s rule), before the new one enters, since both
        // have the same id.
        if let Some(old) = self.data.holds.slot_of(hold_id) {
            self.hold_index.remove(old, &self.data.holds);
        }
        let (slot, _) = self.data.holds.insert(hold_id.clone(), hold);
        self.hold_index.insert(slot, &self.data.holds);
        // A hold confirmed on creation is confirmed by the very next record of the same
        // command; it never needs an expiry slot.
        if !confirm {
            self.expiry_queue.push(expires_at_ms, hold_id.clone());
        }
        let mut event = self.event(at_ms, EventKind::Held);
        event.hold_id = Some(hold_id.clone());
        event.user = user.cloned();
        event.items = Some(items.clone());
        event.expires_at_ms = Some(expires_at_ms);
        event.created_at_ms = Some(at_ms);
        events.push(event);
        self.flush_low_stock(at_ms, events);
    }

    /// `Confirmed`: a held hold's units move from held to sold.
    fn apply_confirmed(&mut self, at_ms: u64, hold_id: &HoldId, events: &mut Vec<Event>) {
        let hold = hold_in(&mut self.data.holds, hold_id, HoldStatus::Held, "confirmed");
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
        // Taken from the hold found above rather than looked up again: this is the reserve's
        // hot path (`push_hold_event` does the same for the other kinds).
        let (user, items, expires_at_ms) =
            (hold.user.clone(), hold.items.to_arc(), hold.expires_at_ms);
        self.purge_queue.push(
            at_ms.saturating_add(self.config.confirmed_retention_ms),
            hold_id.clone(),
        );
        let mut event = self.event(at_ms, EventKind::Confirmed);
        event.hold_id = Some(hold_id.clone());
        event.user = user;
        event.items = Some(items);
        event.expires_at_ms = Some(expires_at_ms);
        events.push(event);
    }

    /// `Released` and `Expired` (`status`): a held hold ends and its units go back from held
    /// to available.
    fn apply_ended(
        &mut self,
        at_ms: u64,
        hold_id: &HoldId,
        status: HoldStatus,
        events: &mut Vec<Event>,
    ) {
        let kind = match status {
            HoldStatus::Released => EventKind::Released,
            _ => EventKind::Expired,
        };
        let hold = hold_in(&mut self.data.holds, hold_id, HoldStatus::Held, "ended");
        hold.status = status;
        // An expired hold finished at its deadline, however late the sweep ran: the answer
        // does not depend on sweep timing (nor on the backend).
        let finished_at_ms = match status {
            HoldStatus::Expired => hold.expires_at_ms.min(at_ms),
            _ => at_ms,
        };
        hold.finished_at_ms = Some(finished_at_ms);
        self.give_back_units(hold_id, |pool, qty| {
            pool.held -= qty;
            pool.available += qty;
        });
        self.purge_queue.push(
            finished_at_ms.saturating_add(self.config.hold_retention_ms),
            hold_id.clone(),
        );
        self.push_hold_event(at_ms, kind, hold_id, events);
        self.flush_low_stock(at_ms, events);
    }

    /// `Refunded` (`restock`) and `RefundedWithoutRestock`: a confirmed hold's sold units go
    /// back to available, or leave the pool.
    fn apply_refunded(
        &mut self,
        at_ms: u64,
        hold_id: &HoldId,
        restock: bool,
        events: &mut Vec<Event>,
    ) {
        let hold = hold_in(
            &mut self.data.holds,
            hold_id,
            HoldStatus::Confirmed,
            "refunded",
        );
        hold.status = HoldStatus::Refunded;
        hold.finished_at_ms = Some(at_ms);
        let generation_watermark = hold.generation_watermark;
        self.give_back_units(hold_id, |pool, qty| {
            assert!(
                pool.generation < generation_watermark,
                "refund into a new pool"
            );
            pool.sold -= qty;
            // Without restock the units leave the pool: available does not move, so no
            // low_stock can fire and no waiter gains stock, but the user's usage comes back
            // all the same (a refund gives it back).
            if restock {
                pool.available += qty;
            } else {
                pool.total -= qty;
            }
        });
        self.purge_queue.push(
            at_ms.saturating_add(self.config.hold_retention_ms),
            hold_id.clone(),
        );
        self.push_hold_event(at_ms, EventKind::Refunded, hold_id, events);
        if let Some(event) = events.last_mut() {
            event.restock = Some(restock);
        }
        self.flush_low_stock(at_ms, events);
    }

    /// `Extended`: a held hold gets a later deadline.
    fn apply_extended(
        &mut self,
        at_ms: u64,
        hold_id: &HoldId,
        expires_at_ms: u64,
        events: &mut Vec<Event>,
    ) {
        let hold = hold_in(&mut self.data.holds, hold_id, HoldStatus::Held, "extended");
        hold.expires_at_ms = expires_at_ms;
        self.expiry_queue.push(expires_at_ms, hold_id.clone());
        let mut event = self.event(at_ms, EventKind::Extended);
        event.hold_id = Some(hold_id.clone());
        event.expires_at_ms = Some(expires_at_ms);
        events.push(event);
    }

    /// `LockAcquired`: a lock taken, with its fencing token.
    fn apply_lock_acquired(
        &mut self,
        name: &LockName,
        owner: &OwnerId,
        token: u64,
        expires_at_ms: u64,
    ) {
        self.data.locks.insert(
            name.clone(),
            Lock {
                owner: owner.clone(),
                token,
                expires_at_ms,
            },
        );
        self.data.next_fence_token = self.data.next_fence_token.max(token + 1);
        self.lock_expiry_queue
            .push(Reverse((expires_at_ms, name.clone())));
    }

    /// `LockRenewed`: a lock's lease runs to a later deadline.
    fn apply_lock_renewed(&mut self, name: &LockName, expires_at_ms: u64) {
        let lock = self.data.locks.get_mut(name).expect("renewed lock exists");
        lock.expires_at_ms = expires_at_ms;
        self.lock_expiry_queue
            .push(Reverse((expires_at_ms, name.clone())));
    }

    /// `LockReleased`: a lock freed; its waiters are served after the command.
    fn apply_lock_released(&mut self, name: &LockName) {
        self.data.locks.remove(name);
        self.freed_locks.push(name.clone());
    }

    /// Gives an ended hold's units back, line by line: `give_back` moves each line's units in
    /// its pool (from held or from sold), then the user's usage comes back, the pool's waiters
    /// may be served, and its low-stock crossing is checked once the record's event is out.
    fn give_back_units(&mut self, hold_id: &HoldId, give_back: impl Fn(&mut Pool, u64)) {
        let hold = &self.data.holds[hold_id];
        for line in hold.items.iter() {
            let pool = self
                .data
                .pools
                .get_mut(&line.pool)
                .expect("pool of an ended hold");
            let before = pool.available;
            give_back(pool, line.qty);
            give_back_usage(pool, hold.user.as_ref(), line.qty);
            self.freed_pools.push(line.pool.clone());
            if pool.low_stock_threshold.is_some() {
                self.pending_low_stock.push((line.pool.clone(), before));
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
        let items = hold.items.to_arc();
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
}

impl State {
    /// `user` as the usage of `pool` names it (the same allocation), or as given.
    fn canonical_user(&self, pool: &PoolId, user: &UserId) -> UserId {
        (self.data.pools.get(pool))
            .and_then(|pool| pool.usage.get_key_value(user))
            .map_or_else(|| user.clone(), |(known, _)| known.clone())
    }

    /// `items` as a hold keeps them, naming each pool as the state does (the same
    /// allocation): several as given when they already do, else a copy that does.
    fn canonical_items(&self, items: &Arc<[HoldItem]>) -> HoldItems {
        let known = |pool: &PoolId| self.data.pools.get_key_value(pool).map(|(id, _)| id);
        let same = |pool: &PoolId| {
            known(pool).is_some_and(|id| id.as_str().as_ptr() == pool.as_str().as_ptr())
        };
        if items.len() > 1 && items.iter().all(|item| same(&item.pool)) {
            return HoldItems::Many(items.clone());
        }
        HoldItems::from_iter(items.iter().map(|item| HoldItem {
            pool: known(&item.pool).unwrap_or(&item.pool).clone(),
            qty: item.qty,
        }))
    }
}

/// The hold a record changes, which must exist and be in `expected` status: a record saying
/// otherwise contradicts the decision that made it (see `apply_record`). `change` names the
/// record in the panic.
fn hold_in<'a>(
    holds: &'a mut HoldStore,
    hold_id: &HoldId,
    expected: HoldStatus,
    change: &str,
) -> &'a mut Hold {
    let hold = holds
        .get_mut(hold_id)
        .unwrap_or_else(|| panic!("{change}: no hold {hold_id}"));
    assert_eq!(hold.status, expected, "{change}: a hold not {expected:?}");
    hold
}

/// Takes `qty` units off `user`'s usage of `pool` after they came back; an entry at zero goes.
fn give_back_usage(pool: &mut Pool, user: Option<&UserId>, qty: u64) {
    if let Some(user) = user {
        pool.usage.take_back(user, qty);
    }
}

/// A pool total as an i64, for the `delta` of `pool_upserted`; totals are at most `TOTAL_MAX`.
fn total_as_i64(total: u64) -> i64 {
    i64::try_from(total).expect("a pool total is at most TOTAL_MAX")
}
