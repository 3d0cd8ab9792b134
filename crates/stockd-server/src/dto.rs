//! Request bodies and query strings as they arrive on the wire, and their conversion into core
//! commands with the contract's defaults filled in.
//!
//! Every body refuses unknown fields (so `ttl` instead of `ttl_ms` is a 422, not ignored), and
//! every optional field is an `Option`, so `null` and absent mean the same. Identifiers parse
//! into core newtypes while deserialising, so a bad one is a 422 with the field's name. Range
//! rules are left to `Command::validate`; this module must never re-check them or decide
//! anything about stock.

use std::borrow::Cow;

use serde::de::value::MapAccessDeserializer;
use serde::de::DeserializeSeed;
use serde::Deserialize;
use serde_json::value::RawValue;
use stockd_core::limits::{
    BATCH_OPS_MAX, HOLD_LIST_LIMIT_DEFAULT, HOLD_TTL_MS_DEFAULT, POOL_LIST_LIMIT_DEFAULT,
};
use stockd_core::{Command, HoldId, OwnerId, PoolId, PoolSpec, RequestId, ReserveRequest, UserId};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;
use crate::json::{parse, Wire};
use crate::wire::{self, HoldStatus};

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
    /// Segments the pool is split into (1..=64, default 1), fixed when it is created: an
    /// existing pool keeps its count, and another count is 409 `segments_fixed`.
    pub segments: Option<u64>,
}

impl Wire for PoolBody {}

impl PoolBody {
    /// The rule fields and total (the segment count is the command's own field).
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
            status: self.status.map(wire::core_status),
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
    #[schema(value_type = Vec<wire::HoldItem>)]
    pub items: Vec<ItemBody>,
    /// How long the hold stays held unless confirmed, in ms: 1_000..=86_400_000.
    pub ttl_ms: Option<u64>,
    /// Reserve and confirm in one step.
    pub confirm: Option<bool>,
    /// Wait up to this long (0..=30_000 ms) for stock released by others.
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

/// One item of a reserve: [`wire::HoldItem`] (which the document shows) read strictly, its pool
/// parsed as it is read. The contract's type reads leniently, as a response; a request refuses
/// what it does not know.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ItemBody {
    pub pool: PoolId,
    pub qty: u64,
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
    /// Sold units go back to available (true) or leave the pool (false: sold and total both
    /// shrink, a return that cannot be sold again).
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
    /// Wait up to this long (0..=30_000 ms) for the lock to free up.
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

/// `POST /v1/batch`.
// Ops stay raw JSON text here so that each is parsed on its own: one bad op gets its own 422
// result while the others run. Text, not `serde_json::Value`: a `Value` keeps the last of two
// equal keys, so an op with a repeated field would run where its single endpoint refuses it.
// What an op may be is documented by `openapi::batch_ops`, from the single endpoints' body
// types that `decode_op` decodes the ops with.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchBody {
    /// 1..=1000 ops, applied in order.
    #[schema(value_type = Vec<serde_json::Value>)]
    pub ops: Vec<Box<serde_json::value::RawValue>>,
}

impl Wire for BatchBody {}

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
/// own body type ([`HoldBody`], ...): the same bytes are refused the same way, with the same
/// message, a repeated field included, wherever they arrive.
///
/// An op whose first field is `op` is read in one pass ([`QuickOp`]); any other op, and every
/// op that pass refuses, is read again by [`decode_op_fully`], which names the field at fault.
pub(crate) fn decode_op(op: &RawValue) -> Result<Command, ApiError> {
    match serde_json::from_str::<QuickOp>(op.get()) {
        Ok(QuickOp(command)) => Ok(command),
        Err(_) => decode_op_fully(op),
    }
}

/// [`decode_op`]'s full reading: the op's fields are split from `op` and go through the
/// endpoint's decoder ([`parse`]), whose refusals name the field, what was sent and what is
/// allowed. It tracks the path of every value it reads, so it is kept for the ops the one-pass
/// reading did not take.
fn decode_op_fully(op: &RawValue) -> Result<Command, ApiError> {
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

/// Text read from JSON, borrowed from the input where it has no escapes (most keys, every
/// identifier), so that reading it allocates nothing. Accepts exactly what a `String` accepts.
struct Text<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;

        impl<'de> serde::de::Visitor<'de> for TextVisitor {
            type Value = Text<'de>;

            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a string")
            }

            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                text: &'de str,
            ) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(text)))
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text.to_owned())))
            }
        }

        deserializer.deserialize_str(TextVisitor)
    }
}

