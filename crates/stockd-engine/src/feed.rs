//! The event feed as readers see it: a bounded window of recent events plus the durable
//! watermark.
//!
//! The writer appends events as it applies records; the log stage raises `durable_seq` after
//! each fsync. Readers only ever see events at or below `durable_seq`, so a consumer can never
//! act on a change that a crash could still take back. A reader whose `after` is older than the
//! window gets `events_expired`, never a silent gap. This module must never hold its lock
//! across I/O or a wait.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use stockd_core::state::snapshot::{decode_event, encode_event, encoded_event_seq};
use stockd_core::{Error, Event};
use tokio::sync::watch;

/// Events per chunk of the window.
const CHUNK: usize = 1024;

pub struct Feed {
    events: Mutex<Window>,
    retention_max: usize,
    durable_seq: watch::Sender<u64>,
}

/// Events in the encoding snapshots store them in (`encode_event`), one after the other.
/// About 70 bytes an event where an [`Event`] takes over 220 inline and more on the heap; an
/// event is decoded only when a reader asks for it.
#[derive(Clone, Default)]
struct Chunk {
    bytes: Vec<u8>,
    /// Where each event ends in `bytes` (the next one starts there).
    ends: Vec<u32>,
}

impl Chunk {
    fn with_capacity(events: usize) -> Chunk {
        Chunk {
            bytes: Vec::with_capacity(events * 64),
            ends: Vec::with_capacity(events),
        }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }

    fn push_event(&mut self, event: &Event) {
        encode_event(event, &mut self.bytes);
        self.ends.push(self.end());
    }

    fn push_encoded(&mut self, encoded: &[u8]) {
        self.bytes.extend_from_slice(encoded);
        self.ends.push(self.end());
    }

    fn end(&self) -> u32 {
        u32::try_from(self.bytes.len()).expect("a chunk of 1,024 events is far below 4 GiB")
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }
}

/// The retained events, in seq order, encoded in chunks of [`CHUNK`].
///
/// Not one deque of events: growing or trimming a window of a million events moves all of
/// them at once (a stall measured as a p99 of 100 ms). Chunks are never regrown once full; a
/// chunk trimmed from the front is reused as the next tail, so a full window appends into
/// memory it already has. Recovery builds one from the snapshot and the log, then the feed
/// takes it over.
pub(crate) struct Window {
    /// Full chunks, oldest first, each exactly [`CHUNK`] events. Shared so that
    /// [`Feed::retained`] hands them out without copying.
    full: VecDeque<Arc<Chunk>>,
    /// The newest events, fewer than [`CHUNK`].
    tail: Chunk,
    /// Events at the front of `full[0]` that are out of the window (a chunk is freed whole).
    /// Below [`CHUNK`]; zero when `full` is empty.
    skip: usize,
    /// A chunk trimmed from the front, cleared, for the next tail.
    spare: Option<Chunk>,
}

impl Window {
    pub(crate) fn new() -> Self {
        Window {
            full: VecDeque::new(),
            tail: Chunk::with_capacity(CHUNK),
            skip: 0,
            spare: None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.full.len() * CHUNK + self.tail.len() - self.skip
    }

    /// The bytes its chunks take on the heap, by their capacities.
    pub(crate) fn heap_bytes(&self) -> usize {
        let chunk = |chunk: &Chunk| chunk.bytes.capacity() + 4 * chunk.ends.capacity();
        let full: usize = self.full.iter().map(|full| chunk(full) + 16).sum();
        full + chunk(&self.tail) + self.spare.as_ref().map_or(0, chunk)
    }

    pub(crate) fn push(&mut self, event: &Event) {
        self.tail.push_event(event);
        self.tail_pushed();
    }

    pub(crate) fn push_encoded(&mut self, encoded: &[u8]) {
        self.tail.push_encoded(encoded);
        self.tail_pushed();
    }

    fn tail_pushed(&mut self) {
        if self.tail.len() == CHUNK {
            let next = self
                .spare
                .take()
                .unwrap_or_else(|| Chunk::with_capacity(CHUNK));
            let mut full = std::mem::replace(&mut self.tail, next);
            full.bytes.shrink_to_fit();
            self.full.push_back(Arc::new(full));
        }
    }

    /// Drops the oldest events until at most `max` are left.
    pub(crate) fn trim(&mut self, max: usize) {
        let mut excess = self.len().saturating_sub(max);
        while excess > 0 {
            if self.full.is_empty() {
                // Fewer than a chunk: the tail keeps its newest events.
                let cut = self.tail.ends[excess - 1];
                self.tail.bytes.drain(..cut as usize);
                self.tail.ends.drain(..excess);
                for end in &mut self.tail.ends {
                    *end -= cut;
                }
                return;
            }
            let here = (CHUNK - self.skip).min(excess);
            self.skip += here;
            excess -= here;
            if self.skip == CHUNK {
                self.skip = 0;
                let chunk = self.full.pop_front().expect("checked above");
                // Still shared with a `retained` copy: that one frees it.
                if let Ok(mut chunk) = Arc::try_unwrap(chunk) {
                    chunk.clear();
                    self.spare = Some(chunk);
                }
            }
        }
    }

    /// The events from position `start` of the window on, in order.
    fn iter_from(&self, start: usize) -> impl Iterator<Item = &[u8]> + '_ {
        let at = self.skip + start;
        let (chunk, offset) = (at / CHUNK, at % CHUNK);
        let in_full = self
            .full
            .iter()
            .skip(chunk)
            .flat_map(|chunk| chunk.iter())
            .skip(offset);
        let in_tail = self
            .tail
            .iter()
            .skip(at.saturating_sub(self.full.len() * CHUNK));
        in_full.chain(in_tail)
    }

