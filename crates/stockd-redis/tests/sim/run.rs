//! One seed at work: its servers (real `RedisBackend`s sharing a test clock, each with the seed's
//! faults), its clients (tokio tasks sending the plan's requests through `Backend::execute` and
//! retrying on 503 on the next server), its steps, and the quiescing at the end.
//!
//! Time is the test clock, in phases: it moves only at a `Time` step, after every client has
//! finished, so that every call of a phase runs at the same `now` whatever order the calls
//! reach Redis in (a call built before a delay and applied after a later one would otherwise
//! take Redis's time backwards). Within a phase, requests are stamped with the phase and a
//! counter (invoke and completion times for the history checker, in microseconds: the phase's
//! millisecond, then the counter), so that one acknowledged before another was sent keeps that
//! order. No server sweeps in the background: sweeps are steps, as concurrent as the rest.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stockd_core::{
    Backend, BackendError, Command, HoldId, HoldItem, Outcome, PoolId, PoolSpec, Reply, RequestId,
    ReserveRequest, UserId,
};
use stockd_redis::call_faults::CallFaultsHook;
use stockd_redis::library::{APPLY_GRACE_MS, PART_CHECK_MS, PENDING_TIMEOUT_MS};
use stockd_redis::{RedisBackend, RedisConfig, Target, TestClock};
use tokio::task::JoinHandle;

use crate::deploy::Raw;
use crate::faults::{ServerFaults, Tally};
use crate::plan::{Plan, Step, START_MS};

/// Sends of one request at most: the first and this many retries after a 503.
const RETRIES: usize = 3;
/// How far each quiescing round moves the clock: past every timing of the cross-partition
/// protocol (the pending timeout, the apply grace and the orphaned parts' check), with room.
pub const QUIESCE_STEP_MS: u64 =
    max(PENDING_TIMEOUT_MS, max(APPLY_GRACE_MS, PART_CHECK_MS)) + 15_000;
const fn max(a: u64, b: u64) -> u64 {
    if a > b {
        a
    } else {
        b
    }
}
/// Quiescing rounds at most (each: the clock moves, every live server sweeps).
const QUIESCE_ROUNDS_MAX: usize = 4;
/// Lines of the run kept to print when a seed fails (all of them with
/// `STOCKD_SIM_TRACE_CALLS=1`, which also traces every library call).
const TRACE_LINES: usize = 600;
const TRACE_LINES_ALL: usize = 1_000_000;

/// The last lines of a run, printed when its seed fails, each with the real time since the
/// seed started.
pub struct Trace {
    started: Instant,
    kept: usize,
    lines: Mutex<VecDeque<String>>,
}

impl Default for Trace {
    fn default() -> Self {
        let all = std::env::var("STOCKD_SIM_TRACE_CALLS").is_ok_and(|v| v == "1");
        Trace {
            started: Instant::now(),
            kept: if all { TRACE_LINES_ALL } else { TRACE_LINES },
            lines: Mutex::new(VecDeque::new()),
        }
    }
}

impl Trace {
    pub fn note(&self, line: String) {
        let at_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        let mut lines = self.lines.lock().expect("trace lock");
        if lines.len() == self.kept {
            lines.pop_front();
        }
        lines.push_back(format!("{at_ms:9.1} ms  {line}"));
    }

    pub fn dump(&self) -> String {
        let lines = self.lines.lock().expect("trace lock");
        lines.iter().map(|line| format!("  {line}\n")).collect()
    }
}

/// The test clock: a phase (milliseconds since the epoch) that moves only between phases, and
/// a counter of the stamps taken within the phase.
pub struct Clock {
    phase_ms: AtomicU64,
    ticks: AtomicU64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            phase_ms: AtomicU64::new(START_MS),
            ticks: AtomicU64::new(0),
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.phase_ms.load(Ordering::SeqCst)
    }

    /// A stamp in microseconds: the phase's millisecond and the next count within it (999 at
    /// most, so that the stamp stays in the phase's millisecond).
    pub fn stamp_us(&self) -> u64 {
        let tick = self.ticks.fetch_add(1, Ordering::SeqCst) + 1;
        self.now_ms() * 1000 + tick.min(999)
    }

    /// Only when nothing runs.
    fn advance(&self, ms: u64) {
        self.phase_ms.fetch_add(ms, Ordering::SeqCst);
        self.ticks.store(0, Ordering::SeqCst);
    }
}

