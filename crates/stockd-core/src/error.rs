//! Every way a command can be refused, with the details a client needs to act on it.
//!
//! Each variant has a stable snake_case `code()` (the `error` field of the HTTP body) and carries
//! its details as fields. How they are written on the wire, and the mapping to HTTP statuses, live
//! in exactly one place, the server crate; this crate knows nothing of HTTP.

use crate::ids::{HoldId, PoolId, RequestId};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The message is the error's text (`Display`); it is not repeated as a detail field.
    #[error("{message}")]
    InvalidRequest { message: String },
    #[error("pool {pool} does not exist")]
    PoolNotFound { pool: PoolId },
    #[error("pool {pool} has a per-user limit; the request must name a user")]
    UserRequired { pool: PoolId },
    #[error("the sale of pool {pool} has not started")]
    SaleNotStarted { pool: PoolId, starts_at_ms: u64 },
    #[error("the sale of pool {pool} has ended")]
    SaleEnded { pool: PoolId, ends_at_ms: u64 },
    #[error("pool {pool} has {available} available, {requested} requested")]
    InsufficientStock {
        pool: PoolId,
        available: u64,
        requested: u64,
    },
    #[error("user limit of pool {pool} is {limit}: {used} used, {requested} requested")]
    UserLimitExceeded {
        pool: PoolId,
        limit: u64,
        used: u64,
        requested: u64,
    },
    #[error("pool {pool}: new total {total} is below held + sold = {committed}")]
    TotalBelowCommitted {
        pool: PoolId,
        total: u64,
        committed: u64,
    },
    #[error("pool {pool} has {held} units held by active holds")]
    PoolHasActiveHolds { pool: PoolId, held: u64 },
    #[error("pool {pool} of this hold was deleted")]
    PoolDeleted { pool: PoolId },
    #[error("hold {hold_id} does not exist")]
    HoldNotFound { hold_id: HoldId },
    #[error("hold {hold_id} exists with a different request")]
    HoldIdConflict { hold_id: HoldId },
    #[error("hold {hold_id} has expired")]
    HoldExpired { hold_id: HoldId },
    #[error("hold {hold_id} was released")]
    HoldReleased { hold_id: HoldId },
    #[error("hold {hold_id} is confirmed")]
    HoldConfirmed { hold_id: HoldId },
    #[error("hold {hold_id} was refunded")]
    HoldRefunded { hold_id: HoldId },
    #[error("hold {hold_id} is not confirmed")]
    HoldNotConfirmed { hold_id: HoldId },
    /// `pool` and `delta` are the first request's: what the id is remembered for.
    #[error("request_id {request_id} was used by a restock of pool {pool} by {delta}")]
    RequestIdConflict {
        request_id: RequestId,
        pool: PoolId,
        delta: i64,
    },
    #[error("the lock is held until {expires_at_ms}")]
    LockHeld { expires_at_ms: u64 },
    #[error("not the current owner and token of this lock")]
    NotLockOwner,
    /// The feed no longer keeps some event after `after`: reading on would skip it silently.
    /// `oldest_seq` >= `after` + 2 whenever this is returned, so the resume point is >= 1.
    #[error(
        "events after {after} are no longer kept; the oldest kept is {oldest_seq}: repair your \
         copy (for example with a reconcile), then resume from after={}",
        .oldest_seq.saturating_sub(1)
    )]
    EventsExpired { after: u64, oldest_seq: u64 },
}

impl Error {
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidRequest {
            message: message.into(),
        }
    }

    /// The stable machine-readable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidRequest { .. } => "invalid_request",
            Error::PoolNotFound { .. } => "pool_not_found",
            Error::UserRequired { .. } => "user_required",
            Error::SaleNotStarted { .. } => "sale_not_started",
            Error::SaleEnded { .. } => "sale_ended",
            Error::InsufficientStock { .. } => "insufficient_stock",
            Error::UserLimitExceeded { .. } => "user_limit_exceeded",
            Error::TotalBelowCommitted { .. } => "total_below_committed",
            Error::PoolHasActiveHolds { .. } => "pool_has_active_holds",
            Error::PoolDeleted { .. } => "pool_deleted",
            Error::HoldNotFound { .. } => "hold_not_found",
            Error::HoldIdConflict { .. } => "hold_id_conflict",
            Error::HoldExpired { .. } => "hold_expired",
            Error::HoldReleased { .. } => "hold_released",
            Error::HoldConfirmed { .. } => "hold_confirmed",
            Error::HoldRefunded { .. } => "hold_refunded",
            Error::HoldNotConfirmed { .. } => "hold_not_confirmed",
            Error::RequestIdConflict { .. } => "request_id_conflict",
            Error::LockHeld { .. } => "lock_held",
            Error::NotLockOwner => "not_lock_owner",
            Error::EventsExpired { .. } => "events_expired",
        }
    }
}
