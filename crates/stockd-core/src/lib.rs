//! The pure core of stockd: every stock rule and every hold transition, in one place.
//!
//! This crate owns the arithmetic `total = available + held + sold`, the hold lifecycle, per-user
//! limits, sale windows, waiters and lease locks. It does no I/O and reads no clock: time comes
//! in as `now_ms`, so every decision is deterministic and testable. Backends (embedded engine,
//! Redis) persist and serialise what this crate decides; they must never re-decide a rule.
//!
//! The flow is command -> decision -> [`Record`] -> mutation. Live, [`State::execute`] validates a
//! [`Command`] against the state, then applies the [`Record`]s it produced through
//! [`State::apply_record`], the single mutation path. Recovery replays logged records through the
//! same function, so replay cannot diverge from live behaviour.

pub mod backend;
pub mod command;
pub mod error;
pub mod ids;
pub mod limits;
pub mod record;
pub mod state;
pub mod view;

pub use backend::{
    Backend, BackendError, BackendFuture, BackendStats, EventPage, EventsRequest, HistogramStats,
};
pub use command::{Command, HoldItem, LockRequest, Outcome, PoolSpec, Reply, ReserveRequest};
pub use error::{
    DetailField, DetailKind, DetailType, DetailValue, Error, ErrorKind, ErrorSpec,
    FromDetailsError, ERRORS,
};
pub use ids::{HoldId, IdError, LockName, OwnerId, PoolId, RequestId, UserId};
pub use record::{Change, Event, EventKind, Record, SegmentTake};
pub use state::{
    Effects, FrozenSnapshot, Indexes, Snapshot, SnapshotV3, SnapshotV5, State, StateConfig, Step,
    WaiterId,
};
pub use view::{HoldStatus, HoldView, PoolView, SegmentView};
