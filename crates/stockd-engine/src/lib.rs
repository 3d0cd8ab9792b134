//! The embedded backend: the whole stockd state in memory, made durable by a write-ahead log.
//!
//! Two threads and a stage, each with one job:
//! - the **writer** thread owns the [`stockd_core::State`] and is the only code that decides.
//!   It takes every queued request at once (a batch), reads the clock once, applies expiry and
//!   the commands through the core, and hands the batch's records and answers to the log stage.
//!   One ordered writer means no locks around stock arithmetic and no way to interleave two
//!   decisions on the same pool.
//! - the **log** stage, on the writer thread, appends the batch's records to the log and
//!   fsyncs, and only then releases the answers and events. Requests that arrive during the
//!   fsync queue up and form the next batch (group commit). No client ever sees a change, even
//!   in a read, before it is on disk.
//! - the **snapshot** thread builds snapshots by rolling the newest snapshot on disk forward
//!   through the fsync'd log (the same replay recovery does), so that restart time stays
//!   bounded and old log segments can go, without the writer ever pausing to encode its state.
//!
//! This crate must never decide a business rule; it only orders, persists
//! and times what the core decides.

pub mod clock;
mod feed;
mod frame_codec;
#[cfg(test)]
mod sim;
mod stats;
pub mod storage;
mod writer;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use stockd_core::{
    Backend, BackendError, BackendFuture, BackendStats, Command, Error, EventPage, Outcome, State,
    StateConfig,
};
use tokio::sync::oneshot;

pub use clock::{Clock, ManualClock, SystemClock};
use feed::Feed;
use stats::Stats;
use storage::{Fs, RealFs, Storage, StorageConfig, StorageError};
use writer::Request;

/// Settings of the embedded engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    pub state: StateConfig,
    /// Events kept for the feed (in memory and in snapshots); older ones are dropped.
    pub event_retention_max: usize,
    /// A snapshot is taken after this many records since the last one.
    pub snapshot_every_records: u64,
    /// A log segment is closed and a new one started past this size.
    pub segment_bytes_max: u64,
    /// Requests queued for the writer; past it, requests are refused (503) instead of
    /// queueing without bound.
    pub queue_depth_max: usize,
    /// Commands the writer takes into one batch at most.
    pub batch_commands_max: usize,
    /// Longest the writer waits, after a group commit answered many requests, for their
    /// clients' next requests to arrive so that one fsync covers them again (0: never waits).
    /// The wait is also never longer than the last fsync took; see
    /// `writer::group_commit::Gather`.
    pub group_commit_wait_max: std::time::Duration,
}

impl EngineConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        EngineConfig {
            data_dir: data_dir.into(),
            state: StateConfig::default(),
            event_retention_max: 1_000_000,
            snapshot_every_records: 1_000_000,
            segment_bytes_max: 64 * 1024 * 1024,
            queue_depth_max: 65_536,
            batch_commands_max: 8_192,
            group_commit_wait_max: std::time::Duration::from_micros(500),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    #[error("cannot decode {what}: {source}")]
    Decode {
        what: &'static str,
        source: postcard::Error,
    },
    #[error(
        "snapshot payload format {found:#x} is not a supported one ({SNAPSHOT_FORMAT:#x}, or \
         {SNAPSHOT_FORMAT_V4:#x}, {SNAPSHOT_FORMAT_V3:#x} or {SNAPSHOT_FORMAT_V2:#x} from earlier \
         releases): written by another stockd version"
    )]
    SnapshotFormat { found: u32 },
    #[error("recovered state breaks an invariant: {0}")]
    Invariant(String),
    #[error("cannot start engine thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// Tags the payload layout of a snapshot. Change it whenever the serialised shape of the core's
/// state or of an event changes, so an older snapshot is refused clearly instead of being
/// misread (postcard is not self-describing). Distinctive on purpose: an untagged payload
/// starts with a small count. Format 3 added `restock` to events (refund without restock);
/// format 4 added restock request ids to the state and `request_id` to events; format 5 added
/// `created_at_ms` to events (held).
const SNAPSHOT_FORMAT: u32 = 0x5354_4B05;

/// The previous release's format, still read: a data directory it wrote must open. Its state
/// is the current one, its events have no `created_at_ms` ([`EventV4`]).
const SNAPSHOT_FORMAT_V4: u32 = 0x5354_4B04;

/// The format before that, still read: its state has no restock request ids
/// ([`stockd_core::SnapshotV3`]), its events no `request_id` ([`EventV3`]).
const SNAPSHOT_FORMAT_V3: u32 = 0x5354_4B03;

