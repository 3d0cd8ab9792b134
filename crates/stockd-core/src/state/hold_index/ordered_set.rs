//! `OrderedSet`: the ordered set the hold index keeps its ids in, made for cheap inserts and
//! little memory rather than generality.
//!
//! Elements live in blocks of at most `CAP` sorted elements, stored as two arrays: the heads
//! (`Headed::head`, one integer per element) and the elements. A search in a block is a binary
//! search on the heads, which are contiguous and compared as integers; the elements themselves
//! (behind a pointer, a cache miss each) are compared only among equal heads. The blocks sit in
//! a vector of slots, found through `Starts`: each block's start and slot, in order, in chunks
//! of at most `STARTS_PER_CHUNK`, searched the same way (heads first), so finding an element's
//! block is two binary searches. A std `BTreeMap` of the starts was tried first: its
//! `range(..=probe).next_back()` (a linear scan of each node, four or five nodes deep, and its
//! range machinery) cost some 800 instructions at 5,000 blocks, more than the rest of an insert.
//!
//! A block's start is a lower bound of its elements, above every element of the blocks before
//! it; it need not be an element. The first block's start is `Start::LEAST`, below everything,
//! so every element has a block: the last block whose start is not above it. Removing an
//! element leaves the start as it is (it may keep an id that is gone alive until the block
//! goes), so a removal moves no start unless it empties a block.
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

use std::fmt;
use std::ops::Bound;

/// What the set needs of its elements: ordered, cheap to clone (ids are `Arc`s), and a head that
/// orders as the element does wherever two heads differ: `a.head() < b.head()` implies `a < b`.
pub(super) trait Headed: Ord + Clone {
    fn head(&self) -> u128;
}

/// Elements per block in production: a split or a block allocated at once is 64 × (16-byte head
/// + element), and a search is six integer comparisons.
pub(super) const BLOCK: usize = 64;

/// A block's start in the tree of blocks: a head and an element, or the least start (head 0,
/// no element) of the first block. A struct rather than an enum so that comparing two starts is
/// an integer comparison first, with no variant to tell apart: the tree's searches are most of
/// an insert's cost.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Start<T> {
    head: u128,
    item: Option<T>,
}

impl<T: Headed> Start<T> {
    /// The first block's start, below every element (`None` sorts before any `Some`).
    const LEAST: Self = Start {
        head: 0,
        item: None,
    };

    /// A probe: `item` placed among the starts.
    fn at(item: T) -> Self {
        Start {
            head: item.head(),
            item: Some(item),
        }
    }

    fn item(&self) -> &T {
        self.item.as_ref().expect("a probe is an element")
    }

    fn into_item(self) -> T {
        self.item.expect("a probe is an element")
    }
}

/// At most `CAP` elements in order, heads and elements at the same positions.
///
/// A block also knows its bounds: `start`, its key in the tree of starts, and `end`, the start
/// the next block had when last known (`None`: there was none). An element at or above `start`
/// and below `end` belongs to this block. `end` is never above the next block's start: only a
/// split of this block puts a block after it, and the split sets `end`. It may be below it once
/// the next block has gone: then the block owns more than `[start, end)`, which is only
/// conservative.
struct Block<T> {
    heads: Vec<u128>,
    items: Vec<T>,
    start: Start<T>,
    end: Option<Start<T>>,
}

impl<T: Headed> Block<T> {
    fn with_capacity(capacity: usize) -> Self {
        Block {
            heads: Vec::with_capacity(capacity),
            items: Vec::with_capacity(capacity),
            start: Start::LEAST,
            end: None,
        }
    }

    /// Whether `probe` is within `[start, end)`, so certainly in this block.
    fn owns(&self, probe: &Start<T>) -> bool {
        self.start <= *probe && self.end.as_ref().is_none_or(|end| *probe < *end)
    }

    fn len(&self) -> usize {
        self.heads.len()
    }

    /// Where `item` (of head `head`) is, or where it would go.
    fn search(&self, head: u128, item: &T) -> Result<usize, usize> {
        let low = self.heads.partition_point(|&h| h < head);
        if self.heads.get(low) != Some(&head) {
            return Err(low);
        }
        let ties = self.heads[low..].partition_point(|&h| h == head);
        match self.items[low..low + ties].binary_search(item) {
            Ok(i) => Ok(low + i),
            Err(i) => Err(low + i),
        }
    }

