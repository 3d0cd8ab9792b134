//! The Redis backend of stockd: any number of stateless `stockd serve` processes in front of one
//! Redis behave as one server.
//!
//! Every state change is one atomic call into the function library `stockd_v4` (`lua/`), which
//! mirrors stockd-core's rules file for file; the Rust side validates commands
//! (`Command::validate`, before any lookup), frames them, batches concurrent requests into one
//! call per partition ([`dispatch`]), waits for parked requests (woken over pub/sub), reads the
//! feed and sweeps expiries. It must never decide a rule itself: every decision is the library's,
//! and every time (`now`, deadlines) is the Redis server's clock.
//!
//! Fail closed: a Redis that cannot be reached, an answer that was lost, or a Redis that came
//! back with less than this server saw (its dataset marker missing or changed, its event seq
//! lower) is `BackendError::Unavailable` (503), never a guess.

#[cfg(feature = "call-faults")]
pub mod call_faults;
mod checks;
mod cross;
mod dataset;
mod dispatch;
mod fault;
pub mod keys;
pub mod library;
mod link;
mod starting;
mod waits;
pub mod wire;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use redis::Value;
use stockd_core::limits::{CONFIRMED_RETENTION_MS_DEFAULT, HOLD_RETENTION_MS_DEFAULT};
use stockd_core::{
    Backend, BackendError, BackendFuture, BackendStats, Command, Error, Event, EventPage, HoldId,
    HoldView, Outcome, Reply,
};
use tokio::sync::{oneshot, watch};

pub use dataset::{accept, Marker};
pub use link::Target;
pub use starting::StartingBackend;
use wire::{Answer, Op, Route};

/// How often each server sweeps each partition for holds past their deadline (the contract
/// allows 1 s of lag; several servers sweeping only make it shorter).
pub const SWEEP_INTERVAL: Duration = Duration::from_millis(100);
/// Events kept per partition by default (the stream is trimmed to exactly this many).
pub const EVENT_RETENTION_MAX_DEFAULT: usize = 1_000_000;

/// Partitions of a Redis Cluster dataset by default: enough to spread over many primaries.
pub const CLUSTER_PARTITIONS_DEFAULT: u32 = 16;
/// Most partitions a dataset may have.
pub const PARTITIONS_MAX: u32 = 1024;

#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub target: Target,
    /// Event feed partitions: 1 on a single Redis; on a Cluster, fixed when the dataset is made.
    pub partitions: u32,
    pub hold_retention_ms: u64,
    pub confirmed_retention_ms: u64,
    pub event_retention_max: usize,
    /// Test builds only (feature `test-clock`): the time every call uses instead of Redis's
    /// `TIME`, so that model tests can drive time. Production builds cannot set it.
    #[cfg(feature = "test-clock")]
    pub clock: Option<TestClock>,
    /// Test builds only (feature `test-clock`): false stops the background sweeper, so that
    /// expiries happen only when the test calls [`RedisBackend::sweep_now`].
    #[cfg(feature = "test-clock")]
    pub background_sweep: bool,
    /// Test builds only (feature `call-faults`): faults injected around every library call
    /// (see [`call_faults`]). Production builds cannot set it.
    #[cfg(feature = "call-faults")]
    pub call_faults: Option<call_faults::CallFaultsHook>,
}

/// A clock for tests: milliseconds since the epoch, as the test decides.
#[cfg(feature = "test-clock")]
#[derive(Clone)]
pub struct TestClock(pub Arc<dyn Fn() -> u64 + Send + Sync>);

#[cfg(feature = "test-clock")]
impl std::fmt::Debug for TestClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TestClock")
    }
}

impl RedisConfig {
    /// Checks the settings that need no Redis: the partition count (1 on a single Redis,
    /// 1..=PARTITIONS_MAX on a Cluster).
    pub fn validate(&self) -> Result<(), String> {
        let partitions = self.partitions;
        if partitions == 0 || partitions > PARTITIONS_MAX {
            return Err(format!(
                "--redis-partitions must be from 1 to {PARTITIONS_MAX}, got {partitions}"
            ));
        }
        if partitions > 1 && !self.target.is_cluster() {
            return Err(format!(
                "--redis-partitions is {partitions}, but a single Redis has one partition; \
                 partitions are for a Redis Cluster (redis+cluster://...)"
            ));
        }
        Ok(())
    }

    pub fn new(target: Target) -> Self {
        RedisConfig {
            partitions: if target.is_cluster() {
                CLUSTER_PARTITIONS_DEFAULT
            } else {
                1
            },
            target,
            hold_retention_ms: HOLD_RETENTION_MS_DEFAULT,
            confirmed_retention_ms: CONFIRMED_RETENTION_MS_DEFAULT,
            event_retention_max: EVENT_RETENTION_MAX_DEFAULT,
            #[cfg(feature = "test-clock")]
            clock: None,
            #[cfg(feature = "test-clock")]
            background_sweep: true,
            #[cfg(feature = "call-faults")]
            call_faults: None,
        }
    }
}

/// Why the backend could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot reach Redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("{0}")]
    Dataset(String),
    /// A setting of the Redis under which a server must not run (see `checks`).
    #[error("{0}")]
    Config(String),
}

impl StartError {
    /// Whether the start failed only because Redis could not serve yet (not reached, loading,
    /// a Cluster not yet whole): a start to retry, not one to refuse.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, StartError::Redis(error) if link::is_unreachable(error))
    }
}

