//! `OrderedSet`: the ordered set the hold index keeps its holds in, made for cheap inserts and
//! little memory rather than generality.
//!
//! The elements are slots of the hold store (`u32`s), ordered by keys the set reads from the
//! store through `Keys` (a hold's id, or its user and id): four bytes an element, where the ids
//! themselves took sixteen and a (user, id) pair thirty-two, three entries per retained hold.
//! Elements live in blocks of at most `CAP` sorted elements, stored as two arrays: the heads
//! (16 bytes of each element's key, after the words the block's keys all share, as one integer)
//! and the slots. A search in a block is a binary search on the heads, which are contiguous
//! and compared as integers; the keys themselves (read through the store, a cache miss or two
//! each) are compared only among equal heads. The blocks sit in a vector of slots, found through
//! `Starts`: each block's start and slot, in order, in chunks of at most `STARTS_PER_CHUNK`,
//! searched the same way (heads of the keys' first 16 bytes first), so finding an element's
//! block is two binary searches. A std `BTreeMap` of the starts was tried first: its
//! `range(..=probe).next_back()` (a linear scan of each node, four or five nodes deep, and its
//! range machinery) cost some 800 instructions at 5,000 blocks, more than the rest of an insert.
//!
//! A block's start is a lower bound of its elements, above every element of the blocks before
//! it; it need not be an element. The first block's start is `Start::LEAST`, below everything,
//! so every element has a block: the last block whose start is not above it. A start keeps
//! its own copy of its key's bytes (one per block), not a slot: removing an element leaves the
//! start as it is, so a removal moves no start unless it empties a block, and the slot of an
//! element gone may hold another hold by the time the start is compared again.
//!
//! The set keeps a finger on the block the last insert went to, and each block the range of
//! elements it certainly owns (its start and the start the next block had): an insert next to
//! the last one, as sequential ids make, finds its block with two comparisons and no search.
//!
//! A full block splits at the insert in its last or first quarter (the element starting the
//! second part or ending the first) and in halves elsewhere: a run of inserts ascending (or
//! descending) through a region, as sequential ids do even when unpadded, leaves full blocks
//! behind it, and any split leaves a block at least half full. A block emptied goes; one that
//! falls under a quarter full takes the next block in when the two fit in half a block. Blocks
//! made by a split are allocated at full capacity once; a set's first block grows from small,
//! so that a set of a few elements (a pool with few holds) stays small. A chunk of starts
//! splits in halves when full and goes when empty; the vector of chunks' firsts moves when a
//! chunk comes or goes (one per ~64 block splits; a million elements make some 200 chunks).

use std::cmp::Ordering;
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

/// Where the set reads its elements' keys. The elements are slots of the hold store (`u32`s,
/// four bytes where an id would take sixteen and a (user, hold) pair thirty-two): a slot's key
/// must not change while the slot is in the set, which the hold index keeps (a hold's id, user
/// and items never change; it leaves the sets before its slot is freed).
pub(super) trait Keys {
    fn key(&self, item: u32) -> Key<'_>;
}

/// An element's key: the bytes `first`, or `first`, a zero byte and `second`. No part holds a zero
/// byte, so a key that is a prefix of another sorts first, and `(user, hold)` pairs order as
/// their keys: the user first, a shorter user before a longer one it starts.
#[derive(Clone, Copy)]
pub(super) struct Key<'a> {
    pub(super) first: &'a [u8],
    pub(super) second: Option<&'a [u8]>,
}

impl<'a> Key<'a> {
    #[inline]
    pub(super) fn len(self) -> usize {
        self.first.len() + self.second.map_or(0, |second| 1 + second.len())
    }

    /// The 16 bytes of the key from byte `skip` on, as one big-endian integer, zeros past its end.
    /// Among keys that share their first `skip` bytes, where two heads differ they order as
    /// their keys do; comparing them is one integer comparison, not a `memcmp` of heap bytes.
    #[inline(always)]
    pub(super) fn head_at(self, skip: usize) -> u128 {
        let from_first = self.first.get(skip..).unwrap_or(&[]);
        let mut head = load_be(from_first);
        if let Some(second) = self.second {
            // The zero byte between the parts is already in `head`; `second` starts after it.
            let at = (self.first.len() + 1).saturating_sub(skip);
            if at < 16 {
                let from_second = second
                    .get((skip.saturating_sub(self.first.len() + 1))..)
                    .unwrap_or(&[]);
                head |= load_be(from_second) >> (8 * at);
            }
        }
        head
    }

    /// The order of the keys' bytes: `first`, then (if there is a `second`) a zero byte and
    /// `second`. A key written out in one part (a start's own copy) compares with one in two.
    pub(super) fn cmp_bytes(self, other: Key<'_>) -> Ordering {
        let (a, b) = (self.parts(), other.parts());
        let (mut i, mut j) = (0, 0);
        let (mut x, mut y) = (a[0], b[0]);
        loop {
            while x.is_empty() && i < 2 {
                i += 1;
                x = a[i];
            }
            while y.is_empty() && j < 2 {
                j += 1;
                y = b[j];
            }
            if x.is_empty() || y.is_empty() {
                return (!x.is_empty()).cmp(&!y.is_empty());
            }
            let n = x.len().min(y.len());
            match x[..n].cmp(&y[..n]) {
                Ordering::Equal => (x, y) = (&x[n..], &y[n..]),
                unequal => return unequal,
            }
        }
    }

    fn parts(self) -> [&'a [u8]; 3] {
        match self.second {
            Some(second) => [self.first, &[0], second],
            None => [self.first, &[], &[]],
        }
    }

    /// The key's bytes in one part, for a start to keep.
    fn to_owned_bytes(self) -> Arc<[u8]> {
        self.parts().concat().into()
    }