/// The format before that, still read: its events have no `restock` either ([`EventV2`]).
const SNAPSHOT_FORMAT_V2: u32 = 0x5354_4B02;

/// The on-disk shape of a snapshot: the core's durable state plus the retained event feed.
#[derive(serde::Serialize)]
struct SnapshotRef<'a> {
    format: u32,
    state: &'a stockd_core::Snapshot,
    events: Vec<&'a stockd_core::Event>,
}

#[derive(serde::Deserialize)]
struct SnapshotOwned {
    format: u32,
    state: stockd_core::Snapshot,
    events: Vec<stockd_core::Event>,
}

/// A snapshot of an earlier format (2, 3 or 4), as that release wrote it: that format's state
/// and events.
#[derive(serde::Deserialize)]
struct SnapshotOld<S, E> {
    format: u32,
    state: S,
    events: Vec<E>,
}

/// An event as format 4 stored it: every field of [`stockd_core::Event`] up to `request_id`, in
/// the same order (postcard is positional).
#[derive(serde::Serialize, serde::Deserialize)]
struct EventV4 {
    seq: u64,
    at_ms: u64,
    kind: stockd_core::EventKind,
    pool: Option<stockd_core::PoolId>,
    hold_id: Option<stockd_core::HoldId>,
    user: Option<stockd_core::UserId>,
    items: Option<std::sync::Arc<[stockd_core::HoldItem]>>,
    available: Option<u64>,
    total: Option<u64>,
    delta: Option<i64>,
    low_stock_threshold: Option<u64>,
    expires_at_ms: Option<u64>,
    restock: Option<bool>,
    request_id: Option<stockd_core::RequestId>,
}

/// An event as format 3 stored it: every field of [`stockd_core::Event`] up to `restock`, in
/// the same order (postcard is positional).
#[derive(serde::Serialize, serde::Deserialize)]
struct EventV3 {
    seq: u64,
    at_ms: u64,
    kind: stockd_core::EventKind,
    pool: Option<stockd_core::PoolId>,
    hold_id: Option<stockd_core::HoldId>,
    user: Option<stockd_core::UserId>,
    items: Option<std::sync::Arc<[stockd_core::HoldItem]>>,
    available: Option<u64>,
    total: Option<u64>,
    delta: Option<i64>,
    low_stock_threshold: Option<u64>,
    expires_at_ms: Option<u64>,
    restock: Option<bool>,
}

/// An event as format 2 stored it: every field of [`EventV3`] up to `expires_at_ms`.
#[derive(serde::Serialize, serde::Deserialize)]
struct EventV2 {
    seq: u64,
    at_ms: u64,
    kind: stockd_core::EventKind,
    pool: Option<stockd_core::PoolId>,
    hold_id: Option<stockd_core::HoldId>,
    user: Option<stockd_core::UserId>,
    items: Option<std::sync::Arc<[stockd_core::HoldItem]>>,
    available: Option<u64>,
    total: Option<u64>,
    delta: Option<i64>,
    low_stock_threshold: Option<u64>,
    expires_at_ms: Option<u64>,
}

impl From<EventV2> for EventV3 {
    fn from(old: EventV2) -> Self {
        let EventV2 {
            seq,
            at_ms,
            kind,
            pool,
            hold_id,
            user,
            items,
            available,
            total,
            delta,
            low_stock_threshold,
            expires_at_ms,
        } = old;
        EventV3 {
            seq,
            at_ms,
            kind,
            pool,
            hold_id,
            user,
            items,
            available,
            total,
            delta,
            low_stock_threshold,
            expires_at_ms,
            // Before format 3 every refund put its units back.
            restock: (kind == stockd_core::EventKind::Refunded).then_some(true),
        }
    }
}

impl From<EventV2> for stockd_core::Event {
    fn from(old: EventV2) -> Self {
        EventV3::from(old).into()
    }
}

impl From<EventV3> for stockd_core::Event {
    fn from(old: EventV3) -> Self {
        EventV4::from(old).into()
    }
}

impl From<EventV3> for EventV4 {
    fn from(old: EventV3) -> Self {
        let EventV3 {
            seq,
            at_ms,
            kind,
            pool,
            hold_id,
            user,
            items,
            available,
            total,
            delta,
            low_stock_threshold,
            expires_at_ms,
            restock,
        } = old;
        EventV4 {
            seq,
            at_ms,
            kind,
            pool,
            hold_id,
            user,
            items,
            available,
            total,
            delta,
            low_stock_threshold,
            expires_at_ms,
            restock,
            // Before format 4 no restock named a request id.
            request_id: None,
        }
    }
}

