//! The hold index: hold ids in order, all of them, by pool of an item and by user, for
//! `list_holds` to page through without a scan.
//!
//! Derived from `data.holds`: kept in step by `State::apply_record` and `State::remove_hold`,
//! rebuilt on load, never stored. It must never decide what a page shows (filters and
//! retention are the reads'); it only yields ids in order from a cursor.
//!
//! Inserting is on the reserve's hot path, so keys carry the first 16 bytes of their id inline:
//! comparisons while descending the tree compare those and seldom reach the id's heap bytes (a
//! cache miss each). Users share one ordered set keyed by (user, hold) rather than a set each:
//! a set per user would cost a tree node per buyer.

use std::collections::BTreeSet;
use std::ops::Bound;

use hashbrown::HashMap;

use crate::command::HoldItem;
use crate::ids::{HoldId, PoolId, UserId};

/// An id with its first 16 bytes inline as one big-endian integer (zero-padded: no id byte is
/// zero, so a shorter id that is a prefix of a longer one still sorts first), so that comparing
/// heads is one integer comparison rather than a call to `memcmp`. Ordered as the id is.
///
/// Not wider: the index holds three keys per hold, and every byte a hold keeps is a byte the
/// kernel zeroes for the growing state (32 bytes inline cost 160 bytes per hold,
/// `benches/hold_memory.rs`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key<T> {
    head: u128,
    id: T,
}

fn head(text: &str) -> u128 {
    let mut head = [0; 16];
    let len = text.len().min(16);
    head[..len].copy_from_slice(&text.as_bytes()[..len]);
    u128::from_be_bytes(head)
}

impl Key<HoldId> {
    fn new(id: &HoldId) -> Self {
        Key {
            head: head(id.as_str()),
            id: id.clone(),
        }
    }
}

impl Key<UserId> {
    fn new(id: &UserId) -> Self {
        Key {
            head: head(id.as_str()),
            id: id.clone(),
        }
    }
}

/// The least hold id there can be: ids start with an ASCII letter or digit.
fn least_hold_id() -> HoldId {
    HoldId::parse("0").expect("a valid id")
}

#[derive(Debug, Default)]
pub(super) struct HoldIndex {
    all: BTreeSet<Key<HoldId>>,
    by_pool: HashMap<PoolId, BTreeSet<Key<HoldId>>>,
    by_user: BTreeSet<(Key<UserId>, Key<HoldId>)>,
}

impl HoldIndex {
    pub(super) fn insert(&mut self, hold_id: &HoldId, user: Option<&UserId>, items: &[HoldItem]) {
        let key = Key::<HoldId>::new(hold_id);
        for item in items {
            match self.by_pool.get_mut(&item.pool) {
                Some(set) => {
                    set.insert(key.clone());
                }
                None => {
                    self.by_pool
                        .insert(item.pool.clone(), BTreeSet::from([key.clone()]));
                }
            }
        }
        if let Some(user) = user {
            self.by_user.insert((Key::<UserId>::new(user), key.clone()));
        }
        self.all.insert(key);
    }

    pub(super) fn remove(&mut self, hold_id: &HoldId, user: Option<&UserId>, items: &[HoldItem]) {
        let key = Key::<HoldId>::new(hold_id);
        for item in items {
            if let Some(set) = self.by_pool.get_mut(&item.pool) {
                set.remove(&key);
                if set.is_empty() {
                    self.by_pool.remove(&item.pool);
                }
            }
        }
        if let Some(user) = user {
            self.by_user
                .remove(&(Key::<UserId>::new(user), key.clone()));
        }
        self.all.remove(&key);
    }

    /// Hold ids after `after` in order: the user's when `user` is given (a buyer has few holds),
    /// else the pool's when `pool` is, else all. The caller checks the other filters.
    pub(super) fn walk<'a>(
        &'a self,
        pool: Option<&str>,
        user: Option<&UserId>,
        after: Option<&HoldId>,
    ) -> Box<dyn Iterator<Item = &'a HoldId> + 'a> {
        let lower = |after: Option<&HoldId>| match after {
            Some(after) => Bound::Excluded(Key::<HoldId>::new(after)),
            None => Bound::Unbounded,
        };
        if let Some(user) = user {
            let user_key = Key::<UserId>::new(user);
            let start = match after {
                Some(after) => Bound::Excluded((user_key.clone(), Key::<HoldId>::new(after))),
                None => Bound::Included((user_key.clone(), Key::<HoldId>::new(&least_hold_id()))),
            };
            return Box::new(
                self.by_user
                    .range((start, Bound::Unbounded))
                    .take_while(move |(owner, _)| *owner == user_key)
                    .map(|(_, key)| &key.id),
            );
        }
        let set = match pool {
            Some(pool) => match self.by_pool.get(pool) {
                Some(set) => set,
                None => return Box::new(std::iter::empty()),
            },
            None => &self.all,
        };
        Box::new(
            set.range((lower(after), Bound::Unbounded))
                .map(|key| &key.id),
        )
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
        let key = Key::<HoldId>::new(hold_id);
        self.all.contains(&key)
            && items.iter().all(|item| {
                self.by_pool
                    .get(&item.pool)
                    .is_some_and(|set| set.contains(&key))
            })
            && user.is_none_or(|user| {
                self.by_user
                    .contains(&(Key::<UserId>::new(user), key.clone()))
            })
    }

    /// Entries by pool and by user, and whether some pool's set is empty.
    pub(super) fn entries(&self) -> (usize, usize, bool) {
        let by_pool = self.by_pool.values().map(BTreeSet::len).sum();
        let empty = self.by_pool.values().any(BTreeSet::is_empty);
        (by_pool, self.by_user.len(), empty)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Ids from a small alphabet, with lengths on both sides of the head's 16 bytes, so that
    /// shared prefixes longer than the head and ids that are prefixes of others are common.
    fn id() -> impl Strategy<Value = HoldId> {
        "[0a][0a.:_-]{0,24}".prop_map(|text| HoldId::parse(&text).unwrap())
    }

    proptest! {
        #[test]
        fn keys_are_ordered_as_their_ids(a in id(), b in id()) {
            prop_assert_eq!(Key::<HoldId>::new(&a).cmp(&Key::<HoldId>::new(&b)), a.cmp(&b));
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
