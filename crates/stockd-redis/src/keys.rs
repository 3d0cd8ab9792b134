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

/// Where the segments of a pool spread over partitions live: the dataset's partitions grouped
/// by the primary that served them when the dataset was made (`placement` in every partition's
/// meta, dataset.rs), groups in the order of their first partition. A pool's segments take the
/// partitions in rounds from its own partition K0, the I-th of group G: round R visits groups
/// G, G + 1, ... (mod N) and takes the (I + R)-th partition (mod its size) of each group that
/// has more than R. So segment 0 is K0, a pool's first N segments sit on N different primaries,
/// every segment has a partition of its own while S <= P, and more share them evenly. The
/// placement is fixed for the dataset's life: a pool's segments are found by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    partitions: u32,
    groups: Vec<Vec<u32>>,
    /// For each partition, its group and its position in it.
    at: Vec<(usize, usize)>,
}

impl Placement {
    /// Every partition in one group: segment J of a pool in partition (K0 + J) mod P (a single
    /// Redis, or a dataset whose servers had no Cluster to read).
    pub fn whole(partitions: u32) -> Placement {
        Placement::from_groups(partitions, vec![(0..partitions).collect()])
            .expect("one group of every partition")
    }

    /// Partitions grouped by `owner` (the primary serving each partition's tag).
    pub fn by_owner<T: PartialEq>(partitions: u32, owner: impl Fn(u32) -> T) -> Placement {
        let mut owners: Vec<T> = Vec::new();
        let mut groups: Vec<Vec<u32>> = Vec::new();
        for k in 0..partitions {
            let of = owner(k);
            match owners.iter().position(|known| *known == of) {
                Some(group) => groups[group].push(k),
                None => {
                    owners.push(of);
                    groups.push(vec![k]);
                }
            }
        }
        Placement::from_groups(partitions, groups).expect("every partition in one group")
    }

    fn from_groups(partitions: u32, groups: Vec<Vec<u32>>) -> Result<Placement, String> {
        let mut at = vec![None; partitions as usize];
        for (group, members) in groups.iter().enumerate() {
            if members.is_empty() {
                return Err("an empty group".into());
            }
            for (index, &k) in members.iter().enumerate() {
                match at.get_mut(k as usize) {
                    Some(slot @ None) => *slot = Some((group, index)),
                    Some(Some(_)) => return Err(format!("partition {k} is in two groups")),
                    None => return Err(format!("partition {k} is not below {partitions}")),
                }
            }
        }
        let at = at
            .into_iter()
            .enumerate()
            .map(|(k, place)| place.ok_or_else(|| format!("partition {k} is in no group")))
            .collect::<Result<_, _>>()?;
        Ok(Placement {
            partitions,
            groups,
            at,
        })
    }

    /// The stored form: groups separated by `;`, partitions by `,` (`0,1,2;3,4;5,6`).
    pub fn text(&self) -> String {
        self.groups
            .iter()
            .map(|group| {
                group
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect::<Vec<_>>()
            .join(";")
    }

    /// Reads [`Placement::text`]'s form; an error unless it places each of `partitions` once.
    pub fn parse(text: &str, partitions: u32) -> Result<Placement, String> {
        let groups = text
            .split(';')
            .map(|group| {
                group
                    .split(',')
                    .map(|k| {
                        k.parse::<u32>()
                            .map_err(|_| format!("{k:?} is not a partition"))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        Placement::from_groups(partitions, groups)
            .map_err(|why| format!("placement {text:?} of {partitions} partitions: {why}"))
    }

    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The partition of segment `segment` of `pool`.
    pub fn segment_partition(&self, pool: &str, segment: u32) -> u32 {
        let (group, index) = self.at[partition_of(pool, self.partitions) as usize];
        let count = self.groups.len();
        let mut left = segment % self.partitions;
        for round in 0.. {
            for step in 0..count {
                let members = &self.groups[(group + step) % count];
                if round < members.len() {
                    if left == 0 {
                        return members[(index + round) % members.len()];
                    }
                    left -= 1;
                }
            }
        }
        unreachable!("the rounds visit every partition")
    }

    /// The partition a pool name as the library takes it lives in: a segment's, or the pool's.
    pub fn pool_partition(&self, name: &str) -> u32 {
        match split_segment(name) {
            (pool, Some(segment)) => self.segment_partition(pool, segment),
            (pool, None) => partition_of(pool, self.partitions),
        }
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

    /// A counter written (never read) after a call that may have read without writing, when
    /// changes wait for replicas: `WAIT` then covers what the call read (link.rs `fcall`).
    pub fn touch(&self) -> String {
        format!("{}touch", self.prefix)
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
    fn segments_of_a_pool_on_one_primary_take_the_partitions_after_its_own() {
        let placement = Placement::whole(16);
        let k0 = partition_of("hot", 16);
        for segment in 0..20 {
            let name = segment_name("hot", segment);
            assert_eq!(split_segment(&name), ("hot", Some(segment)));
            assert_eq!(placement.pool_partition(&name), (k0 + segment) % 16);
        }
        assert_eq!(placement.pool_partition("hot"), k0);
        assert_eq!(split_segment("hot"), ("hot", None));
    }

    /// Which of three primaries with `redis-cli --cluster create`'s slot ranges serves
    /// partition `k` of `partitions`.
    fn primary_of(k: u32, partitions: u32) -> u16 {
        slot(&partition_tag(k, partitions)) / 5461
    }

    #[test]
    fn segments_spread_over_the_primaries_first() {
        for partitions in [3u32, 16, 17, 64] {
            let placement = Placement::by_owner(partitions, |k| primary_of(k, partitions));
            assert_eq!(
                Placement::parse(&placement.text(), partitions).as_ref(),
                Ok(&placement)
            );
            for n in 0..200 {
                let pool = format!("sku-{n}");
                let primaries: Vec<u16> = (0..3)
                    .map(|j| primary_of(placement.segment_partition(&pool, j), partitions))
                    .collect();
                assert!(
                    primaries[0] != primaries[1]
                        && primaries[1] != primaries[2]
                        && primaries[0] != primaries[2],
                    "{pool} of {partitions}: {primaries:?}"
                );
                assert_eq!(
                    placement.segment_partition(&pool, 0),
                    partition_of(&pool, partitions)
                );
                // A partition of its own for each of P segments, then evenly again.
                let mut taken: Vec<u32> = (0..partitions)
                    .map(|j| placement.segment_partition(&pool, j))
                    .collect();
                taken.sort_unstable();
                taken.dedup();
                assert_eq!(taken.len(), partitions as usize, "{pool} of {partitions}");
                assert_eq!(
                    placement.segment_partition(&pool, partitions + 1),
                    placement.segment_partition(&pool, 1)
                );
            }
        }
    }

    #[test]
    fn a_placement_that_does_not_place_each_partition_once_is_refused() {
        assert!(Placement::parse("0,1;2", 3).is_ok());
        for text in ["0,1", "0,1;1,2", "0,1;2,3", "0,x;1,2", "", "0,1;;2"] {
            assert!(Placement::parse(text, 3).is_err(), "{text}");
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
