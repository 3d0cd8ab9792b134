//! Pools spread over partitions: a segmented pool on a Cluster keeps segment J in a partition
//! of its own, its first segments on different primaries (`keys::Placement`), so that a flash
//! sale's holds spread over the primaries. The library's `segments.lua` keeps each segment as a pool of its own and runs the
//! pool op's steps; this module drives them, in the order crates/stockd-crosscheck's `poolop`
//! model explores: `pop_begin` (K0) -> `seg_freeze` each other segment -> a plan from what they
//! read -> `pop_plan` (the decision) -> `seg_apply` each -> `pop_end` (K0: the op takes effect,
//! the pool's one event) -> `seg_unfreeze` each. It also routes a reserve to its segment
//! (`wire_reserve`) and reads a whole pool by collecting its segments twice (`collect`).
//!
//! A reserve takes a spread pool's units from one segment: the user's own (so that a user's
//! usage of the pool lives in one place and per-user limits stay exact), or for a hold without a
//! user the hold id's. When that segment is short, a `rebalance` op moves available units to it
//! from the others under the freeze, or finds that the whole pool has fewer than asked: the
//! only way a reserve of a spread pool is refused for stock, so that a refusal is true of the
//! whole pool at an instant during the request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use stockd_core::{BackendError, Error, HoldItem, PoolId, PoolView, ReserveRequest, SegmentView};

use crate::keys;
use crate::shared::Shared;
use crate::wire::Op;

/// How long a request waits for a pool op on its pool (another op, a collect, a reserve on a
/// frozen segment) before it gives up (503): ops are a few calls long; one left by a dead
/// server is rolled back or forward by a sweeper after `PENDING_TIMEOUT_MS`, and a segment it
/// left frozen after its end is unfrozen by the first request that waits `ORPHAN_AFTER` for it.
pub(crate) const OP_WAIT: Duration = Duration::from_secs(5);
/// The pause between two looks at a pool another op holds.
pub(crate) const OP_POLL: Duration = Duration::from_millis(2);
/// How long a segment stays frozen by one op before a request waiting for it asks the op's
/// coordinator (K0, `pop_owner`) whether the op is still under way; if it is not (it ended, or
/// was rolled back, and its server died before unfreezing), the request unfreezes the segment.
pub(crate) const ORPHAN_AFTER: Duration = Duration::from_millis(100);

/// What this server knows of pools spread over partitions: their segment counts. Filled by the
/// library's `segmented` answers; a count is fixed for a pool's life, and an entry left by a pool
/// deleted and made again whole is found out by the segment answering `pool_not_found`.
#[derive(Default)]
pub(crate) struct SpreadPools {
    segments: Mutex<HashMap<String, u32>>,
    /// Per pool with reserves of this server parked on it: the turn to look at the whole pool
    /// for their units, with when it was last looked at.
    looks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<tokio::time::Instant>>>>>,
}

impl SpreadPools {
    pub(crate) fn get(&self, pool: &str) -> Option<u32> {
        self.segments
            .lock()
            .expect("spread pools lock")
            .get(pool)
            .copied()
    }

    pub(crate) fn note(&self, pool: &str, segments: u32) {
        self.segments
            .lock()
            .expect("spread pools lock")
            .insert(pool.to_string(), segments);
    }

    /// The turn of `pool`'s parked reserves to look at the whole pool (spread_ops.rs).
    pub(crate) fn look_turn(
        &self,
        pool: &str,
    ) -> Arc<tokio::sync::Mutex<Option<tokio::time::Instant>>> {
        let mut looks = self.looks.lock().expect("spread pools lock");
        // A server that waited on many pools keeps only the turns someone still holds.
        if looks.len() > 1_000 {
            looks.retain(|_, turn| Arc::strong_count(turn) > 1);
        }
        looks.entry(pool.to_string()).or_default().clone()
    }

