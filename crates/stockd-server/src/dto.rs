//! Request bodies and query strings as they arrive on the wire, and their conversion into core
//! commands with the contract's defaults filled in.
//!
//! Every body refuses unknown fields (so `ttl` instead of `ttl_ms` is a 422, not ignored), and
//! every optional field is an `Option`, so `null` and absent mean the same. Identifiers parse
//! into core newtypes while deserialising, so a bad one is a 422 with the field's name. Range
//! rules are left to `Command::validate`; this module must never re-check them or decide
//! anything about stock.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use stockd_core::limits::{HOLD_LIST_LIMIT_DEFAULT, HOLD_TTL_MS_DEFAULT, POOL_LIST_LIMIT_DEFAULT};
use stockd_core::{Command, HoldId, OwnerId, PoolId, PoolSpec, RequestId, ReserveRequest, UserId};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;
use crate::json::{parse, Wire};
use crate::wire::{HoldItem, HoldStatus};

/// `PUT /v1/pools/{pool}`. A rule left out (or null) is unset.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PoolBody {
    /// Units in the pool: 0..=1_000_000_000_000.
    pub total: u64,
    /// Most units one user may hold + buy: 1..=1_000_000_000.
    pub per_user_limit: Option<u64>,
    /// The sale opens at this time (inclusive).
    pub starts_at_ms: Option<u64>,
    /// The sale closes at this time (exclusive).
    pub ends_at_ms: Option<u64>,
    /// A `low_stock` event fires when available falls to or below this.
    pub low_stock_threshold: Option<u64>,
}

impl Wire for PoolBody {}

impl PoolBody {
    pub(crate) fn into_spec(self) -> PoolSpec {
        PoolSpec {
            total: self.total,
            per_user_limit: self.per_user_limit,
            starts_at_ms: self.starts_at_ms,
            ends_at_ms: self.ends_at_ms,
            low_stock_threshold: self.low_stock_threshold,
        }
    }
}

/// `POST /v1/pools/{pool}/restock`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RestockBody {
    /// Non-zero change of total and available; may be negative.
    pub delta: i64,
    /// Names this restock so that a retry changes nothing: the same id, pool and delta answer
    /// the pool as it is now; the id with another pool or delta is `request_id_conflict`.
    /// Remembered for the hold retention from the restock.
    #[schema(value_type = Option<String>)]
    pub request_id: Option<RequestId>,
}

impl Wire for RestockBody {}

impl RestockBody {
    pub(crate) fn into_command(self, pool: PoolId) -> Command {
        Command::Restock {
            pool,
            delta: self.delta,
            request_id: self.request_id,
        }
    }
}

/// `?if_absent=true` on `PUT /v1/pools/{pool}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct PutPoolQuery {
    /// Create only when missing; an existing pool is returned unchanged (200).
    pub if_absent: Option<bool>,
}

impl Wire for PutPoolQuery {}

/// `GET /v1/pools` paging.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListPoolsQuery {
    /// Only pools whose id starts with this (default: all).
    pub prefix: Option<String>,
    /// The `next` cursor of the previous page.
    pub after: Option<String>,
    /// Pools per page: 1..=1000, default 100.
    pub limit: Option<usize>,
}

impl Wire for ListPoolsQuery {}

impl ListPoolsQuery {
    pub(crate) fn into_command(self) -> Command {
        Command::ListPools {
            prefix: self.prefix.unwrap_or_default(),
            after: self.after,
            limit: self.limit.unwrap_or(POOL_LIST_LIMIT_DEFAULT),
        }
    }
}

/// `GET /v1/holds` filters and paging.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListHoldsQuery {
    /// Only holds with an item in this pool.
    #[param(value_type = Option<String>)]
    pub pool: Option<PoolId>,
    /// Only holds of this user.
    #[param(value_type = Option<String>)]
    pub user: Option<UserId>,
    /// Only holds in this status (a hold past its deadline is `expired`, swept or not).
    pub status: Option<HoldStatus>,
    /// The `next` cursor of the previous page.
    pub after: Option<String>,
    /// Holds per page: 1..=1000, default 100. A page may hold fewer (see `next`).
    pub limit: Option<usize>,
}

impl Wire for ListHoldsQuery {
    const DOOR: &'static str = "holds";
}

impl ListHoldsQuery {
    pub(crate) fn into_command(self) -> Command {
        Command::ListHolds {
            pool: self.pool,
            user: self.user,
            status: self.status.map(HoldStatus::into_core),
            after: self.after,
            limit: self.limit.unwrap_or(HOLD_LIST_LIMIT_DEFAULT),
        }
    }
}