    /// How many bytes, at most `limit`, this key and `other` share at their start.
    #[inline]
    pub(super) fn shared(self, other: Key<'_>, limit: usize) -> usize {
        let firsts = common_prefix(self.first, other.first, limit);
        if firsts < self.first.len() || firsts < other.first.len() || firsts == limit {
            return firsts;
        }
        // Equal first parts, and room for more: the zero byte, then the second parts.
        match (self.second, other.second) {
            (Some(mine), Some(theirs)) => {
                let after = firsts + 1;
                after + common_prefix(mine, theirs, limit - after)
            }
            _ => firsts,
        }
    }
}

/// The first 16 bytes of `bytes` (zeros past its end) as a big-endian integer. Written out in
/// word loads rather than a copy of a variable length, which calls `memcpy`: this is on every
/// search of a block.
#[inline(always)]
fn load_be(bytes: &[u8]) -> u128 {
    let n = bytes.len();
    if n >= 16 {
        let mut word = [0; 16];
        word.copy_from_slice(&bytes[..16]);
        return u128::from_be_bytes(word);
    }
    let word = |at: usize| -> u64 {
        let mut word = [0; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        u64::from_be_bytes(word)
    };
    if n >= 8 {
        // The last 8 bytes, shifted up over the ones the first 8 already hold.
        let low = match n {
            8 => 0,
            _ => u128::from(word(n - 8) << (8 * (16 - n))),
        };
        return (u128::from(word(0)) << 64) | low;
    }
    let mut high = 0u64;
    for (i, &byte) in bytes.iter().enumerate() {
        high |= u64::from(byte) << (8 * (7 - i));
    }
    u128::from(high) << 64
}

/// How many bytes, at most `limit`, `a` and `b` share at their start: eight at a time, inline
/// (ids are short, and a call to `memcmp` costs more than comparing them).
#[inline]
fn common_prefix(a: &[u8], b: &[u8], limit: usize) -> usize {
    let n = a.len().min(b.len()).min(limit);
    let (a, b) = (&a[..n], &b[..n]);
    let mut at = 0;
    while at + 8 <= n {
        let word = |bytes: &[u8]| {
            let mut word = [0; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(word)
        };
        let differ = word(a) ^ word(b);
        if differ != 0 {
            return at + (differ.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at + a[at..]
        .iter()
        .zip(&b[at..])
        .position(|(x, y)| x != y)
        .unwrap_or(n - at)
}

/// `bytes` rounded down to whole 16-byte words.
fn words(bytes: usize) -> usize {
    bytes / 16 * 16
}

/// Elements per block in production: a split or a block allocated at once is 64 × (16-byte head
/// + 4-byte element), and a search is six integer comparisons.
pub(super) const BLOCK: usize = 64;

/// A block's start in the tree of blocks: a head and the key's bytes, or the least start (head
/// 0, no key) of the first block. A struct rather than an enum so that comparing a start with a
/// probe is an integer comparison first, with no variant to tell apart: the tree's searches are
/// most of an insert's cost. The start keeps its own copy of the key (one per block) rather
/// than a slot: it may outlive its element, and a freed slot is used again for another hold.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Start {
    head: u128,
    bytes: Option<Arc<[u8]>>,
}

impl Start {
    /// The first block's start, below every key.
    const LEAST: Self = Start {
        head: 0,
        bytes: None,
    };

    fn of(key: Key<'_>) -> Self {
        Start {
            head: key.head_at(0),
            bytes: Some(key.to_owned_bytes()),
        }
    }

    /// How this start orders against `probe`: by heads, then by the bytes.
    #[inline]
    fn cmp_probe(&self, probe: &Probe<'_>) -> Ordering {
        self.head.cmp(&probe.head).then_with(|| match &self.bytes {
            None => Ordering::Less,
            Some(bytes) => Key {
                first: bytes,
                second: None,
            }
            .cmp_bytes(probe.key),
        })
    }

    #[cfg(test)]
    fn cmp_start(&self, other: &Start) -> Ordering {
        match &other.bytes {
            None => self.head.cmp(&0).then((self.bytes.is_some()).cmp(&false)),
            Some(bytes) => self.cmp_probe(&Probe::of(Key {
                first: bytes,
                second: None,
            })),
        }
    }
}

/// A key looked for, with its head at byte 0.
#[derive(Clone, Copy)]
struct Probe<'a> {
    head: u128,
    key: Key<'a>,
}

impl<'a> Probe<'a> {
    fn of(key: Key<'a>) -> Self {
        Probe {
            head: key.head_at(0),
            key,
        }
    }
}

/// At most `CAP` elements in order, heads and elements at the same positions.
///
/// The heads are taken after the 16-byte words every element's key shares at its start (`skip`
/// bytes, a multiple of 16): ids of one block often share more than a head's 16 bytes (a shop's
/// order numbers, `bench-` and a run's 12 hex digits), and heads of those bytes alone would all
/// tie, leaving every search to read the ids' bytes. Whole words, so that a probe's first head
/// (which it has already) tells whether it shares a 16-byte prefix, and ids that differ within
/// their first 16 bytes are searched as if there were no prefix at all. An element that does
/// not share the prefix goes first or last, and the block takes its heads again after a shorter
/// one (`narrow`): rare. A block split off, or taken in, takes them after its own (`tighten`).
///
/// A block also knows its bounds: `start`, its key in the tree of starts, and `end`, the start
/// the next block had when last known (`None`: there was none). An element at or above `start`
/// and below `end` belongs to this block. `end` is never above the next block's start: only a
/// split of this block puts a block after it, and the split sets `end`. It may be below it once
/// the next block has gone: then the block owns more than `[start, end)`, which is only
/// conservative.
struct Block {
    heads: Vec<u128>,
    items: Vec<u32>,
    /// How many bytes (a multiple of 16) every element's key shares at its start and has.
    skip: usize,
    /// The first 16 of them, when there are (every element's head at 0).
    prefix: u128,
    start: Start,
    end: Option<Start>,
}

/// Where an element is in a block, or would go, and its head there.
struct Place {
    at: Result<usize, usize>,
    /// Its head after the block's `skip` bytes, or `None` if its key does not start with them
    /// (it goes first or last).
    head: Option<u128>,
}

impl Block {
    fn with_capacity(capacity: usize) -> Self {
        Block {
            heads: Vec::with_capacity(capacity),
            items: Vec::with_capacity(capacity),
            skip: 0,
            prefix: 0,
            start: Start::LEAST,
            end: None,
        }
    }

    /// Whether `probe` is within `[start, end)`, so certainly in this block.
    fn owns(&self, probe: &Probe<'_>) -> bool {
        self.start.cmp_probe(probe).is_le()
            && (self.end.as_ref()).is_none_or(|end| end.cmp_probe(probe).is_gt())
    }

    fn len(&self) -> usize {
        self.heads.len()
    }

    /// Where the element of key `probe` is, or where it would go.
    fn search(&self, probe: &Probe<'_>, keys: &impl Keys) -> Place {
        let key = probe.key;
        let head = match self.skip {
            0 => probe.head,
            skip => {
                let first = keys.key(self.items[0]);
                let shares =
                    probe.head == self.prefix && (skip == 16 || key.shared(first, skip) == skip);
                if !shares {
                    // Outside the prefix every element shares: before them all, or after.
                    let at = if key.cmp_bytes(first).is_lt() {
                        0
                    } else {
                        self.len()
                    };
                    return Place {
                        at: Err(at),
                        head: None,
                    };
                }
                key.head_at(skip)
            }
        };
        let low = self.heads.partition_point(|&h| h < head);
        let at = if self.heads.get(low) != Some(&head) {
            Err(low)
        } else {
            let ties = self.heads[low..].partition_point(|&h| h == head);
            match self.items[low..low + ties]
                .binary_search_by(|&item| keys.key(item).cmp_bytes(key))
            {
                Ok(i) => Ok(low + i),
                Err(i) => Err(low + i),
            }
        };
        Place {
            at,
            head: Some(head),
        }
    }

    /// Inserts `item` (of head `head0` at byte 0) at `pos`, with its `head` from `search`
    /// (`None`: it does not share the block's prefix), growing (a set's first block starts
    /// small) but never past `cap`.
    fn insert(
        &mut self,
        pos: usize,
        head0: u128,
        head: Option<u128>,
        item: u32,
        cap: usize,
        keys: &impl Keys,
    ) {
        let len = self.len();
        if len == self.heads.capacity() {
            let more = len.max(4).min(cap - len);
            self.heads.reserve_exact(more);
            self.items.reserve_exact(more);
        }
        let head = match head {
            Some(head) => head,
            None => {
                self.narrow(head0, keys.key(item), keys);
                keys.key(item).head_at(self.skip)
            }
        };
        self.heads.insert(pos, head);
        self.items.insert(pos, item);
    }

    /// Makes room for an element of key `key` (and head `head0`), which does not share the
    /// block's prefix: the heads are taken again after the whole words it shares with the
    /// elements (all of its key that fills words, if the block is empty).
    #[cold]
    fn narrow(&mut self, head0: u128, key: Key<'_>, keys: &impl Keys) {
        let shared = match self.items.first() {
            Some(&first) => key.shared(keys.key(first), self.skip),
            None => key.len(),
        };
        self.reprefix(words(shared), head0, keys);
    }

    /// Takes the heads after the whole prefix the elements share, if it has grown (elements
    /// gone to another block).
    fn tighten(&mut self, keys: &impl Keys) {
        if let Some((skip, prefix)) = self.prefix_of_all(keys) {
            if skip != self.skip {
                self.reprefix(skip, prefix, keys);
            }
        }
    }

    /// The whole words all the elements' keys share at their start (all of the key that fills
    /// words if there is one element), and the first of them; `None` for an empty block. The
    /// elements are in order, so what the first and the last share, all share.
    fn prefix_of_all(&self, keys: &impl Keys) -> Option<(usize, u128)> {
        let (first, last) = (
            keys.key(*self.items.first()?),
            keys.key(*self.items.last()?),
        );
        let shared = first.shared(last, usize::MAX);
        Some((words(shared), first.head_at(0)))
    }

    fn reprefix(&mut self, skip: usize, prefix: u128, keys: &impl Keys) {
        self.skip = skip;
        self.prefix = prefix;
        for (head, &item) in self.heads.iter_mut().zip(&self.items) {
            *head = keys.key(item).head_at(skip);
        }
    }

    fn remove(&mut self, pos: usize) {
        self.heads.remove(pos);
        self.items.remove(pos);
    }

    /// The elements from `at` on, as a block of capacity `cap` (heads after the same prefix).
    fn split_off(&mut self, at: usize, cap: usize) -> Self {
        let mut right = Block::with_capacity(cap);
        right.skip = self.skip;
        right.prefix = self.prefix;
        right.heads.extend(self.heads.drain(at..));
        right.items.extend(self.items.drain(at..));
        right
    }

    /// Takes in the elements of the block after this one, and its end.
    fn append(&mut self, next: Block, keys: &impl Keys) {
        self.heads.reserve_exact(next.len());
        self.items.reserve_exact(next.len());
        self.heads.extend(next.heads);
        self.items.extend(next.items);
        self.end = next.end;
        // The two blocks' heads were taken after prefixes of their own.
        if let Some((skip, prefix)) = self.prefix_of_all(keys) {
            self.reprefix(skip, prefix, keys);
        }
    }

    /// A start for this block: its first element's key.
    fn first(&self, keys: &impl Keys) -> Start {
        Start::of(keys.key(self.items[0]))
    }
}

/// Block starts per chunk of the index of starts in production. A chunk that fills splits in
/// halves.
pub(super) const STARTS_PER_CHUNK: usize = 128;

/// The blocks' starts in order, each with its block's slot: a sorted vector of chunks of at
/// most `CHUNK` starts (128 in production), with each chunk's first start (and its head) in
/// vectors of their own.
/// Finding the block of an element is two binary searches, on heads first.
struct Starts<const CHUNK: usize> {
    first_heads: Vec<u128>,
    firsts: Vec<Start>,
    chunks: Vec<Chunk>,
}

/// Starts in order, their heads apart (searched first, as a block's), and their blocks' slots.
struct Chunk {
    heads: Vec<u128>,
    starts: Vec<Start>,
    slots: Vec<usize>,
}

/// How many of `starts` (in order, with their `heads`) are not above `probe`: a binary search
/// on the heads, then on the starts of the probe's head if several have it.
fn count_at_most(heads: &[u128], starts: &[Start], probe: &Probe<'_>) -> usize {
    let below = heads.partition_point(|&head| head < probe.head);
    if heads.get(below) != Some(&probe.head) {
        return below;
    }
    let ties = heads[below..].partition_point(|&head| head == probe.head);
    below + starts[below..below + ties].partition_point(|start| start.cmp_probe(probe).is_le())
}

impl<const CHUNK: usize> Starts<CHUNK> {
    fn new() -> Self {
        Starts {
            first_heads: Vec::new(),
            firsts: Vec::new(),
            chunks: Vec::new(),
        }
    }

    /// Where the last start not above `probe` is: (chunk, index in the chunk).
    fn find(&self, probe: &Probe<'_>) -> Option<(usize, usize)> {
        let chunk = count_at_most(&self.first_heads, &self.firsts, probe).checked_sub(1)?;
        let part = &self.chunks[chunk];
        Some((chunk, count_at_most(&part.heads, &part.starts, probe) - 1))
    }

    /// Where `start` (one of the starts) is.
    fn find_start(&self, start: &Start) -> Option<(usize, usize)> {
        match &start.bytes {
            None => self.first_position(),
            Some(bytes) => self.find(&Probe::of(Key {
                first: bytes,
                second: None,
            })),
        }
    }

    /// The slot of the last block whose start is not above `probe`.
    fn slot_of(&self, probe: &Probe<'_>) -> Option<usize> {
        self.find(probe)
            .map(|(chunk, at)| self.chunks[chunk].slots[at])
    }

    fn at(&self, (chunk, at): (usize, usize)) -> (&Start, usize) {
        let chunk = &self.chunks[chunk];
        (&chunk.starts[at], chunk.slots[at])
    }

    /// The position after `(chunk, at)`, if any.
    fn after(&self, (chunk, at): (usize, usize)) -> Option<(usize, usize)> {
        if at + 1 < self.chunks[chunk].starts.len() {
            Some((chunk, at + 1))
        } else if chunk + 1 < self.chunks.len() {
            Some((chunk + 1, 0))
        } else {
            None
        }
    }

    /// Adds `start` (not there yet, above the first start unless there is none).
    fn insert(&mut self, start: Start, slot: usize) {
        let found = match &start.bytes {
            None => None,
            Some(bytes) => self.find(&Probe::of(Key {
                first: bytes,
                second: None,
            })),
        };
        let Some((mut chunk, at)) = found else {
            assert!(self.chunks.is_empty(), "a start below the least");
            self.first_heads.reserve_exact(1);
            self.first_heads.push(start.head);
            self.firsts.reserve_exact(1);
            self.firsts.push(start.clone());
            self.chunks.reserve_exact(1);
            self.chunks.push(Chunk {
                heads: vec![start.head],
                starts: vec![start],
                slots: vec![slot],
            });
            return;
        };
        let mut at = at + 1;
        if self.chunks[chunk].starts.len() == CHUNK {
            let half = CHUNK / 2;
            let left = &mut self.chunks[chunk];
            let right = Chunk {
                heads: left.heads.split_off(half),
                starts: left.starts.split_off(half),
                slots: left.slots.split_off(half),
            };
            self.first_heads.insert(chunk + 1, right.heads[0]);
            self.firsts.insert(chunk + 1, right.starts[0].clone());
            self.chunks.insert(chunk + 1, right);
            if at > half {
                chunk += 1;
                at -= half;
            }
        }
        let part = &mut self.chunks[chunk];
        part.heads.insert(at, start.head);
        part.starts.insert(at, start);
        part.slots.insert(at, slot);
    }

    /// Takes out the start at `(chunk, at)`.
    fn remove_at(&mut self, (chunk, at): (usize, usize)) {
        let part = &mut self.chunks[chunk];
        part.heads.remove(at);
        part.starts.remove(at);
        part.slots.remove(at);
        if part.starts.is_empty() {
            self.chunks.remove(chunk);
            self.first_heads.remove(chunk);
            self.firsts.remove(chunk);
        } else if at == 0 {
            self.first_heads[chunk] = part.heads[0];
            self.firsts[chunk] = part.starts[0].clone();
        }
    }

    /// Makes the first start `LEAST` (its block has become the first).
    fn lower_first(&mut self) {
        if let Some(chunk) = self.chunks.first_mut() {
            chunk.heads[0] = 0;
            chunk.starts[0] = Start::LEAST;
            self.first_heads[0] = 0;
            self.firsts[0] = Start::LEAST;
        }
    }

    /// The slots from position `from` on, in order.
    fn slots_from(&self, from: Option<(usize, usize)>) -> impl Iterator<Item = usize> + '_ {
        let (chunk, at) = from.unwrap_or((self.chunks.len(), 0));
        let first = self.chunks.get(chunk).map_or(&[][..], |c| &c.slots[at..]);
        first
            .iter()
            .chain(
                self.chunks
                    .get(chunk + 1..)
                    .unwrap_or(&[])
                    .iter()
                    .flat_map(|c| c.slots.iter()),
            )
            .copied()
    }

    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = (&Start, usize)> + '_ {
        self.chunks
            .iter()
            .flat_map(|c| c.starts.iter().zip(c.slots.iter().copied()))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.starts.len()).sum()
    }

    fn first_position(&self) -> Option<(usize, usize)> {
        (!self.chunks.is_empty()).then_some((0, 0))
    }
}

