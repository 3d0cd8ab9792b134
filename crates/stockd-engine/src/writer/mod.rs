//! The writer thread: batching, and the decision of each batch through the core.
//!
//! The writer is the only code that touches the state. It takes every queued request at once
//! (a batch), reads the clock once, applies expiry and the commands through the core, and hands
//! the batch's records and answers to the log stage. It must never release an answer itself
//! (only the log stage does, after the fsync that covers it) nor decide a rule (the core does).
//!
//! Its other concerns each have a file: `group_commit` (waiting briefly for a group's next
//! requests), `snapshot_job` (snapshot builds off the writer) and `log_stage` (append, fsync,
//! release). The records' encoding is `crate::frame_codec`.

mod group_commit;
mod log_stage;
mod snapshot_job;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stockd_core::{BackendError, Command, Effects, Outcome, State, Step, WaiterId};
use tokio::sync::oneshot;

pub(crate) use self::group_commit::Arrivals;
use self::group_commit::Gather;
pub use self::log_stage::{Log, LogJob, Release};
use self::snapshot_job::SnapshotRunner;
use crate::clock::Clock;
use crate::frame_codec::encode_frames;
use crate::{EngineConfig, Shared};

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
        let in_flight = shared.stats.snapshot_in_flight.clone();
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
            snapshot_in_flight: in_flight,
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
        self.shared.arrivals.set_writer(std::thread::current());
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
        self.shared.feed.append(&effects.events);
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
}

/// What the deterministic simulation (`crate::sim`) looks at; test builds only.
#[cfg(test)]
impl Writer {
    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    /// The lsn of the last record written (or recovered).
    pub(crate) fn last_lsn(&self) -> u64 {
        self.next_lsn - 1
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