pub struct Server {
    pub number: u64,
    pub backend: RedisBackend,
    pub faults: Option<Arc<ServerFaults>>,
}

impl Server {
    fn is_dead(&self) -> bool {
        self.faults.as_ref().is_some_and(|faults| faults.is_dead())
    }
}

/// One send of a request and what came back.
pub struct Sent {
    pub process: u32,
    pub invoke_us: u64,
    pub complete_us: u64,
    pub command: Command,
    pub result: Result<Outcome, BackendError>,
}

pub struct Run {
    pub plan: Plan,
    target: Target,
    pub clock: Arc<Clock>,
    slots: Mutex<Vec<Arc<Server>>>,
    /// Killed servers, kept until the seed ends (their clients may still hold them).
    retired: Mutex<Vec<Arc<Server>>>,
    next_server: AtomicU64,
    calm: Arc<AtomicBool>,
    pub sent: Mutex<Vec<Sent>>,
    next_process: AtomicU32,
    pub trace: Arc<Trace>,
    pub tally: Arc<Tally>,
}

pub fn show_command(command: &Command) -> String {
    match command {
        Command::PutPool { pool, spec, .. } => format!("put {pool} total {}", spec.total),
        Command::Restock {
            pool,
            delta,
            request_id,
        } => format!(
            "restock {pool} {delta:+} ({})",
            request_id.as_ref().map_or("-", |r| r.as_str())
        ),
        Command::Reserve(request) => {
            let items: Vec<String> = request
                .items
                .iter()
                .map(|item| format!("{}:{}", item.pool, item.qty))
                .collect();
            format!(
                "reserve {} [{}]{}",
                request.hold_id,
                items.join(", "),
                if request.confirm { " confirm" } else { "" }
            )
        }
        Command::Confirm { hold_id } => format!("confirm {hold_id}"),
        Command::Release { hold_id } => format!("release {hold_id}"),
        Command::Refund { hold_id, restock } => format!("refund {hold_id} restock {restock}"),
        Command::GetHold { hold_id } => format!("get hold {hold_id}"),
        Command::GetPool { pool } => format!("get pool {pool}"),
        other => format!("{other:?}"),
    }
}

pub fn show_result(result: &Result<Outcome, BackendError>) -> String {
    match result {
        Err(error) => format!("503 {error}"),
        Ok(Err(error)) => format!("{} ({error})", error.code()),
        Ok(Ok(Reply::Hold { hold, created })) => format!(
            "{} {} created {} expires {}",
            if *created { 201 } else { 200 },
            hold.status.as_str(),
            hold.created_at_ms,
            hold.expires_at_ms
        ),
        Ok(Ok(Reply::Pool { pool, .. })) => format!(
            "200 total {} available {} held {} sold {}",
            pool.total, pool.available, pool.held, pool.sold
        ),
        Ok(Ok(other)) => format!("{other:?}"),
    }
}

fn id<T>(parse: fn(&str) -> Result<T, stockd_core::IdError>, text: &str) -> T {
    parse(text).unwrap_or_else(|_| panic!("{text:?} is a valid id"))
}

impl Run {
    pub fn new(plan: Plan, target: Target) -> Arc<Run> {
        Arc::new(Run {
            plan,
            target,
            clock: Arc::new(Clock::new()),
            slots: Mutex::new(Vec::new()),
            retired: Mutex::new(Vec::new()),
            next_server: AtomicU64::new(0),
            calm: Arc::new(AtomicBool::new(false)),
            sent: Mutex::new(Vec::new()),
            next_process: AtomicU32::new(0),
            trace: Arc::new(Trace::default()),
            tally: Arc::new(Tally::default()),
        })
    }

    /// A new server on the seed's Redis and clock, with the seed's faults unless `faultless`.
    async fn start_server(&self, faultless: bool) -> Result<Arc<Server>, String> {
        let number = self.next_server.fetch_add(1, Ordering::SeqCst);
        let faults = (!faultless).then(|| {
            Arc::new(ServerFaults::new(
                &self.plan,
                number,
                self.calm.clone(),
                self.tally.clone(),
                self.trace.clone(),
            ))
        });
        let clock = self.clock.clone();
        let config = RedisConfig {
            partitions: self.plan.partitions,
            clock: Some(TestClock(Arc::new(move || clock.now_ms()))),
            background_sweep: false,
            call_faults: faults.clone().map(|f| CallFaultsHook(f)),
            ..RedisConfig::new(self.target.clone())
        };
        let backend = RedisBackend::connect(config)
            .await
            .map_err(|e| format!("server {number} did not start: {e}"))?;
        match self.plan.slow_ms(number).filter(|_| !faultless) {
            Some((low, high)) => self.trace.note(format!(
                "server {number} started (slow: every call waits {low} to {high} ms)"
            )),
            None => self.trace.note(format!("server {number} started")),
        }
        Ok(Arc::new(Server {
            number,
            backend,
            faults,
        }))
    }