/// State shared by the backend, its dispatch tasks, its sweeper and its pub/sub listener.
pub(crate) struct Shared {
    config: RedisConfig,
    link: link::Link,
    partitions: u32,
    keys: Vec<keys::PartitionKeys>,
    marker: Mutex<Marker>,
    /// Per partition: the highest event seq this server has seen. Redis answering with less is
    /// a dataset that lost acknowledged changes.
    seq_seen: Vec<AtomicU64>,
    /// Per partition: the highest change counter (`rev`, one per call that changed anything,
    /// evented or not) this server has seen. Redis answering with less lost a change.
    rev_seen: Vec<AtomicU64>,
    /// Per partition: whether the next sweep makes every held part due for its ownership check
    /// (at start, and after adopting a dataset an operator accepted: its homes may have lost
    /// the holds of parts held elsewhere).
    recheck_parts: Vec<AtomicBool>,
    /// Per partition: the latest seq known, for long-polls.
    seq_watch: Vec<watch::Sender<u64>>,
    waits: waits::Waits,
    /// Told when this server adopts a dataset an operator accepted: the pub/sub listener then
    /// moves to the new dataset's wake-up channel.
    marker_adopted: tokio::sync::Notify,
    /// Whether the last call reached Redis and was accepted.
    healthy: AtomicBool,
    queues: OnceLock<Vec<dispatch::Queue>>,
    calls_total: AtomicU64,
    commands_total: AtomicU64,
    /// On a Cluster, calls carry `CALL_PREFIX-N` so that one the client sends twice runs once.
    call_prefix: Option<String>,
    next_call: AtomicU64,
    /// Test builds with a test clock: told after each `sweep_now`, when parked requests look
    /// whether their wait is over by that clock.
    #[cfg(feature = "test-clock")]
    clock_moved: tokio::sync::Notify,
}

impl Shared {
    fn call_args(&self, function: &str, partition: u32) -> redis::Cmd {
        let marker = self.marker.lock().expect("marker lock").text.clone();
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(function)
            .arg(1)
            .arg(self.keys[partition as usize].meta())
            .arg(partition)
            .arg(marker)
            .arg(self.seq_seen[partition as usize].load(Ordering::Acquire));
        cmd
    }

    /// One `LIBRARY_call` carrying `groups`; returns the answers in order.
    async fn call(&self, partition: u32, groups: &[&[Op]]) -> Result<Vec<String>, BackendError> {
        let result = self.call_once(partition, groups).await;
        let result = match result {
            Err(CallError::Refused(why)) if self.adopt_newer_marker(&why).await => {
                self.call_once(partition, groups).await
            }
            other => other,
        };
        match result {
            Ok(answers) => {
                self.healthy.store(true, Ordering::Release);
                Ok(answers)
            }
            Err(error) => {
                self.healthy.store(false, Ordering::Release);
                let error = error.into_backend_error();
                tracing::warn!(partition, %error, "redis call failed");
                Err(error)
            }
        }
    }

    async fn call_once(&self, partition: u32, groups: &[&[Op]]) -> Result<Vec<String>, CallError> {
        let mut cmd = self.call_args(library::FN_CALL, partition);
        let call_id = match &self.call_prefix {
            Some(prefix) => format!(
                "{prefix}-{}",
                self.next_call.fetch_add(1, Ordering::Relaxed)
            ),
            None => String::new(),
        };
        cmd.arg(self.now_override())
            .arg(self.config.hold_retention_ms)
            .arg(self.config.confirmed_retention_ms)
            .arg(self.config.event_retention_max)
            .arg(call_id)
            .arg(self.rev_seen[partition as usize].load(Ordering::Acquire));
        let mut commands = 0;
        for group in groups {
            cmd.arg(group.len());
            for op in *group {
                cmd.arg(op.name).arg(op.args.len()).arg(&op.args);
            }
            commands += group.len();
        }
        self.calls_total.fetch_add(1, Ordering::Relaxed);
        self.commands_total
            .fetch_add(commands as u64, Ordering::Relaxed);
        #[cfg(not(feature = "call-faults"))]
        let value = self.link.fcall(&cmd).await;
        #[cfg(feature = "call-faults")]
        let value = call_faults::fcall(self, partition, groups, &cmd).await;
        let mut values = into_array(value.map_err(CallError::Redis)?)?;
        if values.is_empty() {
            return Err(CallError::Protocol("empty reply".into()));
        }
        let head = values.remove(0);
        let seq = match head {
            Value::Int(seq) => seq as u64,
            other => return Err(refusal(other)),
        };
        let Some(Value::Int(rev)) = (!values.is_empty()).then(|| values.remove(0)) else {
            return Err(CallError::Protocol("no change counter in the reply".into()));
        };
        self.rev_seen[partition as usize].fetch_max(rev as u64, Ordering::AcqRel);
        self.saw_seq(partition, seq);
        let answers = dispatch::answers(values).map_err(|e| CallError::Protocol(e.to_string()))?;
        if answers.len() != commands {
            return Err(CallError::Protocol(format!(
                "{} answers for {commands} commands",
                answers.len()
            )));
        }
        Ok(answers)
    }

    /// The time calls run at: Redis's own clock (empty), unless a test build set a clock.
    fn now_override(&self) -> String {
        #[cfg(feature = "test-clock")]
        if let Some(clock) = &self.config.clock {
            return (clock.0)().to_string();
        }
        String::new()
    }

