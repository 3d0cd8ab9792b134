//! The writer and log threads: batching, group commit and release of answers in log order.
//!
//! The writer is the only code that touches the state. The log thread is the only code that
//! touches the log files, and the only code that releases answers, always after the fsync that
//! covers them. Neither may block on the other except through their channels.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stockd_core::{BackendError, Command, Effects, Outcome, State, Step, WaiterId};
use tokio::sync::oneshot;

use crate::clock::Clock;
use crate::storage::Storage;
use crate::{encode_snapshot, EngineConfig, Shared};

pub type Reply = oneshot::Sender<Result<Vec<Outcome>, BackendError>>;

pub enum Request {
    Execute {
        commands: Vec<Command>,
        reply: Reply,
    },
    /// Only wakes the writer so that it looks at the clock.
    Tick,
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

/// Answers to release once a batch is durable.
pub struct Completion {
    reply: Reply,
    outcomes: Vec<Outcome>,
}

pub enum LogJob {
    Batch {
        /// Encoded records of the batch; empty when the batch changed nothing (reads must still
        /// wait for earlier batches to be durable, so they travel the same way).
        payload: Vec<u8>,
        expected_lsn: u64,
        records: u64,
        /// Seq of the last event the batch produced (or earlier): durable once this is synced.
        last_seq: u64,
        completions: Vec<Completion>,
    },
    RemoveObsolete {
        snapshot_lsn: u64,
    },
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

/// How often the writer checks whether parked clients went away.
const WAITER_SWEEP_INTERVAL: Duration = Duration::from_millis(100);
/// Longest the writer sleeps with nothing to do; time-based work is scheduled exactly, this is
/// only a bound.
const IDLE_WAKE_MAX: Duration = Duration::from_millis(1_000);
/// Above this many holds, debug builds check only cheap invariants after each batch.
const DEEP_CHECK_HOLDS_MAX: usize = 20_000;

pub struct Writer {
    state: State,
    config: EngineConfig,
    clock: Arc<dyn Clock>,
    shared: Arc<Shared>,
    log: LogSink,
    next_lsn: u64,
    last_now_ms: u64,
    /// Parked requests by waiter id: answered when the core serves or times them out.
    parked: HashMap<WaiterId, Reply>,
    last_waiter_sweep: Instant,
    records_since_snapshot: u64,
    snapshot_in_flight: Arc<AtomicBool>,
    /// Lsn of the last snapshot the snapshot thread finished (0: none yet to act on); the
    /// writer then has the log drop what the snapshot covers.
    snapshot_done_lsn: Arc<AtomicU64>,
}

impl Writer {
    pub fn new(
        state: State,
        config: EngineConfig,
        clock: Arc<dyn Clock>,
        shared: Arc<Shared>,
        log: LogSink,
        next_lsn: u64,
        records_since_snapshot: u64,
    ) -> Self {
        Writer {
            state,
            config,
            clock,
            shared,
            log,
            next_lsn,
            last_now_ms: 0,
            parked: HashMap::new(),
            last_waiter_sweep: Instant::now(),
            records_since_snapshot,
            snapshot_in_flight: Arc::new(AtomicBool::new(false)),
            snapshot_done_lsn: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Time never goes backwards inside the engine, even if the wall clock does.
    fn now_ms(&mut self) -> u64 {
        self.last_now_ms = self.last_now_ms.max(self.clock.now_ms());
        self.last_now_ms
    }

    fn idle_timeout(&self) -> Duration {
        let now_ms = self.clock.now_ms();
        let mut timeout = match self.state.next_deadline_ms() {
            Some(deadline_ms) => Duration::from_millis(deadline_ms.saturating_sub(now_ms)),
            None => IDLE_WAKE_MAX,
        };
        if !self.parked.is_empty() {
            timeout = timeout.min(WAITER_SWEEP_INTERVAL);
        }
        timeout.min(IDLE_WAKE_MAX)
    }

    pub fn run(mut self, requests: Receiver<Request>) {
        let mut effects = Effects::default();
        let mut batch = Vec::new();
        loop {
            let first = match requests.recv_timeout(self.idle_timeout()) {
                Ok(request) => Some(request),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let mut commands = 0;
            if let Some(request) = first {
                commands += request_len(&request);
                batch.push(request);
                while commands < self.config.batch_commands_max {
                    match requests.try_recv() {
                        Ok(request) => {
                            commands += request_len(&request);
                            batch.push(request);
                        }
                        Err(_) => break,
                    }
                }
            }
            let shutdown = self.apply_batch(&mut batch, &mut effects);
            if let Some(done) = shutdown {
                self.write_snapshot_now();
                self.log.send(LogJob::Shutdown { done });
                return;
            }
        }
        let (done, _) = oneshot::channel();
        self.log.send(LogJob::Shutdown { done });
    }

    /// Applies one batch of requests and hands the result to the log thread. Returns the
    /// shutdown signal if the batch asked to stop.
    fn apply_batch(
        &mut self,
        batch: &mut Vec<Request>,
        effects: &mut Effects,
    ) -> Option<oneshot::Sender<()>> {
        let now_ms = self.now_ms();
        let snapshot_lsn = self.snapshot_done_lsn.swap(0, Relaxed);
        if snapshot_lsn > 0 {
            self.log.send(LogJob::RemoveObsolete { snapshot_lsn });
        }
        let failure = self.shared.failure();
        self.state.tick(now_ms, effects);
        let mut completions = Vec::with_capacity(batch.len());
        let mut shutdown = None;
        let mut command_count = 0u64;
        for request in batch.drain(..) {
            match request {
                Request::Execute { commands, reply } => {
                    if let Some(why) = &failure {
                        let _ = reply.send(Err(BackendError::Unavailable(why.clone())));
                        continue;
                    }
                    command_count += commands.len() as u64;
                    let single = commands.len() == 1;
                    let mut outcomes = Vec::with_capacity(commands.len());
                    let mut parked_as = None;
                    for command in commands {
                        match self.state.execute(command, now_ms, effects) {
                            Step::Done(outcome) => outcomes.push(outcome),
                            Step::Waiting(id) => {
                                // Engine::execute sends a command that may wait alone.
                                debug_assert!(single, "a waiting command shared a request");
                                parked_as = Some(id);
                            }
                        }
                    }
                    match parked_as {
                        Some(id) if single => {
                            self.parked.insert(id, reply);
                        }
                        Some(id) => {
                            self.state.cancel_waiter(id);
                            let _ = reply.send(Err(BackendError::Unavailable(
                                "a waiting command must be sent alone".into(),
                            )));
                        }
                        None => completions.push(Completion { reply, outcomes }),
                    }
                }
                Request::Tick => {}
                Request::Shutdown { done } => shutdown = Some(done),
            }
        }
        for (id, outcome) in effects.woken.drain(..) {
            if let Some(reply) = self.parked.remove(&id) {
                completions.push(Completion {
                    reply,
                    outcomes: vec![outcome],
                });
            }
        }
        self.sweep_gone_waiters();
        self.check_invariants();

        let stats = &self.shared.stats;
        stats.observe_events(&effects.events);
        stats.batches.fetch_add(1, Relaxed);
        stats.commands.fetch_add(command_count, Relaxed);
        stats.pools.store(self.state.pool_count() as u64, Relaxed);
        stats.holds.store(self.state.hold_count() as u64, Relaxed);
        stats
            .waiters
            .store(self.state.waiter_count() as u64, Relaxed);

        let records = effects.records.len() as u64;
        if records == 0 && completions.is_empty() {
            return shutdown;
        }
        let payload = if records == 0 {
            Vec::new()
        } else {
            postcard::to_allocvec(&effects.records).expect("serialising to memory cannot fail")
        };
        let expected_lsn = if records == 0 {
            0
        } else {
            self.next_lsn += 1;
            self.next_lsn - 1
        };
        self.shared.feed.append(effects.events.drain(..));
        stats
            .events_retained
            .store(self.shared.feed.retained_count() as u64, Relaxed);
        effects.clear();
        let job = LogJob::Batch {
            payload,
            expected_lsn,
            records,
            last_seq: self.state.next_seq() - 1,
            completions,
        };
        if !self.log.send(job) {
            self.shared.fail("the log thread stopped".into());
        }
        self.records_since_snapshot += records;
        if self.records_since_snapshot >= self.config.snapshot_every_records {
            self.start_snapshot();
        }
        shutdown
    }

    /// Forgets parked requests whose client went away, so they take no stock when served.
    fn sweep_gone_waiters(&mut self) {
        if self.parked.is_empty() || self.last_waiter_sweep.elapsed() < WAITER_SWEEP_INTERVAL {
            return;
        }
        self.last_waiter_sweep = Instant::now();
        let state = &mut self.state;
        self.parked.retain(|id, reply| {
            if reply.is_closed() {
                state.cancel_waiter(*id);
                false
            } else {
                true
            }
        });
    }

    fn check_invariants(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        if self.state.hold_count() <= DEEP_CHECK_HOLDS_MAX {
            if let Err(broken) = self.state.check_invariants() {
                panic!("invariant broken after a batch: {broken}");
            }
        }
    }

    /// Starts building a snapshot of everything durable so far on the snapshot thread, which
    /// rolls the newest snapshot on disk forward through the log (the same replay recovery
    /// does). The writer hands over only an lsn: it never stops to encode its own state, so a
    /// snapshot of millions of holds costs requests no pause.
    fn start_snapshot(&mut self) {
        if self.snapshot_in_flight.swap(true, Relaxed) {
            return;
        }
        self.records_since_snapshot = 0;
        let up_to_lsn = self.shared.durable_lsn.load(Relaxed);
        let dir = self.config.data_dir.clone();
        let state_config = self.config.state;
        let event_retention_max = self.config.event_retention_max;
        let done_lsn = self.snapshot_done_lsn.clone();
        let in_flight = self.snapshot_in_flight.clone();
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("stockd-snapshot".into())
            .spawn(move || {
                let started = Instant::now();
                match crate::build_snapshot(&dir, up_to_lsn, state_config, event_retention_max) {
                    Ok(()) => {
                        let build_ms = started.elapsed().as_millis() as u64;
                        shared.stats.snapshots.fetch_add(1, Relaxed);
                        shared.stats.snapshot_build_ms_last.store(build_ms, Relaxed);
                        tracing::info!(lsn = up_to_lsn, build_ms, "snapshot written");
                        done_lsn.store(up_to_lsn, Relaxed);
                    }
                    // A failed snapshot loses nothing: the log still has every record.
                    Err(error) => tracing::warn!(%error, "snapshot failed; will retry later"),
                }
                in_flight.store(false, Relaxed);
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot start the snapshot thread");
            self.snapshot_in_flight.store(false, Relaxed);
        }
    }

    /// At shutdown: a snapshot of everything so the next start replays nothing.
    fn write_snapshot_now(&mut self) {
        // Wait for a snapshot still being written, so the two never race on the files.
        while self.snapshot_in_flight.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(5));
        }
        if self.records_since_snapshot == 0 || self.shared.failure().is_some() {
            return;
        }
        // Stopping anyway: encoding the live state here costs no request a pause.
        let lsn = self.next_lsn - 1;
        let retained = self.shared.feed.retained();
        let payload = encode_snapshot(&self.state, retained.iter().map(|e| &**e));
        match Storage::write_snapshot(&self.config.data_dir, lsn, &payload) {
            Ok(()) => {
                self.shared.stats.snapshots.fetch_add(1, Relaxed);
                self.log.send(LogJob::RemoveObsolete { snapshot_lsn: lsn });
            }
            Err(error) => tracing::warn!(%error, "final snapshot failed; the log has everything"),
        }
    }
}

fn request_len(request: &Request) -> usize {
    match request {
        Request::Execute { commands, .. } => commands.len(),
        _ => 1,
    }
}

/// Where the writer hands each batch: to the log thread (pipelined: the writer applies the next
/// batch while this one syncs) or to the log stage run inline on the writer itself (one thread
/// less to wake per batch; requests that arrive during the fsync form the next group).
pub enum LogSink {
    Thread(Sender<LogJob>),
    Inline(Log),
}

impl LogSink {
    /// Returns false if the log thread is gone.
    fn send(&mut self, job: LogJob) -> bool {
        match self {
            LogSink::Thread(jobs) => jobs.send(job).is_ok(),
            LogSink::Inline(log) => {
                log.process(&mut vec![job]);
                true
            }
        }
    }
}

/// The log stage: append, one fsync for all that queued up, then release answers in order.
pub struct Log {
    storage: Storage,
    shared: Arc<Shared>,
}

/// The log thread: takes every job queued since the last round and processes them as a group.
pub fn run_log(mut log: Log, jobs: Receiver<LogJob>) {
    let mut pending = Vec::new();
    while let Ok(job) = jobs.recv() {
        pending.push(job);
        while let Ok(job) = jobs.try_recv() {
            pending.push(job);
        }
        if log.process(&mut pending) {
            return;
        }
    }
}

impl Log {
    pub fn new(storage: Storage, shared: Arc<Shared>) -> Self {
        Log { storage, shared }
    }

    /// Processes a group of jobs; returns true once a shutdown job was handled.
    pub fn process(&mut self, pending: &mut Vec<LogJob>) -> bool {
        let Log { storage, shared } = self;
        let mut appended = false;
        let mut last_seq = 0;
        let mut shutdown = None;
        let mut failed = shared.failure().is_some();
        for job in pending.iter() {
            if let LogJob::Batch {
                payload,
                expected_lsn,
                records,
                last_seq: seq,
                ..
            } = job
            {
                last_seq = last_seq.max(*seq);
                if payload.is_empty() || failed {
                    continue;
                }
                match storage.append(payload) {
                    Ok(lsn) => {
                        debug_assert_eq!(lsn, *expected_lsn, "writer and log disagree on lsn");
                        appended = true;
                        shared.stats.wal_records.fetch_add(*records, Relaxed);
                        shared
                            .stats
                            .wal_bytes
                            .fetch_add(payload.len() as u64, Relaxed);
                    }
                    Err(error) => {
                        shared.fail(format!("appending to the log: {error}"));
                        failed = true;
                    }
                }
            }
        }
        if appended && !failed {
            match storage.sync() {
                Ok(()) => {
                    shared.stats.wal_syncs.fetch_add(1, Relaxed);
                    shared.durable_lsn.store(storage.durable_lsn(), Relaxed);
                }
                Err(error) => {
                    shared.fail(format!("fsync of the log: {error}"));
                    failed = true;
                }
            }
        }
        if !failed {
            shared.feed.mark_durable(last_seq);
        }
        for job in pending.drain(..) {
            match job {
                LogJob::Batch { completions, .. } => {
                    for Completion { reply, outcomes } in completions {
                        let answer = if failed {
                            Err(BackendError::Unavailable(
                                "the write-ahead log failed; the change is not acknowledged".into(),
                            ))
                        } else {
                            Ok(outcomes)
                        };
                        let _ = reply.send(answer);
                    }
                }
                LogJob::RemoveObsolete { snapshot_lsn } => {
                    if let Err(error) = storage.remove_obsolete(snapshot_lsn) {
                        tracing::warn!(%error, "cannot remove obsolete log segments");
                    }
                }
                LogJob::Shutdown { done } => shutdown = Some(done),
            }
        }
        match shutdown {
            Some(done) => {
                let _ = storage.sync();
                let _ = done.send(());
                true
            }
            None => false,
        }
    }
}