    pub(crate) fn forget(&self, pool: &str) {
        self.segments
            .lock()
            .expect("spread pools lock")
            .remove(pool);
    }
}

/// FNV-1a, 32 bits: the home segment of a user (or hold id), stable across servers.
fn fnv(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// The segment a request takes a spread pool's units from.
pub(crate) fn home_segment(request: &ReserveRequest, segments: u32) -> u32 {
    let key = request
        .user
        .as_ref()
        .map_or_else(|| request.hold_id.as_str(), |user| user.as_str());
    fnv(key) % segments.max(1)
}

/// A segment's state as `pop_begin`, `seg_freeze` and `seg_get` read it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SegmentState {
    pub g: u64,
    pub total: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
    pub per_user_limit: Option<u64>,
    pub starts_at_ms: Option<u64>,
    pub ends_at_ms: Option<u64>,
    pub low_stock_threshold: Option<u64>,
    pub segments: u32,
    /// Segment 0 of a pool spread over partitions (a pool kept whole has none).
    #[serde(default)]
    pub spread: bool,
    /// Segment 0: the pool is at or below its low-stock threshold (its low_stock fired).
    #[serde(default)]
    pub low_fired: bool,
}

/// An op's plan, as `pop_plan` records it at K0 (JSON), so that a sweeper can roll it forward:
/// each other segment's part (`seg_apply`'s words), and `pop_end`'s arguments.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Plan {
    /// `(segment, words)` for each segment J >= 1.
    pub parts: Vec<(u32, String)>,
    /// Segment 0's part, then the pool's threshold ('-' for none), its segment count, whether
    /// it is at or below the threshold now ('1') and the event's words.
    pub end: Vec<String>,
}

/// What a pool op saw when it froze the pool: segment 0 (None: the pool does not exist), the
/// generation a pool it makes gets, and every other segment.
pub(crate) struct Frozen {
    pub generation: u64,
    pub segments: Vec<Option<SegmentState>>,
}

impl Frozen {
    pub fn zero(&self) -> Option<&SegmentState> {
        self.segments.first().and_then(Option::as_ref)
    }

    pub fn sum(&self, count: impl Fn(&SegmentState) -> u64) -> u64 {
        self.segments.iter().flatten().map(count).sum()
    }
}

/// What a plan decided.
pub(crate) enum Decision<T> {
    /// Apply the plan; answer with `T`.
    Apply(Plan, T),
    /// Change nothing; answer with `T` (a refusal, or nothing to do).
    Nothing(T),
}

/// How an op ended for its caller.
pub(crate) enum OpOutcome<T> {
    Done(T),
    /// A restock whose request id was already applied: nothing changed.
    Replayed,
    Refused(Error),
}

fn op(name: &'static str, args: Vec<String>) -> Op {
    Op { name, args }
}

fn unavailable(what: impl Into<String>) -> BackendError {
    BackendError::Unavailable(what.into())
}

fn parse(text: &str) -> Result<Value, BackendError> {
    // A watch an op's own step crossed is left to the sweep (`lowq`).
    let (_, text) = crate::wire::split_low(text);
    serde_json::from_str(text).map_err(|e| unavailable(format!("{e}: {text}")))
}

fn state(value: &Value) -> Result<Option<SegmentState>, BackendError> {
    match value {
        Value::Null => Ok(None),
        other => serde_json::from_value(other.clone())
            .map(Some)
            .map_err(|e| unavailable(format!("{e}: {other}"))),
    }
}

