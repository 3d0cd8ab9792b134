//! The snapshot formats: what a snapshot payload is, byte for byte, in this release and in the
//! earlier releases whose data directories must still open.
//!
//! A payload is the postcard encoding of a format tag, the durable state ([`Snapshot`]) and the
//! retained event feed. This module owns the tags, [`encode_snapshot`], [`decode_snapshot`] and
//! the shapes of the older formats with their upgrades to the current one. postcard is not
//! self-describing, so the tag is what keeps a payload from being misread: this module must
//! never change the shape of a format once released (a change is a new tag, and the old one
//! gets a reader here), and never read a payload whose tag it does not know. It does no I/O:
//! the engine's storage writes and reads the bytes.

use std::collections::BTreeMap;
use std::sync::Arc;

use hashbrown::HashMap;
use serde::{Deserialize, Serialize};

use super::holds::HoldStore;
use super::{FrozenSnapshot, Lock, Pool, RestockRequest, Snapshot, State};
use crate::command::HoldItem;
use crate::ids::{interning, HoldId, LockName, PoolId, RequestId, UserId};
use crate::record::{Event, EventKind};

/// Tags the payload layout of a snapshot. Change it whenever the serialised shape of the core's
/// state or of an event changes, so an older snapshot is refused clearly instead of being
/// misread (postcard is not self-describing). Distinctive on purpose: an untagged payload
/// starts with a small count. Format 3 added `restock` to events (refund without restock);
/// format 4 added restock request ids to the state and `request_id` to events; format 5 added
/// `created_at_ms` to events (held); format 6 added `segments` to pools.
pub const SNAPSHOT_FORMAT: u32 = 0x5354_4B06;

/// The previous release's format, still read: a data directory it wrote must open. Its pools
/// have no segment count ([`SnapshotV5`], [`PoolV5`]), its events are the current ones.
pub const SNAPSHOT_FORMAT_V5: u32 = 0x5354_4B05;

/// The format before that, still read: its state is format 5's, its events have no
/// `created_at_ms` ([`EventV4`]).
pub const SNAPSHOT_FORMAT_V4: u32 = 0x5354_4B04;

/// The format before that, still read: its state has no restock request ids ([`SnapshotV3`]),
/// its events no `request_id` ([`EventV3`]).
pub const SNAPSHOT_FORMAT_V3: u32 = 0x5354_4B03;

/// The format before that, still read: its events have no `restock` either ([`EventV2`]).
pub const SNAPSHOT_FORMAT_V2: u32 = 0x5354_4B02;

/// Why a snapshot payload cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The tag is a known format but the bytes do not decode as it.
    #[error("cannot decode snapshot: {0}")]
    Decode(#[from] postcard::Error),
    /// The tag is none of the formats this release reads.
    #[error("snapshot payload format {found:#x} is not a supported one")]
    Format { found: u32 },
}

/// The on-disk shape of a snapshot, as written: the core's durable state plus the retained
/// event feed.
#[derive(Serialize)]
struct SnapshotRef<'a> {
    format: u32,
    state: &'a Snapshot,
    events: Vec<EventV5Ref<'a>>,
}

/// An event as formats 5 and 6 store it ([`EventV5`]), borrowed from an [`Event`] to be written:
/// every field in [`EventV5`]'s order (postcard is positional, and writes a nested struct as
/// its fields), and nothing of the later `segments`, which only a Redis Cluster sets.
#[derive(Serialize)]
struct EventV5Ref<'a> {
    seq: u64,
    at_ms: u64,
    kind: EventKind,
    pool: &'a Option<PoolId>,
    hold_id: &'a Option<HoldId>,
    user: &'a Option<UserId>,
    items: &'a Option<Arc<[HoldItem]>>,
    available: Option<u64>,
    total: Option<u64>,
    delta: Option<i64>,
    low_stock_threshold: Option<u64>,
    expires_at_ms: Option<u64>,
    restock: Option<bool>,
    request_id: &'a Option<RequestId>,
    created_at_ms: Option<u64>,
}

impl<'a> From<&'a Event> for EventV5Ref<'a> {
    fn from(event: &'a Event) -> Self {
        EventV5Ref {
            seq: event.seq,
            at_ms: event.at_ms,
            kind: event.kind,
            pool: &event.pool,
            hold_id: &event.hold_id,
            user: &event.user,
            items: &event.items,
            available: event.available,
            total: event.total,
            delta: event.delta,
            low_stock_threshold: event.low_stock_threshold,
            expires_at_ms: event.expires_at_ms,
            restock: event.restock,
            request_id: &event.request_id,
            created_at_ms: event.created_at_ms,
        }
    }
}