    fn saw_seq(&self, partition: u32, seq: u64) {
        self.seq_seen[partition as usize].fetch_max(seq, Ordering::AcqRel);
        self.seq_watch[partition as usize].send_if_modified(|known| {
            let newer = seq > *known;
            if newer {
                *known = seq;
            }
            newer
        });
    }

    /// After a refusal: if an operator accepted a dataset (a marker of a later epoch), adopt it
    /// and forget the seqs seen on the old one. Returns whether it adopted one.
    async fn adopt_newer_marker(&self, why: &str) -> bool {
        if why != "dataset_mismatch" {
            return false;
        }
        let Ok(Some(found)) = dataset::read(&self.link, &self.keys[0]).await else {
            return false;
        };
        if found.epoch <= self.marker.lock().expect("marker lock").epoch {
            return false;
        }
        // An accept on a Redis that had lost everything leaves no fleet settings stored: the
        // first server to adopt it stores its own (the fleet's), and a server whose settings are
        // not the dataset's does not serve it.
        if let Err(error) = dataset::check_settings(&self.link, &self.keys, &self.config).await {
            tracing::error!(%error, "not adopting the dataset an operator accepted");
            return false;
        }
        let mut marker = self.marker.lock().expect("marker lock");
        if found.epoch <= marker.epoch {
            return false;
        }
        tracing::warn!(old = %marker.text, new = %found.text, "adopting a dataset accepted by an operator");
        *marker = found;
        self.marker_adopted.notify_one();
        for seen in self.seq_seen.iter().chain(&self.rev_seen) {
            seen.store(0, Ordering::Release);
        }
        for recheck in &self.recheck_parts {
            recheck.store(true, Ordering::Release);
        }
        true
    }

    /// Sends one request's commands to a partition's queue and waits for their answers.
    async fn submit(&self, partition: u32, ops: Vec<Op>) -> Result<Vec<String>, BackendError> {
        let (reply, answer) = oneshot::channel();
        let queue = &self.queues.get().expect("queues started")[partition as usize];
        queue
            .try_send(dispatch::Job { ops, reply })
            .map_err(|_| BackendError::Unavailable("too many requests queued for Redis".into()))?;
        answer
            .await
            .map_err(|_| BackendError::Unavailable("the Redis dispatcher stopped".into()))?
    }

    async fn submit_raw(&self, partition: u32, op: Op) -> Result<String, BackendError> {
        let mut answers = self.submit(partition, vec![op]).await?;
        answers
            .pop()
            .ok_or_else(|| BackendError::Unavailable("no answer".into()))
    }

    async fn submit_one(&self, partition: u32, op: Op) -> Result<Answer, BackendError> {
        decode(&self.submit_raw(partition, op).await?)
    }

    /// The partition a command is sent to first: its pool's, its lock's, or (for a command
    /// naming a hold) the one its hold id hashes to, which knows where the hold lives.
    fn first_partition(&self, command: &Command) -> u32 {
        let id = match command {
            Command::PutPool { pool, .. }
            | Command::Restock { pool, .. }
            | Command::GetPool { pool }
            | Command::DeletePool { pool } => pool.as_str(),
            Command::Reserve(request) => request.hold_id.as_str(),
            Command::Confirm { hold_id }
            | Command::Release { hold_id }
            | Command::Refund { hold_id, .. }
            | Command::Extend { hold_id, .. }
            | Command::GetHold { hold_id } => hold_id.as_str(),
            Command::LockAcquire(request) => request.name.as_str(),
            Command::LockRenew { name, .. } | Command::LockRelease { name, .. } => name.as_str(),
            Command::ListPools { .. } | Command::ListHolds { .. } => return 0,
        };
        keys::partition_of(id, self.partitions)
    }

    /// Whether `command` must first ask every other partition (see
    /// `RedisBackend::restock_seen_elsewhere`): a restock naming a request id, on a dataset of
    /// several partitions.
    fn asks_other_partitions(&self, command: &Command) -> bool {
        self.partitions > 1
            && matches!(
                command,
                Command::Restock {
                    request_id: Some(_),
                    ..
                }
            )
    }

    /// How a command sent to `at` names its route (see `wire::Route`).
    fn route(&self, command: &Command, at: u32, moved: bool) -> Route {
        if self.partitions == 1 {
            return Route::Only;
        }
        let local = match command {
            Command::Reserve(request) => request
                .items
                .iter()
                .all(|item| keys::partition_of(item.pool.as_str(), self.partitions) == at),
            _ => true,
        };
        if moved {
            return Route::Home { local };
        }
        let home = match command {
            Command::Reserve(request) => {
                keys::partition_of(request.items[0].pool.as_str(), self.partitions)
            }
            _ => at,
        };
        Route::Dir { home, local }
    }
}

enum CallError {
    Redis(redis::RedisError),
    Refused(String),
    Protocol(String),
}

impl CallError {
    fn into_backend_error(self) -> BackendError {
        BackendError::Unavailable(match self {
            CallError::Redis(error) => format!("redis: {error}"),
            CallError::Refused(why) => format!(
                "Redis does not hold the dataset this server served ({why}): it may have \
                 restarted empty, been restored from an old backup or failed over to a lagging \
                 replica; check it, then run `stockd redis accept`"
            ),
            CallError::Protocol(what) => format!("redis library protocol: {what}"),
        })
    }
}

fn into_array(value: Value) -> Result<Vec<Value>, CallError> {
    match value {
        Value::Array(values) => Ok(values),
        other => Err(CallError::Protocol(format!(
            "expected an array, got {other:?}"
        ))),
    }
}

