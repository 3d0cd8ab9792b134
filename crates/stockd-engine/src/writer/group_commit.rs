//! Group commit's gathering: after a group commit answered several requests, the writer waits
//! briefly for those clients' next requests so that one fsync covers them again.
//!
//! This module owns the heuristic ([`Gather`]: how long to wait, for how many) and the wake-up
//! ([`Arrivals`]: submitters count what they queue, and the one that completes the group wakes
//! the writer). It must never decide, log or answer anything, and never make a request wait past
//! [`GATHER_FSYNCS_MAX`] times the last fsync nor `group_commit_wait_max`: it only chooses when
//! the writer stops taking requests into the batch.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use super::{request_len, Request, Writer};

/// How many of the last fsync's durations a gather may wait for its group. A bound of one
/// (waiting longer than an fsync costs the first clients more than a second fsync would cost
/// the last) weighed latency only; but an fsync also costs CPU (about 100 µs on the VM of
/// docs/benchmarks.md, a large share of the writer's time), which a CPU-bound server takes from
/// every request, and a wait that ends the moment its group is in ([`Arrivals`]) costs nothing past
/// that moment. At 50 connections, with a bound of one fsync 0.36 of the gathers ran to their
/// deadline against 0.30 that got their group; with two, requests per fsync went from 22-23 to
/// 25-31 and the writer's context switches per request from 0.15 to 0.10-0.12. Still a
/// multiple of the fsync, so that on a fast disk the wait stays as short as its fsyncs.
const GATHER_FSYNCS_MAX: u32 = 2;

/// Group commit's gathering. The clients a group commit answered send their next requests a
/// round trip later, within a fraction of an fsync. A writer that took the first of them alone
/// would start an fsync for it and leave the rest queued behind that fsync: the group splits in
/// two (or three), each client waits for a whole extra fsync, and closed-loop throughput halves.
/// So after a group of several requests, the writer waits, briefly, until as many requests are
/// queued as the last group had (the same idea as PostgreSQL's `commit_delay` with
/// `commit_siblings`, sized by what the last commit saw instead of fixed settings).
///
/// The wait ends as soon as the group is in ([`Arrivals`]), and never exceeds
/// [`GATHER_FSYNCS_MAX`] times the last fsync's duration nor `group_commit_wait_max`; after a
/// group of one request (a single client, or an idle server) there is no wait at all.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Gather {
    /// Requests the last group commit answered.
    pub(super) last_group: usize,
    /// How long the last group's append and fsync took.
    pub(super) last_sync: Duration,
}

impl Gather {
    /// How long to wait for more requests when `queued` are in the batch, or `None` to go on.
    pub(crate) fn window(&self, queued: usize, wait_max: Duration) -> Option<Duration> {
        if self.last_group < 2 || queued >= self.last_group {
            return None;
        }
        let window = wait_max.min(self.last_sync.saturating_mul(GATHER_FSYNCS_MAX));
        (!window.is_zero()).then_some(window)
    }

    /// Requests the writer waits for before it stops gathering.
    pub(crate) fn target(&self) -> usize {
        self.last_group
    }
}

/// How a gathering writer learns that its group is complete: submitters count the requests
/// they queue, and the one whose request completes the group wakes the writer, once.
///
/// The writer used to sleep in quarter slices of the window and drain the queue after each. On
/// the VM of docs/benchmarks.md a sleep costs about 25 µs of CPU (its timer, its wake-up), and
/// a slice ends late (timer slack, scheduling), so a group already complete waited on: at 8
/// connections a gather took 210-220 µs with slices and 90-115 µs woken this way. Blocking on
/// the queue instead would wake the writer for every arriving request. Counting costs each
/// submitter one atomic add and one load.
#[derive(Debug)]
pub(crate) struct Arrivals {
    /// Requests to execute queued so far, each counted once it is in the queue.
    queued: AtomicU64,
    /// The count of `queued` at which the writer wants waking; [`Arrivals::NOBODY`] when it
    /// is not gathering.
    wake_at: AtomicU64,
    /// The writer thread, once it runs (the simulation's writer never parks, and has none).
    writer: OnceLock<Thread>,
}

impl Default for Arrivals {
    fn default() -> Self {
        Arrivals {
            queued: AtomicU64::new(0),
            wake_at: AtomicU64::new(Arrivals::NOBODY),
            writer: OnceLock::new(),
        }
    }
}

impl Arrivals {
    const NOBODY: u64 = u64::MAX;

    /// Names the thread to wake: the writer's, once it runs.
    pub(super) fn set_writer(&self, writer: Thread) {
        let _ = self.writer.set(writer);
    }

    /// A submitter's part, after its request is in the queue: counts it, and wakes the writer
    /// if it completes the group the writer is gathering.
    pub(crate) fn arrived(&self) {
        if self.count_one() {
            if let Some(writer) = self.writer.get() {
                writer.unpark();
            }
        }
    }

