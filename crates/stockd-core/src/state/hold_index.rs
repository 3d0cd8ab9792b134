//! The hold index: hold ids in order, all of them, by pool of an item and by user, for
//! `list_holds` to page through without a scan.
//!
//! Derived from `data.holds`: kept in step by `State::apply_record` and `State::remove_hold`,
//! rebuilt on load, never stored. It must never decide what a page shows (filters and
//! retention are the reads'); it only yields holds in id order from a cursor.
//!
//! Inserting is on the reserve's hot path, and the index holds three entries per hold, so the
//! sets are `OrderedSet`s (`hold_index/ordered_set.rs`) rather than std `BTreeSet`s: sorted
//! blocks of up to 64 hold slots (4 bytes each: the keys are read from the hold store), each
//! with 16 bytes of its key inline as an integer (its head: the bytes after the prefix all the
//! block's keys share), searched by comparing heads and seldom the keys themselves (a cache
//! miss each), under an index with one entry per block, which an insert next to the previous
//! one (sequential ids) does not search at all. Users share one set keyed by (user, hold), the
//! user first, rather than a set each: a set per user would cost a block per buyer.

mod ordered_set;

use std::ops::Bound;

use hashbrown::HashMap;

use crate::ids::{HoldId, PoolId, UserId};

use super::holds::HoldStore;
use ordered_set::{Key, Keys, OrderedSet};

/// The keys of `all` and `by_pool`: a slot's hold id.
struct ById<'a>(&'a HoldStore);

impl Keys for ById<'_> {
    fn key(&self, slot: u32) -> Key<'_> {
        Key {
            first: self.0.at(slot).0.as_str().as_bytes(),
            second: None,
        }
    }
}

/// The keys of `by_user`: a slot's user, a zero byte (no id has one), then its hold id, so
/// that a user's holds are together, in id order.
struct ByUser<'a>(&'a HoldStore);

impl Keys for ByUser<'_> {
    fn key(&self, slot: u32) -> Key<'_> {
        let (hold_id, hold) = self.0.at(slot);
        Key {
            first: (hold.user.as_ref())
                .expect("only holds with a user are listed by user")
                .as_str()
                .as_bytes(),
            second: Some(hold_id.as_str().as_bytes()),
        }
    }
}

fn id_key(hold_id: &HoldId) -> Key<'_> {
    Key {
        first: hold_id.as_str().as_bytes(),
        second: None,
    }
}

/// `items` in the order of their keys (`key`), sorted by the 16 bytes of each key after the
/// prefix every item shares, held in a vector beside the item's position: a comparison reads
/// no string, unless two heads tie. Ids of one shop share long prefixes (`ORD-20261207-`), so
/// the heads after them order nearly every pair. Its scratch is 32 bytes an item: at ten
/// million holds, a restart's largest allocation after the snapshot's bytes.
fn sort_by_heads<'k, T: Copy>(items: &[T], key: impl Fn(&T) -> &'k str) -> Vec<T> {
    let Some(first) = items.first().map(|item| key(item).as_bytes()) else {
        return Vec::new();
    };
    let skip = items.iter().fold(first.len(), |shared, item| {
        (first[..shared].iter())
            .zip(key(item).as_bytes())
            .take_while(|(a, b)| a == b)
            .count()
    });
    let head = |text: &str| {
        let mut head = [0u8; 16];
        for (to, from) in head.iter_mut().zip(text.as_bytes().iter().skip(skip)) {
            *to = *from;
        }
        u128::from_be_bytes(head)
    };
    let mut order: Vec<(u128, u32)> = (items.iter().enumerate())
        .map(|(position, item)| {
            let position = u32::try_from(position).expect("fewer than 4 billion items");
            (head(key(item)), position)
        })
        .collect();
    // Heads compare as their strings wherever they differ; where they tie, the strings may
    // still differ beyond them, so the strings decide.
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0).then_with(|| {
            let (a, b) = (&items[a.1 as usize], &items[b.1 as usize]);
            key(a).cmp(key(b))
        })
    });
    (order.into_iter())
        .map(|(_, position)| items[position as usize])
        .collect()
}