    /// Every event, the full chunks shared, the tail copied.
    pub(crate) fn retained(&self) -> Retained {
        Retained {
            full: self.full.iter().cloned().collect(),
            skip: self.skip,
            tail: self.tail.clone(),
        }
    }

    fn first_seq(&self) -> Option<u64> {
        self.iter_from(0).next().and_then(encoded_event_seq)
    }
}

/// The retained events at one moment, for a snapshot: the full chunks are shared with the
/// feed (never changed once full), the tail copied.
pub struct Retained {
    full: Vec<Arc<Chunk>>,
    skip: usize,
    tail: Chunk,
}

impl Retained {
    pub fn len(&self) -> usize {
        self.full.len() * CHUNK + self.tail.len() - self.skip
    }

    /// Each event, encoded.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.full
            .iter()
            .flat_map(|chunk| chunk.iter())
            .skip(self.skip)
            .chain(self.tail.iter())
    }
}

/// An event the feed encoded, decoded again.
fn decoded(bytes: &[u8]) -> Event {
    decode_event(bytes).expect("the feed decodes the events it encoded itself")
}

impl Feed {
    pub fn new(retention_max: usize) -> Self {
        Feed {
            events: Mutex::new(Window::new()),
            retention_max: retention_max.max(1),
            durable_seq: watch::Sender::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Window> {
        // A panic while holding this lock cannot leave the window half-written (a push or a
        // trim moves whole events), so a poisoned lock is still consistent.
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends events in seq order, dropping the oldest past the retention bound.
    pub fn append<'a>(&self, new_events: impl IntoIterator<Item = &'a Event>) {
        let mut events = self.lock();
        for event in new_events {
            events.push(event);
        }
        events.trim(self.retention_max);
    }

    /// Takes over the window recovery built, trimmed to the retention bound.
    pub(crate) fn restore(&self, mut window: Window) {
        window.trim(self.retention_max);
        *self.lock() = window;
    }

    /// Marks every event up to `seq` durable and wakes long-polling readers.
    pub fn mark_durable(&self, seq: u64) {
        self.durable_seq.send_if_modified(|durable| {
            if seq > *durable {
                *durable = seq;
                true
            } else {
                false
            }
        });
    }

    pub fn durable_seq(&self) -> u64 {
        *self.durable_seq.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.durable_seq.subscribe()
    }

    /// Durable events with seq > `after`, at most `limit`; `EventsExpired` when the window has
    /// already dropped some event after `after` (the oldest kept is past `after + 1`), so that
    /// a consumer that fell behind learns of its gap instead of skipping it. Checked under the
    /// same lock as the read, so a window that moves during a long poll is caught too.
    pub fn read(&self, after: u64, limit: usize) -> Result<Vec<Event>, Error> {
        let durable = self.durable_seq();
        let events = self.lock();
        let Some(first_seq) = events.first_seq() else {
            return Ok(Vec::new());
        };
        if after.saturating_add(1) < first_seq {
            return Err(Error::EventsExpired {
                after,
                oldest_seq: first_seq,
            });
        }
        let start = after.saturating_add(1).saturating_sub(first_seq) as usize;
        // The page's bytes are copied under the lock and decoded after it, so that the writer,
        // which appends under the same lock, never waits for a reader's decoding.
        let mut page = Chunk::default();
        for encoded in events.iter_from(start.min(events.len())).take(limit) {
            if encoded_event_seq(encoded).is_none_or(|seq| seq > durable) {
                break;
            }
            page.push_encoded(encoded);
        }
        drop(events);
        Ok(page.iter().map(decoded).collect())
    }

    /// Every retained event, for a snapshot: the full chunks shared, the tail copied.
    pub fn retained(&self) -> Retained {
        self.lock().retained()
    }

    pub fn retained_count(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use stockd_core::EventKind;

    use super::*;

    fn event(seq: u64) -> Event {
        Event::new(seq, seq, EventKind::Restocked)
    }

    fn seqs<'a>(events: impl Iterator<Item = &'a [u8]>) -> Vec<u64> {
        events.map(|e| decoded(e).seq).collect()
    }

    fn read_seqs(events: &[Event]) -> Vec<u64> {
        events.iter().map(|e| e.seq).collect()
    }

    proptest! {
        /// The chunked window holds what a deque trimmed to the same bound holds, seen from
        /// every position, whether or not a `retained` copy shares its chunks meanwhile.
        #[test]
        fn the_window_keeps_what_a_deque_keeps(
            retention_max in prop_oneof![1usize..40, 1000usize..1100, 2000usize..5000],
            appends in prop::collection::vec((0usize..1500, any::<bool>()), 1..24),
            probes in prop::collection::vec(any::<prop::sample::Index>(), 4),
        ) {
            let feed = Feed::new(retention_max);
            let mut model = VecDeque::new();
            let mut next = 1u64;
            let mut kept = Vec::new();
            for (count, keep_a_copy) in appends {
                let batch: Vec<Event> = (next..next + count as u64).map(event).collect();
                next += count as u64;
                model.extend(batch.iter().map(|e| e.seq));
                while model.len() > retention_max {
                    model.pop_front();
                }
                feed.append(&batch);
                let window = feed.lock();
                prop_assert_eq!(window.len(), model.len());
                prop_assert!(window.skip < CHUNK && (window.skip == 0 || !window.full.is_empty()));
                prop_assert!(window.full.iter().all(|chunk| chunk.len() == CHUNK));
                prop_assert_eq!(window.first_seq(), model.front().copied());
                prop_assert_eq!(seqs(window.iter_from(0)), Vec::from(model.clone()));
                for probe in &probes {
                    let start = probe.index(model.len() + 1);
                    let expected: Vec<u64> = model.iter().skip(start).copied().collect();
                    prop_assert_eq!(seqs(window.iter_from(start)), expected);
                }
                drop(window);
                let retained = feed.retained();
                prop_assert_eq!(seqs(retained.iter()), Vec::from(model.clone()));
                if keep_a_copy {
                    kept.push((retained, Vec::from(model.clone())));
                }
            }
            // A copy handed out stays as it was, whatever the window did since.
            for (retained, then) in &kept {
                prop_assert_eq!(&seqs(retained.iter()), then);
            }
        }
    }

    #[test]
    fn reads_start_after_the_cursor_and_stop_at_the_durable_seq() {
        let feed = Feed::new(3000);
        feed.append(&(1..=2500).map(event).collect::<Vec<_>>());
        feed.mark_durable(2100);
        assert_eq!(read_seqs(&feed.read(0, 3).unwrap()), [1, 2, 3]);
        assert_eq!(read_seqs(&feed.read(1023, 2).unwrap()), [1024, 1025]);
        assert_eq!(read_seqs(&feed.read(2098, 10).unwrap()), [2099, 2100]);
        assert!(feed.read(2100, 10).unwrap().is_empty());
        feed.append(&(2501..=4000).map(event).collect::<Vec<_>>());
        assert!(matches!(
            feed.read(999, 1),
            Err(Error::EventsExpired {
                after: 999,
                oldest_seq: 1001
            })
        ));
        assert_eq!(read_seqs(&feed.read(1000, 2).unwrap()), [1001, 1002]);
    }
}
