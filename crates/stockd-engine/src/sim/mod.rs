//! Deterministic simulation of the embedded engine, in the spirit of TigerBeetle's VOPR: the
//! real writer, log stage, snapshot builder and recovery code, run step by step on one thread
//! against a simulated clock and a simulated disk ([`disk`]) that tears writes, loses what was
//! not fsync'd, flips bits, fails calls and crashes at any call, with many clients' requests
//! queued between steps, everything drawn from one seed.
//!
//! After every step each answer is checked against the naive model of stockd-model, as are the
//! state's invariants, every pool and hold and the durable event feed. After every crash,
//! recovery (the engine's own code) must show every acknowledged change; an unacknowledged one
//! may or may not be there, and the model then follows what recovery shows, for good. A
//! recovery may refuse to start only after a bit flip; an answer may be a refusal (503) only
//! after an I/O failure, and never an acknowledgement.
//!
//! A failing seed prints `STOCKD_SIM_SEED=<seed>`, the step and the last steps that ran; the
//! same seed replays the same run. See docs/testing.md for running millions. Test builds only:
//! nothing here is part of the engine.

mod disk;

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use stockd_core::{BackendError, Command, Effects, Event, Outcome};
use stockd_model::{self as model, Memory, Model, Step};
use tokio::sync::oneshot;

use self::disk::{FaultRates, Flip, SimFs, SimRng};
use crate::clock::{Clock, ManualClock};
use crate::storage::StorageError;
use crate::writer::{LogJob, Request, Writer};
use crate::{EngineConfig, EngineError};

/// Where the simulated engine keeps its data, on the simulated disk.
const DATA_DIR: &str = "/sim/data";
/// Bytes of a frame header in the log (lsn, length, checksum): a flip there or in the payload
/// of the last frame is the same damage.
const FRAME_HEADER_BYTES: u64 = 16;
/// Lines of the run kept to print when a seed fails.
const TRACE_LINES: usize = 120;

/// What one seed decides before the run starts.
#[derive(Debug, Clone)]
struct Plan {
    steps: usize,
    rates: FaultRates,
    sector_bytes: usize,
    ordered_metadata: bool,
    crash_per_million: u64,
    arm_per_million: u64,
    flip_per_crash_per_million: u64,
    restart_per_million: u64,
    batch_commands_max: usize,
    snapshot_every_records: u64,
    segment_bytes_max: u64,
    event_retention_max: usize,
}

impl Plan {
    fn new(rng: &mut SimRng) -> Plan {
        // A quarter of the seeds has no failing calls, so that crashes alone get explored too.
        let rates = if rng.below(4) == 0 {
            FaultRates::default()
        } else {
            FaultRates {
                write_per_million: rng.below(15_000),
                sync_per_million: rng.below(15_000),
                read_per_million: rng.below(10_000),
                metadata_per_million: rng.below(5_000),
            }
        };
        Plan {
            steps: 60 + rng.below(240) as usize,
            rates,
            sector_bytes: 1 << (3 + rng.below(7)),
            ordered_metadata: rng.below(2) == 0,
            crash_per_million: 5_000 + rng.below(30_000),
            arm_per_million: rng.below(25_000),
            flip_per_crash_per_million: rng.below(250_000),
            restart_per_million: rng.below(15_000),
            batch_commands_max: 1 + rng.below(12) as usize,
            snapshot_every_records: 2 + rng.below(40),
            segment_bytes_max: [4096, 4096, 8192, 65_536][rng.below(4) as usize],
            event_retention_max: if rng.below(5) == 0 {
                5 + rng.below(60) as usize
            } else {
                1_000_000
            },
        }
    }
}

/// Totals of one run or of many.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub seeds: u64,
    pub steps: u64,
    pub requests: u64,
    pub commands: u64,
    pub batches: u64,
    pub acknowledged: u64,
    pub refused: u64,
    pub power_losses: u64,
    pub process_crashes: u64,
    pub crashes_mid_call: u64,
    pub clean_restarts: u64,
    pub recoveries: u64,
    pub recovery_retries: u64,
    pub snapshots_run: u64,
    pub disk_calls: u64,
    pub faults: u64,
    pub torn_files: u64,
    pub bit_flips: u64,
    /// Recoveries that kept changes nobody was told of (they were synced, or in the page
    /// cache): the model then follows them.
    pub unacknowledged_kept: u64,
    /// Recoveries that refused to start after a bit flip in data they needed (correct).
    pub refusals: u64,
    /// Acknowledged batches lost because a bit flipped in the last frame of the log, which
    /// recovery cannot tell from a torn write (see docs/testing.md).
    pub lost_to_last_frame_flip: u64,
}