impl From<EventV4> for stockd_core::Event {
    fn from(old: EventV4) -> Self {
        let EventV4 {
            seq,
            at_ms,
            kind,
            pool,
            hold_id,
            user,
            items,
            available,
            total,
            delta,
            low_stock_threshold,
            expires_at_ms,
            restock,
            request_id,
        } = old;
        stockd_core::Event {
            seq,
            at_ms,
            kind,
            pool,
            hold_id,
            user,
            items,
            available,
            total,
            delta,
            low_stock_threshold,
            expires_at_ms,
            restock,
            request_id,
            // The engine creates a hold when it emits its `held` event.
            created_at_ms: (kind == stockd_core::EventKind::Held).then_some(at_ms),
        }
    }
}

/// Decodes a snapshot payload of the current format or of format 4, 3 or 2.
fn decode_snapshot(bytes: &[u8]) -> Result<SnapshotOwned, EngineError> {
    // The tag is checked first: an untagged or older payload may not decode at all.
    let format = postcard::take_from_bytes::<u32>(bytes).map(|(format, _)| format);
    let decode_error = |source| EngineError::Decode {
        what: "snapshot",
        source,
    };
    fn upgrade<S, E>(old: SnapshotOld<S, E>) -> SnapshotOwned
    where
        S: Into<stockd_core::Snapshot>,
        E: Into<stockd_core::Event>,
    {
        SnapshotOwned {
            format: SNAPSHOT_FORMAT,
            state: old.state.into(),
            events: old.events.into_iter().map(Into::into).collect(),
        }
    }
    match format {
        Ok(SNAPSHOT_FORMAT) => postcard::from_bytes(bytes).map_err(decode_error),
        Ok(SNAPSHOT_FORMAT_V4) => {
            let old: SnapshotOld<stockd_core::Snapshot, EventV4> =
                postcard::from_bytes(bytes).map_err(decode_error)?;
            debug_assert_eq!(old.format, SNAPSHOT_FORMAT_V4);
            Ok(upgrade(old))
        }
        Ok(SNAPSHOT_FORMAT_V3) => {
            let old: SnapshotOld<stockd_core::SnapshotV3, EventV3> =
                postcard::from_bytes(bytes).map_err(decode_error)?;
            debug_assert_eq!(old.format, SNAPSHOT_FORMAT_V3);
            Ok(upgrade(old))
        }
        Ok(SNAPSHOT_FORMAT_V2) => {
            let old: SnapshotOld<stockd_core::SnapshotV3, EventV2> =
                postcard::from_bytes(bytes).map_err(decode_error)?;
            debug_assert_eq!(old.format, SNAPSHOT_FORMAT_V2);
            Ok(upgrade(old))
        }
        _ => Err(EngineError::SnapshotFormat {
            found: format.unwrap_or(0),
        }),
    }
}

/// Shared between the handle, the writer thread and the snapshot thread.
struct Shared {
    feed: Feed,
    stats: Stats,
    /// Set when the log could not be written: from then on nothing is acknowledged, since the
    /// in-memory state may be ahead of the disk (fail-stop).
    failure: Mutex<Option<String>>,
    /// Every record up to this lsn is fsync'd; snapshots are built from those only.
    durable_lsn: AtomicU64,
    /// Cleared when the writer thread ends, however it ends, so `/readyz` tells the truth.
    writer_alive: AtomicBool,
    /// Requests queued, counted, so that a gathering writer is woken when its group is in.
    arrivals: writer::Arrivals,
}

impl Shared {
    fn new(event_retention_max: usize) -> Shared {
        Shared {
            feed: Feed::new(event_retention_max),
            stats: Stats::default(),
            failure: Mutex::new(None),
            durable_lsn: AtomicU64::new(0),
            writer_alive: AtomicBool::new(true),
            arrivals: writer::Arrivals::default(),
        }
    }

    fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn fail(&self, why: String) {
        tracing::error!(%why, "write-ahead log failed; refusing all further writes");
        let mut failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        failure.get_or_insert(why);
    }
}

/// Joins the engine threads when the last handle goes, so that a dropped engine has released
/// its data directory by the time the drop returns.
struct Threads(Mutex<Vec<JoinHandle<()>>>);

