//! Items due at a time, taken earliest first: the queues of hold expiries and of finished holds
//! to forget, which gain an entry with nearly every sale.
//!
//! A `BinaryHeap` would do, but its one vector doubles as it grows: past a million holds, the
//! push that crosses a power of two copies tens of megabytes while every request queued behind
//! the writer waits (measured: a 190 ms batch at 2,097,152 holds). Here items wait in one small
//! vector per millisecond, in a B-tree by time, so no growth moves more than one millisecond's
//! items. Items are taken in (time, item) order, the order the heap gave.

use std::collections::BTreeMap;

#[derive(Debug)]
pub(super) struct TimeQueue<T> {
    buckets: BTreeMap<u64, Bucket<T>>,
}

/// The items due at one millisecond. Sorted, largest first, when the first of them is taken,
/// so that the rest come off the end in order.
#[derive(Debug)]
struct Bucket<T> {
    items: Vec<T>,
    sorted: bool,
}

impl<T: Ord> TimeQueue<T> {
    pub(super) fn new() -> Self {
        TimeQueue {
            buckets: BTreeMap::new(),
        }
    }

    pub(super) fn push(&mut self, at_ms: u64, item: T) {
        // Most pushes are for the latest time (now plus a fixed retention or TTL): its bucket
        // is the last, reached down the tree's right edge without comparing keys.
        if let Some(mut last) = self.buckets.last_entry() {
            if *last.key() == at_ms {
                let bucket = last.get_mut();
                bucket.items.push(item);
                bucket.sorted = false;
                return;
            }
        }
        let bucket = self.buckets.entry(at_ms).or_insert_with(|| Bucket {
            items: Vec::new(),
            sorted: true,
        });
        bucket.items.push(item);
        bucket.sorted = bucket.items.len() == 1;
    }

    /// The bytes it takes on the heap: the buckets' vectors by capacity, and the tree's
    /// entries with the room its nodes leave (about a third; an estimate, and what the items
    /// own on the heap is not counted).
    pub(super) fn heap_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(u64, Bucket<T>)>();
        (self.buckets.values())
            .map(|bucket| bucket.items.capacity() * std::mem::size_of::<T>() + entry * 3 / 2)
            .sum()
    }

    /// When the earliest item is due.
    pub(super) fn peek_ms(&self) -> Option<u64> {
        self.buckets.first_key_value().map(|(&at_ms, _)| at_ms)
    }

    /// The earliest item (the smallest of those due at the earliest time), and its time.
    pub(super) fn pop(&mut self) -> Option<(u64, T)> {
        let mut first = self.buckets.first_entry()?;
        let at_ms = *first.key();
        let bucket = first.get_mut();
        if !bucket.sorted {
            bucket.items.sort_unstable_by(|a, b| b.cmp(a));
            bucket.sorted = true;
        }
        let item = bucket.items.pop().expect("a bucket is never left empty");
        if bucket.items.is_empty() {
            first.remove();
        }
        Some((at_ms, item))
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    use super::*;

    #[test]
    fn takes_items_in_the_order_a_min_heap_does() {
        let mut queue = TimeQueue::new();
        let mut heap = BinaryHeap::new();
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        };
        for round in 0..20_000 {
            if next(3) > 0 {
                let (at_ms, item) = (next(50), format!("h{}", next(30)));
                queue.push(at_ms, item.clone());
                heap.push(Reverse((at_ms, item)));
            } else {
                assert_eq!(
                    queue.pop(),
                    heap.pop().map(|Reverse(entry)| entry),
                    "round {round}"
                );
            }
            assert_eq!(
                queue.peek_ms(),
                heap.peek().map(|Reverse((at_ms, _))| *at_ms)
            );
        }
        while let Some(Reverse(entry)) = heap.pop() {
            assert_eq!(queue.pop(), Some(entry));
        }
        assert_eq!(queue.pop(), None);
        assert_eq!(queue.peek_ms(), None);
    }
}
