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
    fn partition_of_is_stable_and_in_range() {
        assert_eq!(partition_of("sku-1", 1), 0);
        for id in ["a", "sku-1", "team:42", "order.7"] {
            assert!(partition_of(id, 16) < 16);
            assert_eq!(partition_of(id, 16), partition_of(id, 16));
        }
    }
}
