//! `check_invariants`: every invariant the state must hold, checked from scratch against the
//! holds and pools.
//!
//! It reads only: it recounts held units and usage from the holds and compares them with the
//! pools' own counters, so that a drift in `apply_record`'s bookkeeping shows up here. It must
//! never repair what it finds; a failure is for the caller to treat as a crash.

use hashbrown::HashMap;

use crate::ids::{PoolId, UserId};
use crate::view::HoldStatus;

use super::{Snapshot, State};

impl State {
    /// Checks every invariant the state must hold; used after each batch in debug builds and in
    /// tests. `total == available + held + sold` for every pool, held units equal the units of
    /// held holds, usage equals the units of held + confirmed holds per user, and the hold index
    /// lists exactly the holds there are.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_counts()?;
        self.check_hold_index()
    }

    /// What recovery checks before a loaded state serves: every invariant of the data itself
    /// (the pools' counters against the holds), and the hold index's sizes, but not each
    /// hold's place in the index. The index is not read from the disk: `HoldIndex::build` makes
    /// it from the holds (and its tests hold it to the index built hold by hold), and looking
    /// every hold up in its three sets was half of a million holds' restart.
    pub fn check_loaded(&self) -> Result<(), String> {
        self.check_counts()?;
        self.check_hold_index_sizes()
    }

    /// What [`State::check_loaded`] checks besides [`Snapshot::check_counts`] of the data: for
    /// a caller that checked the data before it became this state.
    pub fn check_loaded_indexes(&self) -> Result<(), String> {
        self.check_hold_index_sizes()
    }

    fn check_counts(&self) -> Result<(), String> {
        self.data.check_counts()
    }
}

impl Snapshot {
    /// `total == available + held + sold` for every pool, held units equal the units of held
    /// holds, and usage is at least the units of held + confirmed holds per user.
    pub fn check_counts(&self) -> Result<(), String> {
        let mut held: HashMap<&PoolId, u64> = HashMap::new();
        // Sized up front: growing it pair by pair rehashed a million pairs a dozen times, a
        // quarter of a restart's check.
        let pairs = self.pools.values().map(|pool| pool.usage.len()).sum();
        let mut usage: HashMap<(&PoolId, &UserId), u64> = HashMap::with_capacity(pairs);
        for (hold_id, hold) in self.holds.iter() {
            for line in hold.items.iter() {
                let alive = self
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
        for (id, pool) in &self.pools {
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
            for (user, used) in pool.usage.iter() {
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

impl State {
    /// The hold index (all, by pool, by user) holds exactly the ids of `data.holds`, each where
    /// its items and user put it, and no empty set.
    fn check_hold_index(&self) -> Result<(), String> {
        self.check_hold_index_sizes()?;
        let index = &self.hold_index;
        for slot in self.data.holds.slots() {
            if !index.lists(slot, &self.data.holds) {
                let hold_id = self.data.holds.at(slot).0;
                return Err(format!("hold {hold_id} is missing from the hold index"));
            }
        }
        Ok(())
    }

    /// The hold index has one entry in all per hold, one by pool per item, one by user per hold
    /// with a user, and no empty set. With every hold listed where it belongs
    /// (`check_hold_index`), it lists nothing else.
    fn check_hold_index_sizes(&self) -> Result<(), String> {
        let index = &self.hold_index;
        if index.len() != self.data.holds.len() {
            return Err(format!(
                "hold index lists {} holds, there are {}",
                index.len(),
                self.data.holds.len()
            ));
        }
        let (mut by_pool, mut by_user) = (0, 0);
        for (_, hold) in self.data.holds.iter() {
            by_pool += hold.items.len();
            by_user += usize::from(hold.user.is_some());
        }
        if index.entries() != (by_pool, by_user, false) {
            return Err("the hold index lists holds that are gone".to_string());
        }
        Ok(())
    }
}
