//! A hash index split into shards by the key's hash, for the table that grows by every sale:
//! the slot of each retained hold, by its id.
//!
//! A hash table grows by doubling: the insert that crosses its load factor allocates a table
//! twice the size and moves every entry into it, hashing each key again. For millions of holds
//! that one insert takes from a few hundred milliseconds to over a second here, and every
//! request queued behind the writer waits for it (measured in process: a batch of 1,000 holds
//! took 671 ms at 1.8 million holds and 1,344 ms at 3.7 million). With the entries spread over
//! [`SHARDS`] tables, each doubling moves one shard's entries: the same work in all, in pieces
//! a [`SHARDS`]th the size, which [`ShardedSlots::insert`] spreads out in time.
//!
//! An entry is only a slot number (4 bytes): the keys live where the slots point, and every
//! call is handed `key_of`, which reads the key of a slot there. The key is hashed once: the
//! hash picks the shard (from bits the tables do not use to place entries) and is handed to
//! that shard's table.

use std::hash::{BuildHasher, Hash};

use hashbrown::hash_table::HashTable;
use hashbrown::DefaultHashBuilder;

/// Shards per index. A power of two; 64 keeps an empty index small and makes a doubling of a
/// table of 4 million holds move about 60,000 entries.
const SHARDS: usize = 64;
/// Where in the hash the shard number comes from: above the bits a table uses for the bucket
/// (the low bits, for tables of fewer than 2^32 buckets) and below the 7 it keeps as tags (the
/// top bits), so that neither goes uniform within a shard.
const SHARD_SHIFT: u32 = 40;

#[derive(Clone)]
pub(super) struct ShardedSlots {
    shards: Box<[HashTable<u32>]>,
    hasher: DefaultHashBuilder,
    len: usize,
}

impl Default for ShardedSlots {
    fn default() -> Self {
        ShardedSlots {
            shards: (0..SHARDS).map(|_| HashTable::new()).collect(),
            hasher: DefaultHashBuilder::default(),
            len: 0,
        }
    }
}

impl ShardedSlots {
    fn locate<K: Hash + ?Sized>(&self, key: &K) -> (usize, u64) {
        let hash = self.hasher.hash_one(key);
        ((hash >> SHARD_SHIFT) as usize & (SHARDS - 1), hash)
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The slot of `key`.
    pub(super) fn get<'k, K: Hash + Eq + ?Sized + 'k>(
        &self,
        key: &K,
        key_of: impl Fn(u32) -> &'k K,
    ) -> Option<u32> {
        let (shard, hash) = self.locate(key);
        self.shards[shard]
            .find(hash, |&slot| key_of(slot) == key)
            .copied()
    }

    /// Indexes `slot` under `key`, which must not be indexed yet.
    pub(super) fn insert<'k, K: Hash + ?Sized + 'k>(
        &mut self,
        key: &K,
        slot: u32,
        key_of: impl Fn(u32) -> &'k K,
    ) {
        let (shard, hash) = self.locate(key);
        let hasher = &self.hasher;
        let rehash = |&slot: &u32| hasher.hash_one(key_of(slot));
        let table = &mut self.shards[shard];
        grow_staggered(table, shard, rehash);
        table.insert_unique(hash, slot, rehash);
        self.len += 1;
    }

    /// Adds `key` at `slot` unless it is there already (false then), with one hash: for
    /// loading a snapshot, whose ids are unique unless the file is not a snapshot we wrote.
    pub(super) fn insert_new<'k, K: Hash + Eq + ?Sized + 'k>(
        &mut self,
        key: &K,
        slot: u32,
        key_of: impl Fn(u32) -> &'k K,
    ) -> bool {
        let (shard, hash) = self.locate(key);
        let hasher = &self.hasher;
        let rehash = |&slot: &u32| hasher.hash_one(key_of(slot));
        let table = &mut self.shards[shard];
        grow_staggered(table, shard, rehash);
        match table.entry(hash, |&other| key_of(other) == key, rehash) {
            hashbrown::hash_table::Entry::Occupied(_) => false,
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                vacant.insert(slot);
                self.len += 1;
                true
            }
        }
    }

    /// Room for `more` keys spread over the shards, each sized as it would have grown to
    /// (its staggered fill) so that loading them grows none: a snapshot's count is known
    /// before its holds are read.
    pub(super) fn reserve<'k, K: Hash + ?Sized + 'k>(
        &mut self,
        more: usize,
        key_of: impl Fn(u32) -> &'k K,
    ) {
        let hasher = &self.hasher;
        let per_shard = more.div_ceil(SHARDS) + more.div_ceil(SHARDS) / 16 + 1;
        for (shard, table) in self.shards.iter_mut().enumerate() {
            let wanted = table.len() + per_shard;
            table.reserve(
                wanted * (2 * SHARDS) / (SHARDS + shard) + 1 - table.len(),
                |&slot: &u32| hasher.hash_one(key_of(slot)),
            );
        }
    }

