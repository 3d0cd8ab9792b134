//! The HTTP API's operations as data: each one's method and path template, once. The server's
//! route table (`stockd-server`, `route_table!`) names its paths from [`paths`], and a test there
//! checks that its API routes are exactly [`OPERATIONS`]; the client (`stockd-client`) builds
//! every call from an [`Operation`] and checks that it has one for each. A new operation is one
//! line here, and neither side builds until it is served and callable.
//!
//! No dependencies: this crate is the contract's list of doors, nothing more.

pub mod exposition;
pub mod wire;

/// Every path of the API, exactly as the server matches it; `{name}` is one path segment.
pub mod paths {
    pub const HEALTHZ: &str = "/healthz";
    pub const READYZ: &str = "/readyz";
    pub const METRICS: &str = "/metrics";
    pub const OPENAPI: &str = "/openapi.json";
    pub const POOLS: &str = "/v1/pools";
    pub const POOL: &str = "/v1/pools/{pool}";
    pub const POOL_RESTOCK: &str = "/v1/pools/{pool}/restock";
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

/// One operation: a method on a path template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Operation {
    /// `GET`, `PUT`, `POST` or `DELETE`.
    pub method: &'static str,
    pub path: &'static str,
}

impl Operation {
    const fn new(method: &'static str, path: &'static str) -> Operation {
        Operation { method, path }
    }

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

pub const HEALTHZ: Operation = Operation::new("GET", paths::HEALTHZ);
pub const READYZ: Operation = Operation::new("GET", paths::READYZ);
pub const METRICS: Operation = Operation::new("GET", paths::METRICS);
pub const OPENAPI: Operation = Operation::new("GET", paths::OPENAPI);
pub const LIST_POOLS: Operation = Operation::new("GET", paths::POOLS);
pub const PUT_POOL: Operation = Operation::new("PUT", paths::POOL);
pub const GET_POOL: Operation = Operation::new("GET", paths::POOL);
pub const DELETE_POOL: Operation = Operation::new("DELETE", paths::POOL);
pub const RESTOCK: Operation = Operation::new("POST", paths::POOL_RESTOCK);
pub const LIST_HOLDS: Operation = Operation::new("GET", paths::HOLDS);
pub const RESERVE: Operation = Operation::new("POST", paths::HOLDS);
pub const GET_HOLD: Operation = Operation::new("GET", paths::HOLD);
pub const CONFIRM: Operation = Operation::new("POST", paths::HOLD_CONFIRM);
pub const RELEASE: Operation = Operation::new("POST", paths::HOLD_RELEASE);
pub const EXTEND: Operation = Operation::new("POST", paths::HOLD_EXTEND);
pub const REFUND: Operation = Operation::new("POST", paths::HOLD_REFUND);
pub const BATCH: Operation = Operation::new("POST", paths::BATCH);
pub const EVENTS: Operation = Operation::new("GET", paths::EVENTS);
pub const EVENT_PARTITIONS: Operation = Operation::new("GET", paths::EVENT_PARTITIONS);
pub const LOCK_ACQUIRE: Operation = Operation::new("POST", paths::LOCK_ACQUIRE);
pub const LOCK_RENEW: Operation = Operation::new("POST", paths::LOCK_RENEW);
pub const LOCK_RELEASE: Operation = Operation::new("POST", paths::LOCK_RELEASE);

/// Every operation of the API.
pub const OPERATIONS: [Operation; 22] = [
    HEALTHZ,
    READYZ,
    METRICS,
    OPENAPI,
    LIST_POOLS,
    PUT_POOL,
    GET_POOL,
    DELETE_POOL,
    RESTOCK,
    LIST_HOLDS,
    RESERVE,
    GET_HOLD,
    CONFIRM,
    RELEASE,
    EXTEND,
    REFUND,
    BATCH,
    EVENTS,
    EVENT_PARTITIONS,
    LOCK_ACQUIRE,
    LOCK_RENEW,
    LOCK_RELEASE,
];

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
    fn operations_are_distinct() {
        for (i, a) in OPERATIONS.iter().enumerate() {
            for b in &OPERATIONS[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