impl Totals {
    fn add(&mut self, other: &Totals) {
        let Totals {
            seeds,
            steps,
            requests,
            commands,
            batches,
            acknowledged,
            refused,
            power_losses,
            process_crashes,
            crashes_mid_call,
            clean_restarts,
            recoveries,
            recovery_retries,
            snapshots_run,
            disk_calls,
            faults,
            torn_files,
            bit_flips,
            unacknowledged_kept,
            refusals,
            lost_to_last_frame_flip,
        } = other;
        self.seeds += seeds;
        self.steps += steps;
        self.requests += requests;
        self.commands += commands;
        self.batches += batches;
        self.acknowledged += acknowledged;
        self.refused += refused;
        self.power_losses += power_losses;
        self.process_crashes += process_crashes;
        self.crashes_mid_call += crashes_mid_call;
        self.clean_restarts += clean_restarts;
        self.recoveries += recoveries;
        self.recovery_retries += recovery_retries;
        self.snapshots_run += snapshots_run;
        self.disk_calls += disk_calls;
        self.faults += faults;
        self.torn_files += torn_files;
        self.bit_flips += bit_flips;
        self.unacknowledged_kept += unacknowledged_kept;
        self.refusals += refusals;
        self.lost_to_last_frame_flip += lost_to_last_frame_flip;
    }
}

/// A request a client sent, until its answer came.
struct Sent {
    commands: Vec<Command>,
    answer: oneshot::Receiver<Result<Vec<Outcome>, BackendError>>,
}

/// The model as of the end of one batch: where a recovery that ends at `lsn` must land.
#[derive(Clone)]
struct Candidate {
    lsn: u64,
    model: Model,
    /// Events of the model's history up to then.
    events_len: usize,
    /// Bytes of the batch's last log frame (0 when it wrote none).
    last_frame_bytes: u64,
}

/// How a machine goes down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Crash {
    PowerLoss,
    Process,
    /// Shutdown through the engine's own path: final snapshot, last sync.
    Clean,
}

enum RecoveryEnd {
    Running,
    /// Recovery refused to start after a bit flip: the run ends here, correctly.
    Refused,
}

struct Sim {
    rng: SimRng,
    plan: Plan,
    disk: SimFs,
    clock: Arc<ManualClock>,
    config: EngineConfig,
    writer: Option<Writer>,
    effects: Effects,
    /// Requests sent and not yet taken into a batch, in arrival order.
    queue: VecDeque<(Request, Sent)>,
    /// The client side: what the sequence says to send, and what clients remember of answers.
    steps: VecDeque<Step>,
    memory: Memory,
    /// The model as of the last batch decided.
    model: Model,
    /// Every event of the model's history, in seq order.
    events: Vec<Event>,
    /// Every batch of the history a recovery may land on, oldest first. None is forgotten: a
    /// bit flipped in the last frame takes one acknowledged batch back, and it can happen again
    /// after the next crash (runs are a few hundred batches).
    candidates: Vec<Candidate>,
    /// Every record up to this lsn was acknowledged, or shown to a client some other way.
    acknowledged_lsn: u64,
    /// Events up to this seq were made durable by a log stage that did not fail.
    synced_seq: u64,
    /// Events up to this seq were read from the feed.
    feed_seen_seq: u64,
    /// Steps since the engine stopped acknowledging (it fails stop after an I/O error).
    failed_steps: u64,
    failed_steps_max: u64,
    /// Snapshots the engine was told are written, with their bytes: each must survive a power
    /// loss intact, unless the engine removed it (or a bit flipped in it).
    snapshots_written: Vec<(PathBuf, Vec<u8>)>,
    /// Whether a bit was ever flipped in this run: only then may recovery refuse to start.
    flips_injected: bool,
    /// The bit flipped at the last crash, and whether it was in the newest log segment.
    flip: Option<(Flip, bool)>,
    totals: Totals,
    trace: VecDeque<String>,
    step: u64,
}

fn data_dir() -> PathBuf {
    PathBuf::from(DATA_DIR)
}

fn is_log_or_snapshot(name: &str) -> bool {
    (name.starts_with("wal-") || name.starts_with("snapshot-")) && !name.ends_with(".tmp")
}