/// `GET /v1/events` partition, paging and long-poll.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    /// The partition to read: 0..P-1 (`GET /v1/events/partitions` gives P). Optional only when
    /// P is 1.
    // Kept as text so that a bad value is refused with the range it must be in, not a parser's
    // message; documented as the integer it must be.
    #[param(value_type = Option<u32>, minimum = 0)]
    pub partition: Option<String>,
    /// Return events with seq greater than this (default 0).
    pub after: Option<u64>,
    /// Events per page: 1..=1000, default 100.
    pub limit: Option<usize>,
    /// Wait up to this long (0..=30000 ms) for a first event when none is there yet.
    pub wait_ms: Option<u64>,
}

impl Wire for EventsQuery {
    const DOOR: &'static str = "events";
}

/// `POST /v1/holds`, and the `reserve` op of a batch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HoldBody {
    /// Chosen by the client; the idempotency key.
    #[schema(value_type = String)]
    pub hold_id: HoldId,
    /// Buyer id, required by pools with a per-user limit.
    #[schema(value_type = Option<String>)]
    pub user: Option<UserId>,
    /// 1..=64 items, pools distinct.
    #[serde(deserialize_with = "crate::json::objects")]
    pub items: Vec<HoldItem>,
    /// 1_000..=86_400_000, default 600_000.
    pub ttl_ms: Option<u64>,
    /// Reserve and confirm in one step; default false.
    pub confirm: Option<bool>,
    /// Wait up to this long (0..=30_000 ms, default 0) for stock released by others.
    pub wait_ms: Option<u64>,
}

impl Wire for HoldBody {}

impl HoldBody {
    pub(crate) fn into_command(self) -> Command {
        Command::Reserve(ReserveRequest {
            hold_id: self.hold_id,
            user: self.user,
            items: self
                .items
                .into_iter()
                .map(|item| stockd_core::HoldItem {
                    pool: item.pool,
                    qty: item.qty,
                })
                .collect(),
            ttl_ms: self.ttl_ms.unwrap_or(HOLD_TTL_MS_DEFAULT),
            confirm: self.confirm.unwrap_or(false),
            wait_ms: self.wait_ms.unwrap_or(0),
        })
    }
}

/// `POST /v1/holds/{hold_id}/extend`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExtendBody {
    /// New deadline is now + ttl_ms: 1_000..=86_400_000.
    pub ttl_ms: u64,
}

impl Wire for ExtendBody {}

/// `POST /v1/holds/{hold_id}/refund`. The body may also be empty or `null` (the default).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RefundBody {
    /// Sold units go back to available (true, the default) or leave the pool (false: sold and
    /// total both shrink, a return that cannot be sold again).
    pub restock: Option<bool>,
}

impl Wire for RefundBody {}

impl RefundBody {
    pub(crate) fn into_command(self, hold_id: HoldId) -> Command {
        Command::Refund {
            hold_id,
            restock: self.restock.unwrap_or(true),
        }
    }
}

/// `POST /v1/locks/{name}/acquire`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LockAcquireBody {
    #[schema(value_type = String)]
    pub owner: OwnerId,
    /// Lease length: 100..=3_600_000.
    pub ttl_ms: u64,
    /// Wait up to this long (0..=30_000 ms, default 0) for the lock to free up.
    pub wait_ms: Option<u64>,
}

impl Wire for LockAcquireBody {
    const DOOR: &'static str = "lock";
}

/// `POST /v1/locks/{name}/renew`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LockRenewBody {
    #[schema(value_type = String)]
    pub owner: OwnerId,
    /// The fencing token acquire returned.
    pub token: u64,
    /// New lease length from now: 100..=3_600_000.
    pub ttl_ms: u64,
}

impl Wire for LockRenewBody {
    const DOOR: &'static str = "lock";
}

/// `POST /v1/locks/{name}/release`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LockReleaseBody {
    #[schema(value_type = String)]
    pub owner: OwnerId,
    pub token: u64,
}

impl Wire for LockReleaseBody {
    const DOOR: &'static str = "lock";
}

/// `POST /v1/batch`. Ops stay raw JSON text here so that each is parsed on its own: one bad op
/// gets its own 422 result while the others run. Text, not `serde_json::Value`: a `Value` keeps
/// the last of two equal keys, so an op with a repeated field would run where its single
/// endpoint refuses it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchBody {
    /// 1..=1000 ops, applied in order.
    #[schema(value_type = Vec<BatchOp>)]
    pub ops: Vec<Box<serde_json::value::RawValue>>,
}

impl Wire for BatchBody {}

