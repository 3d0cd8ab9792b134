//! A Redis backend whose Redis could not be reached at start. The server listens anyway,
//! answers 503 `backend_unavailable` (and `/readyz` 503), and connects in the background,
//! retrying with back-off, so that a fleet and its Redis may start in any order and a Redis
//! that is restarting does not fail a server's start.
//!
//! It never serves before [`RedisBackend::connect`] has done everything a start does (the
//! checks of the Redis, the library, the dataset). A Redis found to be one a server must refuse
//! (keys it may evict, another dataset's settings, a layout it does not know) ends the retries
//! and is reported to the caller, which stops the server: the same refusal as at start, only
//! later.

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use stockd_core::{
    Backend, BackendError, BackendFuture, BackendStats, Command, Error, EventPage, EventsRequest,
    Outcome,
};
use tokio::sync::oneshot;

use crate::{RedisBackend, RedisConfig, StartError};

/// The first wait before trying again; each failure doubles it, up to `RETRY_DELAY_MAX`.
const RETRY_DELAY_FIRST: Duration = Duration::from_millis(100);
const RETRY_DELAY_MAX: Duration = Duration::from_secs(5);

/// A Redis backend being connected: 503 until it is, then the backend itself.
pub struct StartingBackend {
    partitions: u32,
    backend: OnceLock<RedisBackend>,
    /// Why the last attempt failed, for the 503's message.
    last_error: Mutex<String>,
    retries: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl StartingBackend {
    /// Starts retrying `RedisBackend::connect(config)`, whose first attempt failed with
    /// `first_error` (one for which `StartError::is_unreachable` holds). The receiver is told
    /// why, if the Redis turns out to be one the server must refuse.
    pub fn spawn(
        config: RedisConfig,
        first_error: &StartError,
    ) -> (Arc<StartingBackend>, oneshot::Receiver<StartError>) {
        let starting = Arc::new(StartingBackend {
            partitions: config.partitions,
            backend: OnceLock::new(),
            last_error: Mutex::new(first_error.to_string()),
            retries: Mutex::new(None),
        });
        let (refuse, refused) = oneshot::channel();
        let task = tokio::spawn(retry(Arc::downgrade(&starting), config, refuse));
        *starting.retries.lock().expect("retries lock") = Some(task);
        (starting, refused)
    }

    fn not_yet(&self) -> BackendError {
        BackendError::Unavailable(format!(
            "Redis could not be reached yet ({}); retrying",
            self.last_error.lock().expect("last error lock")
        ))
    }
}

/// Tries to connect until it succeeds or finds a Redis to refuse, waiting longer after each
/// failure. Holds the backend weakly: it stops when the server dropped it.
async fn retry(
    starting: Weak<StartingBackend>,
    config: RedisConfig,
    refuse: oneshot::Sender<StartError>,
) {
    let mut delay = RETRY_DELAY_FIRST;
    loop {
        tokio::time::sleep(delay).await;
        match RedisBackend::connect(config.clone()).await {
            Ok(backend) => {
                if let Some(starting) = starting.upgrade() {
                    tracing::info!("backend: redis (reached)");
                    let _ = starting.backend.set(backend);
                }
                return;
            }
            Err(error) if error.is_unreachable() => {
                let Some(starting) = starting.upgrade() else {
                    return;
                };
                delay = (delay * 2).min(RETRY_DELAY_MAX);
                tracing::warn!(%error, retry_in_ms = delay.as_millis() as u64, "Redis cannot be reached yet");
                *starting.last_error.lock().expect("last error lock") = error.to_string();
            }
            Err(error) => {
                let _ = refuse.send(error);
                return;
            }
        }
    }
}

impl Backend for StartingBackend {
    fn execute(&self, commands: Vec<Command>) -> BackendFuture<'_, Vec<Outcome>> {
        match self.backend.get() {
            Some(backend) => backend.execute(commands),
            None => {
                let error = self.not_yet();
                Box::pin(async move { Err(error) })
            }
        }
    }

    fn partitions(&self) -> u32 {
        self.partitions
    }

    fn events(&self, request: EventsRequest) -> BackendFuture<'_, Result<EventPage, Error>> {
        match self.backend.get() {
            Some(backend) => backend.events(request),
            None => {
                let error = self.not_yet();
                Box::pin(async move { Err(error) })
            }
        }
    }

    fn ready(&self) -> BackendFuture<'_, ()> {
        match self.backend.get() {
            Some(backend) => backend.ready(),
            None => {
                let error = self.not_yet();
                Box::pin(async move { Err(error) })
            }
        }
    }

    fn warnings(&self) -> Vec<String> {
        self.backend
            .get()
            .map(Backend::warnings)
            .unwrap_or_default()
    }

    fn stats(&self) -> BackendStats {
        match self.backend.get() {
            Some(backend) => backend.stats(),
            None => BackendStats {
                gauges: vec![
                    ("redis_partitions", f64::from(self.partitions)),
                    ("redis_healthy", 0.0),
                ],
                ..BackendStats::default()
            },
        }
    }

    fn shutdown(&self) -> BackendFuture<'_, ()> {
        if let Some(retries) = self.retries.lock().expect("retries lock").take() {
            retries.abort();
        }
        match self.backend.get() {
            Some(backend) => backend.shutdown(),
            None => Box::pin(async { Ok(()) }),
        }
    }
}