fn refusal(value: Value) -> CallError {
    match value {
        Value::BulkString(bytes) => {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            match text.strip_prefix('!') {
                Some(why) => CallError::Refused(why.to_string()),
                None => CallError::Protocol(text),
            }
        }
        other => CallError::Protocol(format!("{other:?}")),
    }
}

fn decode(text: &str) -> Result<Answer, BackendError> {
    wire::decode(text).map_err(|e| BackendError::Unavailable(e.to_string()))
}

/// Runs the steps of a cross-partition hold to the end even if the request that started them goes
/// away (its client disconnected): stopping half-way would leave work for the sweepers, and units
/// held meanwhile.
async fn detached<T: Send + 'static>(
    steps: impl std::future::Future<Output = Result<T, BackendError>> + Send + 'static,
) -> Result<T, BackendError> {
    tokio::spawn(steps).await.map_err(|error| {
        BackendError::Unavailable(format!("cross-partition steps failed: {error}"))
    })?
}

fn unexpected_answer(answer: &Answer) -> BackendError {
    BackendError::Unavailable(format!("unexpected answer from Redis: {answer:?}"))
}

/// The Redis backend. Cheap to share; background tasks stop on [`Backend::shutdown`].
pub struct RedisBackend {
    shared: Arc<Shared>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// What the checks at start found to warn about (`/readyz` shows them).
    warnings: Vec<String>,
}

impl RedisBackend {
    /// Connects, checks the Redis's settings on every primary (`checks`), loads the function
    /// library, checks (or, on an empty Redis, writes) the dataset marker, and starts the
    /// dispatchers, the sweeper and the pub/sub listener.
    pub async fn connect(config: RedisConfig) -> Result<RedisBackend, StartError> {
        let link = link::Link::connect(&config.target).await?;
        let warnings = checks::check(&link).await?;
        for warning in &warnings {
            tracing::warn!("{warning}");
        }
        link.load_library().await?;
        config.validate().map_err(StartError::Dataset)?;
        let partitions = config.partitions;
        let call_prefix = config.target.is_cluster().then(|| {
            use rand::Rng;
            format!("{:016x}", rand::thread_rng().gen::<u64>())
        });
        let keys: Vec<keys::PartitionKeys> = (0..partitions)
            .map(|k| keys::PartitionKeys::new(k, partitions))
            .collect();
        let marker = dataset::init(&link, &keys, &config).await?;
        let shared = Arc::new(Shared {
            config,
            link,
            partitions,
            keys,
            marker: Mutex::new(marker),
            seq_seen: (0..partitions).map(|_| AtomicU64::new(0)).collect(),
            rev_seen: (0..partitions).map(|_| AtomicU64::new(0)).collect(),
            recheck_parts: (0..partitions).map(|_| AtomicBool::new(true)).collect(),
            seq_watch: (0..partitions).map(|_| watch::channel(0).0).collect(),
            waits: waits::Waits::default(),
            marker_adopted: tokio::sync::Notify::new(),
            healthy: AtomicBool::new(true),
            queues: OnceLock::new(),
            calls_total: AtomicU64::new(0),
            commands_total: AtomicU64::new(0),
            call_prefix,
            next_call: AtomicU64::new(0),
            #[cfg(feature = "test-clock")]
            clock_moved: tokio::sync::Notify::new(),
        });
        let mut tasks = Vec::new();
        let mut queues = Vec::new();
        for partition in 0..partitions {
            let (queue, task) = dispatch::start(shared.clone(), partition);
            queues.push(queue);
            tasks.push(task);
        }
        let _ = shared.queues.set(queues);
        #[cfg(feature = "test-clock")]
        let background_sweep = shared.config.background_sweep;
        #[cfg(not(feature = "test-clock"))]
        let background_sweep = true;
        if background_sweep {
            tasks.push(tokio::spawn(sweep(shared.clone())));
        }
        tasks.push(tokio::spawn(waits::listen(shared.clone())));
        Ok(RedisBackend {
            shared,
            tasks: Mutex::new(tasks),
            warnings,
        })
    }

    /// Test builds only (feature `test-clock`): one sweep of every partition, through the code
    /// the background sweeper runs, so that a test decides when time's effects happen; then
    /// parked requests whose wait is over by the test clock end (their final attempt runs after
    /// this returns).
    #[cfg(feature = "test-clock")]
    pub async fn sweep_now(&self) -> Result<(), BackendError> {
        let mut first_error = None;
        for partition in 0..self.shared.partitions {
            if let Err(error) = sweep_partition(&self.shared, partition).await {
                first_error.get_or_insert(error);
            }
        }
        self.shared.clock_moved.notify_waiters();
        first_error.map_or(Ok(()), Err)
    }

