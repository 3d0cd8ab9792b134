//! The writer thread and its log stage: batching, group commit, and release of answers in log
//! order.
//!
//! The writer is the only code that touches the state; the log stage is the only code that
//! touches the log files (the snapshot thread only reads them and writes snapshots), and the
//! only code that releases answers, always after the fsync that covers them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use stockd_core::{BackendError, Command, Effects, Outcome, State, Step, WaiterId};
use tokio::sync::oneshot;

use crate::clock::Clock;
use crate::storage::{Fs, Storage};
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

/// A request part-way through its commands: answered so far, and what is left. A request whose
/// command parks (`wait_ms`) waits here as a whole, so a batch stays one request: queued once,
/// applied in order, answered once.
pub struct Parked {
    reply: Reply,
    outcomes: Vec<Outcome>,
    rest: std::vec::IntoIter<Command>,
}

/// Answers to release once a batch is durable.
pub struct Completion {
    reply: Reply,
    /// What the core decided; sent only if the batch becomes durable.
    pub(crate) outcomes: Vec<Outcome>,
}

pub enum LogJob {
    Batch {
        /// Encoded records of the batch, one log frame each (a big batch is split); none when
        /// the batch changed nothing (reads must still wait for earlier batches to be durable,
        /// so they travel the same way).
        payloads: Vec<Vec<u8>>,
        /// Lsn of the first frame; the others follow consecutively.
        first_lsn: u64,
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
    log: Log,
    next_lsn: u64,
    last_now_ms: u64,
    /// Requests parked behind a waiting command, by waiter id: resumed when the core serves
    /// or times the waiter out.
    parked: HashMap<WaiterId, Parked>,
    records_since_snapshot: u64,
    snapshot_in_flight: Arc<AtomicBool>,
    /// Lsn of the last snapshot the snapshot thread finished (0: none yet to act on); the
    /// writer then has the log drop what the snapshot covers.
    snapshot_done_lsn: Arc<AtomicU64>,
    snapshots: SnapshotRunner,
    gather: Gather,
    /// Where a batch's records are encoded before they are copied into their frame; kept with
    /// its capacity, since growing a fresh one to a large batch's size every time has the
    /// kernel zero new pages for it each time.
    encoding: Vec<u8>,
    /// Requests to execute taken off the queue so far, counted as [`Arrivals`] counts them
    /// going in: how the writer names the moment a gathered group is complete.
    received: u64,
}

/// How many of the last fsync's durations a gather may wait for its group. A bound of one
/// (waiting longer than an fsync costs the first clients more than a second fsync would cost
/// the last) weighed latency only; but an fsync also costs CPU (about 100 µs on the VM of
/// docs/benchmarks.md, 40% of the writer's time), which a CPU-bound server takes from every
/// request, and a wait that ends the moment its group is in ([`Arrivals`]) costs nothing past
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
    last_group: usize,
    /// How long the last group's append and fsync took.
    last_sync: Duration,
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

/// Where snapshot builds run.
pub enum SnapshotRunner {
    /// On a thread of their own; the one in flight is joined before the writer ends, so that
    /// no snapshot is still being written into the directory once the engine has let go of it.
    Thread(Option<std::thread::JoinHandle<()>>),
    /// Queued for the deterministic simulation, which runs each when its seed says, between
    /// (or instead of) writer steps, on the one simulation thread.
    #[cfg(test)]
    Queued(Vec<SnapshotJob>),
}

/// One snapshot build: everything durable up to `up_to_lsn`, rolled forward from the newest
/// snapshot on disk through the log (the same replay recovery does).
pub struct SnapshotJob {
    fs: Arc<dyn Fs>,
    dir: std::path::PathBuf,
    pub(crate) up_to_lsn: u64,
    state_config: stockd_core::StateConfig,
    event_retention_max: usize,
    done_lsn: Arc<AtomicU64>,
    in_flight: Arc<AtomicBool>,
    shared: Arc<Shared>,
}

impl SnapshotJob {
    /// Builds and writes the snapshot, deletes the files it makes obsolete, then tells the writer
    /// (`done_lsn`) so that the log forgets them. A failed snapshot loses nothing: the log still
    /// has every record.
    pub fn run(self) {
        // Clears the in-flight flag however the build ends, a panic included.
        let _in_flight = FlagGuard(self.in_flight);
        let started = Instant::now();
        let built = crate::build_snapshot(
            &*self.fs,
            &self.dir,
            self.up_to_lsn,
            self.state_config,
            self.event_retention_max,
        );
        match built {
            Ok(()) => {
                let build_ms = started.elapsed().as_millis() as u64;
                let stats = &self.shared.stats;
                stats.snapshots.fetch_add(1, Relaxed);
                stats.snapshot_build_ms_last.store(build_ms, Relaxed);
                tracing::info!(lsn = self.up_to_lsn, build_ms, "snapshot written");
                // Here rather than on the writer, which must not stop for file deletions.
                let removed = Storage::remove_obsolete_files(&*self.fs, &self.dir, self.up_to_lsn);
                if let Err(error) = removed {
                    tracing::warn!(%error, "cannot remove obsolete log segments and snapshots");
                }
                self.done_lsn.store(self.up_to_lsn, Relaxed);
            }
            Err(error) => tracing::warn!(%error, "snapshot failed; will retry later"),
        }
    }
}

impl Writer {
    pub fn new(
        state: State,
        config: EngineConfig,
        clock: Arc<dyn Clock>,
        shared: Arc<Shared>,
        log: Log,
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
            records_since_snapshot,
            snapshot_in_flight: Arc::new(AtomicBool::new(false)),
            snapshot_done_lsn: Arc::new(AtomicU64::new(0)),
            snapshots: SnapshotRunner::Thread(None),
            gather: Gather::default(),
            encoding: Vec::new(),
            received: 0,
        }
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Has the log stage send its answers through `release` (a task on the async runtime)
    /// rather than from the writer thread.
    pub fn release_through(&mut self, release: Release) {
        self.log.release = Some(release);
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
        let _alive = AliveGuard(self.shared.clone());
        let _ = self.shared.arrivals.writer.set(std::thread::current());
        let mut effects = Effects::default();
        let mut batch = Vec::new();
        loop {
            let first = match requests.recv_timeout(self.idle_timeout()) {
                Ok(request) => Some(request),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            if let Some(request) = first {
                self.fill_batch(&mut batch, request, || requests.try_recv().ok());
                self.gather_more(&mut batch, &requests);
            }
            let shutdown = self.apply_batch(&mut batch, &mut effects);
            if let Some(done) = shutdown {
                self.finish(done);
                return;
            }
        }
        self.join_snapshot_thread();
        let (done, _) = oneshot::channel();
        self.log.process(LogJob::Shutdown { done });
    }

    /// A clean stop: a final snapshot, a last sync, then `done`.
    pub(crate) fn finish(&mut self, done: oneshot::Sender<()>) {
        self.write_snapshot_now();
        self.log.process(LogJob::Shutdown { done });
    }

    /// A batch: `first`, then what `next` has queued, up to `batch_commands_max` commands.
    pub(crate) fn fill_batch(
        &mut self,
        batch: &mut Vec<Request>,
        first: Request,
        mut next: impl FnMut() -> Option<Request>,
    ) {
        let mut commands = self.take(batch, first);
        while commands < self.config.batch_commands_max {
            match next() {
                Some(request) => commands += self.take(batch, request),
                None => break,
            }
        }
    }

    /// Adds a request taken off the queue to the batch; returns its command count.
    fn take(&mut self, batch: &mut Vec<Request>, request: Request) -> usize {
        let commands = request_len(&request);
        if matches!(request, Request::Execute { .. }) {
            self.received += 1;
        }
        batch.push(request);
        commands
    }

    /// Waits briefly for the rest of the last group's clients (see [`Gather`]). It parks at
    /// most once per arrival of the whole group: the submitter whose request completes it
    /// wakes the writer ([`Arrivals`]), and the deadline bounds the wait.
    fn gather_more(&mut self, batch: &mut Vec<Request>, requests: &Receiver<Request>) {
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

    /// Waits for the snapshot build in flight, if any, to finish.
    fn join_snapshot_thread(&mut self) {
        match &mut self.snapshots {
            SnapshotRunner::Thread(thread) => {
                if let Some(thread) = thread.take() {
                    let _ = thread.join();
                }
            }
            // Joining a queued build is letting it run to its end now.
            #[cfg(test)]
            SnapshotRunner::Queued(jobs) => jobs.drain(..).for_each(SnapshotJob::run),
        }
    }

    /// Applies one batch of requests and hands the result to the log stage. Returns the
    /// shutdown signal if the batch asked to stop.
    fn apply_batch(
        &mut self,
        batch: &mut Vec<Request>,
        effects: &mut Effects,
    ) -> Option<oneshot::Sender<()>> {
        let (job, shutdown) = self.decide_batch(batch, effects);
        if let Some(job) = job {
            self.log_batch(job);
        }
        shutdown
    }

    /// The deciding half of a batch: what time did, then every request through the core. The
    /// state changes in memory only; the records and answers come back as the log job (none
    /// when the batch changed nothing and answers nobody), which [`Writer::log_batch`] makes
    /// durable before anyone hears of it. Returns the shutdown signal too.
    ///
    /// Never inlined (one call per batch): `scripts/bench-instructions.sh` counts the
    /// instructions spent in it.
    #[inline(never)]
    pub(crate) fn decide_batch(
        &mut self,
        batch: &mut Vec<Request>,
        effects: &mut Effects,
    ) -> (Option<LogJob>, Option<oneshot::Sender<()>>) {
        // First, forget waiters whose client went away, so that units freed in this batch go
        // to someone still listening (a ghost hold would lock them for its whole ttl).
        self.sweep_gone_waiters();
        let now_ms = self.now_ms();
        let snapshot_lsn = self.snapshot_done_lsn.swap(0, Relaxed);
        if snapshot_lsn > 0 {
            self.log.process(LogJob::RemoveObsolete { snapshot_lsn });
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
                    let outcomes = Vec::with_capacity(commands.len());
                    let parked = Parked {
                        reply,
                        outcomes,
                        rest: commands.into_iter(),
                    };
                    self.run_commands(parked, now_ms, effects, &mut completions);
                }
                Request::Tick => {}
                Request::Shutdown { done } => shutdown = Some(done),
            }
        }
        // Answers for parked commands: each resumes the rest of its request, which may wake
        // further waiters (a release later in the same batch), hence the loop.
        loop {
            let woken = std::mem::take(&mut effects.woken);
            if woken.is_empty() {
                break;
            }
            for (id, outcome) in woken {
                if let Some(mut parked) = self.parked.remove(&id) {
                    parked.outcomes.push(outcome);
                    self.run_commands(parked, now_ms, effects, &mut completions);
                }
            }
        }
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
            return (None, shutdown);
        }
        let payloads = encode_frames(&effects.records, &mut self.encoding);
        let first_lsn = self.next_lsn;
        self.next_lsn += payloads.len() as u64;
        self.shared.feed.append(effects.events.drain(..));
        stats
            .events_retained
            .store(self.shared.feed.retained_count() as u64, Relaxed);
        effects.clear();
        let job = LogJob::Batch {
            payloads,
            first_lsn,
            records,
            last_seq: self.state.next_seq() - 1,
            completions,
        };
        (Some(job), shutdown)
    }