/// An ordered set of slots, ordered by their keys, in blocks of at most `CAP` elements (see the
/// module doc). Every call that reads keys takes the `Keys` they are read from; it must be the
/// same store each time.
pub(super) struct OrderedSet<const CAP: usize = BLOCK, const CHUNK: usize = STARTS_PER_CHUNK> {
    /// Each block's start, to the block's slot in `slots`.
    starts: Starts<CHUNK>,
    /// The blocks; those of slots in `vacant` are empty and in no use.
    slots: Vec<Block>,
    vacant: Vec<usize>,
    /// The block the last insert went to: every search looks there first.
    finger: Option<usize>,
    len: usize,
}

impl<const CAP: usize, const CHUNK: usize> OrderedSet<CAP, CHUNK> {
    /// The bytes its blocks and starts take on the heap, by their capacities (an estimate: the
    /// allocator rounds each up).
    pub(super) fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let vec = |capacity: usize, each: usize| capacity * each;
        // A start's own copy of its key: two counts and the bytes, rounded up to 16.
        let start = |start: &Start| {
            (start.bytes.as_ref()).map_or(0, |bytes| {
                (2 * size_of::<usize>() + bytes.len()).div_ceil(16) * 16
            })
        };
        let blocks: usize = (self.slots.iter())
            .map(|block| {
                vec(block.heads.capacity(), size_of::<u128>())
                    + vec(block.items.capacity(), size_of::<u32>())
                    + start(&block.start)
            })
            .sum();
        let starts = &self.starts;
        let chunks: usize = (starts.chunks.iter())
            .map(|chunk| {
                vec(chunk.heads.capacity(), size_of::<u128>())
                    + vec(chunk.starts.capacity(), size_of::<Start>())
                    + vec(chunk.slots.capacity(), size_of::<usize>())
            })
            .sum();
        blocks
            + vec(self.slots.capacity(), size_of::<Block>())
            + vec(self.vacant.capacity(), size_of::<usize>())
            + chunks
            + vec(starts.first_heads.capacity(), size_of::<u128>())
            + vec(starts.firsts.capacity(), size_of::<Start>())
            + vec(starts.chunks.capacity(), size_of::<Chunk>())
    }
}

