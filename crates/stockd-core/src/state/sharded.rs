//! A hash map split into shards by the key's hash, for the tables that grow by every sale.
//!
//! A hash table grows by doubling: the insert that crosses its load factor allocates a table
//! twice the size and moves every entry into it, hashing each key again. For millions of holds
//! that one insert takes from a few hundred milliseconds to over a second here, and every
//! request queued behind the writer waits for it (measured in process: a batch of 1,000 holds
//! took 671 ms at 1.8 million holds and 1,344 ms at 3.7 million). With the entries spread over
//! [`SHARDS`] tables, each doubling moves one shard's entries: the same work in all, in pieces
//! a [`SHARDS`]th the size, which [`ShardedMap::insert`] spreads out in time.
//!
//! The key is hashed once: the hash picks the shard (from bits the tables do not use to place
//! entries) and is handed to that shard's table. Serialised as one map, entry for entry what a
//! `HashMap` gives, so that snapshots keep their format.

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;

use hashbrown::hash_table::{Entry, HashTable};
use hashbrown::DefaultHashBuilder;
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Shards per map. A power of two; 64 keeps an empty map small and makes a doubling of a
/// table of 4 million holds move about 60,000 entries.
const SHARDS: usize = 64;
/// Where in the hash the shard number comes from: above the bits a table uses for the bucket
/// (the low bits, for tables of fewer than 2^32 buckets) and below the 7 it keeps as tags (the
/// top bits), so that neither goes uniform within a shard.
const SHARD_SHIFT: u32 = 40;

pub(super) struct ShardedMap<K, V> {
    shards: Box<[HashTable<(K, V)>]>,
    hasher: DefaultHashBuilder,
    len: usize,
}

impl<K: Hash + Eq, V> ShardedMap<K, V> {
    pub(super) fn new() -> Self {
        ShardedMap {
            shards: (0..SHARDS).map(|_| HashTable::new()).collect(),
            hasher: DefaultHashBuilder::default(),
            len: 0,
        }
    }

    fn locate(&self, key: &K) -> (usize, u64) {
        let hash = self.hasher.hash_one(key);
        ((hash >> SHARD_SHIFT) as usize & (SHARDS - 1), hash)
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn get(&self, key: &K) -> Option<&V> {
        let (shard, hash) = self.locate(key);
        self.shards[shard]
            .find(hash, |(k, _)| k == key)
            .map(|(_, v)| v)
    }

    pub(super) fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// Inserts or replaces; returns the value replaced.
    pub(super) fn insert(&mut self, key: K, value: V) -> Option<V> {
        let (shard, hash) = self.locate(&key);
        let hasher = &self.hasher;
        // With keys spread evenly, every shard would reach its load factor in the same few
        // inserts and the pauses would only be cut in pieces, not spread out. So each shard
        // doubles at a fill of its own, from half to nearly full, and the doublings of one
        // round fall all along the way to the next.
        let table = &mut self.shards[shard];
        if table.len() >= table.capacity() * (SHARDS + shard) / (2 * SHARDS) {
            table.reserve(table.len() + 1, |(k, _)| hasher.hash_one(k));
        }
        let entry = table.entry(hash, |(k, _)| *k == key, |(k, _)| hasher.hash_one(k));
        match entry {
            Entry::Occupied(mut occupied) => {
                Some(std::mem::replace(&mut occupied.get_mut().1, value))
            }
            Entry::Vacant(vacant) => {
                vacant.insert((key, value));
                self.len += 1;
                None
            }
        }
    }

    pub(super) fn remove(&mut self, key: &K) -> Option<V> {
        let (shard, hash) = self.locate(key);
        let found = self.shards[shard]
            .find_entry(hash, |(k, _)| k == key)
            .ok()?;
        let ((_, value), _) = found.remove();
        self.len -= 1;
        Some(value)
    }

    /// The bytes its tables take on the heap, by their capacities: about 8 buckets for 7 of
    /// capacity, each an entry and a control byte (an estimate; what the entries own on the
    /// heap is not counted).
    pub(super) fn heap_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(K, V)>() + 1;
        (self.shards.iter())
            .map(|shard| shard.capacity() * 8 / 7 * entry)
            .sum()
    }

    /// Every entry, shard by shard (in no particular order, like a `HashMap`'s).
    pub(super) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards
            .iter()
            .flat_map(|shard| shard.iter().map(|(k, v)| (k, v)))
    }
}