    /// The logging half of a batch: the log stage appends and fsyncs its records and only then
    /// releases its answers; then a snapshot starts if one is due.
    pub(crate) fn log_batch(&mut self, job: LogJob) {
        let (records, answers) = match &job {
            LogJob::Batch {
                records,
                completions,
                ..
            } => (*records, completions.len()),
            _ => (0, 0),
        };
        let started = Instant::now();
        self.log.process(job);
        self.gather = Gather {
            last_group: answers,
            last_sync: started.elapsed(),
        };
        self.records_since_snapshot += records;
        if self.records_since_snapshot >= self.config.snapshot_every_records {
            self.start_snapshot();
        }
    }

    /// Runs a request's remaining commands in order until one parks (the request waits in
    /// `parked`) or all are done (its answer joins `completions`).
    fn run_commands(
        &mut self,
        mut request: Parked,
        now_ms: u64,
        effects: &mut Effects,
        completions: &mut Vec<Completion>,
    ) {
        while let Some(command) = request.rest.next() {
            match self.state.execute(command, now_ms, effects) {
                Step::Done(outcome) => request.outcomes.push(outcome),
                Step::Waiting(id) => {
                    self.parked.insert(id, request);
                    return;
                }
            }
        }
        completions.push(Completion {
            reply: request.reply,
            outcomes: request.outcomes,
        });
    }