/// The command sequence of a seed: stockd-model's generator, driven by a ChaCha stream seeded
/// from the seed, so the same seed always sends the same requests.
fn sequence(seed: u64, steps: usize) -> Vec<Step> {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(b"stockdsm");
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    model::sequences(steps..=steps)
        .new_tree(&mut runner)
        .expect("the sequence strategy never rejects")
        .current()
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = SimRng::new(seed);
        let plan = Plan::new(&mut rng);
        let disk = SimFs::new(
            rng.next_u64(),
            Path::new("/sim"),
            plan.rates,
            plan.sector_bytes,
            plan.ordered_metadata,
        );
        let mut config = EngineConfig::new(data_dir());
        config.state = model::CONFIG;
        config.event_retention_max = plan.event_retention_max;
        config.snapshot_every_records = plan.snapshot_every_records;
        config.segment_bytes_max = plan.segment_bytes_max;
        config.batch_commands_max = plan.batch_commands_max;
        let failed_steps_max = rng.below(4);
        Sim {
            steps: sequence(seed, plan.steps).into(),
            rng,
            plan,
            disk,
            clock: Arc::new(ManualClock::new(model::START_MS)),
            config,
            writer: None,
            effects: Effects::default(),
            queue: VecDeque::new(),
            memory: Memory::default(),
            model: Model::new(model::CONFIG),
            events: Vec::new(),
            candidates: vec![Candidate {
                lsn: 0,
                model: Model::new(model::CONFIG),
                events_len: 0,
                last_frame_bytes: 0,
            }],
            acknowledged_lsn: 0,
            synced_seq: 0,
            feed_seen_seq: 0,
            failed_steps: 0,
            failed_steps_max,
            snapshots_written: Vec::new(),
            flips_injected: false,
            flip: None,
            totals: Totals {
                seeds: 1,
                ..Totals::default()
            },
            trace: VecDeque::new(),
            step: 0,
        }
    }

    fn note(&mut self, line: String) {
        if self.trace.len() == TRACE_LINES {
            self.trace.pop_front();
        }
        self.trace.push_back(format!("step {}: {line}", self.step));
    }

    fn writer(&mut self) -> &mut Writer {
        self.writer.as_mut().expect("the engine is running")
    }

    /// Runs the seed to its end; `Err` describes the first thing that went wrong.
    fn run(&mut self) -> Result<(), String> {
        if let RecoveryEnd::Refused = self.recover()? {
            return Err("a fresh disk refused to start".to_string());
        }
        while !self.steps.is_empty() || !self.queue.is_empty() {
            self.step += 1;
            self.totals.steps += 1;
            let roll = self.rng.below(1_000_000);
            let plan = &self.plan;
            if roll < plan.crash_per_million {
                let crash = if self.rng.below(3) == 0 {
                    Crash::Process
                } else {
                    Crash::PowerLoss
                };
                if let RecoveryEnd::Refused = self.crash(crash)? {
                    return Ok(());
                }
            } else if roll < plan.crash_per_million + plan.restart_per_million {
                if let RecoveryEnd::Refused = self.clean_restart()? {
                    return Ok(());
                }
            } else if roll
                < plan.crash_per_million + plan.restart_per_million + plan.arm_per_million
            {
                let calls = self.rng.below(40);
                self.note(format!("a crash is armed to strike in {calls} disk calls"));
                self.disk.arm_crash(calls);
            } else {
                match self.rng.below(100) {
                    0..=44 => self.send()?,
                    45..=89 => self.writer_step()?,
                    _ => self.run_snapshot_job(),
                }
            }
            if self.disk.is_dead() {
                if let RecoveryEnd::Refused = self.crash(Crash::PowerLoss)? {
                    return Ok(());
                }
            } else if self.failed() {
                // Fail-stop: a few more steps show every answer is a refusal, then a restart.
                self.failed_steps += 1;
                if self.failed_steps > self.failed_steps_max {
                    if let RecoveryEnd::Refused = self.crash(Crash::PowerLoss)? {
                        return Ok(());
                    }
                }
            }
        }
        // The last word: whatever was acknowledged survives a power loss at the very end.
        self.crash(Crash::PowerLoss)?;
        Ok(())
    }

    fn failed(&self) -> bool {
        self.writer
            .as_ref()
            .is_some_and(|writer| writer.shared().failure().is_some())
    }

    /// Clients send the next one to four requests of the sequence (time passes where the
    /// sequence says so).
    fn send(&mut self) -> Result<(), String> {
        for _ in 0..=self.rng.below(4) {
            let Some(step) = self.steps.pop_front() else {
                return Ok(());
            };
            match step {
                Step::Advance { ms, .. } => {
                    self.clock.advance(ms);
                    self.note(format!("time passes {ms} ms"));
                }
                Step::Commands(ops) => {
                    let now_ms = self.clock.now_ms();
                    let commands: Vec<Command> = ops
                        .iter()
                        .map(|op| op.command(now_ms, &self.memory))
                        .collect();
                    for command in &commands {
                        self.memory.note(command, None);
                    }
                    self.totals.requests += 1;
                    self.totals.commands += commands.len() as u64;
                    let (reply, answer) = oneshot::channel();
                    let request = Request::Execute {
                        commands: commands.clone(),
                        reply,
                    };
                    self.note(format!("a client sends {commands:?}"));
                    self.queue.push_back((request, Sent { commands, answer }));
                }
            }
        }
        Ok(())
    }

    /// One batch of the writer: decide (the model judges every answer), log, then check what
    /// the clients got and everything the engine shows.
    fn writer_step(&mut self) -> Result<(), String> {
        let now_ms = self.clock.now_ms();
        let mut batch = Vec::new();
        let mut sent = Vec::new();
        if let Some((first, first_sent)) = self.queue.pop_front() {
            sent.push(first_sent);
            let queue = &mut self.queue;
            let writer = self.writer.as_mut().expect("the engine is running");
            writer.fill_batch(&mut batch, first, || {
                let (request, next_sent) = queue.pop_front()?;
                sent.push(next_sent);
                Some(request)
            });
        }
        self.totals.batches += 1;
        let failed_before = self.failed();
        self.model.tick(now_ms);
        let writer = self.writer.as_mut().expect("the engine is running");
        let (job, shutdown) = writer.decide_batch(&mut batch, &mut self.effects);
        assert!(shutdown.is_none(), "only clean_restart asks to stop");
        let last_lsn = writer.last_lsn();
        let (decided, last_frame_bytes) = match &job {
            Some(LogJob::Batch {
                completions,
                payloads,
                ..
            }) => (
                completions
                    .iter()
                    .map(|completion| completion.outcomes.clone())
                    .collect::<Vec<_>>(),
                payloads
                    .last()
                    .map_or(0, |payload| FRAME_HEADER_BYTES + payload.len() as u64),
            ),
            _ => (Vec::new(), 0),
        };
        let expected_decisions = if failed_before { 0 } else { sent.len() };
        if decided.len() != expected_decisions {
            return Err(format!(
                "{} requests decided out of {} (failed before: {failed_before})",
                decided.len(),
                sent.len()
            ));
        }
        for (request, outcomes) in sent.iter().zip(&decided) {
            if outcomes.len() != request.commands.len() {
                return Err(format!(
                    "{} outcomes for {} commands",
                    outcomes.len(),
                    request.commands.len()
                ));
            }
            for (command, outcome) in request.commands.iter().zip(outcomes) {
                model::check_outcome(&mut self.model, command, outcome, now_ms)
                    .map_err(|why| format!("the engine decided against the model: {why}"))?;
            }
        }
        self.events.extend(self.model.take_events());
        self.push_candidate(last_lsn, last_frame_bytes);

        let failed_calls_before = self.disk.counts().failed_calls;
        let logged = job.is_some();
        if let Some(job) = job {
            self.writer().log_batch(job);
        }
        let faulted = self.disk.counts().failed_calls > failed_calls_before;
        if logged && !faulted && !failed_before {
            if self.failed() {
                return Err("the log stage failed without a failing disk call".to_string());
            }
            self.synced_seq = self.events.len() as u64;
        }
        self.note(format!(
            "writer batch of {} requests at {now_ms} ms up to lsn {last_lsn}{}",
            sent.len(),
            if faulted { ", a disk call failed" } else { "" }
        ));

        for (request, outcomes) in sent.into_iter().zip(
            decided
                .into_iter()
                .map(Some)
                .chain(std::iter::repeat_with(|| None)),
        ) {
            let Sent {
                commands,
                mut answer,
            } = request;
            match answer.try_recv() {
                Ok(Ok(got)) => {
                    if failed_before || faulted {
                        return Err(format!(
                            "acknowledged {commands:?} although the log failed \
                             (failed before the batch: {failed_before}, a disk call of this \
                             batch failed: {faulted})"
                        ));
                    }
                    if Some(&got) != outcomes.as_ref() {
                        return Err(format!(
                            "answered {got:?} to {commands:?}, decided {outcomes:?}"
                        ));
                    }
                    for (command, outcome) in commands.iter().zip(&got) {
                        self.memory.note(command, Some(outcome));
                    }
                    self.acknowledged_lsn = self.acknowledged_lsn.max(last_lsn);
                    self.totals.acknowledged += 1;
                }
                Ok(Err(BackendError::Unavailable(why))) => {
                    if !self.failed() {
                        return Err(format!(
                            "refused {commands:?} ({why}) although nothing failed"
                        ));
                    }
                    self.totals.refused += 1;
                }
                Err(error) => {
                    return Err(format!(
                        "no answer to {commands:?} after its batch: {error}"
                    ))
                }
            }
        }
        self.check_engine(now_ms)
    }

    /// Everything the engine shows must be the model's: invariants, pools, holds, the feed.
    fn check_engine(&mut self, now_ms: u64) -> Result<(), String> {
        let writer = self.writer.as_ref().expect("the engine is running");
        let state = writer.state();
        state
            .check_invariants()
            .map_err(|broken| format!("invariant broken: {broken}"))?;
        let pools: Vec<_> = state.pools().collect();
        for pool in &pools {
            if pool.total != pool.available + pool.held + pool.sold {
                return Err(format!(
                    "pool breaks total = available + held + sold: {pool:?}"
                ));
            }
        }
        let expected = self.model.pool_views();
        if pools != expected {
            return Err(format!(
                "pools differ\n  model  {expected:?}\n  engine {pools:?}"
            ));
        }
        for name in model::HOLDS {
            let id = model::hold_id(name);
            if !self.model.settled(&id, now_ms) {
                continue;
            }
            let expected = self.model.hold_view(&id, now_ms);
            let got = state.hold_view(&id);
            if got != expected {
                return Err(format!(
                    "hold {name} differs\n  model  {expected:?}\n  engine {got:?}"
                ));
            }
        }
        self.check_feed()
    }

    /// The feed shows only durable events, each the model's, and never one a failed log stage
    /// left unsynced. What a client read from it counts as acknowledged.
    fn check_feed(&mut self) -> Result<(), String> {
        let feed = &self.writer.as_ref().expect("running").shared().feed;
        let durable_seq = feed.durable_seq();
        if durable_seq > self.synced_seq {
            return Err(format!(
                "the feed calls events up to seq {durable_seq} durable, but only {} were synced",
                self.synced_seq
            ));
        }
        let mut after = self.feed_seen_seq;
        let read = match feed.read(after, usize::MAX) {
            Ok(read) => read,
            Err(stockd_core::Error::EventsExpired { oldest_seq, .. }) => {
                // Events a small retention dropped within one batch; read on from the oldest.
                after = oldest_seq - 1;
                feed.read(after, usize::MAX)
                    .map_err(|error| format!("reading the feed after {after}: {error}"))?
            }
            Err(error) => return Err(format!("reading the feed after {after}: {error}")),
        };
        if read.last().is_some_and(|event| event.seq > durable_seq) {
            return Err("the feed showed an event beyond its durable watermark".to_string());
        }
        let expected = self
            .events
            .get(after as usize..after as usize + read.len())
            .ok_or_else(|| format!("the feed shows {} events after {after}", read.len()))?;
        if read != expected {
            return Err(format!(
                "feed differs after seq {after}\n  model  {expected:?}\n  engine {read:?}"
            ));
        }
        if let Some(last) = read.last() {
            self.feed_seen_seq = last.seq;
            // A client saw these events: the batch that made the last one is acknowledged.
            if let Some(candidate) = self
                .candidates
                .iter()
                .find(|candidate| candidate.events_len as u64 >= last.seq)
            {
                self.acknowledged_lsn = self.acknowledged_lsn.max(candidate.lsn);
            }
        }
        Ok(())
    }

    /// Notes the model as of the batch just decided, which ended the log at `lsn`.
    fn push_candidate(&mut self, lsn: u64, frame_bytes: u64) {
        // A batch that wrote no frame leaves the last frame the one before it wrote.
        let last_frame_bytes = match self.candidates.last() {
            Some(previous) if previous.lsn == lsn => previous.last_frame_bytes,
            _ => frame_bytes,
        };
        self.candidates.push(Candidate {
            lsn,
            model: self.model.clone(),
            events_len: self.events.len(),
            last_frame_bytes,
        });
    }

    fn run_snapshot_job(&mut self) {
        if let Some(job) = self.writer().take_snapshot_job() {
            let up_to_lsn = job.up_to_lsn;
            let written_before = self.snapshots_reported();
            job.run();
            self.totals.snapshots_run += 1;
            self.note(format!("snapshot build up to lsn {up_to_lsn} ran"));
            if self.snapshots_reported() > written_before {
                self.promise_snapshot(up_to_lsn);
            }
        }
    }

    /// Snapshots the engine reports written (its `snapshots_total`).
    fn snapshots_reported(&self) -> u64 {
        let shared = self.writer.as_ref().expect("running").shared();
        shared
            .stats
            .snapshots
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The engine said the snapshot at `lsn` is written: its bytes now must be what any later
    /// power loss leaves (a build that found a newer snapshot on disk writes nothing).
    fn promise_snapshot(&mut self, lsn: u64) {
        let path = data_dir().join(format!("snapshot-{lsn:020}.snap"));
        if let Some(bytes) = self.disk.contents(&path) {
            self.note(format!("the engine reports {} written", path.display()));
            self.snapshots_written
                .retain(|(written, _)| *written != path);
            self.snapshots_written.push((path, bytes));
        }
    }

    /// The machine loses power. Every snapshot the engine said was written must still be
    /// there afterwards, byte for byte, unless the engine removed it itself.
    fn power_loss(&mut self) -> Result<(), String> {
        self.totals.power_losses += 1;
        // Removed on purpose: whether the removal survives does not matter.
        let disk = &self.disk;
        self.snapshots_written
            .retain(|(path, _)| !disk.was_removed(path));
        self.disk.power_loss();
        for (path, bytes) in &self.snapshots_written {
            match self.disk.contents(path) {
                Some(kept) if kept == *bytes => {}
                Some(_) => {
                    return Err(format!(
                        "{} was reported written but a power loss changed it",
                        path.display()
                    ))
                }
                None => {
                    return Err(format!(
                        "{} was reported written but a power loss lost it",
                        path.display()
                    ))
                }
            }
        }
        Ok(())
    }

    fn clean_restart(&mut self) -> Result<RecoveryEnd, String> {
        self.note("clean shutdown".to_string());
        self.totals.clean_restarts += 1;
        // Requests still queued are answered first, as the engine's channel would deliver
        // them ahead of the shutdown.
        while !self.queue.is_empty() {
            self.writer_step()?;
        }
        let (done, _finished) = oneshot::channel();
        let writer = self.writer();
        let mut batch = vec![Request::Shutdown { done }];
        let mut effects = Effects::default();
        let (job, shutdown) = writer.decide_batch(&mut batch, &mut effects);
        if let Some(job) = job {
            // What time did at the last moment (expiries) is logged like any batch.
            let last_lsn = writer.last_lsn();
            let last_frame_bytes = match &job {
                LogJob::Batch { payloads, .. } => payloads
                    .last()
                    .map_or(0, |payload| FRAME_HEADER_BYTES + payload.len() as u64),
                _ => 0,
            };
            self.model.tick(self.clock.now_ms());
            self.events.extend(self.model.take_events());
            self.push_candidate(last_lsn, last_frame_bytes);
            self.writer().log_batch(job);
        }
        let done = shutdown.ok_or("a shutdown request did not stop the writer")?;
        // The engine lets a build in flight finish first; run it here, so that what it wrote
        // is told apart from the final snapshot.
        while self.writer().has_snapshot_job() {
            self.run_snapshot_job();
        }
        let written_before = self.snapshots_reported();
        let last_lsn = self.writer().last_lsn();
        self.writer().finish(done);
        if self.snapshots_reported() > written_before {
            self.promise_snapshot(last_lsn);
        }
        self.crash(Crash::Clean)
    }

    /// The machine (or the process) goes down, then the engine recovers from what the disk
    /// kept; what it shows must hold every acknowledged change.
    fn crash(&mut self, crash: Crash) -> Result<RecoveryEnd, String> {
        // An armed crash that struck took the machine down, whatever else was going on.
        let crash = if self.disk.is_dead() {
            self.totals.crashes_mid_call += 1;
            self.note("the armed crash struck in the middle of a disk call".to_string());
            Crash::PowerLoss
        } else {
            crash
        };
        // Everything in memory goes: the writer, its queued snapshot builds, requests not yet
        // answered (their clients see a dropped connection: nothing was promised).
        self.writer = None;
        self.queue.clear();
        match crash {
            Crash::PowerLoss => self.power_loss()?,
            Crash::Process => {
                self.totals.process_crashes += 1;
                self.disk.process_crash();
            }
            Crash::Clean => self.disk.process_crash(),
        }
        self.flip = None;
        if crash != Crash::Clean && self.rng.chance(self.plan.flip_per_crash_per_million) {
            if let Some(flip) = self.disk.flip_bit(&is_log_or_snapshot) {
                let name = flip.path.file_name().and_then(|name| name.to_str());
                let newest_segment = self
                    .disk
                    .durable_names(&data_dir())
                    .into_iter()
                    .filter(|name| name.starts_with("wal-"))
                    .max();
                let in_newest_segment = name.is_some() && name == newest_segment.as_deref();
                self.note(format!(
                    "a bit flipped in {} at byte {} of {}",
                    flip.path.display(),
                    flip.offset,
                    flip.len_bytes
                ));
                self.flips_injected = true;
                self.snapshots_written
                    .retain(|(written, _)| *written != flip.path);
                self.flip = Some((flip, in_newest_segment));
            }
        }
        self.note(format!("{crash:?}; recovering"));
        self.recover()
    }

    /// Opens the engine with its own recovery code, retrying after I/O errors as an operator
    /// would, and checks what it recovered against the acknowledged history.
    fn recover(&mut self) -> Result<RecoveryEnd, String> {
        // A crash may also strike during recovery.
        if self.rng.below(4) == 0 {
            self.disk.arm_crash(self.rng.below(20));
        }
        let mut attempt = 0;
        let writer = loop {
            if self.disk.is_dead() {
                self.totals.crashes_mid_call += 1;
                self.power_loss()?;
            }
            // After a few failed attempts the disk stops failing calls, as a replaced one would.
            self.disk.set_faults_enabled(attempt < 3);
            let failed_calls_before = self.disk.counts().failed_calls;
            let opened = crate::recovery::recover(
                self.config.clone(),
                self.clock.clone(),
                Arc::new(self.disk.clone()),
            );
            self.disk.set_faults_enabled(true);
            match opened {
                Ok(writer) => break writer,
                Err(EngineError::Storage(StorageError::Io(error)))
                    if self.disk.counts().failed_calls > failed_calls_before =>
                {
                    self.note(format!("recovery failed on a disk call ({error}); again"));
                    self.totals.recovery_retries += 1;
                    attempt += 1;
                }
                Err(EngineError::Storage(StorageError::Corrupt { .. })) if self.flips_injected => {
                    self.note("recovery refused to start after a bit flip".to_string());
                    self.totals.refusals += 1;
                    return Ok(RecoveryEnd::Refused);
                }
                Err(error) => return Err(format!("recovery failed: {error}")),
            }
        };
        self.totals.recoveries += 1;
        let mut writer = writer;
        writer.queue_snapshots();
        let recovered_lsn = writer.last_lsn();
        self.writer = Some(writer);
        self.failed_steps = 0;
        self.failed_steps_max = self.rng.below(4);

        if recovered_lsn < self.acknowledged_lsn {
            if !self.lost_to_last_frame_flip(recovered_lsn) {
                return Err(format!(
                    "acknowledged changes lost: recovered up to lsn {recovered_lsn}, \
                     acknowledged up to lsn {}",
                    self.acknowledged_lsn
                ));
            }
            self.note("the last frame was lost to a bit flip (a known limit)".to_string());
            self.totals.lost_to_last_frame_flip += 1;
        } else if recovered_lsn > self.acknowledged_lsn {
            self.totals.unacknowledged_kept += 1;
        }
        let landed = self
            .candidates
            .iter()
            .rposition(|candidate| candidate.lsn == recovered_lsn)
            .ok_or_else(|| {
                format!(
                    "recovered up to lsn {recovered_lsn}, where no batch ended (acknowledged up \
                     to {})",
                    self.acknowledged_lsn
                )
            })?;
        self.note(format!(
            "recovered up to lsn {recovered_lsn} (acknowledged up to {})",
            self.acknowledged_lsn
        ));
        // The model follows what recovery shows, for good: clients may see it from now on.
        self.candidates.truncate(landed + 1);
        let candidate = self.candidates[landed].clone();
        self.model = candidate.model;
        self.events.truncate(candidate.events_len);
        self.acknowledged_lsn = recovered_lsn;
        self.synced_seq = self.events.len() as u64;
        self.feed_seen_seq = self.events.len() as u64;

        let feed = &self.writer.as_ref().expect("running").shared().feed;
        let retained: Vec<Event> = (feed.retained().iter())
            .map(|bytes| {
                stockd_core::state::snapshot::decode_event(bytes).expect("the feed's own encoding")
            })
            .collect();
        let window = self.events.len().min(self.config.event_retention_max);
        let expected = &self.events[self.events.len() - window..];
        if retained != expected {
            return Err(format!(
                "the recovered feed differs\n  model  {expected:?}\n  engine {retained:?}"
            ));
        }
        // What time did while the engine was down happens in its first batch; check all then.
        self.writer_step()?;
        Ok(RecoveryEnd::Running)
    }

    /// Whether losing the acknowledged batch after `recovered_lsn` is the one loss the log
    /// format cannot prevent: a bit flipped in the last acknowledged frame, with nothing valid
    /// after it, looks exactly like a torn write of a frame that was never acknowledged, and
    /// recovery cuts it. Recovery cut the newest segment where that frame began, so the flip
    /// must lie between that length and the frame's end.
    fn lost_to_last_frame_flip(&self, recovered_lsn: u64) -> bool {
        let Some((flip, in_newest_segment)) = &self.flip else {
            return false;
        };
        let Some(lost) = self
            .candidates
            .iter()
            .rev()
            .find(|candidate| candidate.lsn == self.acknowledged_lsn)
        else {
            return false;
        };
        let Some(frame_start) = self.disk.len_bytes(&flip.path) else {
            return false;
        };
        recovered_lsn + 1 == self.acknowledged_lsn
            && *in_newest_segment
            && (frame_start..frame_start + lost.last_frame_bytes).contains(&flip.offset)
    }
}

