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

const HEAD_BYTES: usize = 16;

/// An id with its first bytes inline (zero-padded: no id byte is zero, so a shorter id that is a
/// prefix of a longer one still sorts first). Ordered as the id is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key<T> {
    head: [u8; HEAD_BYTES],
    id: T,
}

fn head(text: &str) -> [u8; HEAD_BYTES] {
    let mut head = [0; HEAD_BYTES];
    let len = text.len().min(HEAD_BYTES);
    head[..len].copy_from_slice(&text.as_bytes()[..len]);
    head
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