impl Threads {
    fn take(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        for thread in self.take() {
            let _ = thread.join();
        }
    }
}

/// A handle to a running embedded engine. Cheap to clone.
///
/// Dropping the last handle without [`Engine::shutdown`] stops the threads after the work
/// already queued, without a final snapshot (the next start replays the log).
#[derive(Clone)]
pub struct Engine {
    // Field order matters: the request channel must close before `threads` joins the writer,
    // which stops when it sees the channel closed.
    requests: SyncSender<Request>,
    shared: Arc<Shared>,
    stopped: Arc<AtomicBool>,
    threads: Arc<Threads>,
}

impl Engine {
    /// Opens the data directory, recovers snapshot + log, and starts the engine threads.
    pub fn open(config: EngineConfig, clock: Arc<dyn Clock>) -> Result<Engine, EngineError> {
        let queue_depth_max = config.queue_depth_max;
        let mut writer = recover(config, clock, Arc::new(RealFs))?;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            writer.release_through(writer::Release::spawn(&runtime));
        }
        let shared = writer.shared().clone();
        let (request_tx, request_rx) = mpsc::sync_channel(queue_depth_max);
        let threads = vec![std::thread::Builder::new()
            .name("stockd-writer".into())
            .spawn(move || writer.run(request_rx))?];
        Ok(Engine {
            requests: request_tx,
            shared,
            stopped: Arc::new(AtomicBool::new(false)),
            threads: Arc::new(Threads(Mutex::new(threads))),
        })
    }

    fn submit(
        &self,
        commands: Vec<Command>,
    ) -> oneshot::Receiver<Result<Vec<Outcome>, BackendError>> {
        let (reply, answer) = oneshot::channel();
        let request = Request::Execute { commands, reply };
        if let Err(error) = self.requests.try_send(request) {
            let why = match error {
                TrySendError::Full(_) => "overloaded: the writer queue is full",
                TrySendError::Disconnected(_) => "the engine is stopped",
            };
            let (reply, answer) = oneshot::channel();
            let _ = reply.send(Err(BackendError::Unavailable(why.into())));
            return answer;
        }
        self.shared.arrivals.arrived();
        answer
    }

    async fn submit_and_wait(&self, commands: Vec<Command>) -> Result<Vec<Outcome>, BackendError> {
        self.submit(commands).await.unwrap_or_else(|_| {
            Err(BackendError::Unavailable(
                "the engine stopped before answering".into(),
            ))
        })
    }

    /// Applies commands in order, as one request: a command that waits (`wait_ms`) holds the
    /// rest of its batch back in the writer, never other clients' requests.
    pub async fn execute(&self, commands: Vec<Command>) -> Result<Vec<Outcome>, BackendError> {
        self.submit_and_wait(commands).await
    }

    /// The engine's feed is one partition: every event is in partition 0.
    pub const PARTITIONS: u32 = 1;

    /// Durable events of `partition` with seq > `after`; waits up to `wait_ms` for one to
    /// arrive. `EventsExpired` when the retained window no longer reaches back to `after + 1`.
    pub async fn events(
        &self,
        partition: u32,
        after: u64,
        limit: usize,
        wait_ms: u64,
    ) -> Result<EventPage, Error> {
        if partition >= Self::PARTITIONS {
            return Err(Error::invalid(format!(
                "partition must be from 0 to {}, got {partition}",
                Self::PARTITIONS - 1
            )));
        }
        let mut events = self.shared.feed.read(after, limit)?;
        if events.is_empty() && wait_ms > 0 {
            let mut durable = self.shared.feed.subscribe();
            let arrived = durable.wait_for(|&seq| seq > after);
            let _ = tokio::time::timeout(Duration::from_millis(wait_ms), arrived).await;
            events = self.shared.feed.read(after, limit)?;
        }
        let next_after = events.last().map_or(after, |e| e.seq);
        Ok(EventPage { events, next_after })
    }

    /// Wakes the writer so it applies what time did (for tests with a [`ManualClock`]).
    pub fn poke(&self) {
        let _ = self.requests.try_send(Request::Tick);
    }

    pub fn stats(&self) -> BackendStats {
        self.shared.stats.to_backend_stats()
    }

    /// Finishes accepted work, makes it durable, writes a final snapshot and stops the threads.
    pub async fn shutdown(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        let (done, finished) = oneshot::channel();
        if self.requests.send(Request::Shutdown { done }).is_ok() {
            let _ = finished.await;
        }
        for thread in self.threads.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

impl Backend for Engine {
    fn execute(&self, commands: Vec<Command>) -> BackendFuture<'_, Vec<Outcome>> {
        Box::pin(Engine::execute(self, commands))
    }

    fn partitions(&self) -> u32 {
        Self::PARTITIONS
    }

    fn events(
        &self,
        partition: u32,
        after: u64,
        limit: usize,
        wait_ms: u64,
    ) -> BackendFuture<'_, Result<EventPage, Error>> {
        Box::pin(async move { Ok(Engine::events(self, partition, after, limit, wait_ms).await) })
    }

    fn ready(&self) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            match self.shared.failure() {
                Some(why) => Err(BackendError::Unavailable(why)),
                None if self.stopped.load(Ordering::SeqCst) => {
                    Err(BackendError::Unavailable("the engine is stopping".into()))
                }
                None if !self.shared.writer_alive.load(Ordering::SeqCst) => Err(
                    BackendError::Unavailable("the engine writer stopped".into()),
                ),
                None => Ok(()),
            }
        })
    }

    fn stats(&self) -> BackendStats {
        Engine::stats(self)
    }

    fn shutdown(&self) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            Engine::shutdown(self).await;
            Ok(())
        })
    }
}