/// A rule as the library's words take it: the value, or '-' for none.
pub(crate) fn word(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// `seg_apply`'s words for a segment: available and total move by `delta_available` and
/// `delta_total`, the rules and generation set to the pool's, the low-stock watch (`watches`).
pub(crate) fn delta_words(
    delta_available: i64,
    delta_total: i64,
    generation: u64,
    rules: [Option<u64>; 3],
    watch: (Option<u64>, Option<u64>),
) -> String {
    format!(
        "delta {delta_available} {delta_total} {generation} {} {} {} {} {}",
        word(rules[0]),
        word(rules[1]),
        word(rules[2]),
        word(watch.0),
        word(watch.1)
    )
}

/// The low-stock watch of each segment, from the segments' available units after an op: with
/// no threshold none; while the pool is above it (`fired` false) floors no higher than each
/// segment's units, adding up to the threshold + 1 (no segment under its floor: the pool is
/// above the threshold); at or below it, ceilings no lower than each segment's units, adding up
/// to the threshold. `(floor, ceiling)` per segment.
pub(crate) fn watches(
    available: &[u64],
    threshold: Option<u64>,
    fired: bool,
) -> Vec<(Option<u64>, Option<u64>)> {
    let Some(threshold) = threshold else {
        return vec![(None, None); available.len()];
    };
    if fired {
        let total: u64 = available.iter().sum();
        let mut spare = threshold.saturating_sub(total);
        let count = available.len() as u64;
        available
            .iter()
            .enumerate()
            .map(|(index, units)| {
                let share = spare / (count - index as u64).max(1);
                spare -= share;
                (None, Some(units + share))
            })
            .collect()
    } else {
        let mut left = threshold + 1;
        available
            .iter()
            .map(|units| {
                let floor = (*units).min(left);
                left -= floor;
                (Some(floor), None)
            })
            .collect()
    }
}

impl Shared {
    fn segment_partition(&self, pool: &str, segment: u32) -> u32 {
        self.placement.segment_partition(pool, segment)
    }

    /// The request as the library takes it: each item of a pool known to be spread named by
    /// the request's segment of it (`PoolId::segment`).
    pub(crate) fn wire_reserve(&self, request: &ReserveRequest) -> ReserveRequest {
        if self.partitions == 1 {
            return request.clone();
        }
        let mut renamed = false;
        let items: Vec<HoldItem> = request
            .items
            .iter()
            .map(|item| match self.spread.get(item.pool.as_str()) {
                Some(segments) => {
                    renamed = true;
                    HoldItem {
                        pool: item.pool.segment(home_segment(request, segments)),
                        qty: item.qty,
                    }
                }
                None => item.clone(),
            })
            .collect();
        if !renamed {
            return request.clone();
        }
        ReserveRequest {
            items: items.into(),
            ..request.clone()
        }
    }

    async fn seg_call(
        &self,
        partition: u32,
        name: &'static str,
        args: Vec<String>,
    ) -> Result<Value, BackendError> {
        parse(&self.submit_raw(partition, op(name, args)).await?)
    }

    /// Runs one pool op on `pool` to its end: `begin_args` after the kind (the first is the
    /// segment count the op assumes), `plan` deciding from what the freeze read.
    pub(crate) async fn pool_op<T>(
        &self,
        pool: &PoolId,
        kind: &str,
        begin_args: Vec<String>,
        plan: impl Fn(&Frozen) -> Decision<T>,
    ) -> Result<OpOutcome<T>, BackendError> {
        let id = pool.as_str();
        let k0 = keys::partition_of(id, self.partitions);
        let started = tokio::time::Instant::now();
        loop {
            let mut args = vec![id.to_string(), kind.to_string()];
            args.extend(begin_args.iter().cloned());
            let begun = self.submit_raw(k0, op("pop_begin", args)).await?;
            let value = parse(&begun)?;
            if value.get("busy").is_some() {
                if started.elapsed() > OP_WAIT {
                    return Err(unavailable(format!(
                        "pool {id} is being changed as a whole by another request; try again"
                    )));
                }
                tokio::time::sleep(OP_POLL).await;
                continue;
            }
            if value.get("replayed").is_some() {
                return Ok(OpOutcome::Replayed);
            }
            if value.get("error").is_some() {
                return match crate::shared::decode(&begun)? {
                    crate::wire::Answer::Done(Err(error)) => Ok(OpOutcome::Refused(error)),
                    other => Err(unavailable(format!("unexpected answer {other:?}"))),
                };
            }
            let op_number = value
                .get("begun")
                .and_then(Value::as_u64)
                .ok_or_else(|| unavailable(format!("unexpected answer {begun}")))?;
            crate::fault::point("pop.after_begin");
            let generation = value.get("generation").and_then(Value::as_u64).unwrap_or(0);
            let zero = state(value.get("segment").unwrap_or(&Value::Null))?;
            let count: u32 = begin_args.first().and_then(|s| s.parse().ok()).unwrap_or(1);
            let count = zero.as_ref().map_or(count, |z| z.segments).max(1);
            let mut segments = vec![zero];
            let mut refused = false;
            for segment in 1..count {
                let answer = self
                    .seg_call(
                        self.segment_partition(id, segment),
                        "seg_freeze",
                        vec![id.to_string(), segment.to_string(), op_number.to_string()],
                    )
                    .await?;
                crate::fault::point("pop.after_freeze");
                match answer.get("segment") {
                    Some(found) => segments.push(state(found)?),
                    None => {
                        // Still frozen by an older op: one that is over had its server die
                        // before it unfroze this segment.
                        if let Some(older) = answer.get("busy").and_then(Value::as_u64) {
                            if started.elapsed() > ORPHAN_AFTER {
                                self.unfreeze_if_orphaned(id, segment, older).await?;
                            }
                        }
                        refused = true;
                        break;
                    }
                }
            }
            let frozen = Frozen {
                generation,
                segments,
            };
            if refused {
                // Another op's freeze is still on a segment (its server died: a sweeper lifts
                // it): give this op up and start again.
                self.end_op(id, op_number.to_string(), Some(count)).await?;
                if started.elapsed() > OP_WAIT {
                    return Err(unavailable(format!(
                        "pool {id} is being changed as a whole: a segment stays frozen; try again"
                    )));
                }
                tokio::time::sleep(OP_POLL).await;
                continue;
            }
            match plan(&frozen) {
                Decision::Nothing(answer) => {
                    self.end_op(id, op_number.to_string(), Some(count)).await?;
                    return Ok(OpOutcome::Done(answer));
                }
                Decision::Apply(plan, answer) => {
                    let text = serde_json::to_string(&plan).expect("a plan is JSON");
                    let planned = self
                        .seg_call(
                            k0,
                            "pop_plan",
                            vec![id.to_string(), op_number.to_string(), text],
                        )
                        .await?;
                    if planned.get("planned").is_none() {
                        // A sweeper rolled it back meanwhile: nothing was applied.
                        continue;
                    }
                    crate::fault::point("pop.after_plan");
                    self.finish_op(id, op_number, &plan).await?;
                    return Ok(OpOutcome::Done(answer));
                }
            }
        }
    }

    /// Rolls forward a planned op: each other segment's part, the end at K0, the unfreezing.
    async fn finish_op(&self, id: &str, op_number: u64, plan: &Plan) -> Result<(), BackendError> {
        for (segment, words) in &plan.parts {
            let mut args = vec![id.to_string(), segment.to_string(), op_number.to_string()];
            args.extend(words.split(' ').map(str::to_string));
            self.seg_call(self.segment_partition(id, *segment), "seg_apply", args)
                .await?;
            crate::fault::point("pop.after_apply");
        }
        let k0 = keys::partition_of(id, self.partitions);
        let mut args = vec![id.to_string(), op_number.to_string()];
        args.extend(plan.end.iter().cloned());
        self.seg_call(k0, "pop_end", args).await?;
        crate::fault::point("pop.after_end");
        for (segment, _) in &plan.parts {
            self.unfreeze(id, *segment, op_number).await?;
            crate::fault::point("pop.after_unfreeze");
        }
        Ok(())
    }

    /// Ends op `asked` (a number, or `*` for whichever K0 records) that cannot go on: rolled
    /// forward when it has a plan, else rolled back at K0 (`pop_abort`) and every other segment
    /// unfrozen: `count` of them, or as many as the op began with.
    async fn end_op(
        &self,
        id: &str,
        asked: String,
        count: Option<u32>,
    ) -> Result<(), BackendError> {
        let k0 = keys::partition_of(id, self.partitions);
        let answer = self
            .seg_call(k0, "pop_abort", vec![id.to_string(), asked])
            .await?;
        if let (Some(op_number), Some(plan)) = (
            answer.get("planned").and_then(Value::as_u64),
            answer.get("plan").and_then(Value::as_str),
        ) {
            let plan: Plan = serde_json::from_str(plan).map_err(|e| unavailable(e.to_string()))?;
            return self.finish_op(id, op_number, &plan).await;
        }
        if let Some(op_number) = answer.get("aborted").and_then(Value::as_u64) {
            let began_with = answer
                .get("args")
                .and_then(Value::as_str)
                .and_then(|args| args.split(' ').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or(1);
            for segment in 1..count.unwrap_or(began_with) {
                self.unfreeze(id, segment, op_number).await?;
            }
        }
        Ok(())
    }

    /// `seg_unfreeze` of op `op_number` in segment `segment`.
    async fn unfreeze(&self, id: &str, segment: u32, op_number: u64) -> Result<(), BackendError> {
        self.seg_call(
            self.segment_partition(id, segment),
            "seg_unfreeze",
            vec![id.to_string(), segment.to_string(), op_number.to_string()],
        )
        .await?;
        Ok(())
    }

    /// A sweeper's share for a pool op older than the timeout at K0: rolled back (no plan) or
    /// forward.
    pub(crate) async fn finish_left_op(&self, id: &str) -> Result<(), BackendError> {
        self.end_op(id, "*".to_string(), None).await
    }

    /// A sweeper's share for a segment frozen longer than the timeout (`POOL SEGMENT OP`):
    /// unfrozen once K0 says it has no record of that op.
    pub(crate) async fn unfreeze_left_segment(&self, entry: &str) -> Result<(), BackendError> {
        let mut words = entry.split(' ');
        let (Some(id), Some(segment), Some(op_number)) = (words.next(), words.next(), words.next())
        else {
            return Err(unavailable(format!("a frozen segment entry {entry}")));
        };
        let segment: u32 = segment
            .parse()
            .map_err(|_| unavailable(entry.to_string()))?;
        let op_number: u64 = op_number
            .parse()
            .map_err(|_| unavailable(entry.to_string()))?;
        self.unfreeze_if_orphaned(id, segment, op_number).await
    }

    /// Segment `segment` of `id`, frozen by op `op_number`: unfrozen when K0 says it has no
    /// record of that op (it ended or was rolled back, and its server died before it unfroze
    /// this segment). A live op keeps its freeze. Safe at any time: an op's freeze is its own
    /// only while K0 records it (crates/stockd-crosscheck `poolop`, whose sweepers run at any
    /// time).
    pub(crate) async fn unfreeze_if_orphaned(
        &self,
        id: &str,
        segment: u32,
        op_number: u64,
    ) -> Result<(), BackendError> {
        let k0 = keys::partition_of(id, self.partitions);
        let owner = self
            .seg_call(k0, "pop_owner", vec![id.to_string(), op_number.to_string()])
            .await?;
        if owner.get("owner").and_then(Value::as_bool) == Some(false) {
            self.unfreeze(id, segment, op_number).await?;
        }
        Ok(())
    }

    /// Every segment of a spread pool as of one instant: read twice, with equal versions and
    /// none frozen (a pool op under way is waited out). `None` when the pool does not exist.
    pub(crate) async fn collect(
        &self,
        pool: &PoolId,
        count: u32,
    ) -> Result<Option<Vec<SegmentState>>, BackendError> {
        let id = pool.as_str();
        let started = tokio::time::Instant::now();
        let mut previous: Option<Vec<(u64, Option<SegmentState>)>> = None;
        while started.elapsed() < OP_WAIT {
            let mut round = Vec::with_capacity(count as usize);
            let mut frozen = false;
            for segment in 0..count {
                let answer = self
                    .seg_call(
                        self.segment_partition(id, segment),
                        "seg_get",
                        vec![id.to_string(), segment.to_string()],
                    )
                    .await?;
                let by = answer.get("frozen").and_then(Value::as_u64).unwrap_or(0);
                if by != 0 && started.elapsed() > ORPHAN_AFTER {
                    self.unfreeze_if_orphaned(id, segment, by).await?;
                }
                frozen |= by != 0;
                let version = answer.get("version").and_then(Value::as_u64).unwrap_or(0);
                round.push((
                    version,
                    state(answer.get("segment").unwrap_or(&Value::Null))?,
                ));
            }
            if frozen {
                previous = None;
                tokio::time::sleep(OP_POLL).await;
                continue;
            }
            let same = previous.as_ref().is_some_and(|before| {
                before.len() == round.len()
                    && before
                        .iter()
                        .zip(&round)
                        .all(|(a, b)| a.0 == b.0 && a.1.is_some() == b.1.is_some())
            });
            if same {
                if round[0].1.is_none() {
                    return Ok(None);
                }
                return Ok(Some(round.into_iter().flat_map(|(_, s)| s).collect()));
            }
            previous = Some(round);
        }
        Err(unavailable(format!(
            "pool {id} could not be read as of one instant: it is being changed as a whole; try \
             again"
        )))
    }

    /// A spread pool as one pool: the sums of its segments, the rules of segment 0.
    pub(crate) fn whole_pool(&self, pool: &PoolId, segments: &[SegmentState]) -> PoolView {
        let zero = &segments[0];
        PoolView {
            pool: pool.clone(),
            total: segments.iter().map(|s| s.total).sum(),
            available: segments.iter().map(|s| s.available).sum(),
            held: segments.iter().map(|s| s.held).sum(),
            sold: segments.iter().map(|s| s.sold).sum(),
            per_user_limit: zero.per_user_limit,
            starts_at_ms: zero.starts_at_ms,
            ends_at_ms: zero.ends_at_ms,
            low_stock_threshold: zero.low_stock_threshold,
            partition: keys::partition_of(pool.as_str(), self.partitions),
            segments: zero.segments,
        }
    }

    /// The segments' list (`GET /v1/pools/{pool}/segments`).
    pub(crate) fn segment_list(
        &self,
        pool: &PoolId,
        segments: &[SegmentState],
    ) -> Vec<SegmentView> {
        segments
            .iter()
            .enumerate()
            .map(|(index, s)| SegmentView {
                segment: index as u32,
                partition: self.segment_partition(pool.as_str(), index as u32),
                total: s.total,
                available: s.available,
                held: s.held,
                sold: s.sold,
            })
            .collect()
    }
}

/// Splits `total` over `count` segments as evenly as can be, the remainder to the first ones.
pub(crate) fn spread(total: u64, count: u32) -> Vec<u64> {
    let count = u64::from(count.max(1));
    (0..count)
        .map(|i| total / count + u64::from(i < total % count))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_even_and_adds_up() {
        assert_eq!(spread(10, 3), vec![4, 3, 3]);
        assert_eq!(spread(2, 4), vec![1, 1, 0, 0]);
        assert_eq!(spread(0, 2), vec![0, 0]);
        for total in 0..50 {
            for count in 1..9 {
                let parts = spread(total, count);
                assert_eq!(parts.iter().sum::<u64>(), total);
                assert!(parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1);
            }
        }
    }
}