/// One batch op read in one pass, straight from the text: its first field is `op`, a string
/// naming a known op, and the fields after it are read by the endpoint's own body type, as
/// [`parse`] reads them but without tracking each value's path. It takes an op only where
/// [`decode_op_fully`] takes it, with the same command: the same fields in the same order go
/// through the same type, a second `op` is an unknown field of that type, and what is not an
/// object is not a map. Whatever it refuses, it refuses without a word: the full reading says
/// why.
struct QuickOp(Command);

impl<'de> Deserialize<'de> for QuickOp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct QuickOpVisitor;

        impl<'de> serde::de::Visitor<'de> for QuickOpVisitor {
            type Value = QuickOp;

            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a batch op with op first")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<QuickOp, A::Error> {
                use serde::de::Error;
                match map.next_key::<Text>()? {
                    Some(Text(key)) if key == "op" => {}
                    _ => return Err(A::Error::custom("not read in one pass")),
                }
                let Text(name) = map.next_value()?;
                let fields = MapAccessDeserializer::new(map);
                Ok(QuickOp(match name.as_ref() {
                    "reserve" => HoldBody::deserialize(fields)?.into_command(),
                    "confirm" => Command::Confirm {
                        hold_id: HoldRefOp::deserialize(fields)?.hold_id,
                    },
                    "release" => Command::Release {
                        hold_id: HoldRefOp::deserialize(fields)?.hold_id,
                    },
                    "refund" => {
                        let RefundOp { hold_id, restock } = RefundOp::deserialize(fields)?;
                        RefundBody { restock }.into_command(hold_id)
                    }
                    "extend" => {
                        let ExtendOp { hold_id, ttl_ms } = ExtendOp::deserialize(fields)?;
                        Command::Extend { hold_id, ttl_ms }
                    }
                    _ => return Err(A::Error::custom("not read in one pass")),
                }))
            }
        }

        deserializer.deserialize_map(QuickOpVisitor)
    }
}

/// A batch's ops, as [`decode_batch`] read them.
pub(crate) enum BatchOps {
    /// Every op decoded, in order: the body was read in one pass.
    Decoded(Vec<Command>),
    /// The ops as the body's own reading ([`BatchBody`]) left them, each to be decoded on its
    /// own by [`decode_op`]: some op did not decode in one pass, and may be refused.
    Raw(Vec<Box<RawValue>>),
}

impl BatchOps {
    pub(crate) fn len(&self) -> usize {
        match self {
            BatchOps::Decoded(commands) => commands.len(),
            BatchOps::Raw(ops) => ops.len(),
        }
    }
}

/// Reads a `POST /v1/batch` body. A body of good ops (the usual case) is read in one pass, each
/// op by [`QuickOp`] on the way: nothing is copied and no path is tracked. Anything else (a bad
/// op, too many ops, a body that is not `{"ops": [...]}`) is read again as [`BatchBody`] by the
/// endpoint decoder ([`parse`]), which refuses a bad body in its words, or leaves the ops raw for
/// the batch to decode (and refuse) one by one.
pub(crate) fn decode_batch(body: &[u8]) -> Result<BatchOps, ApiError> {
    // The commands' list is allocated once, for as many ops as the body can hold (no op takes
    // fewer than `{"op":"confirm","hold_id":"a"}`'s 30 bytes): grown by doubling, it would
    // touch twice the memory and copy itself ten times for a full batch.
    let capacity = (body.len() / 30 + 1).min(BATCH_OPS_MAX);
    // Checked as UTF-8 once, here, rather than string by string by serde_json.
    let quick = std::str::from_utf8(body).ok().and_then(|text| {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let commands = QuickBatch { capacity }
            .deserialize(&mut deserializer)
            .ok()?;
        deserializer.end().ok()?;
        Some(commands)
    });
    match quick {
        Some(commands) => Ok(BatchOps::Decoded(commands)),
        None => Ok(BatchOps::Raw(parse::<BatchBody>(body)?.ops)),
    }
}

/// A batch body read in one pass: `{"ops": [...]}` and nothing else, at most [`BATCH_OPS_MAX`]
/// ops, each a [`QuickOp`], into a list of `capacity` commands. Takes a body only where
/// [`BatchBody`] takes it and every op then decodes.
struct QuickBatch {
    capacity: usize,
}

impl<'de> DeserializeSeed<'de> for QuickBatch {
    type Value = Vec<Command>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for QuickBatch {
    type Value = Vec<Command>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a batch body")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Vec<Command>, A::Error> {
        use serde::de::Error;
        match map.next_key::<Text>()? {
            Some(Text(key)) if key == "ops" => {}
            _ => return Err(A::Error::custom("not read in one pass")),
        }
        let commands = map.next_value_seed(QuickOps {
            capacity: self.capacity,
        })?;
        // A second `ops`, or any other field, is for the full reading to refuse.
        if map.next_key::<Text>()?.is_some() {
            return Err(A::Error::custom("not read in one pass"));
        }
        Ok(commands)
    }
}

