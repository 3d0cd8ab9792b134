//! The backend itself: [`RedisBackend::connect`] (everything a start does, in order: reach
//! Redis, check its settings, load the library, check or make the dataset, start the tasks),
//! the `Backend` trait over the other modules, and its tasks' end. It must never serve before
//! every check of a start has passed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use stockd_core::{
    Backend, BackendFuture, BackendStats, Command, Error, EventPage, EventsRequest, Outcome,
};
use tokio::sync::watch;

use crate::shared::Shared;
use crate::sweeper::sweep;
use crate::{checks, dataset, dispatch, keys, link, waits, RedisConfig};

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

/// The Redis backend. Cheap to share; background tasks stop on [`Backend::shutdown`].
pub struct RedisBackend {
    pub(crate) shared: Arc<Shared>,
    pub(crate) tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// What the checks at start found to warn about (`/readyz` shows them).
    pub(crate) warnings: Vec<String>,
}

impl RedisBackend {
    /// Connects, checks the Redis's settings on every primary (`checks`), loads the function
    /// library, checks (or, on an empty Redis, writes) the dataset marker, and starts the
    /// dispatchers, the sweeper and the pub/sub listener.
    pub async fn connect(config: RedisConfig) -> Result<RedisBackend, StartError> {
        let replicas = link::Replicas {
            count: config.replicas,
            timeout_ms: config.replica_timeout_ms,
        };
        let link = link::Link::connect(&config.target, Some(replicas)).await?;
        let warnings = checks::check(&link, config.replicas).await?;
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
        let proposed = dataset::proposed_placement(&link, partitions).await?;
        let (marker, placement) = dataset::init(&link, &keys, &config, &proposed).await?;
        let shared = Arc::new(Shared {
            config,
            link,
            partitions,
            placement,
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
            spread: Default::default(),
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
    pub async fn sweep_now(&self) -> Result<(), stockd_core::BackendError> {
        let mut first_error = None;
        for partition in 0..self.shared.partitions {
            if let Err(error) = crate::sweeper::sweep_partition(&self.shared, partition, None).await
            {
                first_error.get_or_insert(error);
            }
        }
        self.shared.clock_moved.notify_waiters();
        first_error.map_or(Ok(()), Err)
    }
}

impl Backend for RedisBackend {
    fn execute(&self, commands: Vec<Command>) -> BackendFuture<'_, Vec<Outcome>> {
        Box::pin(self.run(commands))
    }

    fn partitions(&self) -> u32 {
        self.shared.partitions
    }

    fn events(&self, request: EventsRequest) -> BackendFuture<'_, Result<EventPage, Error>> {
        let r = request;
        Box::pin(self.events_after(r.partition, r.after, r.limit, r.wait_ms))
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
                ("redis_replicas", f64::from(shared.config.replicas)),
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
                (
                    "redis_replica_timeouts_total",
                    shared.link.replica_timeouts(),
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
