//! The hold index: hold ids in order, all of them, by pool of an item and by user, for
//! `list_holds` to page through without a scan.
//!
//! Derived from `data.holds`: kept in step by `State::apply_record` and `State::remove_hold`,
//! rebuilt on load, never stored. It must never decide what a page shows (filters and
//! retention are the reads'); it only yields ids in order from a cursor.
//!
//! Inserting is on the reserve's hot path, and the index holds three entries per hold, so the
//! sets are `OrderedSet`s (`hold_index/ordered_set.rs`) rather than std `BTreeSet`s: sorted
//! blocks of up to 64 ids, each id with 16 bytes inline as an integer (its head: the bytes after
//! the prefix all the block's ids share), searched by comparing heads and seldom the ids' heap
//! bytes (a cache miss each), under an index with one entry per block, which an insert next to
//! the previous one (sequential ids) does not search at all. Users share one set keyed by
//! (user, hold), the user first, rather than a set each: a set per user would cost a block per
//! buyer.

mod ordered_set;

use std::ops::Bound;

use hashbrown::HashMap;

use crate::command::HoldItem;
use crate::ids::{HoldId, PoolId, UserId};

use ordered_set::{Headed, Key, OrderedSet};

impl Headed for HoldId {
    fn key(&self) -> Key<'_> {
        Key {
            first: self.as_str().as_bytes(),
            second: None,
        }
    }
}

/// By user, then hold: the user's bytes, a zero byte (no id has one), then the hold's.
impl Headed for (UserId, HoldId) {
    fn key(&self) -> Key<'_> {
        Key {
            first: self.0.as_str().as_bytes(),
            second: Some(self.1.as_str().as_bytes()),
        }
    }
}

/// The least hold id there can be: ids start with an ASCII letter or digit.
fn least_hold_id() -> HoldId {
    HoldId::parse("0").expect("a valid id")
}

#[derive(Debug, Default)]
pub(super) struct HoldIndex {
    all: OrderedSet<HoldId>,
    by_pool: HashMap<PoolId, OrderedSet<HoldId>>,
    by_user: OrderedSet<(UserId, HoldId)>,
}

impl HoldIndex {
    pub(super) fn insert(&mut self, hold_id: &HoldId, user: Option<&UserId>, items: &[HoldItem]) {
        for item in items {
            match self.by_pool.get_mut(&item.pool) {
                Some(set) => {
                    set.insert(hold_id.clone());
                }
                None => {
                    let mut set = OrderedSet::default();
                    set.insert(hold_id.clone());
                    self.by_pool.insert(item.pool.clone(), set);
                }
            }
        }
        if let Some(user) = user {
            self.by_user.insert((user.clone(), hold_id.clone()));
        }
        self.all.insert(hold_id.clone());
    }

    pub(super) fn remove(&mut self, hold_id: &HoldId, user: Option<&UserId>, items: &[HoldItem]) {
        for item in items {
            if let Some(set) = self.by_pool.get_mut(&item.pool) {
                set.remove(hold_id);
                if set.is_empty() {
                    self.by_pool.remove(&item.pool);
                }
            }
        }
        if let Some(user) = user {
            self.by_user.remove(&(user.clone(), hold_id.clone()));
        }
        self.all.remove(hold_id);
    }