    async fn run(&self, commands: Vec<Command>) -> Result<Vec<Outcome>, BackendError> {
        let shared = &self.shared;
        let mut outcomes: Vec<Option<Outcome>> = commands
            .iter()
            .map(|command| command.validate().err().map(Err))
            .collect();
        let mut next = 0;
        while next < commands.len() {
            if outcomes[next].is_some() {
                next += 1;
                continue;
            }
            if let Command::ListPools { .. } = &commands[next] {
                outcomes[next] = Some(self.list_pools(&commands[next]).await?);
                next += 1;
                continue;
            }
            if let Command::ListHolds { .. } = &commands[next] {
                outcomes[next] = Some(self.list_holds(&commands[next]).await?);
                next += 1;
                continue;
            }
            // Only a restock naming a request id on a partitioned dataset asks the other
            // partitions first; every other command goes straight to its group.
            if shared.asks_other_partitions(&commands[next]) {
                if let Some(conflict) = self.restock_seen_elsewhere(&commands[next]).await? {
                    outcomes[next] = Some(Err(conflict));
                    next += 1;
                    continue;
                }
            }
            // The rest of the request, up to the next command that goes elsewhere, in one group.
            let partition = shared.first_partition(&commands[next]);
            let group: Vec<usize> = (next..commands.len())
                .take_while(|&i| {
                    !matches!(
                        commands[i],
                        Command::ListPools { .. } | Command::ListHolds { .. }
                    ) && shared.first_partition(&commands[i]) == partition
                        // Such a restock starts a group of its own, after its check.
                        && (i == next || !shared.asks_other_partitions(&commands[i]))
                })
                .filter(|&i| outcomes[i].is_none())
                .collect();
            let last = *group.last().expect("group has the first command");
            let ops = group
                .iter()
                .map(|&i| wire::encode(&commands[i], shared.route(&commands[i], partition, false)))
                .collect();
            let answers = shared.submit(partition, ops).await?;
            // Test builds only: die after a restock is written, before it is answered, so that
            // a test can retry it on another server.
            #[cfg(feature = "fault-injection")]
            if group
                .iter()
                .any(|&i| matches!(commands[i], Command::Restock { .. }))
            {
                fault::point("restock.after_call");
            }
            let mut resume_at = last + 1;
            for (&i, text) in group.iter().zip(&answers) {
                let answer = decode(text)?;
                // A command the library could not finish in this call (it parked, or the hold
                // lives elsewhere, or spans partitions) ends the group's run: it is finished
                // here, and the commands after it are sent again.
                let finished_here = matches!(
                    answer,
                    Answer::Done(_) | Answer::Decided { .. } | Answer::Settled { .. }
                );
                outcomes[i] = Some(self.resolve(partition, &commands[i], answer).await?);
                if !finished_here {
                    resume_at = i + 1;
                    break;
                }
            }
            next = resume_at;
        }
        Ok(outcomes
            .into_iter()
            .map(|outcome| outcome.expect("every command answered"))
            .collect())
    }

    /// A restock naming a request id, on a dataset of several partitions: the id is remembered
    /// in the partition of the pool it first restocked, so every other partition is asked
    /// whether it remembers the id for another pool (a conflict) before the restock runs in its
    /// own. A retry of the same pool is decided atomically in that pool's partition; only two
    /// first uses of one id on pools of different partitions, at the same moment, can both
    /// pass this check.
    async fn restock_seen_elsewhere(
        &self,
        command: &Command,
    ) -> Result<Option<Error>, BackendError> {
        let Command::Restock {
            pool,
            delta,
            request_id: Some(request_id),
        } = command
        else {
            return Ok(None);
        };
        let shared = &self.shared;
        let own = shared.first_partition(command);
        for partition in (0..shared.partitions).filter(|&k| k != own) {
            let op = Op {
                name: "restock_seen",
                args: vec![request_id.to_string(), pool.to_string(), delta.to_string()],
            };
            match shared.submit_one(partition, op).await? {
                Answer::Unseen => {}
                Answer::Done(Err(conflict)) => return Ok(Some(conflict)),
                other => return Err(unexpected_answer(&other)),
            }
        }
        Ok(None)
    }

    /// Finishes one command from the library's answer to it at `partition`.
    async fn resolve(
        &self,
        partition: u32,
        command: &Command,
        answer: Answer,
    ) -> Result<Outcome, BackendError> {
        let shared = &self.shared;
        let mut partition = partition;
        let mut answer = answer;
        // At most one move: the directory points at the home, and the home never moves on.
        for _ in 0..2 {
            match answer {
                Answer::Done(outcome) => return Ok(outcome),
                Answer::Settled { error, settled } => {
                    let shared = shared.clone();
                    detached(async move {
                        for expired in settled {
                            let (hold, apply) = (&expired.hold, &expired.apply);
                            cross::apply_parts(&shared, partition, hold, apply, &expired.attempt)
                                .await?;
                        }
                        Ok(())
                    })
                    .await?;
                    return Ok(Err(error));
                }
                Answer::Decided {
                    reply,
                    apply,
                    attempt,
                } => {
                    if let Reply::Hold { hold, .. } = &reply {
                        let (shared, hold) = (shared.clone(), hold.clone());
                        detached(async move {
                            cross::apply_parts(&shared, partition, &hold, &apply, &attempt).await
                        })
                        .await?;
                    }
                    return Ok(Ok(reply));
                }
                Answer::Parked(ticket) => return self.wait(partition, ticket, command).await,
                Answer::Cross => {
                    let Command::Reserve(request) = command else {
                        return Err(unexpected_answer(&Answer::Cross));
                    };
                    let (shared, request) = (shared.clone(), request.clone());
                    return detached(
                        async move { cross::reserve(&shared, partition, &request).await },
                    )
                    .await;
                }
                Answer::Precheck(hold) => {
                    let Command::Refund { restock, .. } = command else {
                        return Err(unexpected_answer(&Answer::Precheck(hold)));
                    };
                    let (shared, restock) = (shared.clone(), *restock);
                    return detached(async move {
                        cross::refund(&shared, partition, &hold, restock).await
                    })
                    .await;
                }
                Answer::Moved(home) => {
                    partition = home;
                    let op = wire::encode(command, shared.route(command, home, true));
                    answer = shared.submit_one(home, op).await?;
                }
                other => return Err(unexpected_answer(&other)),
            }
        }
        Err(BackendError::Unavailable(
            "the hold's directory entry points at a partition that does not hold it".into(),
        ))
    }