/// An event of formats 5 and 6 read only for where it ends: each field in [`EventV5`]'s order,
/// the ids borrowed from the bytes and the items passed over, so that finding the events of a
/// million holds allocates nothing.
#[derive(Deserialize)]
#[allow(dead_code)]
struct EventV5Span<'a> {
    seq: u64,
    at_ms: u64,
    kind: EventKind,
    #[serde(borrow)]
    pool: Option<&'a str>,
    #[serde(borrow)]
    hold_id: Option<&'a str>,
    #[serde(borrow)]
    user: Option<&'a str>,
    items: Option<PassedOver<(&'a str, u64)>>,
    available: Option<u64>,
    total: Option<u64>,
    delta: Option<i64>,
    low_stock_threshold: Option<u64>,
    expires_at_ms: Option<u64>,
    restock: Option<bool>,
    #[serde(borrow)]
    request_id: Option<&'a str>,
    created_at_ms: Option<u64>,
}

/// A sequence of `T` read and dropped, one element at a time.
struct PassedOver<T>(std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for PassedOver<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Elements<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Elements<T> {
            type Value = PassedOver<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                while seq.next_element::<T>()?.is_some() {}
                Ok(PassedOver(std::marker::PhantomData))
            }
        }
        deserializer.deserialize_seq(Elements(std::marker::PhantomData))
    }
}

/// A snapshot of any format, as read: that format's state and events.
#[derive(Deserialize)]
struct SnapshotFile<S, E> {
    format: u32,
    state: S,
    events: Vec<E>,
}

/// Encodes `state` and the retained `events` as a payload of the current format.
pub fn encode_snapshot<'a>(state: &State, events: impl Iterator<Item = &'a Event>) -> Vec<u8> {
    let snapshot = SnapshotRef {
        format: SNAPSHOT_FORMAT,
        state: state.snapshot(),
        events: events.map(EventV5Ref::from).collect(),
    };
    postcard::to_allocvec(&snapshot).expect("serialising to memory cannot fail")
}

/// Appends `event` to `out` in the encoding formats 5 and 6 store events in ([`EventV5`]):
/// how the embedded engine keeps its retained feed, a fraction of an [`Event`]'s memory, and
/// what a snapshot copies as it is. `segments`, which only a Redis Cluster sets, is not kept.
pub fn encode_event(event: &Event, out: &mut Vec<u8>) {
    let vec = std::mem::take(out);
    *out = postcard::to_extend(&EventV5Ref::from(event), vec)
        .expect("serialising to memory cannot fail");
}

/// The event `encode_event` wrote to `bytes`.
pub fn decode_event(bytes: &[u8]) -> Result<Event, SnapshotError> {
    Ok(postcard::from_bytes::<EventV5>(bytes)?.into())
}

/// The seq of an encoded event (its first field), read without decoding the rest.
pub fn encoded_event_seq(bytes: &[u8]) -> Option<u64> {
    postcard::take_from_bytes::<u64>(bytes)
        .ok()
        .map(|(seq, _)| seq)
}

/// A payload of the current format from a frozen state ([`State::freeze`]) and the retained
/// events, each already encoded by [`encode_event`] (`count` of them): the bytes
/// [`encode_snapshot`] writes for the state it was frozen from, the events copied as they are.
pub fn encode_snapshot_of_encoded<'a>(
    state: &FrozenSnapshot,
    count: usize,
    events: impl Iterator<Item = &'a [u8]>,
) -> Vec<u8> {
    let mut out = Vec::new();
    write_snapshot_of_encoded(state, count, events, &mut out)
        .expect("writing to memory cannot fail");
    out
}

/// [`encode_snapshot_of_encoded`], written to `out` as it is encoded (a snapshot file, in
/// pieces) rather than gathered in memory.
pub fn write_snapshot_of_encoded<'a>(
    state: &FrozenSnapshot,
    count: usize,
    events: impl Iterator<Item = &'a [u8]>,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let head = (SNAPSHOT_FORMAT, state, count);
    postcard::to_io(&head, &mut *out).map_err(std::io::Error::other)?;
    let mut written = 0;
    for event in events {
        out.write_all(event)?;
        written += 1;
    }
    assert_eq!(written, count, "the events counted are the events written");
    Ok(())
}

/// The retained events of a decoded snapshot, each in the encoding of [`encode_event`]: the
/// payload's own bytes for formats 5 and 6, events re-encoded for older ones.
pub struct EncodedEvents<'a> {
    bytes: std::borrow::Cow<'a, [u8]>,
    ends: Vec<usize>,
}

impl EncodedEvents<'_> {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(start, end)| &self.bytes[start..end])
    }

    fn encoding(events: Vec<Event>) -> EncodedEvents<'static> {
        let mut bytes = Vec::new();
        let mut ends = Vec::with_capacity(events.len());
        for event in &events {
            encode_event(event, &mut bytes);
            ends.push(bytes.len());
        }
        EncodedEvents {
            bytes: std::borrow::Cow::Owned(bytes),
            ends,
        }
    }
}