impl<K: Hash + Eq, V> Default for ShardedMap<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Clone, V: Clone> Clone for ShardedMap<K, V> {
    fn clone(&self) -> Self {
        // Rebuilt rather than cloned table by table: the clone hashes with its own seed.
        let mut clone = ShardedMap::new();
        for (key, value) in self.iter() {
            clone.insert(key.clone(), value.clone());
        }
        clone
    }
}

impl<K: Hash + Eq, V: PartialEq> PartialEq for ShardedMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && self
                .iter()
                .all(|(key, value)| other.get(key).is_some_and(|theirs| theirs == value))
    }
}

impl<K: Hash + Eq, V: Eq> Eq for ShardedMap<K, V> {}

impl<K: Hash + Eq + fmt::Debug, V: fmt::Debug> fmt::Debug for ShardedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Hash + Eq, V> std::ops::Index<&K> for ShardedMap<K, V> {
    type Output = V;

    fn index(&self, key: &K) -> &V {
        self.get(key).expect("key in the map")
    }
}

impl<'a, K: Hash + Eq, V> IntoIterator for &'a ShardedMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Box<dyn Iterator<Item = (&'a K, &'a V)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl<K: Hash + Eq + Serialize, V: Serialize> Serialize for ShardedMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // The length first, as a `HashMap` gives it: formats like postcard need it up front.
        let mut map = serializer.serialize_map(Some(self.len))?;
        for (key, value) in self.iter() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de, K, V> Deserialize<'de> for ShardedMap<K, V>
where
    K: Hash + Eq + Deserialize<'de>,
    V: Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor<K, V>(PhantomData<(K, V)>);

        impl<'de, K, V> Visitor<'de> for MapVisitor<K, V>
        where
            K: Hash + Eq + Deserialize<'de>,
            V: Deserialize<'de>,
        {
            type Value = ShardedMap<K, V>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut map = ShardedMap::new();
                while let Some((key, value)) = access.next_entry()? {
                    map.insert(key, value);
                }
                Ok(map)
            }
        }

        deserializer.deserialize_map(MapVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_as_a_hash_map() {
        let mut sharded = ShardedMap::new();
        let mut plain = hashbrown::HashMap::new();
        for n in 0..5_000u64 {
            let key = format!("hold-{}", n * 7919 % 3_001);
            assert_eq!(sharded.insert(key.clone(), n), plain.insert(key, n));
            if n % 3 == 0 {
                let gone = format!("hold-{}", n % 1_000);
                assert_eq!(sharded.remove(&gone), plain.remove(&gone));
            }
            assert_eq!(sharded.len(), plain.len());
        }
        for (key, value) in &plain {
            assert_eq!(sharded.get(key), Some(value));
            assert_eq!(sharded[key], *value);
        }
        assert!(!sharded.contains_key(&"absent".to_string()));
        let mut entries: Vec<_> = sharded.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let mut expected: Vec<_> = plain.iter().map(|(k, v)| (k.clone(), *v)).collect();
        entries.sort();
        expected.sort();
        assert_eq!(entries, expected);
        assert_eq!(
            sharded.insert(entries[0].0.clone(), u64::MAX),
            Some(entries[0].1)
        );
        assert_eq!(sharded[&entries[0].0], u64::MAX);
        assert_eq!(sharded.clone(), sharded);
    }

    #[test]
    fn uses_every_shard() {
        let mut map = ShardedMap::new();
        for n in 0..10_000u64 {
            map.insert(n, ());
        }
        assert!(map.shards.iter().all(|shard| shard.len() > 80));
    }

    #[test]
    fn serialises_as_the_hash_map_it_replaces() {
        let mut sharded = ShardedMap::new();
        let mut plain = hashbrown::HashMap::new();
        for n in 0..3u64 {
            sharded.insert(n, format!("v{n}"));
            plain.insert(n, format!("v{n}"));
        }
        // Entry order differs between maps; each must read back the other's bytes.
        let back: ShardedMap<u64, String> =
            postcard::from_bytes(&postcard::to_allocvec(&plain).unwrap()).unwrap();
        assert_eq!(back, sharded);
        let back: hashbrown::HashMap<u64, String> =
            postcard::from_bytes(&postcard::to_allocvec(&sharded).unwrap()).unwrap();
        assert_eq!(back, plain);
    }
}