    /// Waits for a parked command until it is served or its wait is over, then collects its
    /// final answer. A client that goes away cancels its waiter.
    async fn wait(
        &self,
        partition: u32,
        ticket: u64,
        command: &Command,
    ) -> Result<Outcome, BackendError> {
        let (kind, wait_ms) = match command {
            Command::Reserve(request) => ("stock", request.wait_ms),
            Command::LockAcquire(request) => ("lock", request.wait_ms),
            _ => {
                return Err(BackendError::Unavailable(
                    "parked a command that cannot wait".into(),
                ))
            }
        };
        let words = wire::encode(command, Route::Only).args;
        let guard =
            waits::CancelGuard::new(self.shared.clone(), partition, ticket, kind, words.clone());
        let woken = self.shared.waits.register(partition, ticket);
        self.wait_timer(wait_ms, woken).await;
        let mut args = vec![ticket.to_string(), kind.to_string()];
        args.extend(words);
        let answer = self
            .shared
            .submit_one(
                partition,
                Op {
                    name: "wait_end",
                    args,
                },
            )
            .await;
        self.shared.waits.forget(partition, ticket);
        guard.disarm();
        match answer? {
            Answer::Done(outcome) => Ok(outcome),
            other => Err(BackendError::Unavailable(format!(
                "unexpected answer {other:?}"
            ))),
        }
    }

    /// Until `woken` fires or `wait_ms` has passed: by this process's timer, or in test builds
    /// with a test clock, by that clock as of the test's sweeps (`sweep_now`), so that a test
    /// decides when a wait ends as it decides when holds expire.
    async fn wait_timer(&self, wait_ms: u64, woken: impl std::future::Future) {
        #[cfg(feature = "test-clock")]
        if let Some(clock) = &self.shared.config.clock {
            let now = clock.0.clone();
            let deadline = now().saturating_add(wait_ms);
            tokio::pin!(woken);
            loop {
                let moved = self.shared.clock_moved.notified();
                tokio::pin!(moved);
                moved.as_mut().enable();
                if now() >= deadline {
                    return;
                }
                tokio::select! {
                    _ = &mut woken => return,
                    _ = moved => {}
                }
            }
        }
        let _ = tokio::time::timeout(Duration::from_millis(wait_ms), woken).await;
    }

    /// Lists pools across every partition: each gives its page in id order, merged here.
    async fn list_pools(&self, command: &Command) -> Result<Outcome, BackendError> {
        let Command::ListPools { limit, .. } = command else {
            unreachable!("list_pools takes ListPools")
        };
        let mut pools = Vec::new();
        let mut more = false;
        for partition in 0..self.shared.partitions {
            match self
                .shared
                .submit_one(partition, wire::encode(command, Route::Only))
                .await?
            {
                Answer::PoolPage {
                    pools: page,
                    more: page_more,
                } => {
                    pools.extend(page);
                    more |= page_more;
                }
                Answer::Done(Err(error)) => return Ok(Err(error)),
                other => {
                    return Err(BackendError::Unavailable(format!(
                        "unexpected answer {other:?}"
                    )))
                }
            }
        }
        pools.sort_by(|a, b| a.pool.cmp(&b.pool));
        if pools.len() > *limit {
            pools.truncate(*limit);
            more = true;
        }
        let next = if more {
            pools.last().map(|p| p.pool.clone())
        } else {
            None
        };
        Ok(Ok(Reply::PoolList { pools, next }))
    }

    /// Lists holds across every partition: each gives its page in id order with how far it
    /// examined, and the pages are merged here in hold id order. A partition that stopped early
    /// (its page full, or its examination bound reached) has seen nothing past its `next`, so
    /// the merged page ends at the lowest such `next`: no hold is skipped or listed twice.
    async fn list_holds(&self, command: &Command) -> Result<Outcome, BackendError> {
        let Command::ListHolds { limit, .. } = command else {
            unreachable!("list_holds takes ListHolds")
        };
        let mut pages = Vec::with_capacity(self.shared.partitions as usize);
        for partition in 0..self.shared.partitions {
            match self
                .shared
                .submit_one(partition, wire::encode(command, Route::Only))
                .await?
            {
                Answer::HoldPage { holds, next } => pages.push((holds, next)),
                Answer::Done(Err(error)) => return Ok(Err(error)),
                other => {
                    return Err(BackendError::Unavailable(format!(
                        "unexpected answer {other:?}"
                    )))
                }
            }
        }
        let (holds, next) = merge_hold_pages(pages, *limit);
        Ok(Ok(Reply::HoldList { holds, next }))
    }