/// Decodes a payload of any format this release reads into the current state and its events
/// encoded ([`EncodedEvents`]). For formats 5 and 6 each event is only read through to find its
/// end (`EventV5Span`: its shape, not its ids' grammar, which a reader's decoding checks), and
/// kept as the payload has it.
pub fn decode_snapshot_encoded(
    bytes: &[u8],
) -> Result<(Snapshot, EncodedEvents<'_>), SnapshotError> {
    let format = postcard::take_from_bytes::<u32>(bytes).map(|(format, _)| format);
    // Interned: a million holds name a few pools and users, each read into one allocation.
    let (state, rest): (Snapshot, &[u8]) = match format {
        Ok(SNAPSHOT_FORMAT) => {
            let ((_, state), rest) =
                interning(|| postcard::take_from_bytes::<(u32, Snapshot)>(bytes))?;
            (state, rest)
        }
        Ok(SNAPSHOT_FORMAT_V5) => {
            let ((_, state), rest) =
                interning(|| postcard::take_from_bytes::<(u32, SnapshotV5)>(bytes))?;
            (state.into(), rest)
        }
        _ => {
            let (state, events) = decode_snapshot(bytes)?;
            return Ok((state, EncodedEvents::encoding(events)));
        }
    };
    let (count, events) = postcard::take_from_bytes::<u64>(rest)?;
    let mut ends = Vec::with_capacity((count as usize).min(events.len()));
    let mut left = events;
    for _ in 0..count {
        let (_, after) = postcard::take_from_bytes::<EventV5Span>(left)?;
        left = after;
        ends.push(events.len() - left.len());
    }
    Ok((
        state,
        EncodedEvents {
            bytes: std::borrow::Cow::Borrowed(&events[..events.len() - left.len()]),
            ends,
        },
    ))
}

/// Decodes a payload of the current format or of format 5, 4, 3 or 2 into the current state
/// and events.
pub fn decode_snapshot(bytes: &[u8]) -> Result<(Snapshot, Vec<Event>), SnapshotError> {
    // The tag is checked first: an untagged or older payload may not decode at all.
    let format = postcard::take_from_bytes::<u32>(bytes).map(|(format, _)| format);
    match format {
        Ok(SNAPSHOT_FORMAT) => decode_as::<Snapshot, EventV5>(bytes, SNAPSHOT_FORMAT),
        Ok(SNAPSHOT_FORMAT_V5) => decode_as::<SnapshotV5, EventV5>(bytes, SNAPSHOT_FORMAT_V5),
        Ok(SNAPSHOT_FORMAT_V4) => decode_as::<SnapshotV5, EventV4>(bytes, SNAPSHOT_FORMAT_V4),
        Ok(SNAPSHOT_FORMAT_V3) => decode_as::<SnapshotV3, EventV3>(bytes, SNAPSHOT_FORMAT_V3),
        Ok(SNAPSHOT_FORMAT_V2) => decode_as::<SnapshotV3, EventV2>(bytes, SNAPSHOT_FORMAT_V2),
        _ => Err(SnapshotError::Format {
            found: format.unwrap_or(0),
        }),
    }
}

/// Decodes `bytes` as the format whose state is `S` and events `E`, and upgrades both.
fn decode_as<S, E>(bytes: &[u8], format: u32) -> Result<(Snapshot, Vec<Event>), SnapshotError>
where
    S: for<'de> Deserialize<'de> + Into<Snapshot>,
    E: for<'de> Deserialize<'de> + Into<Event>,
{
    let file: SnapshotFile<S, E> = interning(|| postcard::from_bytes(bytes))?;
    debug_assert_eq!(file.format, format);
    let events = file.events.into_iter().map(Into::into).collect();
    Ok((file.state.into(), events))
}

/// A pool as formats 2 to 5 stored it, before pools had segments: every field of [`Pool`] up
/// to `usage`, in the same order (postcard is positional). A second copy of those fields on
/// purpose: a released format is frozen, and must not follow [`Pool`]'s changes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolV5 {
    generation: u64,
    total: u64,
    available: u64,
    held: u64,
    sold: u64,
    per_user_limit: Option<u64>,
    starts_at_ms: Option<u64>,
    ends_at_ms: Option<u64>,
    low_stock_threshold: Option<u64>,
    usage: HashMap<UserId, u64>,
}

impl From<PoolV5> for Pool {
    fn from(old: PoolV5) -> Self {
        Pool {
            generation: old.generation,
            total: old.total,
            available: old.available,
            held: old.held,
            sold: old.sold,
            per_user_limit: old.per_user_limit,
            starts_at_ms: old.starts_at_ms,
            ends_at_ms: old.ends_at_ms,
            low_stock_threshold: old.low_stock_threshold,
            usage: old.usage.into_iter().collect(),
            // Before format 6 every pool was one segment.
            segments: 1,
        }
    }
}

impl From<&Pool> for PoolV5 {
    /// What an earlier release would have written (for tests of the reading path).
    fn from(pool: &Pool) -> Self {
        PoolV5 {
            generation: pool.generation,
            total: pool.total,
            available: pool.available,
            held: pool.held,
            sold: pool.sold,
            per_user_limit: pool.per_user_limit,
            starts_at_ms: pool.starts_at_ms,
            ends_at_ms: pool.ends_at_ms,
            low_stock_threshold: pool.low_stock_threshold,
            usage: (pool.usage.iter())
                .map(|(user, used)| (user.clone(), *used))
                .collect(),
        }
    }
}

