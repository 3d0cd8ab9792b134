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
//! - the **snapshot** thread encodes and writes the state the writer froze for it when all it
//!   had applied was durable (the holds' pages shared copy-on-write), so that restart time
//!   stays bounded and old log segments can go, without the writer ever pausing to encode.
//!
//! This crate must never decide a business rule; it only orders, persists
//! and times what the core decides.

pub mod clock;
mod feed;
mod frame_codec;
mod recovery;
#[cfg(test)]
mod sim;
mod stats;
pub mod storage;
mod writer;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use stockd_core::state::snapshot::{
    SNAPSHOT_FORMAT, SNAPSHOT_FORMAT_V2, SNAPSHOT_FORMAT_V3, SNAPSHOT_FORMAT_V4, SNAPSHOT_FORMAT_V5,
};
use stockd_core::{
    Backend, BackendError, BackendFuture, BackendStats, Command, Error, EventPage, EventsRequest,
    Outcome, StateConfig,
};
use tokio::sync::oneshot;

pub use clock::{Clock, ManualClock, SystemClock};
use feed::Feed;
pub use recovery::memory_estimate;
use recovery::recover;
use stats::Stats;
use storage::{RealFs, StorageError};
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
            event_retention_max: stockd_core::limits::EVENT_RETENTION_MAX_DEFAULT,
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
         {SNAPSHOT_FORMAT_V5:#x}, {SNAPSHOT_FORMAT_V4:#x}, {SNAPSHOT_FORMAT_V3:#x} or \
         {SNAPSHOT_FORMAT_V2:#x} from earlier releases): written by another stockd version"
    )]
    SnapshotFormat { found: u32 },
    #[error("recovered state breaks an invariant: {0}")]
    Invariant(String),
    #[error("cannot start engine thread: {0}")]
    Thread(#[from] std::io::Error),
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

    fn events(&self, request: EventsRequest) -> BackendFuture<'_, Result<EventPage, Error>> {
        let r = request;
        Box::pin(async move {
            let page = Engine::events(self, r.partition, r.after, r.limit, r.wait_ms).await;
            Ok(page)
        })
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