    async fn read_events(
        &self,
        partition: u32,
        after: u64,
        limit: usize,
    ) -> Result<Result<EventPage, Error>, BackendError> {
        let shared = &self.shared;
        let mut cmd = shared.call_args(library::FN_EVENTS, partition);
        cmd.arg(after).arg(limit);
        let value = shared
            .link
            .fcall(&cmd)
            .await
            .map_err(|e| CallError::Redis(e).into_backend_error())?;
        let mut values = into_array(value).map_err(CallError::into_backend_error)?;
        if values.len() < 2 {
            return Err(refusal(values.pop().unwrap_or(Value::Nil)).into_backend_error());
        }
        let mut rest = values.split_off(2);
        let (Value::Int(seq), Value::Int(oldest)) = (&values[0], &values[1]) else {
            return Err(refusal(values.swap_remove(0)).into_backend_error());
        };
        let (seq, oldest) = (*seq as u64, *oldest as u64);
        shared.saw_seq(partition, seq);
        // `after` may be u64::MAX (nothing can come after it): `after + 1` would wrap.
        if oldest > 0 && after.saturating_add(1) < oldest {
            return Ok(Err(Error::EventsExpired {
                after,
                oldest_seq: oldest,
            }));
        }
        let texts = dispatch::answers(std::mem::take(&mut rest))?;
        let events = texts
            .iter()
            .map(|text| serde_json::from_str::<Event>(text))
            .collect::<Result<Vec<Event>, _>>()
            .map_err(|e| BackendError::Unavailable(format!("unreadable event: {e}")))?;
        let next_after = events.last().map_or(after, |event| event.seq);
        Ok(Ok(EventPage { events, next_after }))
    }
}

impl Backend for RedisBackend {
    fn execute(&self, commands: Vec<Command>) -> BackendFuture<'_, Vec<Outcome>> {
        Box::pin(self.run(commands))
    }

    fn partitions(&self) -> u32 {
        self.shared.partitions
    }

    fn events(
        &self,
        partition: u32,
        after: u64,
        limit: usize,
        wait_ms: u64,
    ) -> BackendFuture<'_, Result<EventPage, Error>> {
        Box::pin(async move {
            let mut newer = self.shared.seq_watch[partition as usize].subscribe();
            let page = self.read_events(partition, after, limit).await?;
            let waiting = matches!(&page, Ok(page) if page.events.is_empty()) && wait_ms > 0;
            if !waiting {
                return Ok(page);
            }
            let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
            let arrived = tokio::time::timeout_at(deadline, async {
                newer.wait_for(|seq| *seq > after).await.is_ok()
            })
            .await
            .unwrap_or(false);
            if arrived {
                self.read_events(partition, after, limit).await
            } else {
                Ok(page)
            }
        })
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    fn ready(&self) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            let shared = &self.shared;
            for partition in 0..shared.partitions {
                shared.call(partition, &[]).await?;
            }
            Ok(())
        })
    }

    fn stats(&self) -> BackendStats {
        let shared = &self.shared;
        BackendStats {
            gauges: vec![
                ("redis_partitions", f64::from(shared.partitions)),
                (
                    "redis_healthy",
                    if shared.healthy.load(Ordering::Acquire) {
                        1.0
                    } else {
                        0.0
                    },
                ),
            ],
            counters: vec![
                (
                    "redis_calls_total",
                    shared.calls_total.load(Ordering::Relaxed),
                ),
                (
                    "redis_commands_total",
                    shared.commands_total.load(Ordering::Relaxed),
                ),
            ],
            ..BackendStats::default()
        }
    }

    fn shutdown(&self) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            for task in self.tasks.lock().expect("tasks lock").drain(..) {
                task.abort();
            }
            Ok(())
        })
    }
}

impl Drop for RedisBackend {
    fn drop(&mut self) {
        for task in self.tasks.lock().expect("tasks lock").drain(..) {
            task.abort();
        }
    }
}

/// Expires holds past their deadline and frees lapsed leases on every partition, a few times a
/// second, with or without traffic. Every server runs one; the library makes each expiry happen
/// exactly once whoever sweeps.
/// Merges partitions' pages of holds (each in hold id order, with the `next` it answered) into
/// one page of at most `limit` holds in hold id order. Every partition has examined all its ids
/// up to its `next` (all of them when `None`), so the merge may only answer holds up to the
/// lowest `next`: past it, a partition may hold ids it has not shown.
fn merge_hold_pages(
    pages: Vec<(Vec<HoldView>, Option<HoldId>)>,
    limit: usize,
) -> (Vec<HoldView>, Option<HoldId>) {
    let frontier = pages.iter().filter_map(|(_, next)| next.clone()).min();
    // A k-way merge of sorted pages: each step takes the least head.
    let mut heads: Vec<std::iter::Peekable<std::vec::IntoIter<HoldView>>> = pages
        .into_iter()
        .map(|(holds, _)| holds.into_iter().peekable())
        .collect();
    let mut holds = Vec::with_capacity(limit);
    loop {
        let least = heads
            .iter_mut()
            .enumerate()
            .filter_map(|(index, head)| head.peek().map(|hold| (index, hold.hold_id.clone())))
            .min_by(|a, b| a.1.cmp(&b.1));
        let Some((index, hold_id)) = least else {
            return (holds, frontier);
        };
        if frontier
            .as_ref()
            .is_some_and(|frontier| hold_id > *frontier)
        {
            return (holds, frontier);
        }
        if holds.len() == limit {
            let next = holds.last().map(|hold: &HoldView| hold.hold_id.clone());
            return (holds, next);
        }
        holds.push(heads[index].next().expect("peeked"));
    }
}

async fn sweep(shared: Arc<Shared>) {
    let mut interval = tokio::time::interval(SWEEP_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        for partition in 0..shared.partitions {
            if let Err(error) = sweep_partition(&shared, partition).await {
                tracing::debug!(partition, %error, "sweep failed");
            }
        }
    }
}