    /// Hold ids after `after` in order: the user's when `user` is given (a buyer has few holds),
    /// else the pool's when `pool` is, else all. The caller checks the other filters.
    pub(super) fn walk<'a>(
        &'a self,
        pool: Option<&str>,
        user: Option<&UserId>,
        after: Option<&HoldId>,
    ) -> Box<dyn Iterator<Item = &'a HoldId> + 'a> {
        if let Some(user) = user {
            let user = user.clone();
            let start = match after {
                Some(after) => (user.clone(), after.clone()),
                None => (user.clone(), least_hold_id()),
            };
            let from = match after {
                Some(_) => Bound::Excluded(&start),
                None => Bound::Included(&start),
            };
            return Box::new(
                self.by_user
                    .range(from)
                    .take_while(move |(owner, _)| *owner == user)
                    .map(|(_, hold_id)| hold_id),
            );
        }
        let set = match pool {
            Some(pool) => match self.by_pool.get(pool) {
                Some(set) => set,
                None => return Box::new(std::iter::empty()),
            },
            None => &self.all,
        };
        Box::new(set.range(after.map_or(Bound::Unbounded, Bound::Excluded)))
    }

    pub(super) fn len(&self) -> usize {
        self.all.len()
    }

    /// Whether the hold is where its items and user put it, in every set.
    pub(super) fn lists(
        &self,
        hold_id: &HoldId,
        user: Option<&UserId>,
        items: &[HoldItem],
    ) -> bool {
        self.all.contains(hold_id)
            && items.iter().all(|item| {
                self.by_pool
                    .get(&item.pool)
                    .is_some_and(|set| set.contains(hold_id))
            })
            && user.is_none_or(|user| self.by_user.contains(&(user.clone(), hold_id.clone())))
    }

    /// Entries by pool and by user, and whether some pool's set is empty.
    pub(super) fn entries(&self) -> (usize, usize, bool) {
        let by_pool = self.by_pool.values().map(OrderedSet::len).sum();
        let empty = self.by_pool.values().any(OrderedSet::is_empty);
        (by_pool, self.by_user.len(), empty)
    }
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use proptest::prelude::*;

    use super::*;

    /// Ids from a small alphabet, with lengths on both sides of the head's 16 bytes, so that
    /// shared prefixes longer than the head and ids that are prefixes of others are common.
    fn id() -> impl Strategy<Value = HoldId> {
        "[0a][0a.:_-]{0,24}".prop_map(|text| HoldId::parse(&text).unwrap())
    }

    /// A key's bytes, written out.
    fn bytes(key: Key<'_>) -> Vec<u8> {
        let mut bytes = key.first.to_vec();
        if let Some(second) = key.second {
            bytes.push(0);
            bytes.extend_from_slice(second);
        }
        bytes
    }

    /// What the ordered set relies on: keys order as their elements, `shared` counts the bytes
    /// two keys share at their start (at most its limit), and a head after `skip` shared bytes
    /// is the 16 bytes from there, ordered as the elements wherever two heads differ.
    fn keys_order_and_head_as<T: Headed + fmt::Debug>(
        a: &T,
        b: &T,
        skip: usize,
    ) -> Result<(), TestCaseError> {
        let (key_a, key_b) = (bytes(a.key()), bytes(b.key()));
        prop_assert_eq!(key_a.cmp(&key_b), a.cmp(b), "{:?} {:?}", a, b);
        prop_assert_eq!(a.key().len(), key_a.len());
        let shared = key_a.iter().zip(&key_b).take_while(|(x, y)| x == y).count();
        prop_assert_eq!(a.key().shared(b.key(), usize::MAX), shared);
        prop_assert_eq!(a.key().shared(b.key(), skip), shared.min(skip));
        let skip = skip.min(shared);
        let mut head = [0; 16];
        for (to, from) in head.iter_mut().zip(key_a.iter().skip(skip)) {
            *to = *from;
        }
        prop_assert_eq!(a.key().head_at(skip), u128::from_be_bytes(head));
        let heads = a.key().head_at(skip).cmp(&b.key().head_at(skip));
        prop_assert!(
            heads.is_eq() || heads == a.cmp(b),
            "{:?} {:?} {}",
            a,
            b,
            skip
        );
        Ok(())
    }

    proptest! {
        #[test]
        fn keys_order_and_head_as_their_ids(
            a in id(), b in id(), c in id(), d in id(), skip in 0..30usize,
        ) {
            keys_order_and_head_as(&a, &b, skip)?;
            let user = |id: &HoldId| UserId::parse(id.as_str()).unwrap();
            keys_order_and_head_as(&(user(&a), b.clone()), &(user(&c), d.clone()), skip)?;
            // The same user, or one a prefix of the other's: the zero byte between the parts.
            keys_order_and_head_as(&(user(&a), b.clone()), &(user(&a), d), skip)?;
            let longer = user(&HoldId::parse(&format!("{a}{c}")).unwrap());
            keys_order_and_head_as(&(user(&a), b), &(longer, c), skip)?;
        }

        #[test]
        fn a_walk_yields_ids_in_order(ids in prop::collection::btree_set(id(), 0..60)) {
            let mut index = HoldIndex::default();
            for id in ids.iter().rev() {
                index.insert(id, None, &[]);
            }
            let walked: Vec<&HoldId> = index.walk(None, None, None).collect();
            prop_assert_eq!(walked, ids.iter().collect::<Vec<_>>());
        }
    }
}