/// The state as snapshot formats 2 and 3 stored it, before restocks had request ids: every
/// field of [`Snapshot`] up to `next_fence_token`, in the same order (postcard is positional),
/// with [`PoolV5`] pools. An engine reads it to open a data directory of an earlier release. A
/// second copy of those fields on purpose: a released format is frozen, and must not follow
/// [`Snapshot`]'s changes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotV3 {
    pools: BTreeMap<PoolId, PoolV5>,
    holds: HoldStore,
    locks: HashMap<LockName, Lock>,
    next_seq: u64,
    next_generation: u64,
    next_fence_token: u64,
}

/// The state as snapshot formats 4 and 5 stored it, before pools had segments: format 3's
/// state plus the restock request ids, nested like the older events (the same bytes as the flat
/// shape those releases wrote). Frozen on purpose, like [`SnapshotV3`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotV5 {
    v3: SnapshotV3,
    restock_requests: HashMap<RequestId, RestockRequest>,
}

impl From<SnapshotV3> for SnapshotV5 {
    fn from(v3: SnapshotV3) -> Self {
        // Before format 4 no restock named a request id.
        SnapshotV5 {
            v3,
            restock_requests: HashMap::new(),
        }
    }
}

impl From<SnapshotV3> for Snapshot {
    fn from(old: SnapshotV3) -> Self {
        SnapshotV5::from(old).into()
    }
}

impl From<SnapshotV5> for Snapshot {
    fn from(old: SnapshotV5) -> Self {
        let SnapshotV5 {
            v3,
            restock_requests,
        } = old;
        Snapshot {
            // Before format 6 every pool was one segment (`PoolV5`'s upgrade).
            pools: v3
                .pools
                .into_iter()
                .map(|(id, pool)| (id, pool.into()))
                .collect(),
            holds: v3.holds,
            locks: v3.locks,
            next_seq: v3.next_seq,
            next_generation: v3.next_generation,
            next_fence_token: v3.next_fence_token,
            restock_requests,
        }
    }
}

impl From<&Snapshot> for SnapshotV5 {
    /// What an earlier release would have written (for tests of the reading path).
    fn from(snapshot: &Snapshot) -> Self {
        SnapshotV5 {
            v3: SnapshotV3 {
                pools: snapshot
                    .pools
                    .iter()
                    .map(|(id, pool)| (id.clone(), pool.into()))
                    .collect(),
                holds: snapshot.holds.clone(),
                locks: snapshot.locks.clone(),
                next_seq: snapshot.next_seq,
                next_generation: snapshot.next_generation,
                next_fence_token: snapshot.next_fence_token,
            },
            restock_requests: snapshot.restock_requests.clone(),
        }
    }
}

impl From<&Snapshot> for SnapshotV3 {
    /// What an earlier release would have written (for tests of the reading path).
    fn from(snapshot: &Snapshot) -> Self {
        SnapshotV5::from(snapshot).v3
    }
}

// Each older event is the one before it plus the field its format added, nested: postcard
// writes a struct as its fields one after the other with nothing around them, so a nested
// struct has exactly the bytes of the flat one it stands for.

/// An event as format 2 stored it: every field of [`Event`] up to `expires_at_ms`, in the same
/// order (postcard is positional). A second copy of those fields on purpose: a released format
/// is frozen, and must not follow [`Event`]'s changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventV2 {
    pub seq: u64,
    pub at_ms: u64,
    pub kind: EventKind,
    pub pool: Option<PoolId>,
    pub hold_id: Option<HoldId>,
    pub user: Option<UserId>,
    pub items: Option<Arc<[HoldItem]>>,
    pub available: Option<u64>,
    pub total: Option<u64>,
    pub delta: Option<i64>,
    pub low_stock_threshold: Option<u64>,
    pub expires_at_ms: Option<u64>,
}

/// An event as format 3 stored it: format 2's, then `restock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventV3 {
    pub v2: EventV2,
    pub restock: Option<bool>,
}

/// An event as format 4 stored it: format 3's, then `request_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventV4 {
    pub v3: EventV3,
    pub request_id: Option<RequestId>,
}

/// An event as formats 5 and 6 store it: format 4's, then `created_at_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventV5 {
    pub v4: EventV4,
    pub created_at_ms: Option<u64>,
}

impl From<EventV5> for Event {
    fn from(old: EventV5) -> Self {
        Event {
            created_at_ms: old.created_at_ms,
            ..Event::from(old.v4)
        }
    }
}

impl From<EventV2> for EventV3 {
    fn from(v2: EventV2) -> Self {
        // Before format 3 every refund put its units back.
        let restock = (v2.kind == EventKind::Refunded).then_some(true);
        EventV3 { v2, restock }
    }
}

impl From<EventV3> for EventV4 {
    fn from(v3: EventV3) -> Self {
        // Before format 4 no restock named a request id.
        EventV4 {
            v3,
            request_id: None,
        }
    }
}