/// The slots of the holds with a user, in the order of (user, hold id): `by_id`, the slots in
/// hold id order, stably sorted by user. The users are ranked once each (a shop has a tenth
/// as many buyers as holds) and the slots counted into place by rank, rather than ten million
/// (user, id) pairs sorted: a tenth of the comparisons, and 4 bytes of scratch a hold rather
/// than 48.
fn by_user_order(holds: &HoldStore, by_id: &[u32]) -> Vec<u32> {
    let mut users: HashMap<&str, u32> = HashMap::new();
    let mut distinct: Vec<&str> = Vec::new();
    let mut user_of: Vec<(u32, u32)> = Vec::new();
    for &slot in by_id {
        if let Some(user) = &holds.at(slot).1.user {
            let next = u32::try_from(distinct.len()).expect("fewer than 4 billion users");
            let user = *users.entry(user.as_str()).or_insert_with(|| {
                distinct.push(user.as_str());
                next
            });
            user_of.push((slot, user));
        }
    }
    drop(users);
    let mut rank = vec![0u32; distinct.len()];
    let ordered: Vec<u32> = (0..distinct.len() as u32).collect();
    for (place, user) in sort_by_heads(&ordered, |&user| distinct[user as usize])
        .into_iter()
        .enumerate()
    {
        rank[user as usize] = place as u32;
    }
    // Where each rank's slots start, then each slot to its place, in id order within a user.
    let mut start = vec![0usize; distinct.len() + 1];
    for &(_, user) in &user_of {
        start[rank[user as usize] as usize + 1] += 1;
    }
    for at in 1..start.len() {
        start[at] += start[at - 1];
    }
    let mut sorted = vec![0u32; user_of.len()];
    for (slot, user) in user_of {
        let at = &mut start[rank[user as usize] as usize];
        sorted[*at] = slot;
        *at += 1;
    }
    sorted
}

/// The sets hold slots of the hold store (`holds.rs`), four bytes each, and read the ids and
/// users to order them from the store: every call takes the store the slots name. A hold
/// enters after the store has it and leaves before the store lets its slot go.
#[derive(Debug, Default)]
pub(super) struct HoldIndex {
    all: OrderedSet,
    by_pool: HashMap<PoolId, OrderedSet>,
    by_user: OrderedSet,
}

impl HoldIndex {
    /// The index of every hold in `holds`, built in order: each set is filled ascending, so
    /// that every insert lands in the block of the one before (the finger: no search) and
    /// leaves full blocks behind it. Loading a snapshot's million holds in the store's order
    /// instead searched every set for every hold, the most of a restart's time. The order is
    /// found by sorting heads (`sort_by_heads`), not the ids themselves, which are scattered
    /// over the heap.
    pub(super) fn build(holds: &HoldStore) -> HoldIndex {
        let (by_id, by_user_keys) = (ById(holds), ByUser(holds));
        let slots: Vec<u32> = holds.slots().collect();
        let slots = sort_by_heads(&slots, |&slot| holds.at(slot).0.as_str());
        let mut index = HoldIndex::default();
        for &slot in &slots {
            index.all.insert(slot, &by_id);
            for item in holds.at(slot).1.items.iter() {
                match index.by_pool.get_mut(&item.pool) {
                    Some(set) => set.insert(slot, &by_id),
                    None => {
                        let mut set = OrderedSet::default();
                        set.insert(slot, &by_id);
                        index.by_pool.insert(item.pool.clone(), set);
                        true
                    }
                };
            }
        }
        for slot in by_user_order(holds, &slots) {
            index.by_user.insert(slot, &by_user_keys);
        }
        index
    }

    /// Lists the hold in `slot`, which `holds` has.
    pub(super) fn insert(&mut self, slot: u32, holds: &HoldStore) {
        let by_id = ById(holds);
        let hold = holds.at(slot).1;
        for item in hold.items.iter() {
            match self.by_pool.get_mut(&item.pool) {
                Some(set) => {
                    set.insert(slot, &by_id);
                }
                None => {
                    let mut set = OrderedSet::default();
                    set.insert(slot, &by_id);
                    self.by_pool.insert(item.pool.clone(), set);
                }
            }
        }
        if hold.user.is_some() {
            self.by_user.insert(slot, &ByUser(holds));
        }
        self.all.insert(slot, &by_id);
    }

