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

/// `items` in the order of their keys (`key`: two strings, compared as the pair), sorted by
/// the 16 bytes of each string after the prefix every item shares, held in a vector beside the
/// item's position: a comparison reads no string, unless two heads tie. Ids of one shop share
/// long prefixes (`ORD-20261207-`), so the heads after them order nearly every pair.
fn sort_by_heads<T>(items: Vec<T>, key: impl Fn(&T) -> (&str, &str)) -> Vec<T> {
    fn part<'a, T>(key: &impl Fn(&T) -> (&str, &str), item: &'a T, second: bool) -> &'a [u8] {
        let (first, other) = key(item);
        if second { other } else { first }.as_bytes()
    }
    let shared = |second: bool| {
        let Some(first) = items.first().map(|item| part(&key, item, second)) else {
            return 0;
        };
        items.iter().fold(first.len(), |shared, item| {
            let bytes = part(&key, item, second);
            first[..shared]
                .iter()
                .zip(bytes)
                .take_while(|(a, b)| a == b)
                .count()
        })
    };
    let (skip_first, skip_second) = (shared(false), shared(true));
    let head = |text: &str, skip: usize| {
        let mut head = [0u8; 16];
        for (to, from) in head.iter_mut().zip(text.as_bytes().iter().skip(skip)) {
            *to = *from;
        }
        u128::from_be_bytes(head)
    };
    let mut order: Vec<(u128, u128, usize)> = items
        .iter()
        .enumerate()
        .map(|(position, item)| {
            let (first, second) = key(item);
            (head(first, skip_first), head(second, skip_second), position)
        })
        .collect();
    // Heads compare as their strings wherever they differ; where the first heads tie, the
    // first strings may still differ beyond them, so the strings decide from there.
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0).then_with(|| {
            let (ka, kb) = (key(&items[a.2]), key(&items[b.2]));
            ka.0.cmp(kb.0)
                .then_with(|| a.1.cmp(&b.1))
                .then_with(|| ka.1.cmp(kb.1))
        })
    });
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    order
        .into_iter()
        .map(|(_, _, position)| slots[position].take().expect("each position once"))
        .collect()
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
    /// The index of `holds` (id, user, items), built in order: each set is filled ascending,
    /// so that every insert lands in the block of the one before (the finger: no search) and
    /// leaves full blocks behind it. Loading a snapshot's million holds in the map's order
    /// instead searched every set for every hold, the most of a restart's time. The order is
    /// found by sorting heads (`sort_by_heads`), not the ids themselves, which are scattered
    /// over the heap.
    pub(super) fn build(holds: Vec<(&HoldId, Option<&UserId>, &[HoldItem])>) -> HoldIndex {
        let holds = sort_by_heads(holds, |&(hold_id, _, _)| (hold_id.as_str(), ""));
        let mut index = HoldIndex::default();
        for &(hold_id, _, items) in &holds {
            index.all.insert(hold_id.clone());
            for item in items {
                match index.by_pool.get_mut(&item.pool) {
                    Some(set) => set.insert(hold_id.clone()),
                    None => {
                        let mut set = OrderedSet::default();
                        set.insert(hold_id.clone());
                        index.by_pool.insert(item.pool.clone(), set);
                        true
                    }
                };
            }
        }
        let by_user: Vec<(&UserId, &HoldId)> = holds
            .iter()
            .filter_map(|&(hold_id, user, _)| user.map(|user| (user, hold_id)))
            .collect();
        drop(holds);
        let by_user = sort_by_heads(by_user, |&(user, hold_id)| {
            (user.as_str(), hold_id.as_str())
        });
        for (user, hold_id) in by_user {
            index.by_user.insert((user.clone(), hold_id.clone()));
        }
        index
    }

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

    /// The bytes its sets take on the heap (`OrderedSet::heap_bytes`; the ids are shared with
    /// the holds, counted there).
    pub(super) fn heap_bytes(&self) -> usize {
        let by_pool: usize = self.by_pool.values().map(OrderedSet::heap_bytes).sum();
        self.all.heap_bytes()
            + by_pool
            + self.by_pool.capacity() * (std::mem::size_of::<(PoolId, OrderedSet<HoldId>)>() + 1)
            + self.by_user.heap_bytes()
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
        fn an_index_built_at_once_is_the_one_built_hold_by_hold(
            holds in prop::collection::btree_map(
                id(),
                (prop::option::of(0..4u8), prop::collection::btree_set(0..3u8, 1..3)),
                0..300,
            ),
        ) {
            let user = |u: u8| UserId::parse(&format!("u{u}")).unwrap();
            let items = |pools: &std::collections::BTreeSet<u8>| -> Vec<HoldItem> {
                pools
                    .iter()
                    .map(|p| HoldItem { pool: PoolId::parse(&format!("p{p}")).unwrap(), qty: 1 })
                    .collect()
            };
            let holds: Vec<(HoldId, Option<UserId>, Vec<HoldItem>)> = holds
                .into_iter()
                .map(|(id, (u, pools))| (id, u.map(user), items(&pools)))
                .collect();
            let mut one_by_one = HoldIndex::default();
            for (id, user, items) in holds.iter().rev() {
                one_by_one.insert(id, user.as_ref(), items);
            }
            let built = HoldIndex::build(
                holds.iter().map(|(id, user, items)| (id, user.as_ref(), &items[..])).collect(),
            );
            prop_assert_eq!(built.len(), one_by_one.len());
            prop_assert_eq!(built.entries(), one_by_one.entries());
            let walks = |index: &HoldIndex| -> Vec<Vec<HoldId>> {
                let mut walks = vec![index.walk(None, None, None).cloned().collect()];
                for p in 0..3 {
                    let pool = format!("p{p}");
                    walks.push(index.walk(Some(&pool), None, None).cloned().collect());
                }
                for u in 0..4 {
                    walks.push(index.walk(None, Some(&user(u)), None).cloned().collect());
                }
                walks
            };
            prop_assert_eq!(walks(&built), walks(&one_by_one));
            for (id, user, items) in &holds {
                prop_assert!(built.lists(id, user.as_ref(), items));
            }
        }

        #[test]
        fn sorting_by_heads_sorts_by_the_strings(
            pairs in prop::collection::vec(("[0a]{0,3}[0a.]{0,20}", "[0a]{0,20}"), 0..80),
        ) {
            let mut expected = pairs.clone();
            expected.sort();
            let sorted = sort_by_heads(pairs, |(a, b)| (a.as_str(), b.as_str()));
            prop_assert_eq!(sorted, expected);
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