impl<const CAP: usize, const CHUNK: usize> Default for OrderedSet<CAP, CHUNK> {
    fn default() -> Self {
        OrderedSet {
            starts: Starts::new(),
            slots: Vec::new(),
            vacant: Vec::new(),
            finger: None,
            len: 0,
        }
    }
}

impl<const CAP: usize, const CHUNK: usize> fmt::Debug for OrderedSet<CAP, CHUNK> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrderedSet")
            .field("len", &self.len)
            .field("blocks", &(self.slots.len() - self.vacant.len()))
            .finish()
    }
}

impl<const CAP: usize, const CHUNK: usize> OrderedSet<CAP, CHUNK> {
    const MERGE_BELOW: usize = CAP / 4;

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot of the block `probe` belongs to: the finger's block if it owns the probe (two
    /// comparisons), else the last block whose start is not above it (two binary searches).
    fn locate(&self, probe: &Probe<'_>) -> Option<usize> {
        if let Some(slot) = self.finger {
            if self.slots[slot].owns(probe) {
                return Some(slot);
            }
        }
        self.starts.slot_of(probe)
    }

    fn occupy(&mut self, block: Block) -> usize {
        match self.vacant.pop() {
            Some(slot) => {
                self.slots[slot] = block;
                slot
            }
            None => {
                // One slot for a set's first block, not the four a push would allocate: most
                // pools' sets may hold a few holds.
                if self.slots.is_empty() {
                    self.slots.reserve_exact(1);
                }
                self.slots.push(block);
                self.slots.len() - 1
            }
        }
    }

