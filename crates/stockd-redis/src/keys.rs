//! The key layout: which partition an id lives in and the hash tag each partition's keys carry.
//!
//! Every key of partition K is `stockd:{TAG_K}:...`, so all of a partition's keys (its pools, their
//! per-user usage, its holds, its event stream, its locks and waiters) share one hash slot and one
//! script call can touch them atomically. The tags are chosen so that partition K's slot falls in
//! the K-th of P equal slot ranges: a Cluster whose primaries own equal slot ranges (what
//! `redis-cli --cluster create` makes) then holds an equal share of the partitions on each.
//! This module must never change what an existing dataset's ids map to: the partition count is
//! part of the dataset (its marker records it) and the functions here are its only mapping.

/// Redis Cluster's slot count.
pub const SLOTS: u16 = 16384;

/// CRC16/XMODEM, Redis Cluster's key hash.
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The hash slot of a hash tag's content.
pub fn slot(tag: &str) -> u16 {
    crc16(tag.as_bytes()) % SLOTS
}

/// The partition an id (a pool, a hold or a lock name) lives in.
pub fn partition_of(id: &str, partitions: u32) -> u32 {
    u32::from(crc16(id.as_bytes())) % partitions
}

/// The library's name for segment `segment` of a pool spread over partitions: `POOL~J`, and
/// `POOL~0` for segment 0 (the pool's own hash, named so that the library knows the server meant
/// that segment; `~` is never in a pool id).
pub fn segment_name(pool: &str, segment: u32) -> String {
    format!("{pool}~{segment}")
}

/// A pool name as the library takes it (a pool, or a segment's name), split: the pool and the
/// segment, if it names one.
pub fn split_segment(name: &str) -> (&str, Option<u32>) {
    match name.rsplit_once('~') {
        Some((pool, segment)) => match segment.parse() {
            Ok(segment) => (pool, Some(segment)),
            Err(_) => (name, None),
        },
        None => (name, None),
    }
}

/// The partition of segment `segment` of a pool: (K0 + J) mod P, so that while S <= P each
/// segment has a partition of its own.
pub fn segment_partition(pool: &str, segment: u32, partitions: u32) -> u32 {
    (partition_of(pool, partitions) + segment % partitions) % partitions
}

/// The partition a pool name as the library takes it lives in: a segment's, or the pool's.
pub fn pool_partition(name: &str, partitions: u32) -> u32 {
    match split_segment(name) {
        (pool, Some(segment)) => segment_partition(pool, segment, partitions),
        (pool, None) => partition_of(pool, partitions),
    }
}

/// The hash tag of partition `k` of `partitions`: the first `pK.N` whose slot falls in the
/// K-th equal range of slots.
pub fn partition_tag(k: u32, partitions: u32) -> String {
    let slots = u32::from(SLOTS);
    let low = k * slots / partitions;
    let high = (k + 1) * slots / partitions;
    (0u32..)
        .map(|n| format!("p{k}.{n}"))
        .find(|tag| (low..high).contains(&u32::from(slot(tag))))
        .expect("some tag lands in every range")
}

/// The key names of one partition.
#[derive(Debug, Clone)]
pub struct PartitionKeys {
    /// `stockd:{tag}:`, the prefix of every key of the partition.
    pub prefix: String,
}

impl PartitionKeys {
    pub fn new(k: u32, partitions: u32) -> Self {
        PartitionKeys {
            prefix: format!("stockd:{{{}}}:", partition_tag(k, partitions)),
        }
    }

    /// The partition's meta hash: dataset marker, counters. The key every call declares.
    pub fn meta(&self) -> String {
        format!("{}meta", self.prefix)
    }

    pub fn pool(&self, id: &str) -> String {
        format!("{}pool:{id}", self.prefix)
    }

    pub fn usage(&self, id: &str) -> String {
        format!("{}usage:{id}", self.prefix)
    }

    pub fn hold(&self, id: &str) -> String {
        format!("{}hold:{id}", self.prefix)
    }

    pub fn events(&self) -> String {
        format!("{}events", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_redis_examples() {
        // From the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
    }

    #[test]
    fn tags_spread_over_equal_slot_ranges() {
        for partitions in [1u32, 3, 16, 64] {
            for k in 0..partitions {
                let tag = partition_tag(k, partitions);
                let s = u32::from(slot(&tag));
                assert!(s >= k * 16384 / partitions && s < (k + 1) * 16384 / partitions);
            }
        }
    }

    #[test]
    fn segments_of_a_pool_take_the_partitions_after_its_own() {
        let k0 = partition_of("hot", 16);
        for segment in 0..20 {
            let name = segment_name("hot", segment);
            assert_eq!(split_segment(&name), ("hot", Some(segment)));
            assert_eq!(pool_partition(&name, 16), (k0 + segment) % 16);
        }
        assert_eq!(pool_partition("hot", 16), k0);
        assert_eq!(split_segment("hot"), ("hot", None));
    }

    #[test]
    fn partition_of_is_stable_and_in_range() {
        assert_eq!(partition_of("sku-1", 1), 0);
        for id in ["a", "sku-1", "team:42", "order.7"] {
            assert!(partition_of(id, 16) < 16);
            assert_eq!(partition_of(id, 16), partition_of(id, 16));
        }
    }
}
