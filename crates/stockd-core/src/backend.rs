//! The interface every backend offers the server: batch first.
//!
//! A backend takes a slice of commands and answers each, in order, with exactly the outcome the
//! command would get alone; a single request is a batch of one. The embedded engine and the
//! Redis backend implement this trait; the server holds a `dyn Backend` and never knows which.
//! `BackendError` means "could not find out": the caller must not claim any change happened.

use std::future::Future;
use std::pin::Pin;

use crate::command::{Command, Outcome};
use crate::error::Error;
use crate::record::Event;

pub type BackendFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, BackendError>> + Send + 'a>>;

/// The backend could not be reached or could not tell whether a change happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("backend unavailable: {0}")]
    Unavailable(String),
}

/// One page of one partition of the ordered event feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPage {
    pub events: Vec<Event>,
    /// Seq of the last event returned, or the `after` asked for when none is.
    pub next_after: u64,
}

/// What one read of the event feed asks for: [`Backend::events`] answers events of `partition`
/// with seq > `after`, at most `limit` of them, waiting up to `wait_ms` for a first one when
/// there is none yet (0: answer at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventsRequest {
    /// The feed partition read, from 0 to [`Backend::partitions`] - 1.
    pub partition: u32,
    /// The seq already seen: only later events are answered (0 for the start).
    pub after: u64,
    /// The most events one page holds.
    pub limit: usize,
    /// How long to wait for a first event when none is there yet, in milliseconds.
    pub wait_ms: u64,
}

impl EventsRequest {
    /// A read that answers at once with what is there (`wait_ms` 0).
    pub const fn at_once(partition: u32, after: u64, limit: usize) -> Self {
        EventsRequest {
            partition,
            after,
            limit,
            wait_ms: 0,
        }
    }
}

/// Counters, gauges and histograms a backend exposes for `/metrics`. Names are Prometheus-ready
/// (snake_case, unit last); the server adds the `stockd_` prefix and renders them. A backend
/// lists only what it measures: what it does not have is absent, never a zero.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BackendStats {
    /// Hold transitions by outcome (`held`, `confirmed`, `released`, `expired`, `refunded`).
    pub hold_transitions: Vec<(&'static str, u64)>,
    /// Distributions (`expiry_lag_ms`, `wal_fsync_duration_seconds`, ...).
    pub histograms: Vec<HistogramStats>,
    /// Point-in-time values (`pools`, `holds`, `waiters`, ...).
    pub gauges: Vec<(&'static str, f64)>,
    /// Monotonic counters (`wal_syncs_total`, ...).
    pub counters: Vec<(&'static str, u64)>,
}

/// One histogram, read at one moment, in the unit its name ends with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramStats {
    /// Prometheus-ready name, unit last (`expiry_lag_ms`).
    pub name: &'static str,
    /// Cumulative counts per upper bound, bounds ascending: observations `<=` each bound. The
    /// `+Inf` bucket, which is `count`, may be left out.
    pub buckets: Vec<(f64, u64)>,
    /// The sum of the observations.
    pub sum: f64,
    /// How many observations there were.
    pub count: u64,
}

pub trait Backend: Send + Sync + 'static {
    /// Applies `commands` in order; the answer has one outcome per command. A reserve or lock
    /// acquire with `wait_ms` may wait, and later commands of the batch wait for it.
    fn execute(&self, commands: Vec<Command>) -> BackendFuture<'_, Vec<Outcome>>;

    /// How many partitions the event feed has (1 on the embedded engine and a single Redis).
    fn partitions(&self) -> u32;

    /// One page of the feed, as [`EventsRequest`] says. `Err(Error::EventsExpired{..})` when
    /// some event of the partition after `after` is no longer kept.
    fn events(&self, request: EventsRequest) -> BackendFuture<'_, Result<EventPage, Error>>;

    /// Ok when the backend can serve writes now.
    fn ready(&self) -> BackendFuture<'_, ()>;

    /// What an operator must know about how the backend is set up, shown by `/readyz` (on
    /// Redis: settings that lose acknowledged changes in a crash). None by default.
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    fn stats(&self) -> BackendStats;

    /// Stops accepting work, finishes what was accepted and makes it durable.
    fn shutdown(&self) -> BackendFuture<'_, ()>;
}