    /// Frees `slot`'s block (already out of the tree) and hands it back.
    fn vacate(&mut self, slot: usize) -> Block {
        if self.finger == Some(slot) {
            self.finger = None;
        }
        self.vacant.push(slot);
        std::mem::replace(&mut self.slots[slot], Block::with_capacity(0))
    }

    /// Adds `item`, whose key `keys` reads; false if an element of that key was there already.
    pub(super) fn insert(&mut self, item: u32, keys: &impl Keys) -> bool {
        let probe = Probe::of(keys.key(item));
        let Some(slot) = self.locate(&probe) else {
            // The first element: a block that grows as it fills.
            let mut block = Block::with_capacity(0);
            block.insert(0, probe.head, None, item, CAP, keys);
            let slot = self.occupy(block);
            self.starts.insert(Start::LEAST, slot);
            self.finger = Some(slot);
            self.len = 1;
            return true;
        };
        self.finger = Some(slot);
        let block = &mut self.slots[slot];
        let Place { at: Err(pos), head } = block.search(&probe, keys) else {
            return false;
        };
        self.len += 1;
        if block.len() < CAP {
            block.insert(pos, probe.head, head, item, CAP, keys);
            return true;
        }
        self.insert_into_full(slot, pos, head, probe.head, item, keys);
        true
    }

    /// Inserts `item` (of head `head0`) at `pos` of the full block in `slot`, splitting the
    /// block. In its last quarter, the block splits at `pos` and the element starts the second
    /// part; in its first quarter, the block splits at `pos` and the element ends the first
    /// part; elsewhere it splits in halves. So a run of inserts that ascend (or descend)
    /// through a region, as sequential ids do, leaves full blocks behind it, not half-full
    /// ones, and any split leaves a block at least half full. The finger follows the element.
    /// Both parts then take their heads after their own prefixes.
    #[cold]
    fn insert_into_full(
        &mut self,
        slot: usize,
        pos: usize,
        head: Option<u128>,
        head0: u128,
        item: u32,
        keys: &impl Keys,
    ) {
        let block = &mut self.slots[slot];
        let (mut right, into_right) = if pos >= CAP - CAP / 4 {
            let mut right = block.split_off(pos, CAP);
            right.insert(0, head0, head, item, CAP, keys);
            (right, true)
        } else if pos <= CAP / 4 {
            let right = block.split_off(pos, CAP);
            block.insert(pos, head0, head, item, CAP, keys);
            (right, false)
        } else {
            let half = CAP / 2;
            let mut right = block.split_off(half, CAP);
            if pos <= half {
                block.insert(pos, head0, head, item, CAP, keys);
            } else {
                right.insert(pos - half, head0, head, item, CAP, keys);
            }
            (right, pos > half)
        };
        block.tighten(keys);
        right.tighten(keys);
        let start = right.first(keys);
        right.start = start.clone();
        right.end = block.end.replace(start.clone());
        let right = self.occupy(right);
        self.starts.insert(start, right);
        if into_right {
            self.finger = Some(right);
        }
    }