    /// Forgets parked requests whose client went away, so they take no stock when served.
    /// One atomic load per parked request.
    fn sweep_gone_waiters(&mut self) {
        if self.parked.is_empty() {
            return;
        }
        let state = &mut self.state;
        self.parked.retain(|id, parked| {
            if parked.reply.is_closed() {
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
        let job = SnapshotJob {
            fs: self.log.storage.fs().clone(),
            dir: self.config.data_dir.clone(),
            up_to_lsn: self.shared.durable_lsn.load(Relaxed),
            state_config: self.config.state,
            event_retention_max: self.config.event_retention_max,
            done_lsn: self.snapshot_done_lsn.clone(),
            in_flight: self.snapshot_in_flight.clone(),
            shared: self.shared.clone(),
        };
        // A finished thread is joined here; at most one runs (`snapshot_in_flight`).
        self.join_snapshot_thread();
        match &mut self.snapshots {
            SnapshotRunner::Thread(thread) => {
                let spawned = std::thread::Builder::new()
                    .name("stockd-snapshot".into())
                    .spawn(move || job.run());
                match spawned {
                    Ok(spawned) => *thread = Some(spawned),
                    Err(error) => {
                        tracing::warn!(%error, "cannot start the snapshot thread");
                        self.snapshot_in_flight.store(false, Relaxed);
                    }
                }
            }
            #[cfg(test)]
            SnapshotRunner::Queued(jobs) => jobs.push(job),
        }
    }

    /// At shutdown: a snapshot of everything so the next start replays nothing.
    fn write_snapshot_now(&mut self) {
        // Wait for a snapshot still being written, so the two never race on the files.
        self.join_snapshot_thread();
        if self.records_since_snapshot == 0 || self.shared.failure().is_some() {
            return;
        }
        // Stopping anyway: encoding the live state here costs no request a pause.
        let lsn = self.next_lsn - 1;
        let retained = self.shared.feed.retained();
        let payload = encode_snapshot(&self.state, retained.iter());
        let fs = self.log.storage.fs().clone();
        match Storage::write_snapshot(&*fs, &self.config.data_dir, lsn, &payload) {
            Ok(()) => {
                self.shared.stats.snapshots.fetch_add(1, Relaxed);
                self.log
                    .process(LogJob::RemoveObsolete { snapshot_lsn: lsn });
            }
            Err(error) => tracing::warn!(%error, "final snapshot failed; the log has everything"),
        }
    }
}

/// What the deterministic simulation (`crate::sim`) drives and looks at; test builds only.
#[cfg(test)]
impl Writer {
    /// From now on snapshot builds wait in a queue for the simulation to run them.
    pub(crate) fn queue_snapshots(&mut self) {
        self.snapshots = SnapshotRunner::Queued(Vec::new());
    }

    pub(crate) fn take_snapshot_job(&mut self) -> Option<SnapshotJob> {
        match &mut self.snapshots {
            SnapshotRunner::Queued(jobs) => jobs.pop(),
            SnapshotRunner::Thread(_) => None,
        }
    }

    pub(crate) fn has_snapshot_job(&self) -> bool {
        matches!(&self.snapshots, SnapshotRunner::Queued(jobs) if !jobs.is_empty())
    }

    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    /// The lsn of the last record written (or recovered).
    pub(crate) fn last_lsn(&self) -> u64 {
        self.next_lsn - 1
    }
}

/// A log frame is closed once its encoded records pass this size; far below the storage's
/// record limit, so that no batch (a mass expiry, a restock serving thousands of waiters) can
/// produce a frame the log refuses.
const FRAME_BYTES_TARGET: usize = 4 << 20;

/// The most bytes postcard's varint of a `usize` takes.
const COUNT_BYTES_MAX: usize = 10;

/// Encodes a batch's records as one or more log frames, each a postcard `Vec<Record>`.
///
/// A frame may end after any record except a `Held` with `confirm`: the `Confirmed` that
/// follows it is the same command, and a crash between two frames must never leave half of one
/// command on disk (a hold reserved "with confirm" but only held). Every other record is a
/// consistent state change on its own, and none of the batch was acknowledged before all its
/// frames are synced. `body` is scratch space, empty on return.
fn encode_frames(records: &[stockd_core::Record], body: &mut Vec<u8>) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    body.clear();
    let mut count = 0usize;
    for (index, record) in records.iter().enumerate() {
        encode_record(record, body);
        count += 1;
        let splittable = !matches!(
            record.change,
            stockd_core::Change::Held { confirm: true, .. }
        );
        let last = index + 1 == records.len();
        if last || (splittable && body.len() >= FRAME_BYTES_TARGET) {
            // postcard encodes a Vec as its length (varint) followed by the elements.
            let mut frame = Vec::with_capacity(COUNT_BYTES_MAX + body.len());
            postcard::serialize_with_flavor(&count, Append(&mut frame))
                .expect("serialising to memory cannot fail");
            frame.extend_from_slice(body);
            frames.push(frame);
            body.clear();
            count = 0;
        }
    }
    frames
}

/// The variant numbers postcard gives `Change::Held` and `Change::Confirmed` (their places in
/// the enum; `encoded_by_hand_as_postcard_encodes` fails if they move).
const HELD_VARIANT: u64 = 3;
const CONFIRMED_VARIANT: u64 = 4;

/// Appends `record` to `out` exactly as postcard encodes it. The two records of every reserve
/// with confirm, `Held` and `Confirmed`, are written here without serde's machinery (a
/// proptest holds them to postcard's bytes): about half of the records' encoding cost on the
/// writer. The others go through postcard.
fn encode_record(record: &stockd_core::Record, out: &mut Vec<u8>) {
    use stockd_core::Change;
    match &record.change {
        Change::Held {
            hold_id,
            user,
            items,
            confirm,
            expires_at_ms,
        } => {
            varint(out, record.at_ms);
            varint(out, HELD_VARIANT);
            text(out, hold_id.as_str());
            match user {
                None => out.push(0),
                Some(user) => {
                    out.push(1);
                    text(out, user.as_str());
                }
            }
            varint(out, items.len() as u64);
            for item in items.iter() {
                text(out, item.pool.as_str());
                varint(out, item.qty);
            }
            out.push(u8::from(*confirm));
            varint(out, *expires_at_ms);
        }
        Change::Confirmed { hold_id } => {
            varint(out, record.at_ms);
            varint(out, CONFIRMED_VARIANT);
            text(out, hold_id.as_str());
        }
        _ => postcard::serialize_with_flavor(record, Append(out))
            .expect("serialising to memory cannot fail"),
    }
}

/// postcard's varint: seven bits a byte, least significant first, the top bit set on every
/// byte but the last.
fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// postcard's string: its length in bytes as a varint, then the bytes.
fn text(out: &mut Vec<u8>, text: &str) {
    varint(out, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

/// A postcard output that appends to a vector it borrows. postcard's own `to_extend` goes
/// through `Extend<u8>` a byte slice at a time, and its `AllocVec` cannot take a vector that
/// already has room: this one copies each slice with `extend_from_slice` into the kept buffer
/// (about a third fewer instructions for a batch's records, `scripts/bench-instructions.sh`).
struct Append<'a>(&'a mut Vec<u8>);

impl postcard::ser_flavors::Flavor for Append<'_> {
    type Output = ();

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// Clears an atomic flag when dropped.
struct FlagGuard(Arc<AtomicBool>);

impl Drop for FlagGuard {
    fn drop(&mut self) {
        self.0.store(false, Relaxed);
    }
}

/// Marks the writer gone when dropped, whether it returned or panicked.
struct AliveGuard(Arc<Shared>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.writer_alive.store(false, Relaxed);
    }
}

fn request_len(request: &Request) -> usize {
    match request {
        Request::Execute { commands, .. } => commands.len(),
        _ => 1,
    }
}

/// The log stage, run inline on the writer thread: append, fsync, then release answers in
/// order. Requests that arrive during an fsync queue up and form the next group (group commit).
///
/// A separate log thread, pipelined with the writer, was measured and dropped: it was no
/// faster on small machines, and syncing several writer batches together is exactly what would
/// let a crash leave a hole before valid frames, which recovery must treat as corruption.
pub struct Log {
    storage: Storage,
    shared: Arc<Shared>,
    release: Option<Release>,
}

/// The answers of one group commit, in log order.
type Answers = Vec<(Reply, Result<Vec<Outcome>, BackendError>)>;

/// Hands each group commit's answers to a task on the async runtime, which sends them.
///
/// Every answer sent from the writer thread is a wake-up from outside the runtime: a task
/// pushed on the runtime's shared queue, often a parked worker woken with a syscall, once per
/// request. Sent from a task on the runtime, the wake-ups are local: the answered tasks join
/// that worker's own run queue, in log order, and the writer wakes the runtime once per group
/// commit. Under a crowd it is also fairness: a worker takes a task from the shared queue only
/// once in a while when its own queue is busy, so answers woken from outside waited behind
/// newly arrived requests.
pub struct Release {
    groups: tokio::sync::mpsc::UnboundedSender<Answers>,
}

impl Release {
    /// Spawns the releasing task on `runtime`; it ends when the log is dropped.
    pub fn spawn(runtime: &tokio::runtime::Handle) -> Release {
        let (groups, mut received) = tokio::sync::mpsc::unbounded_channel::<Answers>();
        runtime.spawn(async move {
            while let Some(answers) = received.recv().await {
                for (reply, answer) in answers {
                    let _ = reply.send(answer);
                }
            }
        });
        Release { groups }
    }

    /// Sends the answers through the task; gives them back if the task is gone (its runtime
    /// shutting down).
    fn send(&self, answers: Answers) -> Result<(), Answers> {
        self.groups.send(answers).map_err(|unsent| unsent.0)
    }
}

impl Log {
    pub fn new(storage: Storage, shared: Arc<Shared>) -> Self {
        Log {
            storage,
            shared,
            release: None,
        }
    }

    /// Processes one job; returns true once a shutdown job was handled.
    pub fn process(&mut self, job: LogJob) -> bool {
        let Log {
            storage,
            shared,
            release,
        } = self;
        match job {
            LogJob::Batch {
                payloads,
                first_lsn,
                records,
                last_seq,
                completions,
            } => {
                let mut failed = shared.failure().is_some();
                for (index, payload) in payloads.iter().enumerate() {
                    if failed {
                        break;
                    }
                    let appended = storage.append(payload).map(|lsn| {
                        debug_assert_eq!(lsn, first_lsn + index as u64, "lsn mismatch");
                        shared
                            .stats
                            .wal_bytes
                            .fetch_add(payload.len() as u64, Relaxed);
                    });
                    // One fsync per frame: only the last frame written can then be torn by a
                    // crash, so recovery can tell a torn tail from lost acknowledged data. A
                    // batch needs several frames only past FRAME_BYTES_TARGET (a mass expiry).
                    let synced = appended.and_then(|()| storage.sync());
                    match synced {
                        Ok(fdatasync) => {
                            // Always `Some`: the frame was just appended. Counted and timed in
                            // one observation, so the histogram's count is the syncs counter.
                            if let Some(took) = fdatasync {
                                shared.stats.observe_wal_fsync(took);
                            }
                            shared.durable_lsn.store(storage.durable_lsn(), Relaxed);
                        }
                        Err(error) => {
                            shared.fail(format!("writing the log: {error}"));
                            failed = true;
                        }
                    }
                }
                if !failed {
                    shared.stats.wal_records.fetch_add(records, Relaxed);
                    shared.feed.mark_durable(last_seq);
                }
                let answers: Answers = completions
                    .into_iter()
                    .map(|Completion { reply, outcomes }| {
                        let answer = if failed {
                            Err(BackendError::Unavailable(
                                "the write-ahead log failed; the change is not acknowledged".into(),
                            ))
                        } else {
                            Ok(outcomes)
                        };
                        (reply, answer)
                    })
                    .collect();
                let unsent = match release {
                    Some(release) if !answers.is_empty() => release.send(answers).err(),
                    _ => Some(answers),
                };
                for (reply, answer) in unsent.into_iter().flatten() {
                    let _ = reply.send(answer);
                }
                false
            }
            LogJob::RemoveObsolete { snapshot_lsn } => {
                if let Err(error) = storage.remove_obsolete(snapshot_lsn) {
                    tracing::warn!(%error, "cannot remove obsolete log segments");
                }
                false
            }
            LogJob::Shutdown { done } => {
                let _ = storage.sync();
                let _ = done.send(());
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use stockd_core::{Change, HoldId, HoldItem, PoolId, Record, UserId};

    use super::*;

    fn id() -> impl Strategy<Value = String> {
        "[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
    }

    fn any_record() -> impl Strategy<Value = Record> {
        let held = (
            id(),
            proptest::option::of(id()),
            proptest::collection::vec((id(), any::<u64>()), 1..=64),
            any::<bool>(),
            any::<u64>(),
        )
            .prop_map(
                |(hold_id, user, items, confirm, expires_at_ms)| Change::Held {
                    hold_id: HoldId::parse(&hold_id).unwrap(),
                    user: user.map(|user| UserId::parse(&user).unwrap()),
                    items: items
                        .into_iter()
                        .map(|(pool, qty)| HoldItem {
                            pool: PoolId::parse(&pool).unwrap(),
                            qty,
                        })
                        .collect(),
                    confirm,
                    expires_at_ms,
                },
            );
        let confirmed = id().prop_map(|hold_id| Change::Confirmed {
            hold_id: HoldId::parse(&hold_id).unwrap(),
        });
        let released = id().prop_map(|hold_id| Change::Released {
            hold_id: HoldId::parse(&hold_id).unwrap(),
        });
        (any::<u64>(), prop_oneof![held, confirmed, released])
            .prop_map(|(at_ms, change)| Record { at_ms, change })
    }

    proptest! {
        #[test]
        fn encoded_by_hand_as_postcard_encodes(record in any_record()) {
            let mut out = vec![7];
            encode_record(&record, &mut out);
            let mut want = vec![7];
            want.extend(postcard::to_allocvec(&record).unwrap());
            prop_assert_eq!(out, want);
        }
    }

    fn claim(n: usize) -> [Record; 2] {
        let hold_id = HoldId::parse(&format!("{n:0>120}")).unwrap();
        [
            Record {
                at_ms: 1,
                change: Change::Held {
                    hold_id: hold_id.clone(),
                    user: None,
                    items: vec![HoldItem {
                        pool: PoolId::parse("p").unwrap(),
                        qty: 1,
                    }]
                    .into(),
                    confirm: true,
                    expires_at_ms: 2,
                },
            },
            Record {
                at_ms: 1,
                change: Change::Confirmed { hold_id },
            },
        ]
    }

    #[test]
    fn big_batches_split_into_frames_between_commands() {
        // ~300 bytes per claim: 40,000 claims is about three frames' worth.
        let records: Vec<Record> = (0..40_000).flat_map(claim).collect();
        let frames = encode_frames(&records, &mut Vec::new());
        assert!(frames.len() >= 2, "{} frames", frames.len());
        let mut decoded = Vec::new();
        for frame in &frames {
            assert!(frame.len() < FRAME_BYTES_TARGET + 4096);
            let part: Vec<Record> = postcard::from_bytes(frame).unwrap();
            // No frame ends between a confirm-on-create Held and its Confirmed.
            assert!(matches!(
                part.last().unwrap().change,
                Change::Confirmed { .. }
            ));
            decoded.extend(part);
        }
        assert_eq!(decoded, records);
    }

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

    #[test]
    fn a_small_batch_is_one_frame_and_an_empty_one_none() {
        let records: Vec<Record> = (0..3).flat_map(claim).collect();
        let frames = encode_frames(&records, &mut Vec::new());
        assert_eq!(frames.len(), 1);
        assert_eq!(
            postcard::from_bytes::<Vec<Record>>(&frames[0]).unwrap(),
            records
        );
        assert!(encode_frames(&[], &mut Vec::new()).is_empty());
    }

    type Answer = oneshot::Receiver<Result<Vec<Outcome>, BackendError>>;

    fn answers(count: u64) -> (Answers, Vec<Answer>) {
        (0..count)
            .map(|n| {
                let (reply, answer) = oneshot::channel();
                let outcome = Err(BackendError::Unavailable(n.to_string()));
                ((reply, outcome), answer)
            })
            .unzip()
    }

    fn label(answer: Result<Vec<Outcome>, BackendError>) -> String {
        match answer {
            Err(BackendError::Unavailable(why)) => why,
            other => panic!("unexpected answer {other:?}"),
        }
    }

    /// The log stage times each frame's fdatasync into the histogram whose count is
    /// `wal_syncs_total`: on a disk whose syncs take 5 ms, two frames are two observations of
    /// at least 5 ms each.
    #[test]
    fn the_log_stage_times_every_fsync_into_the_histogram_that_counts_them() {
        use crate::storage::fs::SlowSyncFs;
        use crate::storage::StorageConfig;

        let sync_takes = Duration::from_millis(5);
        let dir = tempfile::tempdir().unwrap();
        let (storage, _) = Storage::open(StorageConfig {
            fs: Arc::new(SlowSyncFs { sync_takes }),
            ..StorageConfig::new(dir.path())
        })
        .unwrap();
        let shared = Arc::new(Shared::new(1_000));
        let mut log = Log::new(storage, Arc::clone(&shared));
        log.process(LogJob::Batch {
            payloads: vec![b"first frame".to_vec(), b"second frame".to_vec()],
            first_lsn: 1,
            records: 2,
            last_seq: 0,
            completions: Vec::new(),
        });
        assert!(shared.failure().is_none());

        let stats = shared.stats.to_backend_stats();
        let syncs = stats
            .counters
            .iter()
            .find(|(name, _)| *name == "wal_syncs_total")
            .unwrap()
            .1;
        let fsync = stats
            .histograms
            .iter()
            .find(|histogram| histogram.name == "wal_fsync_duration_seconds")
            .unwrap();
        assert_eq!(syncs, 2);
        assert_eq!(fsync.count, 2);
        assert!(
            fsync.sum >= 2.0 * sync_takes.as_secs_f64(),
            "sum {} s",
            fsync.sum
        );
        // Nothing at or below 4 ms: each observation is the slow fdatasync's.
        assert_eq!(fsync.buckets[2], (0.004, 0));
    }

    #[test]
    fn the_release_task_answers_each_group_in_order() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let release = Release::spawn(runtime.handle());
        let (first, first_answers) = answers(300);
        let (second, second_answers) = answers(2);
        release.send(first).unwrap();
        release.send(second).unwrap();
        runtime.block_on(async {
            for (n, answer) in first_answers.into_iter().enumerate() {
                assert_eq!(label(answer.await.unwrap()), n.to_string());
            }
            for (n, answer) in second_answers.into_iter().enumerate() {
                assert_eq!(label(answer.await.unwrap()), n.to_string());
            }
        });
    }

    #[test]
    fn answers_come_back_unsent_once_the_runtime_is_gone() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let release = Release::spawn(runtime.handle());
        drop(runtime);
        let (group, mut receivers) = answers(3);
        let unsent = release.send(group).unwrap_err();
        assert_eq!(unsent.len(), 3);
        for (reply, answer) in unsent {
            let _ = reply.send(answer);
        }
        assert_eq!(label(receivers.remove(0).try_recv().unwrap()), "0");
    }
}
