//! The HTTP API's contract as data, at the bottom of the crate graph: each operation's name,
//! method, path template, role and own errors ([`OPERATIONS`]), every error code
//! ([`error_code`]), the request and response bodies ([`wire`]) and the `/metrics` text formats
//! ([`exposition`]), each declared once. The server's route table (`stockd-server`,
//! `route_table!`) names its routes by these operations, takes its access rules from their
//! roles and its OpenAPI error responses from their errors, and a test there checks that its
//! API routes are exactly [`OPERATIONS`]; the
//! client (`stockd-client`) builds every call from an [`Operation`] and checks that it has one
//! for each; `stockd bench` takes its paths from them, and the web console's
//! `operations.js` is generated from them (a server test holds the file to this table). A new
//! operation is one line here, and neither side builds until it is served and callable.
//!
//! It depends on no other stockd crate (serde only; utoipa with the `openapi` feature, which
//! the server turns on), so that a client depends on the contract and nothing else.

pub mod error_code;
pub mod exposition;
pub mod wire;

pub use error_code::ErrorCode;

/// Every path of the API, exactly as the server matches it; `{name}` is one path segment.
pub mod paths {
    pub const HEALTHZ: &str = "/healthz";
    pub const READYZ: &str = "/readyz";
    pub const METRICS: &str = "/metrics";
    pub const OPENAPI: &str = "/openapi.json";
    pub const POOLS: &str = "/v1/pools";
    pub const POOL: &str = "/v1/pools/{pool}";
    pub const POOL_RESTOCK: &str = "/v1/pools/{pool}/restock";
    pub const POOL_SEGMENTS: &str = "/v1/pools/{pool}/segments";
    pub const HOLDS: &str = "/v1/holds";
    pub const HOLD: &str = "/v1/holds/{hold_id}";
    pub const HOLD_CONFIRM: &str = "/v1/holds/{hold_id}/confirm";
    pub const HOLD_RELEASE: &str = "/v1/holds/{hold_id}/release";
    pub const HOLD_EXTEND: &str = "/v1/holds/{hold_id}/extend";
    pub const HOLD_REFUND: &str = "/v1/holds/{hold_id}/refund";
    pub const BATCH: &str = "/v1/batch";
    pub const EVENTS: &str = "/v1/events";
    pub const EVENT_PARTITIONS: &str = "/v1/events/partitions";
    pub const LOCK_ACQUIRE: &str = "/v1/locks/{name}/acquire";
    pub const LOCK_RENEW: &str = "/v1/locks/{name}/renew";
    pub const LOCK_RELEASE: &str = "/v1/locks/{name}/release";
}

/// Who may call an operation when the server has tokens configured (without any, everyone may
/// call everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// No token: probes, scrapers and the OpenAPI document carry none.
    Open,
    /// A client or an admin token.
    Client,
    /// An admin token only: a client token is refused with 403 `forbidden`.
    Admin,
}

/// One operation: a method on a path template, the name it is declared under here, who may
/// call it and the errors particular to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Operation {
    /// The constant's name (`GET_POOL`): what generated code (the web console's
    /// `operations.js`) calls it.
    pub name: &'static str,
    /// `GET`, `PUT`, `POST` or `DELETE`.
    pub method: &'static str,
    pub path: &'static str,
    /// Who may call it: the server's access rules and the OpenAPI document's security.
    pub role: Role,
    /// The errors particular to this operation, in the order the OpenAPI document lists them;
    /// the errors the HTTP edge can give any operation (a bad body, a missing token, an
    /// unreachable backend) are the server's to add.
    pub errors: &'static [ErrorCode],
}

impl Operation {
    /// The path's segments with each `{name}` replaced by the next of `values`, in order. `None`
    /// when the counts differ.
    pub fn segments<'a>(&self, values: &[&'a str]) -> Option<Vec<&'a str>> {
        let mut values = values.iter();
        let segments: Vec<&'a str> = self
            .path
            .split('/')
            .skip(1)
            .map(|segment| {
                if segment.starts_with('{') {
                    values.next().copied()
                } else {
                    Some(segment)
                }
            })
            .collect::<Option<_>>()?;
        values.next().is_none().then_some(segments)
    }
}