    /// Takes `item` out (found by its key, which `keys` still reads); false if it was not there.
    pub(super) fn remove(&mut self, item: u32, keys: &impl Keys) -> bool {
        let probe = Probe::of(keys.key(item));
        let Some(slot) = self.locate(&probe) else {
            return false;
        };
        let block = &mut self.slots[slot];
        let Ok(pos) = block.search(&probe, keys).at else {
            return false;
        };
        debug_assert_eq!(block.items[pos], item, "one element per key");
        block.remove(pos);
        self.len -= 1;
        if block.len() >= Self::MERGE_BELOW.max(1) {
            return true;
        }
        self.shrunk(slot, keys);
        true
    }

    /// The block in `slot` has lost an element and is under a quarter full: an empty block goes
    /// (the next one becoming the first if it was), a small one takes the next one in if both
    /// fit in half a block.
    #[cold]
    fn shrunk(&mut self, slot: usize, keys: &impl Keys) {
        let len = self.slots[slot].len();
        let at = self
            .starts
            .find_start(&self.slots[slot].start)
            .expect("a block in use has a start");
        if len == 0 {
            self.starts.remove_at(at);
            self.vacate(slot);
            if at == (0, 0) {
                self.starts.lower_first();
                if let Some(first) = self.starts.first_position() {
                    let (_, first) = self.starts.at(first);
                    self.slots[first].start = Start::LEAST;
                }
            }
            return;
        }
        let next = self
            .starts
            .after(at)
            .filter(|&next| len + self.slots[self.starts.at(next).1].len() <= CAP / 2);
        if let Some(next) = next {
            let (_, next_slot) = self.starts.at(next);
            self.starts.remove_at(next);
            let next = self.vacate(next_slot);
            self.slots[slot].append(next, keys);
        }
    }

    /// Whether an element of key `key` is in the set.
    pub(super) fn contains(&self, key: Key<'_>, keys: &impl Keys) -> bool {
        let probe = Probe::of(key);
        self.locate(&probe)
            .is_some_and(|slot| self.slots[slot].search(&probe, keys).at.is_ok())
    }

