//! The API's bodies, declared once: what the server writes and the client reads (pools, holds,
//! events, leases, pages), and what the client sends. The server serialises the responses and,
//! with the `openapi` feature, describes them in its OpenAPI document from these same
//! definitions; the client deserialises them. Each type is named as the OpenAPI document names
//! it.
//!
//! Responses are generic over the type of their identifiers, `S`: `String` (the default) for a
//! client, which reads plain text ids and leaves judging them to the server; `&str` borrowed from
//! the core's views for the server, so that writing an answer copies no id. Responses accept
//! fields they do not know (a newer server may add some) and read an absent optional field as
//! `None`; the server only writes them, so nothing here refuses unknown fields on its behalf.
//!
//! Request bodies are the client's: they serialise exactly the contract's field names and leave
//! out every `None` (the contract treats a missing field and `null` alike). The server parses
//! requests with its own types, which turn ids into the core's checked newtypes as they are read
//! and refuse unknown fields, so that a bad body gets a precise answer.
//!
//! The core keeps its own `HoldStatus`, `EventKind`, views and `Event`: those are what it stores
//! (logs, snapshots, the Redis library's JSON), these are what the API shows; the server converts
//! one into the other in one place.

use serde::{Deserialize, Serialize};

/// A pool. `total = available + held + sold`; rule fields are null when unset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(bound = ""))]
pub struct PoolObject<S = String> {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub pool: S,
    pub total: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
    pub per_user_limit: Option<u64>,
    pub starts_at_ms: Option<u64>,
    pub ends_at_ms: Option<u64>,
    pub low_stock_threshold: Option<u64>,
    /// The event-feed partition that carries this pool's events (0 with one partition): segment
    /// 0's, for a segmented pool.
    pub partition: u32,
    /// How many segments the pool is split into, fixed when it is created (1 by default).
    #[serde(default = "one_segment")]
    pub segments: u32,
}

/// A server that predates segments has pools of one segment.
fn one_segment() -> u32 {
    1
}

/// One segment of a pool, with its counts (`total = available + held + sold`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SegmentObject {
    pub segment: u32,
    /// The event-feed partition the segment lives in.
    pub partition: u32,
    pub total: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
}

/// Units a hold took from one segment of a pool spread over partitions (a hold event's
/// `segments`): per pool, the qtys add up to the item's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(bound = ""))]
pub struct SegmentTake<S = String> {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub pool: S,
    pub segment: u32,
    pub qty: u64,
}

/// The segments of a pool (`GET /v1/pools/{pool}/segments`), in segment order. A backend that
/// keeps a segmented pool as one (the embedded engine, a single Redis) answers one segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SegmentList {
    pub segments: Vec<SegmentObject>,
}

/// One page of pools, ordered by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(bound = ""))]
pub struct PoolList<S = String> {
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<PoolObject>))]
    pub pools: Vec<PoolObject<S>>,
    /// Pass as `after` for the next page; null on the last page.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub next: Option<S>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum HoldStatus {
    Held,
    Confirmed,
    Released,
    Expired,
    Refunded,
}

impl HoldStatus {
    /// The status as the wire names it (`held`, `confirmed`, ...).
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

/// Units of one pool in a hold: what a reserve asks for, and what a hold and its events show.
///
/// Read leniently here, as every response is; the server reads a reserve's items with its own
/// strict type, and the document says so (`additionalProperties: false`, see the `openapi`
/// feature's schema below).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldItem<S = String> {
    pub pool: S,
    /// 1..=1_000_000_000.
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

// Written by hand rather than derived: a derive would read `additionalProperties: false` only
// from `deny_unknown_fields`, which a response must not carry (see the module's doc).
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for HoldItem {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{
            AdditionalProperties, KnownFormat, ObjectBuilder, SchemaFormat, Type,
        };
        ObjectBuilder::new()
            .description(Some(
                "Units of one pool in a hold: what a reserve asks for, and what a hold and its \
                 events show.",
            ))
            .property("pool", ObjectBuilder::new().schema_type(Type::String))
            .required("pool")
            .property(
                "qty",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                    .minimum(Some(0))
                    .description(Some("1..=1_000_000_000.")),
            )
            .required("qty")
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for HoldItem {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("HoldItem")
    }
}

/// A hold. `finished_at_ms` is null while held, else the time of the latest transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(bound = ""))]
pub struct HoldObject<S = String> {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub hold_id: S,
    pub status: HoldStatus,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub user: Option<S>,
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<HoldItem>))]
    pub items: Vec<HoldItem<S>>,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub finished_at_ms: Option<u64>,
    /// The event-feed partition that carries this hold's events (0 with one partition).
    pub partition: u32,
}