/// Runs one seed; on failure, the message names the seed, the step and the last steps.
pub fn run_seed(seed: u64) -> Result<Totals, String> {
    let mut sim = Sim::new(seed);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.run()));
    let why = match outcome {
        Ok(Ok(())) => {
            let counts = sim.disk.counts();
            sim.totals.disk_calls = counts.calls;
            sim.totals.faults = counts.faults;
            sim.totals.torn_files = counts.torn_files;
            sim.totals.bit_flips = counts.bit_flips;
            return Ok(sim.totals);
        }
        Ok(Err(why)) => why,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!("panicked: {message}")
        }
    };
    let mut report = format!(
        "STOCKD_SIM_SEED={seed} failed at step {}: {why}\nplan: {:?}\nlast steps:\n",
        sim.step, sim.plan
    );
    for line in &sim.trace {
        let _ = writeln!(report, "  {line}");
    }
    let _ = writeln!(
        report,
        "durable names: /sim {:?}, {DATA_DIR} {:?}",
        sim.disk.durable_names(Path::new("/sim")),
        sim.disk.durable_names(&data_dir())
    );
    let _ = writeln!(
        report,
        "replay: STOCKD_SIM_SEED={seed} cargo test -p stockd-engine --lib sim::"
    );
    Err(report)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// Seeds the bounded run covers in `cargo test` (a debug build): well under a minute on a
    /// shared two-core machine.
    const SEEDS_DEFAULT: u64 = 2_000;

    /// Seeds that once found a bug, kept so that it stays fixed (see docs/testing.md).
    /// - 1, 7: the data directory's own name was never fsync'd in its parent, so a power loss
    ///   could take the whole directory and every acknowledged change with it.
    /// - 1000281: a crash while a new segment's header was being written left it half
    ///   written (garbage where it was never synced), and the engine refused to start forever,
    ///   though no record was ever in that segment.
    /// - 1007083: a bug of the simulation itself (a snapshot build the shutdown let finish
    ///   was taken for the final snapshot); kept for the path it drives.
    const REGRESSION_SEEDS: &[u64] = &[1, 7, 1_000_281, 1_007_083];

    fn env_u64(name: &str) -> Option<u64> {
        let value = std::env::var(name).ok()?;
        Some(
            value
                .parse()
                .unwrap_or_else(|_| panic!("{name} must be a number, got {value:?}")),
        )
    }

    fn print_totals(label: &str, totals: &Totals) {
        eprintln!("{label}: {totals:#?}");
    }

    /// The bounded run (seeds 0..300 unless `STOCKD_SIM_SEEDS` / `STOCKD_SIM_SEED_START` /
    /// `STOCKD_SIM_SECONDS` say otherwise), or the one seed `STOCKD_SIM_SEED` names.
    #[test]
    fn simulated_seeds() {
        if let Some(seed) = env_u64("STOCKD_SIM_SEED") {
            match run_seed(seed) {
                Ok(totals) => print_totals(&format!("seed {seed}"), &totals),
                Err(report) => panic!("{report}"),
            }
            return;
        }
        let start = env_u64("STOCKD_SIM_SEED_START").unwrap_or(0);
        let count = env_u64("STOCKD_SIM_SEEDS").unwrap_or(SEEDS_DEFAULT);
        let deadline = env_u64("STOCKD_SIM_SECONDS")
            .map(|seconds| Instant::now() + Duration::from_secs(seconds));
        let started = Instant::now();
        let progress = |totals: &Totals| {
            let line = format!(
                "{} seeds from {start} in {:?}",
                totals.seeds,
                started.elapsed()
            );
            print_totals(&line, totals);
        };
        let mut totals = Totals::default();
        for seed in start..start.saturating_add(count) {
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                break;
            }
            match run_seed(seed) {
                Ok(run) => totals.add(&run),
                Err(report) => panic!("{report}"),
            }
            if totals.seeds % 10_000 == 0 {
                progress(&totals);
            }
        }
        progress(&totals);
        // The bounded run must reach every kind of trouble, or it proves less than it claims.
        if totals.seeds >= SEEDS_DEFAULT {
            let reached = [
                ("acknowledged requests", totals.acknowledged),
                ("refused requests", totals.refused),
                ("power losses", totals.power_losses),
                ("process crashes", totals.process_crashes),
                (
                    "crashes in the middle of a disk call",
                    totals.crashes_mid_call,
                ),
                ("clean restarts", totals.clean_restarts),
                ("recovery retries", totals.recovery_retries),
                ("snapshots", totals.snapshots_run),
                ("failed disk calls", totals.faults),
                ("torn files", totals.torn_files),
                ("bit flips", totals.bit_flips),
                ("unacknowledged changes kept", totals.unacknowledged_kept),
                ("refusals to start", totals.refusals),
            ];
            for (what, count) in reached {
                assert!(count > 0, "no {what} in {} seeds", totals.seeds);
            }
        }
    }

    #[test]
    fn regression_seeds() {
        for &seed in REGRESSION_SEEDS {
            if let Err(report) = run_seed(seed) {
                panic!("{report}");
            }
        }
    }

    #[test]
    fn a_seed_replays_exactly() {
        for seed in [7, 1_000_003] {
            let first = run_seed(seed).unwrap_or_else(|report| panic!("{report}"));
            let second = run_seed(seed).unwrap_or_else(|report| panic!("{report}"));
            assert_eq!(first, second, "seed {seed} ran two different ways");
            assert!(first.disk_calls > 0 && first.acknowledged > 0);
        }
    }
}