/// One op of a batch, as the OpenAPI document shows it: `op` names it; the other fields are
/// those of the single endpoint. Decoded by [`decode_op`], not by this type: the op's other
/// fields go through the single endpoint's own body type.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
#[allow(dead_code)] // The document's picture of an op; `decode_op` does the decoding.
pub(crate) enum BatchOp {
    /// Same fields as `POST /v1/holds`.
    Reserve(HoldBody),
    Confirm {
        #[schema(value_type = String)]
        hold_id: HoldId,
    },
    Release {
        #[schema(value_type = String)]
        hold_id: HoldId,
    },
    Refund {
        #[schema(value_type = String)]
        hold_id: HoldId,
        /// As `POST /v1/holds/{hold_id}/refund`'s body: default true.
        restock: Option<bool>,
    },
    Extend {
        #[schema(value_type = String)]
        hold_id: HoldId,
        ttl_ms: u64,
    },
}

/// The fields of confirm and release ops: the hold the single endpoint takes from its path.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HoldRefOp {
    hold_id: HoldId,
}

impl Wire for HoldRefOp {}

/// The fields of a refund op: the path's hold and the single endpoint's body ([`RefundBody`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RefundOp {
    hold_id: HoldId,
    restock: Option<bool>,
}

impl Wire for RefundOp {}

/// The fields of an extend op: the path's hold and the single endpoint's body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExtendOp {
    hold_id: HoldId,
    ttl_ms: u64,
}

impl Wire for ExtendOp {}

/// Any JSON object: how a batch op that is not one is refused, in the words a body that is not
/// one gets.
struct AnyObject;

impl<'de> Deserialize<'de> for AnyObject {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(deserializer).map(|_| AnyObject)
    }
}

impl Wire for AnyObject {}

/// The ops a batch takes, by their `op`.
const OPS: [&str; 5] = ["reserve", "confirm", "release", "refund", "extend"];

/// An op's fields in the order written, each value as its raw JSON text.
struct Fields<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;

        impl<'de> serde::de::Visitor<'de> for FieldsVisitor {
            type Value = Fields<'de>;

            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Fields<'de>, A::Error> {
                let mut fields = Vec::new();
                while let Some(key) = map.next_key()? {
                    fields.push((key, map.next_value()?));
                }
                Ok(Fields(fields))
            }
        }

        deserializer.deserialize_map(FieldsVisitor)
    }
}

/// Decodes one batch op as its single endpoint decodes its request: `op` is read (once, a
/// string, a known op), and the other fields, in the order written, go through the endpoint's
/// own body type and decoder ([`parse`]): the same bytes are refused the same way, with the
/// same message, a repeated field included, wherever they arrive.
pub(crate) fn decode_op(op: &RawValue) -> Result<Command, ApiError> {
    let Fields(fields) = match serde_json::from_str(op.get()) {
        Ok(fields) => fields,
        // Not an object, or not JSON: the single endpoint's reading of a body says which, in
        // its words. What it lets through (a key that is not text) is not JSON all the same.
        Err(error) => {
            return Err(match parse::<AnyObject>(op.get().as_bytes()) {
                Err(refusal) => refusal,
                Ok(AnyObject) => ApiError::InvalidJson(error.to_string()),
            })
        }
    };
    let mut name = None;
    let mut rest = String::with_capacity(op.get().len());
    rest.push('{');
    for (key, value) in &fields {
        if key == "op" {
            if name.is_some() {
                return Err(ApiError::invalid(
                    "\"op\" appears more than once: a field may appear once",
                ));
            }
            name = Some(value);
            continue;
        }
        if rest.len() > 1 {
            rest.push(',');
        }
        rest.push_str(&serde_json::Value::from(key.as_ref()).to_string());
        rest.push(':');
        rest.push_str(value.get());
    }
    rest.push('}');
    let name = name
        .ok_or_else(|| ApiError::invalid(format!("op is required: one of {}", OPS.join(", "))))?;
    let name: String = serde_json::from_str(name.get()).map_err(|_| {
        ApiError::invalid(format!(
            "op: must be one of {}, got {}",
            OPS.join(", "),
            name.get()
        ))
    })?;
    let bytes = rest.as_bytes();
    Ok(match name.as_str() {
        "reserve" => parse::<HoldBody>(bytes)?.into_command(),
        "confirm" => Command::Confirm {
            hold_id: parse::<HoldRefOp>(bytes)?.hold_id,
        },
        "release" => Command::Release {
            hold_id: parse::<HoldRefOp>(bytes)?.hold_id,
        },
        "refund" => {
            let RefundOp { hold_id, restock } = parse(bytes)?;
            RefundBody { restock }.into_command(hold_id)
        }
        "extend" => {
            let ExtendOp { hold_id, ttl_ms } = parse(bytes)?;
            Command::Extend { hold_id, ttl_ms }
        }
        other => {
            return Err(ApiError::invalid(format!(
                "op: unknown op {other:?}: the ops are {}",
                OPS.join(", ")
            )))
        }
    })
}
