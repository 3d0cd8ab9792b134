//! The API's request and response bodies, as this client reads and writes them: the client's
//! own types, not the core's, so that it depends on the contract only.
//!
//! Request bodies serialise exactly the contract's field names and leave out every `None`
//! (the contract treats a missing field and `null` alike, and refuses unknown ones). Identifiers
//! are plain strings here, not the core's parsed ids: the server is the one judge of what is
//! valid, and a client that pre-judged would hide the server's `invalid_request` answer.
//! Responses accept fields they do not know (a newer server may add some) and read a field that
//! is absent as `None`.

use serde::{Deserialize, Serialize};

/// Body of `PUT /v1/pools/{pool}`. A rule left as `None` is unset by the PUT.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSpecBody {
    pub total: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_user_limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub starts_at_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ends_at_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub low_stock_threshold: Option<u64>,
}

impl PoolSpecBody {
    /// A pool of `total` units with no rules.
    pub fn with_total(total: u64) -> Self {
        PoolSpecBody {
            total,
            ..PoolSpecBody::default()
        }
    }
}

/// Body of `POST /v1/pools/{pool}/restock`. With a `request_id`, a retry of the same restock
/// changes nothing (left out of the JSON when absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestockBody {
    pub delta: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// Units of one pool in a hold: one line of a reserve, of a hold, of an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldItem {
    pub pool: String,
    pub qty: u64,
}

impl HoldItem {
    pub fn new(pool: impl Into<String>, qty: u64) -> Self {
        HoldItem {
            pool: pool.into(),
            qty,
        }
    }
}

/// A pool. `total = available + held + sold`; a rule is `None` when unset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolView {
    pub pool: String,
    pub total: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
    pub per_user_limit: Option<u64>,
    pub starts_at_ms: Option<u64>,
    pub ends_at_ms: Option<u64>,
    pub low_stock_threshold: Option<u64>,
    /// The event-feed partition that carries this pool's events.
    pub partition: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldStatus {
    Held,
    Confirmed,
    Released,
    Expired,
    Refunded,
}

impl HoldStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            HoldStatus::Held => "held",
            HoldStatus::Confirmed => "confirmed",
            HoldStatus::Released => "released",
            HoldStatus::Expired => "expired",
            HoldStatus::Refunded => "refunded",
        }
    }
}

/// A hold. `finished_at_ms` is `None` while held, else the time of the latest transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldView {
    pub hold_id: String,
    pub status: HoldStatus,
    pub user: Option<String>,
    pub items: Vec<HoldItem>,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub finished_at_ms: Option<u64>,
    /// The event-feed partition that carries this hold's events.
    pub partition: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    PoolUpserted,
    Restocked,
    PoolDeleted,
    Held,
    Confirmed,
    Released,
    Expired,
    Refunded,
    Extended,
    LowStock,
}

/// One entry of the event feed. Fields that do not apply to the event's type are absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    pub at_ms: u64,
    #[serde(rename = "type")]
    pub kind: EventKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<Vec<HoldItem>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub low_stock_threshold: Option<u64>,
    /// `held` only: the hold's created_at_ms (a server before this field: absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// `refunded` only: whether the units went back to available (false: they left the pool).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restock: Option<bool>,
    /// `restocked` only: the request id the restock named, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// Body of `POST /v1/holds`. `confirm: false` is left out of the JSON (it is the default), so a
/// retry built from the same struct is always the same request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReserveBody {
    pub hold_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    pub items: Vec<HoldItem>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub confirm: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// Body of `POST /v1/holds/{hold_id}/extend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtendBody {
    pub ttl_ms: u64,
}

/// Body of `POST /v1/holds/{hold_id}/refund`: `restock: false` takes the sold units out of the
/// pool instead of putting them back on sale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundBody {
    pub restock: bool,
}