impl From<EventV4> for Event {
    fn from(old: EventV4) -> Self {
        let EventV4 {
            v3: EventV3 { v2, restock },
            request_id,
        } = old;
        Event {
            restock,
            request_id,
            // The engine creates a hold when it emits its `held` event.
            created_at_ms: (v2.kind == EventKind::Held).then_some(v2.at_ms),
            ..Event::from_v2(v2)
        }
    }
}

impl Event {
    /// Format 2's fields of an event; the later ones unset.
    fn from_v2(v2: EventV2) -> Event {
        let mut event = Event::new(v2.seq, v2.at_ms, v2.kind);
        event.pool = v2.pool;
        event.hold_id = v2.hold_id;
        event.user = v2.user;
        event.items = v2.items;
        event.available = v2.available;
        event.total = v2.total;
        event.delta = v2.delta;
        event.low_stock_threshold = v2.low_stock_threshold;
        event.expires_at_ms = v2.expires_at_ms;
        event
    }
}

impl From<EventV3> for Event {
    fn from(old: EventV3) -> Self {
        EventV4::from(old).into()
    }
}

impl From<EventV2> for Event {
    fn from(old: EventV2) -> Self {
        EventV3::from(old).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, PoolSpec, ReserveRequest};
    use crate::state::{Effects, StateConfig, Step};

    const T0: u64 = 1_700_000_000_000;

    /// A pool of 5 units, and a hold of one of them by a user (so that every field of a
    /// `held` event is set).
    fn pool_and_hold(pool: &PoolId) -> [Command; 2] {
        [put_pool(pool, 5), reserve("h1", "u", pool.as_str(), false)]
    }

    /// Creates `pool` with `total` units.
    fn put_pool(pool: &PoolId, total: u64) -> Command {
        Command::PutPool {
            pool: pool.clone(),
            spec: PoolSpec {
                total,
                ..PoolSpec::default()
            },
            segments: None,
            if_absent: false,
        }
    }

    /// A reserve of one unit of `pool` by `user`, its ids parsed afresh (as a request brings
    /// them).
    fn reserve(hold_id: &str, user: &str, pool: &str, confirm: bool) -> Command {
        Command::Reserve(ReserveRequest {
            hold_id: HoldId::parse(hold_id).unwrap(),
            user: Some(UserId::parse(user).unwrap()),
            items: vec![HoldItem {
                pool: PoolId::parse(pool).unwrap(),
                qty: 1,
            }]
            .into(),
            ttl_ms: 60_000,
            confirm,
            wait_ms: 0,
        })
    }

    /// A state that ran `commands` (each must succeed) at `T0`, and the events they made.
    fn state_after(commands: &[Command]) -> (State, Vec<Event>) {
        let mut state = State::new(StateConfig::default());
        let mut effects = Effects::default();
        for command in commands {
            assert!(matches!(
                state.execute(command.clone(), T0, &mut effects),
                Step::Done(Ok(_))
            ));
        }
        (state, effects.events)
    }

    /// A pool with one hold, and its events.
    fn one_hold() -> (State, Vec<Event>) {
        state_after(&pool_and_hold(&PoolId::parse("p").unwrap()))
    }

    /// What format 4 stored of `event`: the bytes of its fields up to `request_id`, the current
    /// event's first bytes (postcard is positional, and later formats only appended fields).
    fn as_v4(event: &Event) -> EventV4 {
        let bytes = postcard::to_allocvec(&EventV5Ref::from(event)).unwrap();
        let (v4, created_at_ms) = postcard::take_from_bytes::<EventV4>(&bytes).unwrap();
        assert_eq!(
            created_at_ms,
            postcard::to_allocvec(&event.created_at_ms).unwrap()
        );
        v4
    }

    /// A refund event, as an old format would have stored one.
    fn refunded(restock: Option<bool>) -> EventV3 {
        let mut v2 = as_v4(&Event::new(99, T0, EventKind::Refunded)).v3.v2;
        v2.hold_id = Some(HoldId::parse("h0").unwrap());
        v2.expires_at_ms = Some(T0);
        EventV3 { v2, restock }
    }

    /// A payload of format 2 or 3 (`format`, the state without restock request ids) with
    /// `events` of that format.
    fn format_3_payload<E: Serialize>(
        format: u32,
        state: &State,
        events: impl Iterator<Item = E>,
    ) -> Vec<u8> {
        let events: Vec<E> = events.collect();
        postcard::to_allocvec(&(format, SnapshotV3::from(state.snapshot()), events)).unwrap()
    }

    /// Decodes `payload` into a state, checked against `state` it was written from.
    fn reopened(payload: &[u8], written: &State) -> (State, Vec<Event>) {
        let (snapshot, events) = decode_snapshot(payload).unwrap();
        let state = State::from_snapshot(StateConfig::default(), snapshot);
        assert_eq!(state.pool_count(), written.pool_count());
        assert_eq!(state.hold_count(), written.hold_count());
        assert_eq!(state.next_seq(), written.next_seq());
        (state, events)
    }