    fn server_in(&self, slot: usize) -> Arc<Server> {
        let slots = self.slots.lock().expect("slots lock");
        slots[slot % slots.len()].clone()
    }

    pub fn live_servers(&self) -> Vec<Arc<Server>> {
        let slots = self.slots.lock().expect("slots lock");
        slots.iter().filter(|s| !s.is_dead()).cloned().collect()
    }

    pub fn hold_id(&self, hold: usize) -> HoldId {
        id(HoldId::parse, &self.plan.holds[hold].id)
    }

    pub fn pool_id(&self, pool: usize) -> PoolId {
        id(PoolId::parse, &self.plan.pools[pool].name)
    }

    pub fn reserve_command(&self, hold: usize) -> Command {
        let plan = &self.plan.holds[hold];
        Command::Reserve(ReserveRequest {
            hold_id: self.hold_id(hold),
            user: plan.user.as_deref().map(|u| id(UserId::parse, u)),
            items: plan
                .items
                .iter()
                .map(|&(pool, qty)| HoldItem {
                    pool: self.pool_id(pool),
                    qty,
                })
                .collect(),
            ttl_ms: plan.ttl_ms,
            confirm: plan.confirm,
            wait_ms: 0,
        })
    }

    /// Sends `command` once to `server` and records it.
    pub async fn send(
        &self,
        process: u32,
        server: &Server,
        command: &Command,
    ) -> Result<Outcome, BackendError> {
        let invoke_us = self.clock.stamp_us();
        let started = Instant::now();
        let result = server
            .backend
            .execute(vec![command.clone()])
            .await
            .map(|mut outcomes| outcomes.pop().expect("one outcome per command"));
        let complete_us = self.clock.stamp_us();
        self.trace.note(format!(
            "client {process} on server {}: {} -> {} ({} ms)",
            server.number,
            show_command(command),
            show_result(&result),
            started.elapsed().as_millis()
        ));
        self.sent.lock().expect("sent lock").push(Sent {
            process,
            invoke_us,
            complete_us,
            command: command.clone(),
            result: result.clone(),
        });
        result
    }

    pub fn new_process(&self) -> u32 {
        self.next_process.fetch_add(1, Ordering::SeqCst)
    }

    /// A client: sends `command` to the server in `slot`, and on 503 again to the next slot,
    /// up to [`RETRIES`] times. A 503 that says another attempt of the hold is being rolled
    /// back, or that a pool is being changed as a whole, has already been retried for seconds
    /// inside the server (src/cross.rs, src/segments.rs): the client tries once more at most,
    /// so that a seed does not spend its time there.
    async fn client(self: Arc<Self>, command: Command, slot: usize) -> Option<Outcome> {
        let process = self.new_process();
        let mut rolled_back = 0;
        for attempt in 0..=RETRIES {
            let server = self.server_in(slot + attempt);
            match self.send(process, &server, &command).await {
                Ok(outcome) => return Some(outcome),
                // A pool op left by a dead server waits for the sweepers, which the test clock
                // holds back until the next join: as for an attempt being rolled back.
                Err(BackendError::Unavailable(why))
                    if why.contains("rolled back") || why.contains("changed as a whole") =>
                {
                    rolled_back += 1;
                    if rolled_back == 2 {
                        return None;
                    }
                }
                Err(_) => {}
            }
        }
        None
    }

    /// A copy of the hold's reserve, sent `start_ms` from now.
    fn spawn_reserve(self: &Arc<Self>, hold: usize, start_ms: u64, slot: usize) -> JoinHandle<()> {
        let run = self.clone();
        let command = self.reserve_command(hold);
        tokio::spawn(async move {
            if start_ms > 0 {
                tokio::time::sleep(Duration::from_millis(start_ms)).await;
            }
            run.client(command, slot).await;
        })
    }