    /// Counts one queued request; true for the one that reaches the count the writer waits
    /// for. Sequentially consistent with [`Arrivals::wake_at`], so that either the submitter
    /// sees the count the writer set or the writer sees the submitter's request counted: a
    /// wake-up is never lost between the writer's last look at the queue and its park.
    fn count_one(&self) -> bool {
        let queued = self.queued.fetch_add(1, SeqCst) + 1;
        queued == self.wake_at.load(SeqCst)
    }

    /// The writer's part: asks to be woken once `count` requests have been queued in all.
    /// False when they already have, and the writer should look at the queue again instead of
    /// parking (their requests are in it: each is counted only after it is queued).
    fn wake_at(&self, count: u64) -> bool {
        self.wake_at.store(count, SeqCst);
        self.queued.load(SeqCst) < count
    }

    /// The writer stopped gathering: no submitter needs to wake it. A wake-up already under
    /// way only leaves a token that makes the next park return at once, to look again.
    fn stop_waking(&self) {
        self.wake_at.store(Arrivals::NOBODY, SeqCst);
    }
}

impl Writer {
    /// Waits briefly for the rest of the last group's clients (see [`Gather`]). It parks at
    /// most once per arrival of the whole group: the submitter whose request completes it
    /// wakes the writer ([`Arrivals`]), and the deadline bounds the wait.
    pub(super) fn gather_more(&mut self, batch: &mut Vec<Request>, requests: &Receiver<Request>) {
        let Some(window) = self
            .gather
            .window(batch.len(), self.config.group_commit_wait_max)
        else {
            return;
        };
        if batch.iter().any(|r| matches!(r, Request::Shutdown { .. })) {
            return;
        }
        let deadline = Instant::now() + window;
        let missing = self.gather.target().saturating_sub(batch.len());
        let complete_at = self.received + missing as u64;
        let shared = Arc::clone(&self.shared);
        let mut commands: usize = batch.iter().map(request_len).sum();
        loop {
            while let Ok(request) = requests.try_recv() {
                commands += self.take(batch, request);
            }
            let enough =
                batch.len() >= self.gather.target() || commands >= self.config.batch_commands_max;
            let now = Instant::now();
            if enough || now >= deadline {
                break;
            }
            if shared.arrivals.wake_at(complete_at) {
                std::thread::park_timeout(deadline - now);
            }
        }
        shared.arrivals.stop_waking();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathering_waits_only_after_a_group_and_never_past_twice_the_last_fsync() {
        let wait_max = Duration::from_micros(500);
        let after = |last_group, last_sync_us| Gather {
            last_group,
            last_sync: Duration::from_micros(last_sync_us),
        };
        // Idle, or one client: no wait at all.
        assert_eq!(Gather::default().window(1, wait_max), None);
        assert_eq!(after(1, 400).window(1, wait_max), None);
        // After a group of 20, with 5 queued: wait, twice as long as the last fsync took.
        assert_eq!(
            after(20, 200).window(5, wait_max),
            Some(Duration::from_micros(400))
        );
        // A slow fsync: the setting bounds the wait.
        assert_eq!(after(20, 9_000).window(5, wait_max), Some(wait_max));
        // As many queued as the last group had: go.
        assert_eq!(after(20, 300).window(20, wait_max), None);
        // Waiting turned off.
        assert_eq!(after(20, 300).window(5, Duration::ZERO), None);
        assert_eq!(after(20, 300).target(), 20);
    }

    #[test]
    fn the_request_that_completes_a_gathered_group_wakes_the_writer_once() {
        let arrivals = Arrivals::default();
        // Nobody gathering: no request wakes anyone.
        assert!(!arrivals.count_one());
        assert!(!arrivals.count_one());
        // Two queued, the writer waits for a fourth: the fourth wakes it, nothing else does.
        assert!(arrivals.wake_at(4));
        assert!(!arrivals.count_one());
        assert!(arrivals.count_one());
        assert!(!arrivals.count_one());
        // Already queued by the time the writer asks: it must not park.
        assert!(!arrivals.wake_at(5));
        arrivals.stop_waking();
        assert!(!arrivals.count_one());
    }

    #[test]
    fn a_parked_writer_is_woken_by_the_request_that_completes_its_group() {
        let arrivals = Arc::new(Arrivals::default());
        let (parked_tx, parked_rx) = std::sync::mpsc::channel();
        let writer = {
            let arrivals = Arc::clone(&arrivals);
            std::thread::spawn(move || {
                let _ = arrivals.writer.set(std::thread::current());
                let started = Instant::now();
                let mut asked = false;
                while arrivals.wake_at(3) {
                    if !asked {
                        parked_tx.send(()).unwrap();
                        asked = true;
                    }
                    std::thread::park_timeout(Duration::from_secs(60));
                }
                arrivals.stop_waking();
                started.elapsed()
            })
        };
        parked_rx.recv().unwrap();
        for _ in 0..3 {
            arrivals.arrived();
        }
        // Woken by the third request, not by the 60 s deadline.
        assert!(writer.join().unwrap() < Duration::from_secs(30));
    }
}