/// The `ops` list of a [`QuickBatch`].
struct QuickOps {
    capacity: usize,
}

impl<'de> DeserializeSeed<'de> for QuickOps {
    type Value = Vec<Command>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for QuickOps {
    type Value = Vec<Command>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a list of batch ops")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Command>, A::Error> {
        let mut commands = Vec::with_capacity(self.capacity);
        while let Some(QuickOp(command)) = seq.next_element()? {
            // Too many ops: the full reading counts them and says so.
            if commands.len() == BATCH_OPS_MAX {
                return Err(serde::de::Error::custom("not read in one pass"));
            }
            commands.push(command);
        }
        Ok(commands)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ops of every kind and of many shapes, good and bad: `op` first, later or twice, escaped
    /// keys and values, unknown and repeated fields, wrong types, nulls, what is not an object.
    const OPS: &[&str] = &[
        r#"{"op": "reserve", "hold_id": "h-1", "items": [{"pool": "p", "qty": 2}]}"#,
        r#"{"op":"reserve","hold_id":"h-1","user":"u","items":[{"pool":"p","qty":1},{"pool":"q","qty":3}],"ttl_ms":5000,"confirm":true,"wait_ms":10}"#,
        r#"{"op": "reserve", "hold_id": "h-1", "user": null, "items": [{"qty": 1, "pool": "p"}], "ttl_ms": null, "confirm": null, "wait_ms": null}"#,
        r#"{"op": "reserve", "hold_id": "h-1", "items": []}"#,
        r#"{"op": "reserve", "hold_id": "h-1"}"#,
        r#"{"op": "reserve", "hold_id": "h 1", "items": [{"pool": "p", "qty": 1}]}"#,
        r#"{"op": "reserve", "hold_id": "h-1", "items": [{"pool": "p", "qty": "1"}]}"#,
        r#"{"op": "reserve", "hold_id": "h-1", "items": [{"pool": "p", "qty": 1e400}]}"#,
        r#"{"op": "reserve", "hold_id": "h-1", "items": [[ "p", 1 ]]}"#,
        r#"{"op": "reserve", "hold_id": "h-1", "items": [{"pool": "p", "qty": 1}], "ttl": 5}"#,
        r#"{"op": "reserve", "hold_id": "h-1", "hold_id": "h-2", "items": [{"pool": "p", "qty": 1}]}"#,
        r#"{"op": "reserve", "hold_id": "h-1", "items": [{"pool": "p", "qty": 1, "qty": 2}]}"#,
        r#"{"op": "reserve", "items": [{"pool": "p", "qty": 1}], "hold_id": "h-1", "op": "reserve"}"#,
        r#"{"hold_id": "h-1", "op": "reserve", "items": [{"pool": "p", "qty": 1}]}"#,
        r#"{"o\u0070": "re\u0073erve", "hold\u005fid": "h\u002d1", "items": [{"pool": "\u0070", "qty": 1}]}"#,
        r#"{"op": "reserve", "hold_id": "h-1", "items": [{"pool": "p", "qty": 1}], "user": "\ud800"}"#,
        r#"{"op": "reserve", "hold_id": "h-1", "items": [{"pool": "p", "qty": 1}], "confirm": 1}"#,
        r#"{"op": "confirm", "hold_id": "h-1"}"#,
        r#"{"op": "confirm", "hold_id": "h-1", "op": "confirm"}"#,
        r#"{"op": "confirm", "op": "release", "hold_id": "h-1"}"#,
        r#"{"op": "confirm"}"#,
        r#"{"op": "confirm", "hold_id": 7}"#,
        r#"{"op": "confirm", "hold_id": null}"#,
        r#"{"op": "release", "hold_id": "h-1"}"#,
        r#"{"op": "release", "hold_id": "h-1", "restock": true}"#,
        r#"{"op": "refund", "hold_id": "h-1"}"#,
        r#"{"op": "refund", "hold_id": "h-1", "restock": false}"#,
        r#"{"op": "refund", "hold_id": "h-1", "restock": null}"#,
        r#"{"op": "extend", "hold_id": "h-1", "ttl_ms": 60000}"#,
        r#"{"op": "extend", "hold_id": "h-1"}"#,
        r#"{"op": "extend", "hold_id": "h-1", "ttl_ms": -1}"#,
        r#"{"op": "nope", "hold_id": "h-1"}"#,
        r#"{"op": 1, "hold_id": "h-1"}"#,
        r#"{"op": null, "hold_id": "h-1"}"#,
        r#"{"op": ["confirm"], "hold_id": "h-1"}"#,
        r#"{"hold_id": "h-1"}"#,
        r#"{}"#,
        r#"["confirm", "h-1"]"#,
        r#""confirm""#,
        r#"null"#,
        r#"7"#,
    ];

    /// Variants of `text`: every byte deleted, doubled, or replaced by bytes that change JSON's
    /// structure, so that the one-pass reading meets its edges.
    fn variants(text: &str) -> Vec<String> {
        let bytes = text.as_bytes();
        let mut out = vec![text.to_string()];
        for at in 0..bytes.len() {
            let mut edits: Vec<Vec<u8>> = Vec::new();
            let mut deleted = bytes.to_vec();
            deleted.remove(at);
            edits.push(deleted);
            let mut doubled = bytes.to_vec();
            doubled.insert(at, bytes[at]);
            edits.push(doubled);
            for byte in [b'"', b',', b'}', b']', b'1', b'\\', b' ', b'n', b'x'] {
                let mut replaced = bytes.to_vec();
                replaced[at] = byte;
                edits.push(replaced);
            }
            out.extend(
                edits
                    .into_iter()
                    .filter_map(|edit| String::from_utf8(edit).ok()),
            );
        }
        out
    }

    /// The one-pass reading of an op takes it only where the full reading takes it, with the
    /// same command: so `decode_op` answers exactly what the full reading answers.
    #[test]
    fn an_op_read_in_one_pass_is_read_as_the_full_reading_reads_it() {
        let mut quick = 0;
        for text in OPS.iter().flat_map(|op| variants(op)) {
            let Ok(raw) = serde_json::from_str::<&RawValue>(&text) else {
                continue;
            };
            let full = decode_op_fully(raw);
            assert_eq!(decode_op(raw), full, "{text}");
            if let Ok(QuickOp(command)) = serde_json::from_str::<QuickOp>(&text) {
                quick += 1;
                assert_eq!(Ok(command), full, "{text}");
            }
        }
        assert!(quick > 100, "the one-pass reading took only {quick} ops");
    }

    /// A batch body read in one pass gives the commands the full reading gives its ops, and one
    /// that is not (a bad op, a body of another shape) is left to the full reading.
    #[test]
    fn a_batch_read_in_one_pass_is_read_as_the_full_reading_reads_it() {
        let good = r#"{"op": "confirm", "hold_id": "h-1"}"#;
        let mut decoded = 0;
        let mut bodies = Vec::new();
        for text in OPS.iter().flat_map(|op| variants(op)) {
            bodies.push(format!(r#"{{"ops": [{good}, {text}]}}"#));
        }
        bodies.extend(variants(&format!(r#"{{"ops": [{good}, {good}]}}"#)));
        bodies.extend(
            [
                r#"{"ops": []}"#,
                r#"{"ops": [], "ops": []}"#,
                r#"{"ops": [], "x": 1}"#,
                r#"{"x": 1, "ops": []}"#,
                r#"{"o\u0070s": [{"op": "confirm", "hold_id": "h-1"}]} "#,
                r#"[[{"op": "confirm", "hold_id": "h-1"}]]"#,
                r#"{"ops": null}"#,
                r#"{"ops": [{"op": "confirm", "hold_id": "h-1"}]} x"#,
            ]
            .map(String::from),
        );
        for body in &bodies {
            let full = parse::<BatchBody>(body.as_bytes());
            match decode_batch(body.as_bytes()) {
                Ok(BatchOps::Decoded(commands)) => {
                    decoded += 1;
                    let ops = full.unwrap_or_else(|error| panic!("{body}: {error:?}")).ops;
                    let fully: Vec<_> = ops.iter().map(|op| decode_op_fully(op)).collect();
                    let commands: Vec<_> = commands.into_iter().map(Ok).collect();
                    assert_eq!(commands, fully, "{body}");
                }
                // Left to the full reading, which answers for it.
                Ok(BatchOps::Raw(_)) | Err(_) => {}
            }
        }
        assert!(decoded > 100, "only {decoded} bodies were read in one pass");
    }

    /// At most `BATCH_OPS_MAX` ops are read in one pass; more are left for the batch to count.
    #[test]
    fn a_batch_of_too_many_ops_is_left_to_the_full_reading() {
        let body = |ops: usize| {
            let op = r#"{"op": "confirm", "hold_id": "h-1"}"#;
            format!(r#"{{"ops": [{}]}}"#, vec![op; ops].join(","))
        };
        assert!(matches!(
            decode_batch(body(BATCH_OPS_MAX).as_bytes()),
            Ok(BatchOps::Decoded(commands)) if commands.len() == BATCH_OPS_MAX
        ));
        assert!(matches!(
            decode_batch(body(BATCH_OPS_MAX + 1).as_bytes()),
            Ok(BatchOps::Raw(ops)) if ops.len() == BATCH_OPS_MAX + 1
        ));
    }
}