    /// A frozen state encodes as the state it was frozen from, whatever the state does after:
    /// holds confirmed, released, created, expired and forgotten after the freeze, over
    /// several pages of holds, leave it as it was (the pages they land on are copied).
    #[test]
    fn a_frozen_state_is_the_state_it_was_frozen_from_whatever_happens_after() {
        let pool = PoolId::parse("p").unwrap();
        let hold_id = |n: u32| HoldId::parse(&format!("h{n}")).unwrap();
        let reserve = |n: u32| {
            let user = format!("u{}", n % 7);
            reserve(&format!("h{n}"), &user, "p", n.is_multiple_of(3))
        };
        let commands: Vec<Command> = std::iter::once(put_pool(&pool, 10_000))
            .chain((0..2_000).map(reserve))
            .collect();
        let (mut state, events) = state_after(&commands);
        let frozen = state.freeze();
        let before = encode_snapshot(&state, events.iter());
        let data_before = state.snapshot().clone();

        let mut effects = Effects::default();
        let mut run = |state: &mut State, command: Command, at_ms: u64| {
            let _ = state.execute(command, at_ms, &mut effects);
        };
        for n in (1..1_000).step_by(3) {
            run(
                &mut state,
                Command::Confirm {
                    hold_id: hold_id(n),
                },
                T0 + 1,
            );
            run(
                &mut state,
                Command::Release {
                    hold_id: hold_id(n + 1),
                },
                T0 + 1,
            );
        }
        for n in 2_000..3_000 {
            run(&mut state, reserve(n), T0 + 2);
        }
        // Past every deadline and retention: held holds expire, finished ones are forgotten.
        let later = T0 + 30 * 24 * 3_600_000;
        state.tick(later, &mut effects);
        state.tick(later + 1, &mut effects);
        assert_ne!(state.snapshot(), &data_before, "the state moved on");

        let encoded: Vec<Vec<u8>> = events
            .iter()
            .map(|event| {
                let mut bytes = Vec::new();
                encode_event(event, &mut bytes);
                bytes
            })
            .collect();
        let of_frozen =
            encode_snapshot_of_encoded(&frozen, encoded.len(), encoded.iter().map(Vec::as_slice));
        assert_eq!(of_frozen, before);
        let (decoded, _) = decode_snapshot(&of_frozen).unwrap();
        assert_eq!(decoded, data_before);
    }

    /// A snapshot read back names each pool and user with one allocation, however many holds
    /// name them, and so do holds made live (the pool's id, the user's id in its usage).
    #[test]
    fn pools_and_users_are_one_allocation_each_live_and_read_back() {
        let pool = PoolId::parse("p").unwrap();
        // A fresh allocation of the same texts each time, as a request brings them.
        let reserve = |n: u32| reserve(&format!("h{n}"), "buyer", "p", false);
        let commands: Vec<Command> = pool_and_hold(&pool)
            .into_iter()
            .chain((2..6).map(reserve))
            .collect();
        let (state, events) = state_after(&commands);
        let addresses = |snapshot: &Snapshot| {
            let mut users = std::collections::HashSet::new();
            let mut pools = std::collections::HashSet::new();
            for (_, hold) in snapshot.holds.iter() {
                users.insert(hold.user.as_ref().unwrap().as_str().as_ptr());
                pools.extend(hold.items.iter().map(|item| item.pool.as_str().as_ptr()));
            }
            (users.len(), pools.len())
        };
        assert_eq!(state.snapshot().holds.len(), 5);
        // h1's user is "u", the others' "buyer".
        assert_eq!(addresses(state.snapshot()), (2, 1));
        let payload = encode_snapshot(&state, events.iter());
        let (decoded, _) = decode_snapshot_encoded(&payload).unwrap();
        assert_eq!(addresses(&decoded), (2, 1));
        let (decoded, _) = decode_snapshot(&payload).unwrap();
        assert_eq!(addresses(&decoded), (2, 1));
        // Outside a snapshot's reading, ids are read as they come.
        let one: UserId = postcard::from_bytes(&postcard::to_allocvec("u").unwrap()).unwrap();
        let two: UserId = postcard::from_bytes(&postcard::to_allocvec("u").unwrap()).unwrap();
        assert_ne!(one.as_str().as_ptr(), two.as_str().as_ptr());
    }

    /// The memory estimate names every structure a hold takes room in, and grows with holds.
    #[test]
    fn the_memory_estimate_grows_with_the_holds() {
        let empty = State::new(StateConfig::default()).memory_estimate();
        let (state, _) = one_hold();
        let one = state.memory_estimate();
        assert_eq!(empty.len(), one.len());
        for ((name, before), (_, after)) in empty.iter().zip(&one) {
            assert!(
                after > before,
                "{name}: {before} bytes empty, {after} with a hold"
            );
        }
    }