    /// One client restocking the pool +1, -1, +1, ... `times` times; it stops at a restock that
    /// found no answer (a segmented pool's op left by a dead server holds the pool until the
    /// next join lets the sweepers end it).
    fn spawn_flicker(self: &Arc<Self>, pool: usize, times: usize, slot: usize) -> JoinHandle<()> {
        let run = self.clone();
        tokio::spawn(async move {
            for i in 0..times {
                // No request id: on a Cluster a restock with one first asks every other
                // partition, and a flicker is meant to be quick.
                let command = Command::Restock {
                    pool: run.pool_id(pool),
                    delta: if i % 2 == 0 { 1 } else { -1 },
                    request_id: None,
                };
                if run.clone().client(command, slot).await.is_none() {
                    break;
                }
            }
        })
    }

    fn spawn_client(self: &Arc<Self>, command: Command, slot: usize) -> JoinHandle<()> {
        let run = self.clone();
        tokio::spawn(async move {
            run.client(command, slot).await;
        })
    }

    /// Runs the plan's setup and steps; every client has finished when it returns.
    pub async fn run(self: &Arc<Self>) -> Result<(), String> {
        for _ in 0..self.plan.slots {
            let server = self.start_server(false).await?;
            self.slots.lock().expect("slots lock").push(server);
        }
        // The pools, through server 0 with its faults held off: the workload needs them.
        self.calm.store(true, Ordering::SeqCst);
        for (index, pool) in self.plan.pools.iter().enumerate() {
            let command = Command::PutPool {
                pool: self.pool_id(index),
                spec: PoolSpec {
                    total: pool.total,
                    per_user_limit: pool.per_user_limit,
                    low_stock_threshold: pool.low_stock_threshold,
                    ..PoolSpec::default()
                },
                segments: (pool.segments > 1).then_some(u64::from(pool.segments)),
                if_absent: false,
            };
            let process = self.new_process();
            let server = self.server_in(0);
            match self.send(process, &server, &command).await {
                Ok(Ok(Reply::Pool { created: true, .. })) => {}
                other => return Err(format!("setup: {} -> {other:?}", show_command(&command))),
            }
        }
        self.calm.store(false, Ordering::SeqCst);

        let mut clients = Clients(Vec::new());
        let tasks = &mut clients.0;
        for (index, step) in self.plan.steps.iter().enumerate() {
            self.trace.note(format!("step {index}: {step:?}"));
            match *step {
                Step::Reserve {
                    hold,
                    ref starts_ms,
                    slot,
                } => {
                    for (copy, &start_ms) in starts_ms.iter().enumerate() {
                        tasks.push(self.spawn_reserve(hold, start_ms, slot + copy));
                    }
                }
                Step::Storm {
                    hold,
                    ref starts_ms,
                    pool,
                    times,
                    slot,
                } => {
                    for (copy, &start_ms) in starts_ms.iter().enumerate() {
                        tasks.push(self.spawn_reserve(hold, start_ms, slot + copy));
                    }
                    tasks.push(self.spawn_flicker(pool, times, slot));
                }
                Step::Confirm { hold, slot } => {
                    let hold_id = self.hold_id(hold);
                    tasks.push(self.spawn_client(Command::Confirm { hold_id }, slot));
                }
                Step::Release { hold, slot } => {
                    let hold_id = self.hold_id(hold);
                    tasks.push(self.spawn_client(Command::Release { hold_id }, slot));
                }
                Step::Refund {
                    hold,
                    restock,
                    slot,
                } => {
                    let command = Command::Refund {
                        hold_id: self.hold_id(hold),
                        restock,
                    };
                    tasks.push(self.spawn_client(command, slot));
                }
                Step::Restock { pool, delta, slot } => {
                    let command = Command::Restock {
                        pool: self.pool_id(pool),
                        delta,
                        request_id: Some(id(RequestId::parse, &format!("r{index}"))),
                    };
                    tasks.push(self.spawn_client(command, slot));
                }
                Step::Flicker { pool, times, slot } => {
                    tasks.push(self.spawn_flicker(pool, times, slot));
                }
                Step::GetHold { hold, slot } => {
                    let hold_id = self.hold_id(hold);
                    tasks.push(self.spawn_client(Command::GetHold { hold_id }, slot));
                }
                Step::GetPool { pool, slot } => {
                    let pool = self.pool_id(pool);
                    tasks.push(self.spawn_client(Command::GetPool { pool }, slot));
                }
                Step::Sweep { slot } => {
                    let server = self.server_in(slot);
                    let trace = self.trace.clone();
                    tasks.push(tokio::spawn(async move {
                        let result = server.backend.sweep_now().await;
                        trace.note(format!("server {} swept: {result:?}", server.number));
                    }));
                }
                Step::Kill { slot } => self.kill(slot).await?,
                Step::Pause { ms } => tokio::time::sleep(Duration::from_millis(ms)).await,
                Step::Time { ms } => {
                    join(tasks).await?;
                    self.restart_dead().await?;
                    self.clock.advance(ms);
                    self.trace.note(format!("time moves {ms} ms"));
                }
                Step::Join => {
                    join(tasks).await?;
                    self.restart_dead().await?;
                }
            }
            // Lets the clients just spawned start before the next step.
            tokio::task::yield_now().await;
        }
        join(tasks).await
    }

