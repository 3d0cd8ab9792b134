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

use stockd_core::{Error, Event};
use tokio::sync::watch;

/// Events per chunk of the window.
const CHUNK: usize = 1024;

pub struct Feed {
    events: Mutex<Window>,
    retention_max: usize,
    durable_seq: watch::Sender<u64>,
}

/// The retained events, in seq order, stored inline in chunks of [`CHUNK`].
///
/// Not one deque of events: growing or trimming a window of a million inline events moves
/// hundreds of megabytes at once (a stall measured as a p99 of 100 ms). Not one `Arc` per event
/// either, as it was: that is an allocation and a free per event on the writer thread. Chunks
/// are allocated at full size and never grow; a chunk trimmed from the front is reused as the
/// next tail, so a full window appends into memory it already has.
struct Window {
    /// Full chunks, oldest first, each exactly [`CHUNK`] events. Shared so that
    /// [`Feed::retained`] hands them out without copying.
    full: VecDeque<Arc<Vec<Event>>>,
    /// The newest events, fewer than [`CHUNK`], in a vector of that capacity.
    tail: Vec<Event>,
    /// Events at the front of `full[0]` that are out of the window (a chunk is freed whole).
    /// Below [`CHUNK`]; zero when `full` is empty.
    skip: usize,
    /// A chunk trimmed from the front, cleared, for the next tail.
    spare: Option<Vec<Event>>,
}

impl Window {
    fn new() -> Self {
        Window {
            full: VecDeque::new(),
            tail: Vec::with_capacity(CHUNK),
            skip: 0,
            spare: None,
        }
    }

    fn len(&self) -> usize {
        self.full.len() * CHUNK + self.tail.len() - self.skip
    }

    fn push(&mut self, event: Event) {
        self.tail.push(event);
        if self.tail.len() == CHUNK {
            let next = self
                .spare
                .take()
                .unwrap_or_else(|| Vec::with_capacity(CHUNK));
            self.full
                .push_back(Arc::new(std::mem::replace(&mut self.tail, next)));
        }
    }

    /// Drops the oldest events until at most `max` are left.
    fn trim(&mut self, max: usize) {
        let mut excess = self.len().saturating_sub(max);
        while excess > 0 {
            if self.full.is_empty() {
                self.tail.drain(..excess);
                return;
            }
            let here = (CHUNK - self.skip).min(excess);
            self.skip += here;
            excess -= here;
            if self.skip == CHUNK {
                self.skip = 0;
                let chunk = self.full.pop_front().expect("checked above");
                // Still shared with a `retained` copy: that one frees it.
                if let Ok(mut events) = Arc::try_unwrap(chunk) {
                    events.clear();
                    self.spare = Some(events);
                }
            }
        }
    }

    /// The events from position `start` of the window on, in order.
    fn iter_from(&self, start: usize) -> impl Iterator<Item = &Event> + '_ {
        let at = self.skip + start;
        let (chunk, offset) = (at / CHUNK, at % CHUNK);
        let in_full = self
            .full
            .iter()
            .skip(chunk)
            .flat_map(|events| events.iter())
            .skip(offset);
        let in_tail = self
            .tail
            .iter()
            .skip(at.saturating_sub(self.full.len() * CHUNK));
        in_full.chain(in_tail)
    }

    fn first(&self) -> Option<&Event> {
        self.iter_from(0).next()
    }
}

/// The retained events at one moment, for the snapshot written at shutdown: the full chunks
/// are shared with the feed, the tail copied.
pub struct Retained {
    full: Vec<Arc<Vec<Event>>>,
    skip: usize,
    tail: Vec<Event>,
}

impl Retained {
    pub fn iter(&self) -> impl Iterator<Item = &Event> + '_ {
        self.full
            .iter()
            .flat_map(|events| events.iter())
            .skip(self.skip)
            .chain(self.tail.iter())
    }
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
    pub fn append(&self, new_events: impl IntoIterator<Item = Event>) {
        let mut events = self.lock();
        for event in new_events {
            events.push(event);
        }
        events.trim(self.retention_max);
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
        let Some(first_seq) = events.first().map(|e| e.seq) else {
            return Ok(Vec::new());
        };
        if after.saturating_add(1) < first_seq {
            return Err(Error::EventsExpired {
                after,
                oldest_seq: first_seq,
            });
        }
        let start = after.saturating_add(1).saturating_sub(first_seq) as usize;
        Ok(events
            .iter_from(start.min(events.len()))
            .take_while(|e| e.seq <= durable)
            .take(limit)
            .cloned()
            .collect())
    }

    /// Every retained event, for the snapshot written at shutdown.
    pub fn retained(&self) -> Retained {
        let events = self.lock();
        Retained {
            full: events.full.iter().cloned().collect(),
            skip: events.skip,
            tail: events.tail.clone(),
        }
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

    fn seqs<'a>(events: impl Iterator<Item = &'a Event>) -> Vec<u64> {
        events.map(|e| e.seq).collect()
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
                feed.append(batch);
                let window = feed.lock();
                prop_assert_eq!(window.len(), model.len());
                prop_assert!(window.skip < CHUNK && (window.skip == 0 || !window.full.is_empty()));
                prop_assert!(window.full.iter().all(|chunk| chunk.len() == CHUNK));
                prop_assert_eq!(window.first().map(|e| e.seq), model.front().copied());
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
        feed.append((1..=2500).map(event));
        feed.mark_durable(2100);
        assert_eq!(seqs(feed.read(0, 3).unwrap().iter()), [1, 2, 3]);
        assert_eq!(seqs(feed.read(1023, 2).unwrap().iter()), [1024, 1025]);
        assert_eq!(seqs(feed.read(2098, 10).unwrap().iter()), [2099, 2100]);
        assert!(feed.read(2100, 10).unwrap().is_empty());
        feed.append((2501..=4000).map(event));
        assert!(matches!(
            feed.read(999, 1),
            Err(Error::EventsExpired {
                after: 999,
                oldest_seq: 1001
            })
        ));
        assert_eq!(seqs(feed.read(1000, 2).unwrap().iter()), [1001, 1002]);
    }
}