    /// Inserts at `pos`, growing (a set's first block starts small) but never past `cap`.
    fn insert(&mut self, pos: usize, head: u128, item: T, cap: usize) {
        let len = self.len();
        if len == self.heads.capacity() {
            let more = len.max(4).min(cap - len);
            self.heads.reserve_exact(more);
            self.items.reserve_exact(more);
        }
        self.heads.insert(pos, head);
        self.items.insert(pos, item);
    }

    fn remove(&mut self, pos: usize) {
        self.heads.remove(pos);
        self.items.remove(pos);
    }

    /// The elements from `at` on, as a block of capacity `cap`.
    fn split_off(&mut self, at: usize, cap: usize) -> Self {
        let mut right = Block::with_capacity(cap);
        right.heads.extend(self.heads.drain(at..));
        right.items.extend(self.items.drain(at..));
        right
    }

    /// Takes in the elements of the block after this one, and its end.
    fn append(&mut self, next: Block<T>) {
        self.heads.reserve_exact(next.len());
        self.items.reserve_exact(next.len());
        self.heads.extend(next.heads);
        self.items.extend(next.items);
        self.end = next.end;
    }

    /// A start for this block: its first element.
    fn first(&self) -> Start<T> {
        Start {
            head: self.heads[0],
            item: Some(self.items[0].clone()),
        }
    }
}

/// Block starts per chunk of the index of starts in production. A chunk that fills splits in
/// halves.
pub(super) const STARTS_PER_CHUNK: usize = 128;

/// The blocks' starts in order, each with its block's slot: a sorted vector of chunks of at
/// most `CHUNK` starts (128 in production), with each chunk's first start (and its head) in
/// vectors of their own.
/// Finding the block of an element is two binary searches, on heads first.
struct Starts<T, const CHUNK: usize> {
    first_heads: Vec<u128>,
    firsts: Vec<Start<T>>,
    chunks: Vec<Chunk<T>>,
}

/// Starts in order, their heads apart (searched first, as a block's), and their blocks' slots.
struct Chunk<T> {
    heads: Vec<u128>,
    starts: Vec<Start<T>>,
    slots: Vec<usize>,
}

/// How many of `starts` (in order, with their `heads`) are not above `probe`: a binary search
/// on the heads, then on the starts of the probe's head if several have it.
fn count_at_most<T: Headed>(heads: &[u128], starts: &[Start<T>], probe: &Start<T>) -> usize {
    let below = heads.partition_point(|&head| head < probe.head);
    if heads.get(below) != Some(&probe.head) {
        return below;
    }
    let ties = heads[below..].partition_point(|&head| head == probe.head);
    below + starts[below..below + ties].partition_point(|start| start <= probe)
}

impl<T: Headed, const CHUNK: usize> Starts<T, CHUNK> {
    fn new() -> Self {
        Starts {
            first_heads: Vec::new(),
            firsts: Vec::new(),
            chunks: Vec::new(),
        }
    }

    /// Where the last start not above `probe` is: (chunk, index in the chunk).
    fn find(&self, probe: &Start<T>) -> Option<(usize, usize)> {
        let chunk = count_at_most(&self.first_heads, &self.firsts, probe).checked_sub(1)?;
        let part = &self.chunks[chunk];
        Some((chunk, count_at_most(&part.heads, &part.starts, probe) - 1))
    }

    /// The slot of the last block whose start is not above `probe`.
    fn slot_of(&self, probe: &Start<T>) -> Option<usize> {
        self.find(probe)
            .map(|(chunk, at)| self.chunks[chunk].slots[at])
    }