/// One page of holds, ordered by hold id. A page may hold fewer than `limit` holds, even none,
/// when the filters reject most of the holds it examined: only `next: null` means the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(bound = ""))]
pub struct HoldList<S = String> {
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<HoldObject>))]
    pub holds: Vec<HoldObject<S>>,
    /// Pass as `after` for the next page; null on the last page.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub next: Option<S>,
}

/// A granted lease: `token` is the fencing token, strictly increasing per lock name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockGrant {
    pub token: u64,
    pub expires_at_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockReleased {
    pub released: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EventType {
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

/// One state change. Fields that do not apply to the type are absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(bound = ""))]
pub struct EventObject<S = String> {
    pub seq: u64,
    pub at_ms: u64,
    #[serde(rename = "type")]
    pub kind: EventType,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, nullable = false))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<S>,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, nullable = false))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_id: Option<S>,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, nullable = false))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<S>,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<HoldItem>>, nullable = false))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<Vec<HoldItem<S>>>,
    /// Pool events: the pool's available after the change; on `pool_deleted`, as it was when
    /// the pool was deleted.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available: Option<u64>,
    /// Pool events: the pool's total after the change; on `pool_deleted`, as it was when the
    /// pool was deleted.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// `restocked` and `pool_upserted`: the change of total (and of available), so that a
    /// consumer can keep a pool's numbers by adding deltas; a create's is its total.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<i64>,
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub low_stock_threshold: Option<u64>,
    /// `held` only: the hold's created_at_ms, as GET /v1/holds/{id} shows it. The event's at_ms
    /// on one partition; on a Redis Cluster a hold over several partitions is created a little
    /// before it is held, so it can be earlier than at_ms there.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at_ms: Option<u64>,
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// `refunded` only: true when the units went back to available, false when they left the
    /// pool (sold and total both shrank).
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restock: Option<bool>,
    /// `restocked` only: the request id the restock named, if it named one.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, nullable = false))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<S>,
    /// A hold's events on a Redis Cluster, when its units came from segments of a segmented
    /// pool: which segment gave how many.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<SegmentTake>>, nullable = false))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segments: Option<Vec<SegmentTake<S>>>,
}

/// One page of one partition of the feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(bound = ""))]
pub struct EventPage<S = String> {
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<EventObject>))]
    pub events: Vec<EventObject<S>>,
    /// Seq of the last event returned, or the `after` given when none is.
    pub next_after: u64,
}

/// How many partitions the feed has (P >= 1); read each with `partition=0..P-1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventPartitions {
    pub partitions: u32,
}

/// What the single endpoint would have answered for one op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchResult {
    pub status: u16,
    /// A hold object, or an error body.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub body: serde_json::Value,
}

/// One result per op, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchResponse {
    pub results: Vec<BatchResult>,
}

/// Body of `PUT /v1/pools/{pool}`. A rule left as `None` is unset by the PUT.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolBody {
    pub total: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_user_limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub starts_at_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ends_at_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub low_stock_threshold: Option<u64>,
    /// Only when the pool is created (an existing pool keeps its count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segments: Option<u32>,
}

impl PoolBody {
    /// A pool of `total` units with no rules.
    pub fn with_total(total: u64) -> Self {
        PoolBody {
            total,
            ..PoolBody::default()
        }
    }
}