    /// The elements in order from `from` on: all of them, or from the key on, or after it.
    pub(super) fn range<'a>(
        &'a self,
        from: Bound<Key<'_>>,
        keys: &impl Keys,
    ) -> impl Iterator<Item = u32> + 'a {
        let (first, rest): (&'a [u32], _) = match from {
            Bound::Unbounded => (&[], self.starts.first_position()),
            Bound::Included(key) | Bound::Excluded(key) => {
                let probe = Probe::of(key);
                match self.starts.find(&probe) {
                    None => (&[], self.starts.first_position()),
                    Some(at) => {
                        let block = &self.slots[self.starts.at(at).1];
                        let pos = match block.search(&probe, keys).at {
                            Ok(pos) if matches!(from, Bound::Excluded(_)) => pos + 1,
                            Ok(pos) | Err(pos) => pos,
                        };
                        (&block.items[pos..], self.starts.after(at))
                    }
                }
            }
        };
        first.iter().copied().chain(
            self.starts
                .slots_from(rest)
                .flat_map(move |slot| self.slots[slot].items.iter().copied()),
        )
    }

    /// The structure is sound: blocks non-empty and at most `CAP` long, their elements in
    /// order, each block's start its key, at or below its first element and above the elements
    /// before, its end not above the next start, the first block's start `LEAST`, the finger on
    /// a block in use, the vacant slots empty, and `len` the count of elements.
    #[cfg(test)]
    fn check(&self, keys: &impl Keys) -> Result<(), String> {
        let mut count = 0;
        let mut previous: Option<&Block> = None;
        let mut used = vec![false; self.slots.len()];
        for (n, (start, slot)) in self.starts.iter().enumerate() {
            let block = &self.slots[slot];
            used[slot] = true;
            if (n == 0) != (*start == Start::LEAST) || block.start != *start {
                return Err(format!("block {n} has the wrong start"));
            }
            if block.len() == 0 || block.len() > CAP || block.heads.capacity() > CAP {
                return Err(format!("block {n} has {} elements", block.len()));
            }
            if block.items.len() != block.len() {
                return Err(format!("block {n}: heads and elements differ in number"));
            }
            if let Some(previous) = previous {
                let last = *previous.items.last().expect("a block in use has elements");
                if start.cmp_probe(&Probe::of(keys.key(last))).is_le() {
                    return Err(format!("block {n} starts at or before the one before ends"));
                }
                if (previous.end.as_ref()).is_none_or(|end| end.cmp_start(start).is_gt()) {
                    return Err(format!("block {n} starts before the end of the one before"));
                }
            }
            let first = keys.key(block.items[0]);
            if start.cmp_probe(&Probe::of(first)).is_gt() {
                return Err(format!("block {n} starts after its first element"));
            }
            if !block.skip.is_multiple_of(16)
                || (block.skip > 0 && first.head_at(0) != block.prefix)
            {
                return Err(format!("block {n}: a prefix of {} bytes", block.skip));
            }
            for (i, (head, &item)) in block.heads.iter().zip(&block.items).enumerate() {
                let key = keys.key(item);
                if key.shared(first, block.skip) != block.skip {
                    return Err(format!("block {n}: an element outside the block's prefix"));
                }
                if *head != key.head_at(block.skip) {
                    return Err(format!("block {n}: a stale head"));
                }
                if i > 0 && keys.key(block.items[i - 1]).cmp_bytes(key).is_ge() {
                    return Err(format!("block {n} is out of order"));
                }
            }
            previous = Some(block);
            count += block.len();
        }
        if count != self.len {
            return Err(format!("len {} but {count} elements", self.len));
        }
        if self.finger.is_some_and(|slot| !used[slot]) {
            return Err("the finger is on a vacant slot".to_string());
        }
        let chunks = &self.starts.chunks;
        if self.starts.firsts.len() != chunks.len()
            || chunks
                .iter()
                .zip(&self.starts.firsts)
                .any(|(chunk, first)| {
                    chunk.starts.is_empty()
                        || chunk.starts.len() > CHUNK
                        || chunk.starts.len() != chunk.slots.len()
                        || chunk.starts[0] != *first
                })
        {
            return Err("a chunk of starts is empty, too long, or has the wrong first".to_string());
        }
        let vacant = self.vacant.len();
        if vacant + self.starts.len() != self.slots.len()
            || self
                .vacant
                .iter()
                .any(|&slot| used[slot] || self.slots[slot].len() > 0)
        {
            return Err("vacant slots in use".to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use proptest::prelude::*;

    use super::*;

    /// Ids as strings, keyed as the hold index keys its ids.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
    struct Id(String);

    impl Id {
        fn key(&self) -> Key<'_> {
            Key {
                first: self.0.as_bytes(),
                second: None,
            }
        }
    }

    /// The store the sets' slots name: each id a slot of its own, for good.
    #[derive(Default)]
    struct Names {
        ids: Vec<Id>,
        slots: HashMap<Id, u32>,
    }

    impl Names {
        fn slot(&mut self, id: &Id) -> u32 {
            if let Some(&slot) = self.slots.get(id) {
                return slot;
            }
            self.ids.push(id.clone());
            let slot = u32::try_from(self.ids.len() - 1).unwrap();
            self.slots.insert(id.clone(), slot);
            slot
        }

        fn ids<'a>(
            &'a self,
            slots: impl Iterator<Item = u32> + 'a,
        ) -> impl Iterator<Item = &'a Id> {
            slots.map(|slot| &self.ids[slot as usize])
        }
    }

    impl Keys for Names {
        fn key(&self, item: u32) -> Key<'_> {
            self.ids[item as usize].key()
        }
    }

    /// A set and the names of its slots, used as one.
    #[derive(Default)]
    struct Named<const CAP: usize = BLOCK, const CHUNK: usize = STARTS_PER_CHUNK> {
        set: OrderedSet<CAP, CHUNK>,
        names: Names,
    }

    impl<const CAP: usize, const CHUNK: usize> Named<CAP, CHUNK> {
        fn insert(&mut self, id: Id) -> bool {
            let slot = self.names.slot(&id);
            self.set.insert(slot, &self.names)
        }

        fn remove(&mut self, id: &Id) -> bool {
            let slot = self.names.slot(id);
            self.set.remove(slot, &self.names)
        }

        fn contains(&self, id: &Id) -> bool {
            self.set.contains(id.key(), &self.names)
        }

        fn range(&self, from: Bound<&Id>) -> impl Iterator<Item = &Id> {
            self.names
                .ids(self.set.range(from.map(Id::key), &self.names))
        }

        fn check(&self) -> Result<(), String> {
            self.set.check(&self.names)
        }

        fn len(&self) -> usize {
            self.set.len()
        }

        fn is_empty(&self) -> bool {
            self.set.is_empty()
        }
    }

    /// Ids from a small alphabet, with lengths on both sides of a head's 16 bytes: many share
    /// their head, many are prefixes of others.
    fn id() -> impl Strategy<Value = Id> {
        "[0a][0a.]{0,20}".prop_map(Id)
    }

    /// Longer ids, as bases of runs: their blocks share prefixes of one, two or three whole
    /// 16-byte words, and the ids above put elements outside them.
    fn long_id() -> impl Strategy<Value = Id> {
        "[0a][0a.]{0,44}".prop_map(Id)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(Id),
        Remove(Id),
        /// Removes `n` ids in order from one the set has (chosen by index): empties blocks.
        RemoveSpan(prop::sample::Index, u8),
        /// Inserts `n` ids from `Id` up (or down), one after another: sequential ids.
        Run(Id, u8, bool),
        Contains(Id),
        From(Id, bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => id().prop_map(Op::Insert),
            2 => id().prop_map(Op::Remove),
            2 => (any::<prop::sample::Index>(), 1..40u8).prop_map(|(at, n)| Op::RemoveSpan(at, n)),
            1 => (id(), 1..40u8, any::<bool>()).prop_map(|(id, n, up)| Op::Run(id, n, up)),
            1 => (long_id(), 1..40u8, any::<bool>()).prop_map(|(id, n, up)| Op::Run(id, n, up)),
            1 => id().prop_map(Op::Contains),
            1 => (id(), any::<bool>()).prop_map(|(id, excluded)| Op::From(id, excluded)),
        ]
    }

    /// The `n`th id of a run from `base`: a counter after it, zero-padded so the run ascends.
    fn nth(base: &Id, n: u8) -> Id {
        Id(format!("{}{n:03}", base.0))
    }

    fn bound(id: &Id, excluded: bool) -> Bound<&Id> {
        if excluded {
            Bound::Excluded(id)
        } else {
            Bound::Included(id)
        }
    }

    /// Runs `ops` on a set of blocks of `CAP` and chunks of `CHUNK` starts and on `BTreeSet`,
    /// comparing every answer, the structure and the whole iteration after each step.
    fn against_the_model<const CAP: usize, const CHUNK: usize>(
        ops: &[Op],
    ) -> Result<(), TestCaseError> {
        let mut set = Named::<CAP, CHUNK>::default();
        let mut model = BTreeSet::new();
        for op in ops {
            match op {
                Op::Insert(id) => prop_assert_eq!(set.insert(id.clone()), model.insert(id.clone())),
                Op::Remove(id) => prop_assert_eq!(set.remove(id), model.remove(id)),
                Op::Run(base, n, up) => {
                    for i in 0..*n {
                        let id = nth(base, if *up { i } else { n - i });
                        prop_assert_eq!(set.insert(id.clone()), model.insert(id));
                    }
                }
                Op::RemoveSpan(at, n) => {
                    if !model.is_empty() {
                        let from = at.index(model.len());
                        let span: Vec<Id> = model
                            .iter()
                            .skip(from)
                            .take(usize::from(*n))
                            .cloned()
                            .collect();
                        for id in &span {
                            prop_assert!(set.remove(id));
                            prop_assert!(model.remove(id));
                        }
                    }
                }
                Op::Contains(id) => prop_assert_eq!(set.contains(id), model.contains(id)),
                Op::From(id, excluded) => {
                    let from = bound(id, *excluded);
                    prop_assert!(set.range(from).eq(model.range((from, Bound::Unbounded))));
                }
            }
            if let Err(broken) = set.check() {
                return Err(TestCaseError::fail(broken));
            }
            prop_assert_eq!(set.len(), model.len());
            prop_assert_eq!(set.is_empty(), model.is_empty());
            prop_assert!(set.range(Bound::Unbounded).eq(model.iter()));
        }
        // Emptied in order, then again: the first block goes and comes back.
        let ids: Vec<Id> = model.iter().cloned().collect();
        for id in &ids {
            prop_assert!(set.remove(id));
            if let Err(broken) = set.check() {
                return Err(TestCaseError::fail(broken));
            }
        }
        prop_assert!(set.is_empty());
        prop_assert_eq!(set.set.starts.len(), 0);
        for id in ids.iter().rev() {
            prop_assert!(set.insert(id.clone()));
        }
        prop_assert!(set.range(Bound::Unbounded).eq(ids.iter()));
        if let Err(broken) = set.check() {
            return Err(TestCaseError::fail(broken));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(100))]

        #[test]
        fn a_set_of_tiny_blocks_answers_as_a_btree_set(
            ops in prop::collection::vec(op(), 0..400)
        ) {
            against_the_model::<4, 2>(&ops)?;
        }

        #[test]
        fn a_set_of_small_blocks_answers_as_a_btree_set(
            ops in prop::collection::vec(op(), 0..400)
        ) {
            against_the_model::<8, 4>(&ops)?;
        }

        #[test]
        fn a_set_of_production_blocks_answers_as_a_btree_set(
            ops in prop::collection::vec(op(), 0..600)
        ) {
            against_the_model::<BLOCK, STARTS_PER_CHUNK>(&ops)?;
        }
    }

    /// Ids that share one or two words, unpadded (so inserts land all over the blocks), with
    /// short ids among them that leave every prefix: the blocks take their heads after the
    /// words they share, and lose them to an id outside.
    #[test]
    fn blocks_head_after_the_words_their_ids_share() {
        let mut set = Named::<BLOCK>::default();
        let mut model = BTreeSet::new();
        let prefixes = [
            "bench-0123456789ab-",
            "order-2026-11-27-shop-0042-checkout-",
        ];
        for n in 0..6_000 {
            for prefix in prefixes {
                let id = Id(format!("{prefix}{n}"));
                assert!(set.insert(id.clone()));
                model.insert(id);
            }
            if n % 97 == 0 {
                // Sorts among the first prefix's ids, sharing none of their words.
                let id = Id(format!("bench-{n}"));
                assert!(set.insert(id.clone()));
                model.insert(id);
            }
        }
        set.check().unwrap();
        assert!(set.range(Bound::Unbounded).eq(model.iter()));
        let skips: BTreeSet<usize> = set.set.slots.iter().map(|block| block.skip).collect();
        assert_eq!(skips, BTreeSet::from([0, 16, 32]));
        // Ids that differ within their first 16 bytes are searched by heads from the start.
        let mut short = Named::<BLOCK>::default();
        for n in 0..5_000 {
            short.insert(Id(format!("order-{n}")));
        }
        short.check().unwrap();
        assert!(short.set.slots.iter().all(|block| block.skip == 0));
        for id in &model {
            assert!(set.contains(id));
            assert!(
                !set.contains(&Id(format!("{}0", id.0)))
                    || model.contains(&Id(format!("{}0", id.0)))
            );
        }
        for id in model.iter().step_by(3) {
            assert!(set.remove(id));
        }
        set.check().unwrap();
        assert!(set.range(Bound::Unbounded).eq(model
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 3 != 0)
            .map(|(_, id)| id)));
    }

    /// Many sequential ids, then every other one removed, then all: splits at the end, in the
    /// middle, merges and empty blocks at production capacity.
    #[test]
    fn sequential_ids_fill_their_blocks() {
        let mut set = Named::<BLOCK>::default();
        let ids: Vec<Id> = (0..10_000).map(|n| Id(format!("order-{n:08}"))).collect();
        for id in &ids {
            assert!(set.insert(id.clone()));
        }
        set.check().unwrap();
        assert_eq!(set.set.starts.len(), 10_000usize.div_ceil(BLOCK));
        assert!(set.range(Bound::Unbounded).eq(ids.iter()));
        for id in ids.iter().step_by(2) {
            assert!(set.remove(id));
        }
        set.check().unwrap();
        assert!(set
            .range(Bound::Unbounded)
            .eq(ids.iter().skip(1).step_by(2)));
        for id in ids.iter().skip(1).step_by(2) {
            assert!(set.remove(id));
        }
        set.check().unwrap();
        assert!(set.is_empty());
    }
}