    /// The server in `slot` dies; a new one takes its place.
    async fn kill(&self, slot: usize) -> Result<(), String> {
        let old = self.server_in(slot);
        if let Some(faults) = &old.faults {
            faults.kill();
        }
        self.tally.kills.fetch_add(1, Ordering::Relaxed);
        self.trace
            .note(format!("server {} killed (slot {slot})", old.number));
        self.replace(slot, old).await
    }

    /// Servers that died at one of their calls are started again (a supervisor restarts a
    /// crashed process), each in its slot, once the clients of the moment are done.
    async fn restart_dead(&self) -> Result<(), String> {
        for slot in 0..self.plan.slots {
            let server = self.server_in(slot);
            if server.is_dead() {
                self.replace(slot, server).await?;
            }
        }
        Ok(())
    }

    async fn replace(&self, slot: usize, old: Arc<Server>) -> Result<(), String> {
        let new = self.start_server(false).await?;
        {
            let mut slots = self.slots.lock().expect("slots lock");
            let len = slots.len();
            slots[slot % len] = new;
        }
        self.retired.lock().expect("retired lock").push(old);
        Ok(())
    }

    /// Faults stop; time moves past every timeout of the cross-partition protocol and every
    /// live server (and a new, faultless one, the judge) sweeps, until nothing is left
    /// unfinished or the rounds are spent. Returns the judge, which the checks read through.
    pub async fn quiesce(&self, raw: &mut Raw) -> Result<Arc<Server>, String> {
        self.calm.store(true, Ordering::SeqCst);
        let judge = self.start_server(true).await?;
        for round in 0..QUIESCE_ROUNDS_MAX {
            self.clock.advance(QUIESCE_STEP_MS);
            // Every live server sweeps at once in the first round (sweepers racing is part of
            // the test); the judge alone finishes what is left.
            let mut sweepers = if round == 0 {
                self.live_servers()
            } else {
                Vec::new()
            };
            sweepers.push(judge.clone());
            let sweeps = sweepers
                .iter()
                .map(|server| async move { (server.number, server.backend.sweep_now().await) });
            for (number, result) in futures_util::future::join_all(sweeps).await {
                if let Err(error) = result {
                    self.trace.note(format!(
                        "quiescing round {round}: server {number} could not sweep: {error}"
                    ));
                }
            }
            if crate::judge::unfinished(self, raw).await?.is_empty() {
                break;
            }
        }
        Ok(judge)
    }

    /// Drops every server (their tasks stop).
    pub async fn shut_down(&self) {
        let servers: Vec<Arc<Server>> = {
            let mut slots = self.slots.lock().expect("slots lock");
            let mut retired = self.retired.lock().expect("retired lock");
            slots.drain(..).chain(retired.drain(..)).collect()
        };
        for server in servers {
            let _ = server.backend.shutdown().await;
        }
    }
}

/// Waits for every task; a task that panicked fails the seed.
/// The client tasks of a run not joined yet: aborted when the run is dropped before it joins
/// them (a seed given up at its timeout), so that none goes on against servers shut down.
struct Clients(Vec<JoinHandle<()>>);

impl Drop for Clients {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

async fn join(tasks: &mut Vec<JoinHandle<()>>) -> Result<(), String> {
    for task in tasks.drain(..) {
        task.await
            .map_err(|e| format!("a client task failed: {e}"))?;
    }
    Ok(())
}