/// Body of `POST /v1/pools/{pool}/restock`. With a `request_id`, a retry of the same restock
/// changes nothing (left out of the JSON when absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestockBody {
    pub delta: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// Body of `POST /v1/holds`. `confirm: false` is left out of the JSON (it is the default), so a
/// retry built from the same struct is always the same request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldBody {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pool_spec_omits_unset_rules() {
        let body = PoolBody::with_total(100);
        assert_eq!(serde_json::to_value(&body).unwrap(), json!({"total": 100}));
    }

    #[test]
    fn pool_spec_names_every_rule_as_the_contract() {
        let body = PoolBody {
            total: 10,
            per_user_limit: Some(2),
            starts_at_ms: Some(1_000),
            ends_at_ms: Some(2_000),
            low_stock_threshold: Some(0),
            segments: Some(3),
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({
                "total": 10,
                "per_user_limit": 2,
                "starts_at_ms": 1_000,
                "ends_at_ms": 2_000,
                "low_stock_threshold": 0,
                "segments": 3,
            })
        );
    }

    #[test]
    fn reserve_minimal_has_only_required_fields() {
        let body = HoldBody {
            hold_id: "o-1".into(),
            items: vec![HoldItem::new("sku-1", 2)],
            ..HoldBody::default()
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"hold_id": "o-1", "items": [{"pool": "sku-1", "qty": 2}]})
        );
    }

    #[test]
    fn reserve_full_names_every_field_as_the_contract() {
        let body = HoldBody {
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
        let pools: PoolList = serde_json::from_value(json!({
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
        assert_eq!(events.events[1].kind, EventType::Held);
        assert_eq!(events.events[1].pool, None);
        assert_eq!(events.events[1].created_at_ms, Some(6));
        assert_eq!(events.events[0].created_at_ms, None);
        assert!(serde_json::to_value(&events.events[0])
            .unwrap()
            .get("created_at_ms")
            .is_none());
    }

    #[test]
    fn responses_accept_fields_they_do_not_know() {
        let hold: HoldObject = serde_json::from_value(json!({
            "hold_id": "o-1", "status": "held", "user": null, "novelty": 1,
            "items": [{"pool": "a", "qty": 1, "novelty": true}],
            "created_at_ms": 1, "expires_at_ms": 2, "finished_at_ms": null, "partition": 0
        }))
        .unwrap();
        assert_eq!(hold.items, vec![HoldItem::new("a", 1)]);
        assert_eq!(hold.status, HoldStatus::Held);
        assert_eq!(hold.user, None);
    }

    /// The server writes the borrowed form, a client reads the owned one: the same JSON.
    #[test]
    fn borrowed_and_owned_ids_write_the_same_json() {
        let borrowed = EventObject::<&str> {
            seq: 3,
            at_ms: 9,
            kind: EventType::Restocked,
            pool: Some("sku-1"),
            hold_id: None,
            user: None,
            items: Some(vec![HoldItem {
                pool: "sku-1",
                qty: 2,
            }]),
            available: Some(4),
            total: Some(6),
            delta: Some(-1),
            low_stock_threshold: None,
            created_at_ms: None,
            expires_at_ms: None,
            restock: None,
            request_id: Some("r-1"),
            segments: Some(vec![SegmentTake {
                pool: "sku-1",
                segment: 1,
                qty: 2,
            }]),
        };
        let written = serde_json::to_value(&borrowed).unwrap();
        let read: EventObject = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(serde_json::to_value(&read).unwrap(), written);
        assert_eq!(read.request_id.as_deref(), Some("r-1"));
        assert_eq!(
            written["segments"],
            json!([{"pool": "sku-1", "segment": 1, "qty": 2}])
        );
        assert_eq!(written.get("hold_id"), None);
        assert_eq!(HoldStatus::Refunded.as_str(), "refunded");
        assert_eq!(
            serde_json::to_value(HoldStatus::Refunded).unwrap(),
            json!("refunded")
        );
    }
}