    /// A snapshot made of encoded events is byte for byte the one made of the events, and
    /// decodes to them, kept as encoded; an event encodes and decodes to itself.
    #[test]
    fn a_snapshot_of_encoded_events_is_the_snapshot_of_the_events() {
        let (state, events) = one_hold();
        assert!(events.len() >= 2);
        let mut encoded = Vec::new();
        for event in &events {
            let mut bytes = Vec::new();
            encode_event(event, &mut bytes);
            assert_eq!(&decode_event(&bytes).unwrap(), event);
            assert_eq!(encoded_event_seq(&bytes), Some(event.seq));
            encoded.push(bytes);
        }
        let payload = encode_snapshot(&state, events.iter());
        let of_encoded = encode_snapshot_of_encoded(
            &state.freeze(),
            encoded.len(),
            encoded.iter().map(Vec::as_slice),
        );
        assert_eq!(payload, of_encoded);
        let (decoded, kept) = decode_snapshot_encoded(&payload).unwrap();
        assert_eq!(&decoded, state.snapshot());
        assert!(matches!(kept.bytes, std::borrow::Cow::Borrowed(_)));
        assert_eq!(kept.iter().collect::<Vec<_>>(), encoded);
        // An older format's events come re-encoded.
        let old_events = events.iter().map(|event| as_v4(event).v3.v2);
        let payload = format_3_payload(SNAPSHOT_FORMAT_V2, &state, old_events);
        let (_, kept) = decode_snapshot_encoded(&payload).unwrap();
        assert_eq!(kept.len(), events.len());
        for (bytes, event) in kept.iter().zip(&events) {
            assert_eq!(decode_event(bytes).unwrap().seq, event.seq);
        }
        // A cut payload is refused, not read short.
        let payload = encode_snapshot(&state, events.iter());
        assert!(decode_snapshot_encoded(&payload[..payload.len() - 1]).is_err());
    }

    /// A data directory of an earlier release holds format 2 snapshots: they still open, and
    /// their refunded events read as refunds with restock (the only kind there was).
    #[test]
    fn a_format_2_snapshot_still_opens() {
        let (state, events) = one_hold();
        let old_events = events.iter().map(|event| as_v4(event).v3.v2);
        let old_events = old_events.chain([refunded(None).v2]);
        let payload = format_3_payload(SNAPSHOT_FORMAT_V2, &state, old_events);
        let (_, feed) = reopened(&payload, &state);
        assert_eq!(feed.len(), events.len() + 1);
        let seqs = |events: &[Event]| events.iter().map(|e| e.seq).collect::<Vec<_>>();
        assert_eq!(seqs(&feed[..events.len()]), seqs(&events));
        assert!(feed.iter().take(events.len()).all(|e| e.restock.is_none()));
        assert_eq!(feed.last().unwrap().restock, Some(true));
    }

    /// A data directory of the release before request ids holds format 3 snapshots: they still
    /// open, with no request id remembered, and their events keep their `restock`.
    #[test]
    fn a_format_3_snapshot_still_opens() {
        let pool = PoolId::parse("p").unwrap();
        let (state, events) = one_hold();
        let old_events = events.iter().map(|event| as_v4(event).v3);
        let old_events = old_events.chain([refunded(Some(false))]);
        let payload = format_3_payload(SNAPSHOT_FORMAT_V3, &state, old_events);
        let (mut reopened, feed) = reopened(&payload, &state);
        assert_eq!(feed.len(), events.len() + 1);
        assert_eq!(feed.last().unwrap().restock, Some(false));
        assert!(feed.iter().all(|e| e.request_id.is_none()));
        // No request id is remembered: a restock naming one is a new restock.
        let restock = Command::Restock {
            pool: pool.clone(),
            delta: 2,
            request_id: Some(RequestId::parse("r").unwrap()),
        };
        let mut effects = Effects::default();
        assert!(matches!(
            reopened.execute(restock, T0 + 1, &mut effects),
            Step::Done(Ok(_))
        ));
        assert_eq!(effects.records.len(), 1);
        assert_eq!(reopened.pool(&pool).unwrap().total, 7);
    }

    /// A data directory of the release before `created_at_ms` on events holds format 4
    /// snapshots: they still open, and their `held` events get the hold's created_at_ms, which
    /// the engine's `held` event's at_ms is.
    #[test]
    fn a_format_4_snapshot_still_opens() {
        let (state, events) = one_hold();
        let old_events: Vec<EventV4> = events.iter().map(as_v4).collect();
        let payload = postcard::to_allocvec(&(
            SNAPSHOT_FORMAT_V4,
            SnapshotV5::from(state.snapshot()),
            &old_events,
        ))
        .unwrap();
        let (_, feed) = reopened(&payload, &state);
        assert_eq!(feed, events);
        assert!(feed
            .iter()
            .any(|e| e.kind == EventKind::Held && e.created_at_ms == Some(e.at_ms)));
    }