    fn at(&self, (chunk, at): (usize, usize)) -> (&Start<T>, usize) {
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
    fn insert(&mut self, start: Start<T>, slot: usize) {
        let Some((mut chunk, at)) = self.find(&start) else {
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
    fn iter(&self) -> impl Iterator<Item = (&Start<T>, usize)> + '_ {
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

/// An ordered set of `T`, in blocks of at most `CAP` elements (see the module doc).
pub(super) struct OrderedSet<T, const CAP: usize = BLOCK, const CHUNK: usize = STARTS_PER_CHUNK> {
    /// Each block's start, to the block's slot in `slots`.
    starts: Starts<T, CHUNK>,
    /// The blocks; those of slots in `vacant` are empty and in no use.
    slots: Vec<Block<T>>,
    vacant: Vec<usize>,
    /// The block the last insert went to: every search looks there first.
    finger: Option<usize>,
    len: usize,
}

impl<T: Headed, const CAP: usize, const CHUNK: usize> Default for OrderedSet<T, CAP, CHUNK> {
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

impl<T: Headed + fmt::Debug, const CAP: usize, const CHUNK: usize> fmt::Debug
    for OrderedSet<T, CAP, CHUNK>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.range(Bound::Unbounded)).finish()
    }
}

impl<T: Headed, const CAP: usize, const CHUNK: usize> OrderedSet<T, CAP, CHUNK> {
    const MERGE_BELOW: usize = CAP / 4;

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot of the block `probe` belongs to: the finger's block if it owns the probe (two
    /// comparisons), else the last block whose start is not above it (two binary searches).
    fn locate(&self, probe: &Start<T>) -> Option<usize> {
        if let Some(slot) = self.finger {
            if self.slots[slot].owns(probe) {
                return Some(slot);
            }
        }
        self.starts.slot_of(probe)
    }

    fn occupy(&mut self, block: Block<T>) -> usize {
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
    fn vacate(&mut self, slot: usize) -> Block<T> {
        if self.finger == Some(slot) {
            self.finger = None;
        }
        self.vacant.push(slot);
        std::mem::replace(&mut self.slots[slot], Block::with_capacity(0))
    }

    /// Adds `item`; false if it was there already.
    pub(super) fn insert(&mut self, item: T) -> bool {
        let probe = Start::at(item);
        let Some(slot) = self.locate(&probe) else {
            // The first element: a block that grows as it fills.
            let mut block = Block::with_capacity(0);
            block.insert(0, probe.head, probe.into_item(), CAP);
            let slot = self.occupy(block);
            self.starts.insert(Start::LEAST, slot);
            self.finger = Some(slot);
            self.len = 1;
            return true;
        };
        self.finger = Some(slot);
        let block = &mut self.slots[slot];
        let Err(pos) = block.search(probe.head, probe.item()) else {
            return false;
        };
        self.len += 1;
        if block.len() < CAP {
            block.insert(pos, probe.head, probe.into_item(), CAP);
            return true;
        }
        self.insert_into_full(slot, pos, probe);
        true
    }

    /// Inserts `probe`'s element at `pos` of the full block in `slot`, splitting the block.
    /// In its last quarter, the block splits at `pos` and the element starts the second part;
    /// in its first quarter, the block splits at `pos` and the element ends the first part;
    /// elsewhere it splits in halves. So a run of inserts that ascend (or descend) through a
    /// region, as sequential ids do, leaves full blocks behind it, not half-full ones, and any
    /// split leaves a block at least half full. The finger follows the element.
    #[cold]
    fn insert_into_full(&mut self, slot: usize, pos: usize, probe: Start<T>) {
        let block = &mut self.slots[slot];
        let head = probe.head;
        let item = probe.into_item();
        let (mut right, into_right) = if pos >= CAP - CAP / 4 {
            let mut right = block.split_off(pos, CAP);
            right.insert(0, head, item, CAP);
            (right, true)
        } else if pos <= CAP / 4 {
            let right = block.split_off(pos, CAP);
            block.insert(pos, head, item, CAP);
            (right, false)
        } else {
            let half = CAP / 2;
            let mut right = block.split_off(half, CAP);
            if pos <= half {
                block.insert(pos, head, item, CAP);
            } else {
                right.insert(pos - half, head, item, CAP);
            }
            (right, pos > half)
        };
        let start = right.first();
        right.start = start.clone();
        right.end = block.end.replace(start.clone());
        let right = self.occupy(right);
        self.starts.insert(start, right);
        if into_right {
            self.finger = Some(right);
        }
    }

    /// Takes `item` out; false if it was not there.
    pub(super) fn remove(&mut self, item: &T) -> bool {
        let probe = Start::at(item.clone());
        let Some(slot) = self.locate(&probe) else {
            return false;
        };
        let block = &mut self.slots[slot];
        let Ok(pos) = block.search(probe.head, item) else {
            return false;
        };
        block.remove(pos);
        self.len -= 1;
        if block.len() >= Self::MERGE_BELOW.max(1) {
            return true;
        }
        self.shrunk(slot);
        true
    }

    /// The block in `slot` has lost an element and is under a quarter full: an empty block goes
    /// (the next one becoming the first if it was), a small one takes the next one in if both
    /// fit in half a block.
    #[cold]
    fn shrunk(&mut self, slot: usize) {
        let len = self.slots[slot].len();
        let at = self
            .starts
            .find(&self.slots[slot].start)
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
            self.slots[slot].append(next);
        }
    }

    pub(super) fn contains(&self, item: &T) -> bool {
        let probe = Start::at(item.clone());
        self.locate(&probe)
            .is_some_and(|slot| self.slots[slot].search(probe.head, item).is_ok())
    }

    /// The elements in order from `from` on: all of them, or from `item` on, or after it.
    pub(super) fn range<'a>(&'a self, from: Bound<&T>) -> impl Iterator<Item = &'a T> + 'a {
        let (first, rest): (&'a [T], _) = match from {
            Bound::Unbounded => (&[], self.starts.first_position()),
            Bound::Included(item) | Bound::Excluded(item) => {
                let probe = Start::at(item.clone());
                match self.starts.find(&probe) {
                    None => (&[], self.starts.first_position()),
                    Some(at) => {
                        let block = &self.slots[self.starts.at(at).1];
                        let pos = match block.search(probe.head, item) {
                            Ok(pos) if matches!(from, Bound::Excluded(_)) => pos + 1,
                            Ok(pos) | Err(pos) => pos,
                        };
                        (&block.items[pos..], self.starts.after(at))
                    }
                }
            }
        };
        first.iter().chain(
            self.starts
                .slots_from(rest)
                .flat_map(move |slot| self.slots[slot].items.iter()),
        )
    }

    /// The structure is sound: blocks non-empty and at most `CAP` long, their elements in
    /// order, each block's start its key, at or below its first element and above the elements
    /// before, its end not above the next start, the first block's start `LEAST`, the finger on
    /// a block in use, the vacant slots empty, and `len` the count of elements.
    #[cfg(test)]
    fn check(&self) -> Result<(), String> {
        let mut count = 0;
        let mut previous: Option<&Block<T>> = None;
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
                let last = previous.items.last().expect("a block in use has elements");
                if *start <= Start::at(last.clone()) {
                    return Err(format!("block {n} starts at or before the one before ends"));
                }
                if previous.end.as_ref().is_none_or(|end| end > start) {
                    return Err(format!("block {n} starts before the end of the one before"));
                }
            }
            if *start > block.first() {
                return Err(format!("block {n} starts after its first element"));
            }
            for (i, (head, item)) in block.heads.iter().zip(&block.items).enumerate() {
                if *head != item.head() {
                    return Err(format!("block {n}: a stale head"));
                }
                if i > 0 && block.items[i - 1] >= *item {
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
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    /// Ids as strings, headed as the hold index heads its ids.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    struct Id(String);

    impl Headed for Id {
        fn head(&self) -> u128 {
            super::super::head(&self.0)
        }
    }

    /// Ids from a small alphabet, with lengths on both sides of a head's 16 bytes: many share
    /// their head, many are prefixes of others.
    fn id() -> impl Strategy<Value = Id> {
        "[0a][0a.]{0,20}".prop_map(Id)
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
        let mut set = OrderedSet::<Id, CAP, CHUNK>::default();
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
        prop_assert_eq!(set.starts.len(), 0);
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

    /// Many sequential ids, then every other one removed, then all: splits at the end, in the
    /// middle, merges and empty blocks at production capacity.
    #[test]
    fn sequential_ids_fill_their_blocks() {
        let mut set = OrderedSet::<Id, BLOCK>::default();
        let ids: Vec<Id> = (0..10_000).map(|n| Id(format!("order-{n:08}"))).collect();
        for id in &ids {
            assert!(set.insert(id.clone()));
        }
        set.check().unwrap();
        assert_eq!(set.starts.len(), 10_000usize.div_ceil(BLOCK));
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