/// Body of `POST /v1/batch`. Each op is a JSON object with an `op` field, as in the contract;
/// they stay untyped so that a caller can send anything the server must judge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchBody {
    pub ops: Vec<serde_json::Value>,
}

/// Body of `POST /v1/locks/{name}/acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockAcquireBody {
    pub owner: String,
    pub ttl_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// Body of `POST /v1/locks/{name}/renew`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRenewBody {
    pub owner: String,
    pub token: u64,
    pub ttl_ms: u64,
}

/// Body of `POST /v1/locks/{name}/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockReleaseBody {
    pub owner: String,
    pub token: u64,
}

/// Answer of `GET /v1/pools`: one page, ordered by pool id. `next` is the cursor to pass as
/// `after` for the following page, `None` on the last page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolPage {
    pub pools: Vec<PoolView>,
    pub next: Option<String>,
}

/// The filters and paging of `GET /v1/holds`, each optional: holds with an item in `pool`, of
/// `user`, in `status`, after the cursor `after`, at most `limit` (server default 100, max 1000).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HoldQuery {
    pub pool: Option<String>,
    pub user: Option<String>,
    pub status: Option<HoldStatus>,
    pub after: Option<String>,
    pub limit: Option<usize>,
}

/// Answer of `GET /v1/holds`: one page, ordered by hold id. A page may hold fewer than `limit`
/// holds (even none) when the filters are selective; only `next: None` means the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldPage {
    pub holds: Vec<HoldView>,
    pub next: Option<String>,
}

/// Answer of `GET /v1/events`: one page of one partition. `next_after` is the `after` of the
/// following call on the same partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventPage {
    pub events: Vec<Event>,
    pub next_after: u64,
}

/// Answer of `GET /v1/events/partitions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventPartitions {
    pub partitions: u32,
}

/// One op's answer inside a batch: the status and body the single endpoint would have given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchResult {
    pub status: u16,
    pub body: serde_json::Value,
}

/// Answer of `POST /v1/batch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchAnswer {
    pub results: Vec<BatchResult>,
}

/// A granted lease (acquire and renew). `token` is the fencing token: it strictly increases per
/// lock name, so a resource guarded by the lock can refuse writes carrying an older one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockLease {
    pub token: u64,
    pub expires_at_ms: u64,
}

