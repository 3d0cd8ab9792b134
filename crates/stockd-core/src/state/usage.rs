//! One pool's usage per user (units in held and confirmed holds), in shards that a snapshot
//! build shares copy-on-write with the live state.
//!
//! A pool a crowd buys from names as many users as buyers, a million on a big sale day, and a
//! snapshot needs the usage as it was when the state was frozen. Copied whole, it would stop the
//! writer for tens of milliseconds at each snapshot. So a pool past [`SPLIT_AT`] users keeps
//! them in [`SHARDS`] maps behind `Arc`s, by the user's hash: freezing shares them, and the
//! writer's next change to a shard still shared copies that shard alone. A smaller pool keeps
//! one map, shared the same way, which the writer's next change copies whole (at most
//! [`SPLIT_AT`] users, tens of microseconds). Serialised as one map of user to units,
//! as the `HashMap` it replaces, so that snapshots keep their format.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashMap};
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ids::UserId;

/// Users past which a pool's usage splits into shards.
const SPLIT_AT: usize = 4_096;
/// Shards of a split usage. A power of two.
const SHARDS: usize = 64;
/// Where in the user's hash the shard comes from (the tables use the low bits and the top 7).
const SHARD_SHIFT: u32 = 40;

#[derive(Clone, Default)]
pub(super) struct Usage {
    /// None (no user yet), one map, or [`SHARDS`] maps by the user's hash.
    shards: Vec<Arc<HashMap<UserId, u64>>>,
    hasher: DefaultHashBuilder,
    len: usize,
}

impl Usage {
    fn shard(&self, user: &UserId) -> usize {
        if self.shards.len() <= 1 {
            0
        } else {
            (self.hasher.hash_one(user) >> SHARD_SHIFT) as usize & (SHARDS - 1)
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn get(&self, user: &UserId) -> Option<&u64> {
        self.shards.get(self.shard(user))?.get(user)
    }

    /// The user's entry: the id as the usage holds it (an allocation shared with holds), and
    /// the units.
    pub(super) fn get_key_value(&self, user: &UserId) -> Option<(&UserId, &u64)> {
        self.shards.get(self.shard(user))?.get_key_value(user)
    }

    /// Adds `qty` units to the user's usage.
    pub(super) fn add(&mut self, user: &UserId, qty: u64) {
        if self.shards.is_empty() {
            self.shards.push(Arc::default());
        }
        let shard = self.shard(user);
        let map = Arc::make_mut(&mut self.shards[shard]);
        match map.get_mut(user) {
            Some(used) => *used += qty,
            None => {
                map.insert(user.clone(), qty);
                self.len += 1;
                if self.shards.len() == 1 && self.len > SPLIT_AT {
                    self.split();
                }
            }
        }
    }

    /// Takes `qty` units off the user's usage (at most what it has); an entry at zero goes.
    pub(super) fn take_back(&mut self, user: &UserId, qty: u64) {
        let shard = self.shard(user);
        // Nothing to change leaves a shared shard shared.
        if self.get(user).is_none() {
            return;
        }
        let map = Arc::make_mut(&mut self.shards[shard]);
        let used = map.get_mut(user).expect("checked above");
        *used -= qty.min(*used);
        if *used == 0 {
            map.remove(user);
            self.len -= 1;
        }
    }

    /// From one map to [`SHARDS`], once.
    fn split(&mut self) {
        let one = self.shards.pop().expect("one map");
        let one = Arc::try_unwrap(one).unwrap_or_else(|shared| (*shared).clone());
        let per_shard = one.len() / SHARDS * 2;
        self.shards = (0..SHARDS)
            .map(|_| Arc::new(HashMap::with_capacity(per_shard)))
            .collect();
        for (user, used) in one {
            let shard = self.shard(&user);
            Arc::make_mut(&mut self.shards[shard]).insert(user, used);
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&UserId, &u64)> {
        self.shards.iter().flat_map(|shard| shard.iter())
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &UserId> {
        self.iter().map(|(user, _)| user)
    }

    /// The bytes its maps take on the heap, by their capacities (an estimate; the users' ids
    /// are shared with holds, counted apart).
    pub(super) fn heap_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(UserId, u64)>() + 1;
        let map = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<HashMap<UserId, u64>>();
        (self.shards.iter())
            .map(|shard| map + shard.capacity() * 8 / 7 * entry)
            .sum()
    }
}

impl FromIterator<(UserId, u64)> for Usage {
    fn from_iter<I: IntoIterator<Item = (UserId, u64)>>(entries: I) -> Self {
        let mut usage = Usage::default();
        for (user, used) in entries {
            usage.add(&user, used);
        }
        usage
    }
}

/// Equal when they give the same users the same units, however sharded.
impl PartialEq for Usage {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && (self.iter())
                .all(|(user, used)| other.get(user).is_some_and(|theirs| theirs == used))
    }
}

impl Eq for Usage {}

impl fmt::Debug for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Usage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len))?;
        for (user, used) in self.iter() {
            map.serialize_entry(user, used)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Usage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct UsageVisitor;

        impl<'de> Visitor<'de> for UsageVisitor {
            type Value = Usage;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of user ids to units")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Usage, A::Error> {
                let mut usage = Usage::default();
                while let Some((user, used)) = access.next_entry::<UserId, u64>()? {
                    usage.add(&user, used);
                }
                Ok(usage)
            }
        }

        deserializer.deserialize_map(UsageVisitor)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn user(n: u16) -> UserId {
        UserId::parse(&format!("u{n}")).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Usage is a map of users to units (against a `HashMap`) through the split, and a
        /// copy taken at any moment keeps what it had, whatever the usage does after.
        #[test]
        fn is_a_map_and_a_copy_never_moves(
            ops in prop::collection::vec((0..6_000u16, 1..4u64, any::<bool>()), 1..12_000)
        ) {
            let mut usage = Usage::default();
            let mut model: std::collections::HashMap<UserId, u64> = Default::default();
            let mut copies = Vec::new();
            for (step, (n, qty, add)) in ops.into_iter().enumerate() {
                if add {
                    usage.add(&user(n), qty);
                    *model.entry(user(n)).or_insert(0) += qty;
                } else {
                    usage.take_back(&user(n), qty);
                    if let Some(used) = model.get_mut(&user(n)) {
                        *used -= qty.min(*used);
                        if *used == 0 {
                            model.remove(&user(n));
                        }
                    }
                }
                if step % 1_500 == 0 {
                    copies.push((usage.clone(), model.clone()));
                }
                prop_assert_eq!(usage.len(), model.len());
            }
            let entries = |usage: &Usage| -> std::collections::HashMap<UserId, u64> {
                usage.iter().map(|(user, used)| (user.clone(), *used)).collect()
            };
            prop_assert_eq!(entries(&usage), model.clone());
            for (copy, then) in &copies {
                prop_assert_eq!(&entries(copy), then);
            }
            for (n, used) in &model {
                prop_assert_eq!(usage.get(n), Some(used));
            }
            let bytes = postcard::to_allocvec(&usage).unwrap();
            let read: Usage = postcard::from_bytes(&bytes).unwrap();
            prop_assert_eq!(&read, &usage);
            // The bytes of the map it replaces.
            let plain: HashMap<UserId, u64> = postcard::from_bytes(&bytes).unwrap();
            prop_assert_eq!(plain.len(), model.len());
        }
    }
}