/// Opens the data directory on `fs`, recovers snapshot + log (the same code whether the disk
/// is real or simulated), and returns the writer ready to serve, not yet running on a thread.
fn recover(
    config: EngineConfig,
    clock: Arc<dyn Clock>,
    fs: Arc<dyn Fs>,
) -> Result<writer::Writer, EngineError> {
    let (storage, recovered) = Storage::open(StorageConfig {
        fs,
        dir: config.data_dir.clone(),
        segment_bytes_max: config.segment_bytes_max,
    })?;
    if recovered.truncated_tail_bytes > 0 {
        tracing::warn!(
            bytes = recovered.truncated_tail_bytes,
            "cut a torn tail off the write-ahead log (a write that was never acknowledged)"
        );
    }
    let shared = Arc::new(Shared::new(config.event_retention_max));
    let (state, events, replayed) = rebuild(&recovered, config.state, config.event_retention_max)?;
    shared.feed.append(events);
    state.check_invariants().map_err(EngineError::Invariant)?;
    shared.feed.mark_durable(state.next_seq() - 1);
    shared
        .stats
        .recovered_records
        .store(replayed, Ordering::Relaxed);
    tracing::info!(
        pools = state.pool_count(),
        holds = state.hold_count(),
        replayed_records = replayed,
        snapshot_lsn = recovered.snapshot_lsn,
        "recovered"
    );

    shared
        .durable_lsn
        .store(storage.last_lsn(), Ordering::Relaxed);
    let next_lsn = storage.last_lsn() + 1;
    let log = writer::Log::new(storage, shared.clone());
    Ok(writer::Writer::new(
        state, config, clock, shared, log, next_lsn, replayed,
    ))
}

fn encode_snapshot<'a>(
    state: &State,
    events: impl Iterator<Item = &'a stockd_core::Event>,
) -> Vec<u8> {
    let snapshot = SnapshotRef {
        format: SNAPSHOT_FORMAT,
        state: state.snapshot(),
        events: events.collect(),
    };
    postcard::to_allocvec(&snapshot).expect("serialising to memory cannot fail")
}

/// Rebuilds the state and the retained feed from a snapshot and the log records after it, by
/// replaying the records through the same `apply_record` that applied them live. Recovery
/// uses it at start; the snapshot builder uses it in the background to roll the last snapshot
/// forward, so the writer never stops to encode its own state.
fn rebuild(
    recovered: &storage::Recovered,
    config: StateConfig,
    event_retention_max: usize,
) -> Result<(State, VecDeque<stockd_core::Event>, u64), EngineError> {
    let mut events = VecDeque::new();
    let mut state = match &recovered.snapshot {
        Some(bytes) => {
            let snapshot = decode_snapshot(bytes)?;
            debug_assert_eq!(snapshot.format, SNAPSHOT_FORMAT);
            events.extend(snapshot.events);
            State::from_snapshot(config, snapshot.state)
        }
        None => State::new(config),
    };
    let mut new_events = Vec::new();
    let mut replayed = 0u64;
    let mut last_at_ms = None;
    for (_lsn, payload) in &recovered.records {
        let records = frame_codec::decode_frame(payload).map_err(|source| EngineError::Decode {
            what: "log record",
            source,
        })?;
        for record in &records {
            state.apply_record(record, &mut new_events);
        }
        last_at_ms = records.last().map(|r| r.at_ms).or(last_at_ms);
        replayed += records.len() as u64;
        events.extend(new_events.drain(..));
        let excess = events.len().saturating_sub(event_retention_max.max(1));
        events.drain(..excess);
    }
    // Forgetting finished holds past retention writes no record, so replay alone would keep
    // every hold ever made; forget them as the live engine did, as of the last record's time.
    if let Some(at_ms) = last_at_ms {
        state.forget_past_retention(at_ms);
    }
    Ok((state, events, replayed))
}