    /// Takes out the hold in `slot`, which `holds` still has.
    pub(super) fn remove(&mut self, slot: u32, holds: &HoldStore) {
        let by_id = ById(holds);
        let hold = holds.at(slot).1;
        for item in hold.items.iter() {
            if let Some(set) = self.by_pool.get_mut(&item.pool) {
                set.remove(slot, &by_id);
                if set.is_empty() {
                    self.by_pool.remove(&item.pool);
                }
            }
        }
        if hold.user.is_some() {
            self.by_user.remove(slot, &ByUser(holds));
        }
        self.all.remove(slot, &by_id);
    }

    /// The slots of the holds after `after` in id order: the user's when `user` is given (a
    /// buyer has few holds), else the pool's when `pool` is, else all. The caller checks the
    /// other filters.
    pub(super) fn walk<'a>(
        &'a self,
        holds: &'a HoldStore,
        pool: Option<&str>,
        user: Option<&'a UserId>,
        after: Option<&HoldId>,
    ) -> Box<dyn Iterator<Item = u32> + 'a> {
        if let Some(user) = user {
            // No hold id is empty: (user, nothing) is below all of the user's holds.
            let from = Key {
                first: user.as_str().as_bytes(),
                second: Some(after.map_or(&[][..], |after| after.as_str().as_bytes())),
            };
            let from = match after {
                Some(_) => Bound::Excluded(from),
                None => Bound::Included(from),
            };
            return Box::new(
                self.by_user
                    .range(from, &ByUser(holds))
                    .take_while(move |&slot| holds.at(slot).1.user.as_ref() == Some(user)),
            );
        }
        let set = match pool {
            Some(pool) => match self.by_pool.get(pool) {
                Some(set) => set,
                None => return Box::new(std::iter::empty()),
            },
            None => &self.all,
        };
        Box::new(set.range(
            after.map_or(Bound::Unbounded, |after| Bound::Excluded(id_key(after))),
            &ById(holds),
        ))
    }

    pub(super) fn len(&self) -> usize {
        self.all.len()
    }

    /// The bytes its sets take on the heap (`OrderedSet::heap_bytes`).
    pub(super) fn heap_bytes(&self) -> usize {
        let by_pool: usize = self.by_pool.values().map(OrderedSet::heap_bytes).sum();
        self.all.heap_bytes()
            + by_pool
            + self.by_pool.capacity() * (std::mem::size_of::<(PoolId, OrderedSet)>() + 1)
            + self.by_user.heap_bytes()
    }

    /// Whether the hold in `slot` is where its items and user put it, in every set.
    pub(super) fn lists(&self, slot: u32, holds: &HoldStore) -> bool {
        let (hold_id, hold) = holds.at(slot);
        let by_id = ById(holds);
        self.all.contains(id_key(hold_id), &by_id)
            && hold.items.iter().all(|item| {
                self.by_pool
                    .get(&item.pool)
                    .is_some_and(|set| set.contains(id_key(hold_id), &by_id))
            })
            && hold.user.as_ref().is_none_or(|user| {
                let key = Key {
                    first: user.as_str().as_bytes(),
                    second: Some(hold_id.as_str().as_bytes()),
                };
                self.by_user.contains(key, &ByUser(holds))
            })
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
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::super::{Hold, HoldItems};
    use super::*;
    use crate::command::HoldItem;
    use crate::view::HoldStatus;

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

    /// What the ordered set relies on: keys order as their bytes, whether in two parts or
    /// written out in one, `shared` counts the bytes two keys share at their start (at most
    /// its limit), and a head after `skip` shared bytes is the 16 bytes from there, ordered as
    /// the keys wherever two heads differ.
    fn keys_order_and_head_as(a: Key<'_>, b: Key<'_>, skip: usize) -> Result<(), TestCaseError> {
        let (key_a, key_b) = (bytes(a), bytes(b));
        fn one_part(bytes: &[u8]) -> Key<'_> {
            Key {
                first: bytes,
                second: None,
            }
        }
        prop_assert_eq!(a.cmp_bytes(b), key_a.cmp(&key_b), "{:?} {:?}", key_a, key_b);
        prop_assert_eq!(one_part(&key_a).cmp_bytes(b), key_a.cmp(&key_b));
        prop_assert_eq!(a.cmp_bytes(one_part(&key_b)), key_a.cmp(&key_b));
        prop_assert_eq!(a.len(), key_a.len());
        let shared = key_a.iter().zip(&key_b).take_while(|(x, y)| x == y).count();
        prop_assert_eq!(a.shared(b, usize::MAX), shared);
        prop_assert_eq!(a.shared(b, skip), shared.min(skip));
        let skip = skip.min(shared);
        let mut head = [0; 16];
        for (to, from) in head.iter_mut().zip(key_a.iter().skip(skip)) {
            *to = *from;
        }
        prop_assert_eq!(a.head_at(skip), u128::from_be_bytes(head));
        let heads = a.head_at(skip).cmp(&b.head_at(skip));
        prop_assert!(
            heads.is_eq() || heads == key_a.cmp(&key_b),
            "{:?} {:?} {}",
            key_a,
            key_b,
            skip
        );
        Ok(())
    }

    fn pair<'a>(user: &'a HoldId, hold: &'a HoldId) -> Key<'a> {
        Key {
            first: user.as_str().as_bytes(),
            second: Some(hold.as_str().as_bytes()),
        }
    }

    proptest! {
        #[test]
        fn keys_order_and_head_as_their_bytes(
            a in id(), b in id(), c in id(), d in id(), skip in 0..30usize,
        ) {
            keys_order_and_head_as(id_key(&a), id_key(&b), skip)?;
            keys_order_and_head_as(pair(&a, &b), pair(&c, &d), skip)?;
            // The same user, or one a prefix of the other's: the zero byte between the parts.
            keys_order_and_head_as(pair(&a, &b), pair(&a, &d), skip)?;
            let longer = HoldId::parse(&format!("{a}{c}")).unwrap();
            keys_order_and_head_as(pair(&a, &b), pair(&longer, &c), skip)?;
            // A user's least key, as a walk starts from.
            let least = Key { first: a.as_str().as_bytes(), second: Some(&[]) };
            keys_order_and_head_as(least, pair(&a, &b), skip)?;
        }
    }

    /// Four users, some the start of others': their holds still go by user, then by id.
    fn user(u: u8) -> UserId {
        UserId::parse(["u1", "u", "u1.x", "u0"][usize::from(u)]).unwrap()
    }

    fn hold(user: Option<UserId>, pools: &BTreeSet<u8>) -> Hold {
        let items = pools.iter().map(|p| HoldItem {
            pool: PoolId::parse(&format!("p{p}")).unwrap(),
            qty: 1,
        });
        Hold {
            user,
            items: HoldItems::from_iter(items.collect::<Vec<_>>().into_iter()),
            generation_watermark: 0,
            confirm: false,
            status: HoldStatus::Held,
            created_at_ms: 0,
            expires_at_ms: 0,
            finished_at_ms: None,
        }
    }

    /// Every walk the index can make from the start: all, each pool's, each user's, as ids.
    fn walks(index: &HoldIndex, holds: &HoldStore) -> Vec<Vec<HoldId>> {
        let ids = |slots: Box<dyn Iterator<Item = u32> + '_>| -> Vec<HoldId> {
            slots.map(|slot| holds.at(slot).0.clone()).collect()
        };
        let mut walks = vec![ids(index.walk(holds, None, None, None))];
        for p in 0..3 {
            let pool = format!("p{p}");
            walks.push(ids(index.walk(holds, Some(&pool), None, None)));
        }
        let users: Vec<UserId> = (0..4).map(user).collect();
        for user in &users {
            walks.push(ids(index.walk(holds, None, Some(user), None)));
        }
        walks
    }

    /// The same walks, from the model: (id, user, pools) in id order.
    fn model_walks(model: &BTreeMap<HoldId, (Option<u8>, BTreeSet<u8>)>) -> Vec<Vec<HoldId>> {
        let which = |keep: &dyn Fn(&Option<u8>, &BTreeSet<u8>) -> bool| -> Vec<HoldId> {
            (model.iter())
                .filter(|(_, (u, pools))| keep(u, pools))
                .map(|(id, _)| id.clone())
                .collect()
        };
        let mut walks = vec![which(&|_, _| true)];
        for p in 0..3 {
            walks.push(which(&|_, pools| pools.contains(&p)));
        }
        for u in 0..4 {
            walks.push(which(&|owner, _| *owner == Some(u)));
        }
        walks
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(HoldId, Option<u8>, BTreeSet<u8>),
        Remove(prop::sample::Index),
        /// A walk from a cursor: after the id at the index, by user or not.
        WalkAfter(prop::sample::Index, Option<u8>),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (id(), prop::option::of(0..4u8), prop::collection::btree_set(0..3u8, 1..3))
                .prop_map(|(id, u, pools)| Op::Insert(id, u, pools)),
            2 => any::<prop::sample::Index>().prop_map(Op::Remove),
            1 => (any::<prop::sample::Index>(), prop::option::of(0..4u8))
                .prop_map(|(at, u)| Op::WalkAfter(at, u)),
        ]
    }

    proptest! {
        #[test]
        fn an_index_built_at_once_is_the_one_built_hold_by_hold(
            holds in prop::collection::btree_map(
                id(),
                (prop::option::of(0..4u8), prop::collection::btree_set(0..3u8, 1..3)),
                0..300,
            ),
        ) {
            let mut store = HoldStore::new();
            let mut one_by_one = HoldIndex::default();
            for (id, (u, pools)) in holds.iter().rev() {
                let (slot, _) = store.insert(id.clone(), hold(u.map(user), pools));
                one_by_one.insert(slot, &store);
            }
            let built = HoldIndex::build(&store);
            prop_assert_eq!(built.len(), one_by_one.len());
            prop_assert_eq!(built.entries(), one_by_one.entries());
            prop_assert_eq!(walks(&built, &store), walks(&one_by_one, &store));
            prop_assert_eq!(walks(&built, &store), model_walks(&holds));
            for slot in store.slots() {
                prop_assert!(built.lists(slot, &store));
            }
        }

        /// Holds come and go as the state makes them (into the index after the store, out of
        /// it before), so that freed slots are used again for other ids: the sets, which hold
        /// slots and keep their blocks' starts as copies, answer as the model does.
        #[test]
        fn an_index_follows_holds_through_reused_slots(ops in prop::collection::vec(op(), 1..600)) {
            let mut store = HoldStore::new();
            let mut index = HoldIndex::default();
            let mut model: BTreeMap<HoldId, (Option<u8>, BTreeSet<u8>)> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(id, u, pools) => {
                        if let Some(old) = store.slot_of(&id) {
                            index.remove(old, &store);
                        }
                        let (slot, _) = store.insert(id.clone(), hold(u.map(user), &pools));
                        index.insert(slot, &store);
                        model.insert(id, (u, pools));
                    }
                    Op::Remove(at) => {
                        if model.is_empty() {
                            continue;
                        }
                        let id = model.keys().nth(at.index(model.len())).unwrap().clone();
                        let slot = store.slot_of(&id).unwrap();
                        index.remove(slot, &store);
                        store.remove(&id);
                        model.remove(&id);
                    }
                    Op::WalkAfter(at, u) => {
                        if model.is_empty() {
                            continue;
                        }
                        let after = model.keys().nth(at.index(model.len())).unwrap().clone();
                        let owner = u.map(user);
                        let walked: Vec<HoldId> = index
                            .walk(&store, None, owner.as_ref(), Some(&after))
                            .map(|slot| store.at(slot).0.clone())
                            .collect();
                        let expected: Vec<HoldId> = (model.range::<HoldId, _>(&after..))
                            .filter(|(id, (owner, _))| **id != after && (u.is_none() || *owner == u))
                            .map(|(id, _)| id.clone())
                            .collect();
                        prop_assert_eq!(walked, expected);
                    }
                }
                prop_assert_eq!(index.len(), model.len());
                let by_pool: usize = model.values().map(|(_, pools)| pools.len()).sum();
                let by_user = model.values().filter(|(u, _)| u.is_some()).count();
                prop_assert_eq!(index.entries(), (by_pool, by_user, false));
            }
            prop_assert_eq!(walks(&index, &store), model_walks(&model));
            for slot in store.slots() {
                prop_assert!(index.lists(slot, &store));
            }
        }

        #[test]
        fn sorting_by_heads_sorts_by_the_strings(
            texts in prop::collection::vec("[0a]{0,3}[0a.]{0,20}", 0..80),
        ) {
            let mut expected = texts.clone();
            expected.sort();
            let refs: Vec<&String> = texts.iter().collect();
            let sorted = sort_by_heads(&refs, |&text| text.as_str());
            prop_assert_eq!(sorted, expected.iter().collect::<Vec<_>>());
        }
    }
}