    /// Takes `key` out; returns its slot.
    pub(super) fn remove<'k, K: Hash + Eq + ?Sized + 'k>(
        &mut self,
        key: &K,
        key_of: impl Fn(u32) -> &'k K,
    ) -> Option<u32> {
        let (shard, hash) = self.locate(key);
        let found = self.shards[shard]
            .find_entry(hash, |&slot| key_of(slot) == key)
            .ok()?;
        let (slot, _) = found.remove();
        self.len -= 1;
        Some(slot)
    }

    /// The bytes its tables take on the heap, by their capacities: about 8 buckets for 7 of
    /// capacity, each a slot and a control byte (an estimate).
    pub(super) fn heap_bytes(&self) -> usize {
        (self.shards.iter())
            .map(|shard| shard.capacity() * 8 / 7 * (std::mem::size_of::<u32>() + 1))
            .sum()
    }
}

/// Makes room in `table`, the index's shard number `shard`, for one more key when its fill
/// has reached the shard's own threshold. With keys spread evenly, every shard would reach its
/// load factor in the same few inserts and the pauses would only be cut in pieces, not spread
/// out. So each shard doubles at a fill of its own, from half to nearly full, and the doublings
/// of one round fall all along the way to the next.
fn grow_staggered(table: &mut HashTable<u32>, shard: usize, rehash: impl Fn(&u32) -> u64) {
    if table.len() >= table.capacity() * (SHARDS + shard) / (2 * SHARDS) {
        table.reserve(table.len() + 1, rehash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys in a vector, slots their positions: the index against a `HashMap`.
    #[test]
    fn behaves_as_a_hash_map_of_keys_to_slots() {
        let mut index = ShardedSlots::default();
        let mut keys: Vec<Option<String>> = Vec::new();
        let mut plain = hashbrown::HashMap::new();
        for n in 0..20_000u64 {
            let key = format!("hold-{}", n * 7919 % 6_007);
            if !plain.contains_key(&key) {
                let slot = keys.len() as u32;
                keys.push(Some(key.clone()));
                let key_of = |slot: u32| keys[slot as usize].as_deref().unwrap();
                index.insert(key.as_str(), slot, key_of);
                plain.insert(key, slot);
            }
            if n % 3 == 0 {
                let gone = format!("hold-{}", n % 2_000);
                let key_of = |slot: u32| keys[slot as usize].as_deref().unwrap();
                let removed = index.remove(gone.as_str(), key_of);
                assert_eq!(removed, plain.remove(&gone));
                if let Some(slot) = removed {
                    keys[slot as usize] = None;
                }
            }
            assert_eq!(index.len(), plain.len());
        }
        let key_of = |slot: u32| keys[slot as usize].as_deref().unwrap();
        for (key, slot) in &plain {
            assert_eq!(index.get(key.as_str(), key_of), Some(*slot));
        }
        assert_eq!(index.get("absent", key_of), None);
        let copy = index.clone();
        assert_eq!(copy.get("hold-7", key_of), index.get("hold-7", key_of));
        assert!(index.shards.iter().all(|shard| shard.len() > 20));
    }

    /// Room reserved for a snapshot's keys is room enough: loading them grows no shard, and a
    /// key there already is refused.
    #[test]
    fn reserved_room_takes_every_key_without_growing() {
        let keys: Vec<String> = (0..50_000).map(|n| format!("order-{n}")).collect();
        let key_of = |slot: u32| keys[slot as usize].as_str();
        let mut index = ShardedSlots::default();
        index.reserve(keys.len(), key_of);
        let capacities: Vec<usize> = index.shards.iter().map(HashTable::capacity).collect();
        for (slot, key) in keys.iter().enumerate() {
            assert!(index.insert_new(key.as_str(), slot as u32, key_of));
        }
        assert!(!index.insert_new("order-7", 0, key_of));
        assert_eq!(index.len(), keys.len());
        let after: Vec<usize> = index.shards.iter().map(HashTable::capacity).collect();
        assert_eq!(after, capacities);
        for (slot, key) in keys.iter().enumerate() {
            assert_eq!(index.get(key.as_str(), key_of), Some(slot as u32));
        }
    }
}