/// Builds a snapshot covering every record up to `up_to_lsn` from the newest snapshot on disk
/// and the durable log after it, and writes it. Runs on the snapshot thread.
fn build_snapshot(
    fs: &dyn Fs,
    dir: &std::path::Path,
    up_to_lsn: u64,
    config: StateConfig,
    event_retention_max: usize,
) -> Result<(), EngineError> {
    let recovered = storage::read_durable(fs, dir, up_to_lsn)?;
    if recovered.snapshot_lsn >= up_to_lsn {
        return Ok(());
    }
    let (state, events, _) = rebuild(&recovered, config, event_retention_max)?;
    let payload = encode_snapshot(&state, events.iter());
    Storage::write_snapshot(fs, dir, up_to_lsn, &payload)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use stockd_core::{Command, HoldId, HoldItem, PoolId, PoolSpec, ReserveRequest};

    use super::*;

    const T0: u64 = 1_700_000_000_000;

    fn reserve(n: usize) -> Command {
        Command::Reserve(ReserveRequest {
            hold_id: HoldId::parse(&format!("h{n}")).unwrap(),
            user: None,
            items: vec![HoldItem {
                pool: PoolId::parse("p").unwrap(),
                qty: 1,
            }]
            .into(),
            ttl_ms: 60_000,
            confirm: false,
            wait_ms: 0,
        })
    }

    /// A pool of 5 units.
    fn put_pool(pool: &PoolId) -> Command {
        Command::PutPool {
            pool: pool.clone(),
            spec: PoolSpec {
                total: 5,
                ..PoolSpec::default()
            },
            if_absent: false,
        }
    }

    /// A state that ran `commands` (each must succeed) at `T0`, and the events they made.
    fn state_after(commands: &[Command]) -> (stockd_core::State, Vec<stockd_core::Event>) {
        let mut state = stockd_core::State::new(StateConfig::default());
        let mut effects = stockd_core::Effects::default();
        for command in commands {
            assert!(matches!(
                state.execute(command.clone(), T0, &mut effects),
                stockd_core::Step::Done(Ok(_))
            ));
        }
        (state, effects.events)
    }

    /// What recovery reads from a data directory holding only this snapshot payload.
    fn from_snapshot(payload: Vec<u8>) -> storage::Recovered {
        storage::Recovered {
            snapshot: Some(payload),
            snapshot_lsn: 1,
            records: Vec::new(),
            truncated_tail_bytes: 0,
        }
    }

    /// Holds in the newest snapshot on disk.
    fn snapshot_holds(dir: &std::path::Path, config: StateConfig) -> usize {
        let recovered = storage::read_durable(&RealFs, dir, 0).unwrap();
        let (state, _, _) = rebuild(&recovered, config, 1000).unwrap();
        state.hold_count()
    }

    /// A data directory of the previous release holds format 2 snapshots: they still open, and
    /// their refunded events read as refunds with restock (the only kind there was).
    #[test]
    fn a_format_2_snapshot_still_opens() {
        let pool = PoolId::parse("p").unwrap();
        let (state, events) = state_after(&[put_pool(&pool), reserve(1)]);
        let old_events: Vec<EventV2> = events
            .iter()
            .map(|event| EventV2 {
                seq: event.seq,
                at_ms: event.at_ms,
                kind: event.kind,
                pool: event.pool.clone(),
                hold_id: event.hold_id.clone(),
                user: event.user.clone(),
                items: event.items.clone(),
                available: event.available,
                total: event.total,
                delta: event.delta,
                low_stock_threshold: event.low_stock_threshold,
                expires_at_ms: event.expires_at_ms,
            })
            .chain(std::iter::once(EventV2 {
                seq: 99,
                at_ms: T0,
                kind: stockd_core::EventKind::Refunded,
                pool: None,
                hold_id: Some(HoldId::parse("h0").unwrap()),
                user: None,
                items: None,
                available: None,
                total: None,
                delta: None,
                low_stock_threshold: None,
                expires_at_ms: Some(T0),
            }))
            .collect();
        let payload = postcard::to_allocvec(&(
            SNAPSHOT_FORMAT_V2,
            stockd_core::SnapshotV3::from(state.snapshot()),
            &old_events,
        ))
        .unwrap();
        let recovered = from_snapshot(payload);
        let (rebuilt, feed, _) = rebuild(&recovered, StateConfig::default(), 10).unwrap();
        assert_eq!(rebuilt.pool_count(), 1);
        assert_eq!(rebuilt.hold_count(), 1);
        assert_eq!(rebuilt.next_seq(), state.next_seq());
        assert_eq!(feed.len(), events.len() + 1);
        assert_eq!(
            feed.iter().map(|e| e.seq).collect::<Vec<_>>()[..events.len()],
            events.iter().map(|e| e.seq).collect::<Vec<_>>()[..]
        );
        assert!(feed.iter().take(events.len()).all(|e| e.restock.is_none()));
        assert_eq!(feed.back().unwrap().restock, Some(true));
    }

    /// A data directory of the release before request ids holds format 3 snapshots: they still
    /// open, with no request id remembered, and their events keep their `restock`.
    #[test]
    fn a_format_3_snapshot_still_opens() {
        let pool = PoolId::parse("p").unwrap();
        let (state, events) = state_after(&[put_pool(&pool), reserve(1)]);
        let old_events: Vec<EventV3> = events
            .iter()
            .map(|event| EventV3 {
                seq: event.seq,
                at_ms: event.at_ms,
                kind: event.kind,
                pool: event.pool.clone(),
                hold_id: event.hold_id.clone(),
                user: event.user.clone(),
                items: event.items.clone(),
                available: event.available,
                total: event.total,
                delta: event.delta,
                low_stock_threshold: event.low_stock_threshold,
                expires_at_ms: event.expires_at_ms,
                restock: None,
            })
            .chain(std::iter::once(EventV3 {
                seq: 99,
                at_ms: T0,
                kind: stockd_core::EventKind::Refunded,
                pool: None,
                hold_id: Some(HoldId::parse("h0").unwrap()),
                user: None,
                items: None,
                available: None,
                total: None,
                delta: None,
                low_stock_threshold: None,
                expires_at_ms: Some(T0),
                restock: Some(false),
            }))
            .collect();
        let payload = postcard::to_allocvec(&(
            SNAPSHOT_FORMAT_V3,
            stockd_core::SnapshotV3::from(state.snapshot()),
            &old_events,
        ))
        .unwrap();
        let recovered = from_snapshot(payload);
        let (mut rebuilt, feed, _) = rebuild(&recovered, StateConfig::default(), 10).unwrap();
        assert_eq!(rebuilt.pool_count(), 1);
        assert_eq!(rebuilt.hold_count(), 1);
        assert_eq!(rebuilt.next_seq(), state.next_seq());
        assert_eq!(feed.len(), events.len() + 1);
        assert_eq!(feed.back().unwrap().restock, Some(false));
        assert!(feed.iter().all(|e| e.request_id.is_none()));
        // No request id is remembered: a restock naming one is a new restock.
        let restock = Command::Restock {
            pool: pool.clone(),
            delta: 2,
            request_id: Some(stockd_core::RequestId::parse("r").unwrap()),
        };
        let mut effects = stockd_core::Effects::default();
        assert!(matches!(
            rebuilt.execute(restock, T0 + 1, &mut effects),
            stockd_core::Step::Done(Ok(_))
        ));
        assert_eq!(effects.records.len(), 1);
        assert_eq!(rebuilt.pool(&pool).unwrap().total, 7);
    }

    /// A data directory of the release before `created_at_ms` on events holds format 4
    /// snapshots: they still open, and their `held` events get the hold's created_at_ms, which
    /// the engine's `held` event's at_ms is.
    #[test]
    fn a_format_4_snapshot_still_opens() {
        let pool = PoolId::parse("p").unwrap();
        let (state, events) = state_after(&[put_pool(&pool), reserve(1)]);
        let old_events: Vec<EventV4> = events
            .iter()
            .map(|event| EventV4 {
                seq: event.seq,
                at_ms: event.at_ms,
                kind: event.kind,
                pool: event.pool.clone(),
                hold_id: event.hold_id.clone(),
                user: event.user.clone(),
                items: event.items.clone(),
                available: event.available,
                total: event.total,
                delta: event.delta,
                low_stock_threshold: event.low_stock_threshold,
                expires_at_ms: event.expires_at_ms,
                restock: event.restock,
                request_id: event.request_id.clone(),
            })
            .collect();
        let payload =
            postcard::to_allocvec(&(SNAPSHOT_FORMAT_V4, state.snapshot(), &old_events)).unwrap();
        let recovered = from_snapshot(payload);
        let (rebuilt, feed, _) = rebuild(&recovered, StateConfig::default(), 10).unwrap();
        assert_eq!(rebuilt.hold_count(), 1);
        assert!(feed.iter().eq(events.iter()));
        assert!(feed
            .iter()
            .any(|e| e.kind == stockd_core::EventKind::Held && e.created_at_ms == Some(e.at_ms)));
    }

    /// A format 4 snapshot keeps the request ids it was written with: a retry after a restart
    /// from it changes nothing.
    #[test]
    fn a_snapshot_keeps_restock_request_ids() {
        let pool = PoolId::parse("p").unwrap();
        let restock = Command::Restock {
            pool: pool.clone(),
            delta: 2,
            request_id: Some(stockd_core::RequestId::parse("r").unwrap()),
        };
        let (state, events) = state_after(&[put_pool(&pool), restock.clone()]);
        let recovered = from_snapshot(encode_snapshot(&state, events.iter()));
        let (mut rebuilt, feed, _) = rebuild(&recovered, StateConfig::default(), 10).unwrap();
        assert_eq!(
            feed.back().unwrap().request_id.as_ref().map(|r| r.as_str()),
            Some("r")
        );
        let mut effects = stockd_core::Effects::default();
        assert!(matches!(
            rebuilt.execute(restock, T0 + 1, &mut effects),
            stockd_core::Step::Done(Ok(_))
        ));
        assert!(effects.records.is_empty());
        assert_eq!(rebuilt.pool(&pool).unwrap().total, 7);
    }

    #[test]
    fn a_snapshot_of_another_format_is_refused_not_misread() {
        let untagged = postcard::to_allocvec(&(
            stockd_core::State::new(StateConfig::default()).snapshot(),
            Vec::<stockd_core::Event>::new(),
        ))
        .unwrap();
        let recovered = from_snapshot(untagged);
        let rebuilt = rebuild(&recovered, StateConfig::default(), 10);
        assert!(matches!(rebuilt, Err(EngineError::SnapshotFormat { .. })));
        let state = stockd_core::State::new(StateConfig::default());
        let tagged = encode_snapshot(&state, std::iter::empty());
        let recovered = storage::Recovered {
            snapshot: Some(tagged),
            ..recovered
        };
        assert!(rebuild(&recovered, StateConfig::default(), 10).is_ok());
    }

    #[tokio::test]
    async fn snapshots_built_by_replay_forget_holds_past_retention() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let mut config = EngineConfig::new(dir.path());
        config.state.hold_retention_ms = 1_000;
        config.snapshot_every_records = 100;
        let engine = Engine::open(config.clone(), clock.clone()).unwrap();
        let put = Command::PutPool {
            pool: PoolId::parse("p").unwrap(),
            spec: PoolSpec {
                total: 1_000,
                ..PoolSpec::default()
            },
            if_absent: false,
        };
        engine.execute(vec![put]).await.unwrap();
        for n in 0..150 {
            let release = Command::Release {
                hold_id: HoldId::parse(&format!("h{n}")).unwrap(),
            };
            engine.execute(vec![reserve(n), release]).await.unwrap();
        }
        // Past retention, more traffic: the next snapshot must not carry the 150 finished holds.
        clock.advance(5_000);
        let snapshots = |engine: &Engine| {
            engine
                .stats()
                .counters
                .iter()
                .find(|(name, _)| *name == "snapshots_total")
                .map_or(0, |(_, value)| *value)
        };
        let before = snapshots(&engine);
        let mut n = 1_000;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // Two more builds: a build already running when the clock moved may finish first, and
        // it only saw records from before; the next one starts after it, with newer records.
        while snapshots(&engine) < before + 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "no snapshot was built"
            );
            engine.execute(vec![reserve(n)]).await.unwrap();
            n += 1;
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        // Dropped, not shut down: no final snapshot, so the newest one is the built one.
        drop(engine);
        let held = n - 1_000;
        assert!(
            snapshot_holds(dir.path(), config.state) <= held,
            "finished holds past retention leaked into the snapshot"
        );
    }
}
