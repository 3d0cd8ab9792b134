//! Every error code of the contract, once: the `error` field of an error body.
//!
//! Each code's string is written here only. The core's error table (`stockd-core`, `errors!`)
//! and the server's edge errors (`stockd-server`, `EDGE_ERRORS`) name their codes as
//! [`ErrorCode`] variants, and tests there check that the two tables together have exactly one
//! row per variant; clients (`stockd-client`, the CLI, the sink, the benchmarks) compare what
//! they receive with [`ErrorCode::parse`]. The Lua library of the Redis backend writes its codes
//! on its side; the model and the history checker keep their own copies on purpose, as
//! independent oracles of the contract.

use std::fmt;

use serde::{Serialize, Serializer};

/// Declares [`ErrorCode`] from one `Variant = "code"` line per code.
macro_rules! error_codes {
    ($($(#[$attribute:meta])* $variant:ident = $code:literal,)+) => {
        /// One error code of the contract.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ErrorCode {
            $($(#[$attribute])* $variant,)+
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)+];

            /// The code as it stands in an error body: stable snake_case.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $code,)+
                }
            }

            /// The code whose string is `code`; `None` for a code this contract does not have
            /// (an intermediary's `http_502`, a newer server's code).
            pub fn parse(code: &str) -> Option<ErrorCode> {
                match code {
                    $($code => Some(ErrorCode::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    // Refusals decided by the rules (the core's table).
    InvalidRequest = "invalid_request",
    PoolNotFound = "pool_not_found",
    UserRequired = "user_required",
    SaleNotStarted = "sale_not_started",
    SaleEnded = "sale_ended",
    InsufficientStock = "insufficient_stock",
    UserLimitExceeded = "user_limit_exceeded",
    TotalBelowCommitted = "total_below_committed",
    SegmentsFixed = "segments_fixed",
    PoolHasActiveHolds = "pool_has_active_holds",
    PoolDeleted = "pool_deleted",
    HoldNotFound = "hold_not_found",
    HoldIdConflict = "hold_id_conflict",
    HoldExpired = "hold_expired",
    HoldReleased = "hold_released",
    HoldConfirmed = "hold_confirmed",
    HoldRefunded = "hold_refunded",
    HoldNotConfirmed = "hold_not_confirmed",
    RequestIdConflict = "request_id_conflict",
    LockHeld = "lock_held",
    NotLockOwner = "not_lock_owner",
    EventsExpired = "events_expired",
    // Failures only the HTTP edge can have (the server's edge table).
    InvalidJson = "invalid_json",
    Unauthorized = "unauthorized",
    Forbidden = "forbidden",
    NotFound = "not_found",
    MethodNotAllowed = "method_not_allowed",
    RequestTimeout = "request_timeout",
    PayloadTooLarge = "payload_too_large",
    PartitionRequired = "partition_required",
    BackendUnavailable = "backend_unavailable",
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_distinct_snake_case_and_parses_back() {
        for (index, code) in ErrorCode::ALL.iter().enumerate() {
            let text = code.as_str();
            assert!(
                !text.is_empty()
                    && text
                        .bytes()
                        .all(|byte| byte.is_ascii_lowercase() || byte == b'_'),
                "{text}"
            );
            assert_eq!(ErrorCode::parse(text), Some(*code));
            assert_eq!(code.to_string(), text);
            assert_eq!(serde_json::to_value(code).unwrap(), text);
            assert_eq!(*code as usize, index);
            for other in &ErrorCode::ALL[index + 1..] {
                assert_ne!(text, other.as_str());
            }
        }
        assert_eq!(ErrorCode::parse("http_502"), None);
        assert_eq!(ErrorCode::parse("Lock_Held"), None);
        assert_eq!(ErrorCode::parse(""), None);
    }
}