/// Declares each operation as a constant named once (the name is also its [`Operation::name`])
/// and [`OPERATIONS`], every one of them in this order, from one row each:
/// `NAME = "METHOD" path, Role, [ErrorCode variants]`.
macro_rules! operations {
    ($($name:ident = $method:literal $path:expr, $role:ident, [$($error:ident),* $(,)?];)*) => {
        $(
            pub const $name: Operation = Operation {
                name: stringify!($name),
                method: $method,
                path: $path,
                role: Role::$role,
                errors: &[$(ErrorCode::$error),*],
            };
        )*

        /// Every operation of the API.
        pub const OPERATIONS: [Operation; [$(stringify!($name)),*].len()] = [$($name),*];
    };
}

operations! {
    HEALTHZ = "GET" paths::HEALTHZ, Open, [];
    READYZ = "GET" paths::READYZ, Open, [];
    METRICS = "GET" paths::METRICS, Open, [];
    OPENAPI = "GET" paths::OPENAPI, Open, [];
    LIST_POOLS = "GET" paths::POOLS, Client, [];
    PUT_POOL = "PUT" paths::POOL, Admin, [TotalBelowCommitted, SegmentsFixed];
    GET_POOL = "GET" paths::POOL, Client, [PoolNotFound];
    GET_POOL_SEGMENTS = "GET" paths::POOL_SEGMENTS, Client, [PoolNotFound];
    DELETE_POOL = "DELETE" paths::POOL, Admin, [PoolNotFound, PoolHasActiveHolds];
    RESTOCK = "POST" paths::POOL_RESTOCK, Admin,
        [PoolNotFound, InsufficientStock, RequestIdConflict];
    LIST_HOLDS = "GET" paths::HOLDS, Client, [];
    RESERVE = "POST" paths::HOLDS, Client, [
        PoolNotFound, UserRequired, SaleNotStarted, SaleEnded, InsufficientStock,
        UserLimitExceeded, HoldIdConflict,
    ];
    GET_HOLD = "GET" paths::HOLD, Client, [HoldNotFound];
    CONFIRM = "POST" paths::HOLD_CONFIRM, Client,
        [HoldNotFound, HoldExpired, HoldReleased, HoldRefunded];
    RELEASE = "POST" paths::HOLD_RELEASE, Client, [HoldNotFound, HoldConfirmed, HoldRefunded];
    EXTEND = "POST" paths::HOLD_EXTEND, Client,
        [HoldNotFound, HoldExpired, HoldConfirmed, HoldReleased, HoldRefunded];
    REFUND = "POST" paths::HOLD_REFUND, Client, [HoldNotFound, HoldNotConfirmed, PoolDeleted];
    // Each op's own failure is inside the 200, in its result.
    BATCH = "POST" paths::BATCH, Client, [];
    EVENTS = "GET" paths::EVENTS, Client, [EventsExpired, PartitionRequired];
    EVENT_PARTITIONS = "GET" paths::EVENT_PARTITIONS, Client, [];
    LOCK_ACQUIRE = "POST" paths::LOCK_ACQUIRE, Client, [LockHeld];
    LOCK_RENEW = "POST" paths::LOCK_RENEW, Client, [NotLockOwner];
    LOCK_RELEASE = "POST" paths::LOCK_RELEASE, Client, [NotLockOwner];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_take_their_values_in_order_and_only_as_many() {
        assert_eq!(
            CONFIRM.segments(&["h1"]),
            Some(vec!["v1", "holds", "h1", "confirm"])
        );
        assert_eq!(LIST_POOLS.segments(&[]), Some(vec!["v1", "pools"]));
        assert_eq!(CONFIRM.segments(&[]), None);
        assert_eq!(GET_POOL.segments(&["a", "b"]), None);
    }

    #[test]
    fn an_operation_is_named_as_its_constant() {
        assert_eq!(GET_POOL.name, "GET_POOL");
        assert_eq!(OPERATIONS.len(), 23);
        assert_eq!(OPERATIONS[22], LOCK_RELEASE);
    }

    #[test]
    fn operations_are_distinct() {
        for (i, a) in OPERATIONS.iter().enumerate() {
            for b in &OPERATIONS[i + 1..] {
                assert_ne!((a.method, a.path), (b.method, b.path));
                assert_ne!(a.name, b.name);
            }
        }
    }

    #[test]
    fn an_operation_names_each_of_its_errors_once() {
        for operation in OPERATIONS {
            for (index, code) in operation.errors.iter().enumerate() {
                assert!(
                    !operation.errors[index + 1..].contains(code),
                    "{operation:?}"
                );
            }
        }
        assert_eq!(PUT_POOL.role, Role::Admin);
        assert_eq!(
            EVENTS.errors,
            [ErrorCode::EventsExpired, ErrorCode::PartitionRequired]
        );
    }
}