    /// A data directory of the release before segmented pools holds format 5 snapshots: they
    /// still open, every pool of one segment, and a later `PUT` naming one segment is allowed.
    #[test]
    fn a_format_5_snapshot_still_opens() {
        let pool = PoolId::parse("p").unwrap();
        let (state, events) = one_hold();
        let stored: Vec<EventV5Ref> = events.iter().map(EventV5Ref::from).collect();
        let payload = postcard::to_allocvec(&(
            SNAPSHOT_FORMAT_V5,
            SnapshotV5::from(state.snapshot()),
            &stored,
        ))
        .unwrap();
        let (mut reopened, feed) = reopened(&payload, &state);
        assert_eq!(feed, events);
        assert_eq!(reopened.pool(&pool).unwrap().segments, 1);
        let put = Command::PutPool {
            pool: pool.clone(),
            spec: PoolSpec {
                total: 6,
                ..PoolSpec::default()
            },
            segments: Some(1),
            if_absent: false,
        };
        let mut effects = Effects::default();
        assert!(matches!(
            reopened.execute(put, T0 + 1, &mut effects),
            Step::Done(Ok(_))
        ));
    }

    /// A segmented pool keeps its count through a snapshot.
    #[test]
    fn a_snapshot_keeps_segment_counts() {
        let pool = PoolId::parse("p").unwrap();
        let put = Command::PutPool {
            pool: pool.clone(),
            spec: PoolSpec {
                total: 8,
                ..PoolSpec::default()
            },
            segments: Some(4),
            if_absent: false,
        };
        let (state, events) = state_after(&[put]);
        let payload = encode_snapshot(&state, events.iter());
        let (reopened, _) = reopened(&payload, &state);
        assert_eq!(reopened.pool(&pool).unwrap().segments, 4);
    }

    /// The nested format-5 state is the flat shape formats 4 and 5 wrote, and a format-5 pool
    /// is the current pool without its segment count (appended last): the same bytes.
    #[test]
    fn a_nested_old_state_has_the_bytes_of_the_flat_one() {
        let (state, _) = one_hold();
        let current = state.snapshot();
        let v5 = SnapshotV5::from(current);
        let flat = (
            &v5.v3.pools,
            &current.holds,
            &current.locks,
            (
                current.next_seq,
                current.next_generation,
                current.next_fence_token,
            ),
            &current.restock_requests,
        );
        assert_eq!(
            postcard::to_allocvec(&v5).unwrap(),
            postcard::to_allocvec(&flat).unwrap()
        );
        let (id, pool) = current.pools.iter().next().unwrap();
        let mut pool_bytes = postcard::to_allocvec(&PoolV5::from(pool)).unwrap();
        pool_bytes.extend(postcard::to_allocvec(&pool.segments).unwrap());
        assert_eq!(
            postcard::to_allocvec(pool).unwrap(),
            pool_bytes,
            "pool {id}"
        );
    }

    /// The nested older events are the flat shapes their releases wrote: the same bytes.
    #[test]
    fn a_nested_old_event_has_the_bytes_of_the_flat_one() {
        let (_, events) = one_hold();
        let held = events.iter().find(|e| e.kind == EventKind::Held).unwrap();
        let v4 = as_v4(held);
        let flat = (
            (held.seq, held.at_ms, held.kind, &held.pool, &held.hold_id),
            (
                &held.user,
                &held.items,
                held.available,
                held.total,
                held.delta,
            ),
            (held.low_stock_threshold, held.expires_at_ms),
            (held.restock, &held.request_id),
        );
        assert_eq!(
            postcard::to_allocvec(&v4).unwrap(),
            postcard::to_allocvec(&flat).unwrap()
        );
    }

    /// A snapshot keeps the request ids it was written with: a retry after a restart from it
    /// changes nothing.
    #[test]
    fn a_snapshot_keeps_restock_request_ids() {
        let pool = PoolId::parse("p").unwrap();
        let restock = Command::Restock {
            pool: pool.clone(),
            delta: 2,
            request_id: Some(RequestId::parse("r").unwrap()),
        };
        let [put, _] = pool_and_hold(&pool);
        let (state, events) = state_after(&[put, restock.clone()]);
        let payload = encode_snapshot(&state, events.iter());
        let (mut reopened, feed) = reopened(&payload, &state);
        assert_eq!(
            feed.last().unwrap().request_id.as_ref().map(|r| r.as_str()),
            Some("r")
        );
        let mut effects = Effects::default();
        assert!(matches!(
            reopened.execute(restock, T0 + 1, &mut effects),
            Step::Done(Ok(_))
        ));
        assert!(effects.records.is_empty());
        assert_eq!(reopened.pool(&pool).unwrap().total, 7);
    }

    #[test]
    fn a_snapshot_of_another_format_is_refused_not_misread() {
        let state = State::new(StateConfig::default());
        let untagged = postcard::to_allocvec(&(state.snapshot(), Vec::<Event>::new())).unwrap();
        assert!(matches!(
            decode_snapshot(&untagged),
            Err(SnapshotError::Format { .. })
        ));
        let tagged = encode_snapshot(&state, std::iter::empty());
        assert!(decode_snapshot(&tagged).is_ok());
    }
}