/// Answer of `POST /v1/locks/{name}/release`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockReleased {
    pub released: bool,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pool_spec_omits_unset_rules() {
        let body = PoolSpecBody::with_total(100);
        assert_eq!(serde_json::to_value(&body).unwrap(), json!({"total": 100}));
    }

    #[test]
    fn pool_spec_names_every_rule_as_the_contract() {
        let body = PoolSpecBody {
            total: 10,
            per_user_limit: Some(2),
            starts_at_ms: Some(1_000),
            ends_at_ms: Some(2_000),
            low_stock_threshold: Some(0),
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({
                "total": 10,
                "per_user_limit": 2,
                "starts_at_ms": 1_000,
                "ends_at_ms": 2_000,
                "low_stock_threshold": 0,
            })
        );
    }

    #[test]
    fn reserve_minimal_has_only_required_fields() {
        let body = ReserveBody {
            hold_id: "o-1".into(),
            items: vec![HoldItem::new("sku-1", 2)],
            ..ReserveBody::default()
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"hold_id": "o-1", "items": [{"pool": "sku-1", "qty": 2}]})
        );
    }

    #[test]
    fn reserve_full_names_every_field_as_the_contract() {
        let body = ReserveBody {
            hold_id: "o-1".into(),
            user: Some("u-1".into()),
            items: vec![HoldItem::new("a", 1), HoldItem::new("b", 3)],
            ttl_ms: Some(60_000),
            confirm: true,
            wait_ms: Some(500),
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({
                "hold_id": "o-1",
                "user": "u-1",
                "items": [{"pool": "a", "qty": 1}, {"pool": "b", "qty": 3}],
                "ttl_ms": 60_000,
                "confirm": true,
                "wait_ms": 500,
            })
        );
    }

    #[test]
    fn small_bodies_match_the_contract() {
        assert_eq!(
            serde_json::to_value(RestockBody {
                delta: -5,
                request_id: None
            })
            .unwrap(),
            json!({"delta": -5})
        );
        assert_eq!(
            serde_json::to_value(RestockBody {
                delta: 5,
                request_id: Some("r-1".into())
            })
            .unwrap(),
            json!({"delta": 5, "request_id": "r-1"})
        );
        assert_eq!(
            serde_json::to_value(ExtendBody { ttl_ms: 5_000 }).unwrap(),
            json!({"ttl_ms": 5_000})
        );
        assert_eq!(
            serde_json::to_value(BatchBody {
                ops: vec![json!({"op": "confirm", "hold_id": "o-1"})]
            })
            .unwrap(),
            json!({"ops": [{"op": "confirm", "hold_id": "o-1"}]})
        );
    }

    #[test]
    fn lock_bodies_match_the_contract() {
        let acquire = LockAcquireBody {
            owner: "w-1".into(),
            ttl_ms: 1_000,
            wait_ms: None,
        };
        assert_eq!(
            serde_json::to_value(&acquire).unwrap(),
            json!({"owner": "w-1", "ttl_ms": 1_000})
        );
        let acquire_waiting = LockAcquireBody {
            wait_ms: Some(200),
            ..acquire
        };
        assert_eq!(
            serde_json::to_value(&acquire_waiting).unwrap(),
            json!({"owner": "w-1", "ttl_ms": 1_000, "wait_ms": 200})
        );
        let renew = LockRenewBody {
            owner: "w-1".into(),
            token: 7,
            ttl_ms: 2_000,
        };
        assert_eq!(
            serde_json::to_value(&renew).unwrap(),
            json!({"owner": "w-1", "token": 7, "ttl_ms": 2_000})
        );
        let release = LockReleaseBody {
            owner: "w-1".into(),
            token: 7,
        };
        assert_eq!(
            serde_json::to_value(&release).unwrap(),
            json!({"owner": "w-1", "token": 7})
        );
    }

    #[test]
    fn pages_decode_the_contract_shapes() {
        let pools: PoolPage = serde_json::from_value(json!({
            "pools": [{
                "pool": "sku-1", "total": 10, "available": 7, "held": 2, "sold": 1,
                "per_user_limit": null, "starts_at_ms": null, "ends_at_ms": null,
                "low_stock_threshold": 3, "partition": 1
            }],
            "next": "sku-1"
        }))
        .unwrap();
        assert_eq!(pools.pools[0].available, 7);
        assert_eq!(pools.pools[0].low_stock_threshold, Some(3));
        assert_eq!(pools.pools[0].partition, 1);
        assert_eq!(pools.next.as_deref(), Some("sku-1"));

        // Event fields that do not apply to a type are absent, not null.
        let events: EventPage = serde_json::from_value(json!({
            "events": [
                {"seq": 1, "at_ms": 5, "type": "pool_upserted", "pool": "sku-1", "total": 10,
                 "available": 10},
                {"seq": 2, "at_ms": 6, "type": "held", "hold_id": "o-1", "user": "u-1",
                 "items": [{"pool": "sku-1", "qty": 2}], "created_at_ms": 6,
                 "expires_at_ms": 600_006}
            ],
            "next_after": 2
        }))
        .unwrap();
        assert_eq!(events.next_after, 2);
        assert_eq!(events.events[1].kind, EventKind::Held);
        assert_eq!(events.events[1].pool, None);
        assert_eq!(events.events[1].created_at_ms, Some(6));
        assert_eq!(events.events[0].created_at_ms, None);
        assert!(serde_json::to_value(&events.events[0])
            .unwrap()
            .get("created_at_ms")
            .is_none());
    }
}