/// One sweep of one partition: calls until nothing more is due (each call expires a bounded
/// number), finishing the cross-partition work the library reports left behind.
async fn sweep_partition(shared: &Shared, partition: u32) -> Result<(), BackendError> {
    let recheck = &shared.recheck_parts[partition as usize];
    loop {
        let rechecking = recheck.swap(false, Ordering::AcqRel);
        let op = Op {
            name: "sweep",
            args: vec![if rechecking { "1" } else { "0" }.to_string()],
        };
        let answer = shared.submit_one(partition, op).await;
        if rechecking && answer.is_err() {
            recheck.store(true, Ordering::Release);
        }
        match answer? {
            Answer::Swept {
                more,
                forward,
                back,
                parts,
            } => {
                let left = cross::LeftBehind {
                    forward,
                    back,
                    parts,
                };
                if !left.is_empty() {
                    let left = cross::finish_left_behind(shared, partition, left);
                    if let Err(error) = left.await {
                        tracing::debug!(partition, %error, "finishing cross-partition work");
                    }
                }
                if !more {
                    return Ok(());
                }
            }
            _ => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(target: &str, partitions: u32) -> RedisConfig {
        let mut config = RedisConfig::new(Target::parse(target).expect("target"));
        config.partitions = partitions;
        config
    }

    #[test]
    fn partitions_at_their_edges() {
        let cluster = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001";
        assert_eq!(
            RedisConfig::new(Target::parse(cluster).unwrap()).partitions,
            16
        );
        assert_eq!(
            RedisConfig::new(Target::parse("redis://127.0.0.1:6379").unwrap()).partitions,
            1
        );
        assert!(config(cluster, 0).validate().unwrap_err().contains("got 0"));
        assert!(config(cluster, 1).validate().is_ok());
        assert!(config(cluster, PARTITIONS_MAX).validate().is_ok());
        assert!(config(cluster, PARTITIONS_MAX + 1)
            .validate()
            .unwrap_err()
            .contains("from 1 to 1024"));
        assert!(config("redis://127.0.0.1:6379", 1).validate().is_ok());
        assert!(config("redis://127.0.0.1:6379", 2)
            .validate()
            .unwrap_err()
            .contains("single Redis"));
    }

    #[test]
    fn backend_urls() {
        assert_eq!(
            Target::parse("redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7000").unwrap(),
            Target::Cluster(vec![
                "redis://:pw@10.0.0.1:7000".to_string(),
                "redis://:pw@10.0.0.2:7000".to_string()
            ])
        );
        assert!(Target::parse("redis+cluster://").is_err());
        assert!(Target::parse("memcached://127.0.0.1:1")
            .unwrap_err()
            .contains("expected embedded"));
    }

    #[test]
    fn passwords_never_show() {
        let target =
            Target::parse("redis+cluster://:s3cret-pw@10.0.0.1:7000,10.0.0.2:7000").unwrap();
        let shown = format!("{target:?}");
        assert!(!shown.contains("s3cret-pw"), "{shown}");
        assert!(shown.contains("redis://***@10.0.0.1:7000"), "{shown}");
        let single = format!(
            "{:?}",
            Target::parse("redis://user:s3cret-pw@h:1/0").unwrap()
        );
        assert!(!single.contains("s3cret-pw"), "{single}");
        let config = format!("{:?}", RedisConfig::new(target));
        assert!(!config.contains("s3cret-pw"), "{config}");
        let refused = Target::parse("redis://:s3cret-pw@h:notaport").unwrap_err();
        assert!(!refused.contains("s3cret-pw"), "{refused}");
        assert_eq!(link::redact("redis://h:1"), "redis://h:1");
    }

    fn hold(id: &str) -> HoldView {
        HoldView {
            hold_id: HoldId::parse(id).unwrap(),
            status: stockd_core::HoldStatus::Held,
            user: None,
            items: Vec::new().into(),
            created_at_ms: 0,
            expires_at_ms: 1_000,
            finished_at_ms: None,
            partition: 0,
        }
    }

    fn ids(holds: &[HoldView]) -> Vec<&str> {
        holds.iter().map(|hold| hold.hold_id.as_str()).collect()
    }

    fn page(list: &[&str], next: Option<&str>) -> (Vec<HoldView>, Option<HoldId>) {
        (
            list.iter().map(|id| hold(id)).collect(),
            next.map(|id| HoldId::parse(id).unwrap()),
        )
    }

    #[test]
    fn hold_pages_merge_in_order_up_to_the_lowest_next() {
        // Both partitions exhausted: everything, in order, up to the limit.
        let (holds, next) = merge_hold_pages(vec![page(&["a", "c"], None), page(&["b"], None)], 10);
        assert_eq!(ids(&holds), ["a", "b", "c"]);
        assert_eq!(next, None);
        // The limit cuts the merged page: next is its last hold.
        let (holds, next) = merge_hold_pages(vec![page(&["a", "c"], None), page(&["b"], None)], 2);
        assert_eq!(ids(&holds), ["a", "b"]);
        assert_eq!(next.unwrap().as_str(), "b");
        // A partition that stopped at "c" has not looked past it: "d" must wait for the next
        // page, which starts after "c".
        let (holds, next) = merge_hold_pages(
            vec![page(&["a", "d"], None), page(&["b", "c"], Some("c"))],
            10,
        );
        assert_eq!(ids(&holds), ["a", "b", "c"]);
        assert_eq!(next.unwrap().as_str(), "c");
        // A partition that examined its bound without a match still holds the page back.
        let (holds, next) =
            merge_hold_pages(vec![page(&["m", "z"], None), page(&[], Some("k"))], 10);
        assert!(holds.is_empty());
        assert_eq!(next.unwrap().as_str(), "k");
    }
}
