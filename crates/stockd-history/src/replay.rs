//! The feed replayed through a naive model: every pool's numbers, every hold's status and every
//! user's usage as timelines over the feed's positions, and, for every event, the request that
//! caused it. The lifecycle, arithmetic and limit rules are checked as each event is applied;
//! what an answer says is checked later against these timelines (`answers.rs`).
//!
//! Positions: in a partition with N events there are N + 1 states; state `s` is the one after the
//! first `s` events. A timeline is a list of `(s, value)`: the value from state `s` on.
//!
//! A spread pool (see the crate documentation) has no timeline of its numbers: its own events are
//! kept as snapshots of the whole pool ([`SpreadLine::snapshots`]), and the units its holds take
//! as one timeline per partition holding such holds ([`SpreadLine::taken`]). Which of those states
//! coexist is decided in real time (`instants.rs`, `spread.rs`), never by replay order here.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde_json::Value;

use crate::{answered, may_have_applied, Bounds, History, Item, Op, Request};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Absent,
    Held,
    Confirmed,
    Released,
    Expired,
    Refunded,
}

impl Status {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Status::Absent => "absent",
            Status::Held => "held",
            Status::Confirmed => "confirmed",
            Status::Released => "released",
            Status::Expired => "expired",
            Status::Refunded => "refunded",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PoolNums {
    pub total: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
}

pub(crate) struct HoldLine {
    pub partition: usize,
    pub user: Option<String>,
    pub items: Vec<Item>,
    pub created_at_ms: u64,
    /// The held event's at_ms (`created_at_ms` too, unless the hold is over several partitions).
    pub held_at_ms: u64,
    /// The reserve that made it (the op index).
    pub creator: usize,
    /// Every reserve that may have made it (`creator` among them).
    pub creators: Vec<usize>,
    /// The held event's `segments`, which every later event of the hold repeats.
    pub segments: Option<Value>,
    /// The reserve that made it asked for `confirm: true`: its `confirmed` must follow at once.
    pub confirm_on_create: bool,
    /// `(s, status, expires_at_ms)`; the hold is absent before the first entry.
    pub timeline: Vec<(usize, Status, u64)>,
}

pub(crate) struct PoolLine {
    pub partition: usize,
    pub per_user_limit: Option<u64>,
    pub low_stock_threshold: Option<u64>,
    /// `(s, numbers)`; the pool does not exist before the first entry.
    pub timeline: Vec<(usize, PoolNums)>,
}

/// What made an event, to place it in real time (`instants.rs`).
#[derive(Clone, Debug, Default)]
pub(crate) enum Cause {
    /// Nothing known (the event is a violation already, or no request causes it).
    #[default]
    Unknown,
    /// One of these ops (several when which one is a guess).
    Ops(Vec<usize>),
    /// Time: an expiry, due once the deadline (`expires_at_ms`) passed.
    Deadline(u64),
}

/// A spread pool's own event: the whole pool as of the instant the event was applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub total: u64,
    pub available: u64,
    /// The total as if no refund without restock had taken units out: the sum of the pool
    /// events' deltas. `effective_total - total` units had left by refunds at that instant.
    pub effective_total: u64,
}

/// A pool whose units are held in partitions other than its own events'.
pub(crate) struct SpreadLine {
    /// The partition of its own events.
    pub partition: usize,
    /// Its segment count, as the PUTs sent it (`None`: none sent one).
    pub segments: Option<u64>,
    /// The highest per-user limit a PUT of it set (`None`: one set none, or there was none).
    pub per_user_limit: Option<u64>,
    /// `(s, snapshot)` in its own partition.
    pub snapshots: Vec<(usize, Snapshot)>,
    /// Per partition: the units its holds there have taken, `(s, units)`: held, sold, and sold
    /// then written off by a refund without restock (those left the total too, so that
    /// `taken <= effective_total` is the no-oversell rule).
    pub taken: BTreeMap<usize, Vec<(usize, u64)>>,
    /// Units going back (release, expiry, refund with restock): `(partition, position, units)`.
    pub returns: Vec<(usize, usize, u64)>,
    /// Refunds without restock: `(partition, position, units)`.
    pub write_offs: Vec<(usize, usize, u64)>,
}

pub(crate) struct Replay {
    /// `at_ms` of every event, per partition.
    pub at_ms: Vec<Vec<u64>>,
    /// What caused every event, per partition.
    pub causes: Vec<Vec<Cause>>,
    /// Spread pools by name.
    pub spread: HashMap<String, SpreadLine>,
    /// (pool, user) of spread pools whose holds are in several partitions: their usage has no
    /// one order, and their per-user limit is not checked.
    pub split_users: HashSet<(String, String)>,
    /// Checks left out for spread pools (`Stats::spread_unchecked`).
    pub spread_unchecked: usize,
    pub holds: HashMap<String, HoldLine>,
    pub pools: HashMap<String, PoolLine>,
    /// Per (pool, user): units in held and confirmed holds, `(s, units)`.
    pub usage: HashMap<(String, String), Vec<(usize, u64)>>,
    /// Per op: the (partition, position) of the first event it caused.
    pub first_effect: Vec<Option<(usize, usize)>>,
    /// Per op: the events it caused.
    pub effects: Vec<Vec<(usize, usize)>>,
    /// Per op: whether another request could as well have caused an event attributed to it
    /// (the same release sent twice, one answer unknown): such an op has no certain place in
    /// the feed.
    pub unsure: Vec<bool>,
    pub expiry_lags_ms: Vec<u64>,
    /// Per request id of a `restocked` event: the pool and delta it restocked. A history is
    /// shorter than the hold retention, so an id restocks at most once.
    pub restock_requests: HashMap<String, (String, i64)>,
}

fn str_field<'a>(event: &'a Value, key: &str) -> Option<&'a str> {
    event.get(key).and_then(Value::as_str)
}

fn u64_field(event: &Value, key: &str) -> Option<u64> {
    event.get(key).and_then(Value::as_u64)
}

pub(crate) fn items_of(value: &Value) -> Option<Vec<Item>> {
    value
        .as_array()?
        .iter()
        .map(|item| {
            Some(Item {
                pool: item.get("pool")?.as_str()?.to_string(),
                qty: item.get("qty")?.as_u64()?,
            })
        })
        .collect()
}

/// The value of a timeline at state `s`, if it has one yet.
pub(crate) fn value_at<T: Copy>(timeline: &[(usize, T)], s: usize) -> Option<T> {
    let after = timeline.partition_point(|(from, _)| *from <= s);
    after.checked_sub(1).map(|i| timeline[i].1)
}

/// The state indices at which a timeline changes within `(lo, hi]`.
pub(crate) fn changes_within<T>(timeline: &[(usize, T)], lo: usize, hi: usize) -> Vec<usize> {
    let start = timeline.partition_point(|(from, _)| *from <= lo);
    timeline[start..]
        .iter()
        .take_while(|(from, _)| *from <= hi)
        .map(|(from, _)| *from)
        .collect()
}

impl HoldLine {
    pub(crate) fn at(&self, s: usize) -> (Status, u64) {
        let after = self.timeline.partition_point(|(from, _, _)| *from <= s);
        match after.checked_sub(1) {
            Some(i) => (self.timeline[i].1, self.timeline[i].2),
            None => (Status::Absent, 0),
        }
    }

    pub(crate) fn changes_within(&self, lo: usize, hi: usize) -> Vec<usize> {
        let start = self.timeline.partition_point(|(from, _, _)| *from <= lo);
        self.timeline[start..]
            .iter()
            .take_while(|(from, _, _)| *from <= hi)
            .map(|(from, _, _)| *from)
            .collect()
    }

    fn now(&self) -> (Status, u64) {
        self.timeline
            .last()
            .map_or((Status::Absent, 0), |(_, status, expires)| {
                (*status, *expires)
            })
    }
}

/// Ops by the hold or pool they name, in recorded order.
struct Index {
    by_hold: HashMap<String, Vec<usize>>,
    by_pool: HashMap<String, Vec<usize>>,
}

impl Index {
    fn new(history: &History) -> Index {
        let mut index = Index {
            by_hold: HashMap::new(),
            by_pool: HashMap::new(),
        };
        for (i, op) in history.ops.iter().enumerate() {
            if let Some(hold_id) = op.request.hold_id() {
                index
                    .by_hold
                    .entry(hold_id.to_string())
                    .or_default()
                    .push(i);
            }
            if let Request::PutPool { pool, .. } | Request::Restock { pool, .. } = &op.request {
                index.by_pool.entry(pool.clone()).or_default().push(i);
            }
        }
        index
    }

    /// The ops naming hold `hold_id`, in recorded order.
    fn of_hold(&self, hold_id: &str) -> Vec<usize> {
        self.by_hold.get(hold_id).cloned().unwrap_or_default()
    }

    /// The ops putting or restocking pool `pool`, in recorded order.
    fn of_pool(&self, pool: &str) -> Vec<usize> {
        self.by_pool.get(pool).cloned().unwrap_or_default()
    }
}

/// Whether `at_ms` may be the moment `op` was applied.
pub(crate) fn within_effect_window(op: &Op, at_ms: u64, bounds: Bounds) -> bool {
    let from = (op.invoke_us / 1000).saturating_sub(bounds.slack_ms);
    let until = if answered(op).is_some() {
        op.complete_us / 1000 + bounds.slack_ms
    } else {
        u64::MAX
    };
    (from..=until).contains(&at_ms)
}

struct Runner<'a> {
    history: &'a History,
    bounds: Bounds,
    index: Index,
    replay: Replay,
    /// Ops that cause at most one event and have caused it.
    used: Vec<bool>,
    /// What caused the event being replayed.
    cause: Cause,
    violations: &'a mut Vec<String>,
}

impl Replay {
    pub(crate) fn run(history: &History, bounds: Bounds, violations: &mut Vec<String>) -> Replay {
        let (spread, split_users) = spread_pools(history);
        let replay = Replay {
            at_ms: Vec::new(),
            causes: Vec::new(),
            spread,
            split_users,
            spread_unchecked: 0,
            holds: HashMap::new(),
            pools: HashMap::new(),
            usage: HashMap::new(),
            first_effect: vec![None; history.ops.len()],
            effects: vec![Vec::new(); history.ops.len()],
            unsure: vec![false; history.ops.len()],
            expiry_lags_ms: Vec::new(),
            restock_requests: HashMap::new(),
        };
        let mut runner = Runner {
            history,
            bounds,
            index: Index::new(history),
            replay,
            used: vec![false; history.ops.len()],
            cause: Cause::Unknown,
            violations,
        };
        for (partition, events) in history.feed.iter().enumerate() {
            runner.partition(partition, events);
        }
        runner.end_of_feed();
        runner.replay
    }
}

impl Runner<'_> {
    fn fail(&mut self, partition: usize, position: usize, event: &Value, why: String) {
        self.violations.push(format!(
            "feed partition {partition}, event {position} ({event}): {why}"
        ));
    }

    fn partition(&mut self, partition: usize, events: &[Value]) {
        let mut at_ms = Vec::with_capacity(events.len());
        let mut causes = Vec::with_capacity(events.len());
        // Pools whose `low_stock` must come next, in any order.
        let mut low_stock_due: BTreeSet<String> = BTreeSet::new();
        for (position, event) in events.iter().enumerate() {
            if position > 0 {
                causes.push(std::mem::take(&mut self.cause));
            }
            self.cause = Cause::Unknown;
            let seq = u64_field(event, "seq");
            if seq != Some(position as u64 + 1) {
                self.fail(
                    partition,
                    position,
                    event,
                    format!(
                        "seq should be {} (a feed read from the start counts up by one)",
                        position + 1
                    ),
                );
            }
            let at = u64_field(event, "at_ms").unwrap_or(0);
            if let Some(&before) = at_ms.last() {
                if at < before {
                    self.fail(
                        partition,
                        position,
                        event,
                        format!("at_ms goes backwards (previous event at {before})"),
                    );
                }
            }
            at_ms.push(at);
            let kind = str_field(event, "type").unwrap_or("").to_string();
            if kind == "low_stock" {
                self.low_stock(partition, position, event, &mut low_stock_due);
                continue;
            }
            if !low_stock_due.is_empty() {
                let due = std::mem::take(&mut low_stock_due);
                self.fail(
                    partition,
                    position,
                    event,
                    format!("low_stock of {due:?} should have come before this event"),
                );
            }
            let crossed = match kind.as_str() {
                "pool_upserted" => self.pool_upserted(partition, position, event),
                "restocked" => self.restocked(partition, position, event),
                "held" => self.held(partition, position, event),
                "confirmed" | "released" | "expired" | "refunded" | "extended" => {
                    self.transition(partition, position, event, &kind)
                }
                _ => {
                    self.fail(
                        partition,
                        position,
                        event,
                        "an event no request of this history can cause".to_string(),
                    );
                    Vec::new()
                }
            };
            low_stock_due.extend(crossed);
        }
        if !events.is_empty() {
            causes.push(std::mem::take(&mut self.cause));
        }
        if !low_stock_due.is_empty() {
            self.violations.push(format!(
                "feed partition {partition}: ends without the low_stock of {low_stock_due:?}"
            ));
        }
        if self.replay.at_ms.len() <= partition {
            self.replay.at_ms.resize(partition + 1, Vec::new());
            self.replay.causes.resize(partition + 1, Vec::new());
        }
        self.replay.at_ms[partition] = at_ms;
        self.replay.causes[partition] = causes;
    }

    /// Claims the op `cause` picked for an event (used up, and the event attributed to it), or
    /// fails the event with `why` when none was picked.
    fn claim(
        &mut self,
        cause: Option<usize>,
        (partition, position, event): (usize, usize, &Value),
        why: impl FnOnce() -> String,
    ) -> Option<usize> {
        let Some(cause) = cause else {
            self.fail(partition, position, event, why());
            return None;
        };
        self.used[cause] = true;
        self.caused_by(cause, partition, position);
        Some(cause)
    }

    /// Attributes an event to `op`.
    fn caused_by(&mut self, op: usize, partition: usize, position: usize) {
        if self.replay.first_effect[op].is_none() {
            self.replay.first_effect[op] = Some((partition, position));
        }
        self.replay.effects[op].push((partition, position));
    }

    /// The first candidate op that may have caused an event at `at_ms` and passes `fits`:
    /// acknowledged ones first, then those without a trusted answer. When several fit, the
    /// choice is a guess, and the op picked is marked unsure.
    fn pick(
        &mut self,
        candidates: &[usize],
        at_ms: u64,
        once: bool,
        fits: impl Fn(&Op) -> bool,
    ) -> Option<usize> {
        let usable: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&i| {
                let op = &self.history.ops[i];
                may_have_applied(op)
                    && !(once && self.used[i])
                    && within_effect_window(op, at_ms, self.bounds)
                    && fits(op)
            })
            .collect();
        let picked = usable
            .iter()
            .copied()
            .find(|&i| answered(&self.history.ops[i]).is_some())
            .or_else(|| usable.first().copied())?;
        if usable.len() > 1 {
            self.replay.unsure[picked] = true;
        }
        self.cause = Cause::Ops(usable);
        Some(picked)
    }

    fn pool_nums(&self, pool: &str) -> Option<PoolNums> {
        self.replay
            .pools
            .get(pool)
            .and_then(|line| line.timeline.last().map(|(_, nums)| *nums))
    }

    fn set_pool(&mut self, pool: &str, s: usize, nums: PoolNums) {
        if let Some(line) = self.replay.pools.get_mut(pool) {
            match line.timeline.last_mut() {
                Some((from, last)) if *from == s => *last = nums,
                _ => line.timeline.push((s, nums)),
            }
        }
    }

    /// Whether `available` went from above the pool's threshold to at or below it.
    fn crossed(&self, pool: &str, before: Option<u64>, after: u64) -> bool {
        let threshold = self
            .replay
            .pools
            .get(pool)
            .and_then(|line| line.low_stock_threshold);
        match threshold {
            Some(threshold) => after <= threshold && before.is_none_or(|b| b > threshold),
            None => false,
        }
    }

    fn low_stock(
        &mut self,
        partition: usize,
        position: usize,
        event: &Value,
        due: &mut BTreeSet<String>,
    ) {
        let pool = str_field(event, "pool").unwrap_or("").to_string();
        if self.replay.spread.contains_key(&pool) {
            // Fired by a step of its own some time after the crossing (a `low` pool op, a part
            // of a hold over several partitions): the "due" rule is not held to it, but it
            // shows the pool low; its numbers are a snapshot.
            let said = (
                u64_field(event, "available"),
                u64_field(event, "low_stock_threshold"),
            );
            if !matches!(said, (Some(available), Some(threshold)) if available <= threshold) {
                self.fail(
                    partition,
                    position,
                    event,
                    "low_stock of a pool above its threshold".to_string(),
                );
            }
            self.spread_snapshot((partition, position, event), &pool, 0);
            return;
        }
        if !due.remove(&pool) {
            self.fail(
                partition,
                position,
                event,
                "low_stock without the pool's available crossing its threshold just before"
                    .to_string(),
            );
        }
        let nums = self.pool_nums(&pool);
        let said = (u64_field(event, "total"), u64_field(event, "available"));
        if nums.map(|n| (Some(n.total), Some(n.available))) != Some(said) {
            self.fail(
                partition,
                position,
                event,
                format!("total and available differ from the model's {nums:?}"),
            );
        }
    }

    fn pool_upserted(&mut self, partition: usize, position: usize, event: &Value) -> Vec<String> {
        let pool = str_field(event, "pool").unwrap_or("").to_string();
        let at = u64_field(event, "at_ms").unwrap_or(0);
        let candidates = self.index.of_pool(&pool);
        let cause = self.pick(&candidates, at, true, |op| {
            matches!(op.request, Request::PutPool { .. })
        });
        let Some(cause) = self.claim(cause, (partition, position, event), || {
            "no PUT of this pool explains it".to_string()
        }) else {
            return Vec::new();
        };
        let Request::PutPool {
            total,
            per_user_limit,
            low_stock_threshold,
            ..
        } = self.history.ops[cause].request
        else {
            unreachable!("picked a PUT");
        };
        if self.replay.spread.contains_key(&pool) {
            let line = self
                .replay
                .pools
                .entry(pool.clone())
                .or_insert_with(|| PoolLine {
                    partition,
                    per_user_limit,
                    low_stock_threshold,
                    timeline: Vec::new(),
                });
            line.per_user_limit = per_user_limit;
            line.low_stock_threshold = low_stock_threshold;
            match event.get("delta").and_then(Value::as_i64) {
                Some(delta) => self.spread_snapshot((partition, position, event), &pool, delta),
                None => self.fail(partition, position, event, "no delta".to_string()),
            }
            if u64_field(event, "total") != Some(total) {
                self.fail(
                    partition,
                    position,
                    event,
                    format!("total is not the PUT's {total}"),
                );
            }
            return Vec::new();
        }
        let before = self.pool_nums(&pool);
        let (held, sold) = before.map_or((0, 0), |n| (n.held, n.sold));
        let Some(available) = total.checked_sub(held + sold) else {
            self.fail(
                partition,
                position,
                event,
                format!("total {total} below held {held} + sold {sold}"),
            );
            return Vec::new();
        };
        let line = self
            .replay
            .pools
            .entry(pool.clone())
            .or_insert_with(|| PoolLine {
                partition,
                per_user_limit,
                low_stock_threshold,
                timeline: Vec::new(),
            });
        line.per_user_limit = per_user_limit;
        line.low_stock_threshold = low_stock_threshold;
        let nums = PoolNums {
            total,
            available,
            held,
            sold,
        };
        self.set_pool(&pool, position + 1, nums);
        if (u64_field(event, "total"), u64_field(event, "available"))
            != (Some(total), Some(available))
        {
            self.fail(
                partition,
                position,
                event,
                format!("the model has total {total}, available {available}"),
            );
        }
        // A consumer sums deltas: the change of total, from 0 on a create.
        let delta = total as i64 - before.map_or(0, |n| n.total) as i64;
        if event.get("delta").and_then(Value::as_i64) != Some(delta) {
            self.fail(
                partition,
                position,
                event,
                format!("the model has delta {delta}"),
            );
        }
        // A PUT that leaves the pool at or below its threshold always fires.
        if self.crossed(&pool, None, available) {
            vec![pool]
        } else {
            Vec::new()
        }
    }

    fn restocked(&mut self, partition: usize, position: usize, event: &Value) -> Vec<String> {
        let pool = str_field(event, "pool").unwrap_or("").to_string();
        let at = u64_field(event, "at_ms").unwrap_or(0);
        let delta = event.get("delta").and_then(Value::as_i64);
        let said_total = u64_field(event, "total");
        let said_request_id = str_field(event, "request_id");
        let candidates = self.index.of_pool(&pool);
        let cause = self.pick(&candidates, at, true, |op| {
            let Request::Restock {
                delta: sent,
                request_id,
                ..
            } = &op.request
            else {
                return false;
            };
            Some(*sent) == delta
                && request_id.as_deref() == said_request_id
                && answered(op).is_none_or(|(_, body)| u64_field(body, "total") == said_total)
        });
        if self
            .claim(cause, (partition, position, event), || {
                "no restock request explains it".to_string()
            })
            .is_none()
        {
            return Vec::new();
        }
        let delta = delta.unwrap_or(0);
        if let Some(request_id) = said_request_id {
            // A retry of a restock answers the pool and changes nothing: a request id that
            // restocks twice applied a retry again.
            let first = self
                .replay
                .restock_requests
                .insert(request_id.to_string(), (pool.clone(), delta));
            if let Some((first_pool, first_delta)) = first {
                self.fail(
                    partition,
                    position,
                    event,
                    format!(
                        "request id {request_id} restocked again (first pool {first_pool} by \
                         {first_delta})"
                    ),
                );
                return Vec::new();
            }
        }
        if self.replay.spread.contains_key(&pool) {
            if self.replay.pools.contains_key(&pool) {
                self.spread_snapshot((partition, position, event), &pool, delta);
            } else {
                self.fail(
                    partition,
                    position,
                    event,
                    "restock of a pool that does not exist".to_string(),
                );
            }
            return Vec::new();
        }
        let Some(before) = self.pool_nums(&pool) else {
            self.fail(
                partition,
                position,
                event,
                "restock of a pool that does not exist".to_string(),
            );
            return Vec::new();
        };
        let (total, available) = match (
            before.total.checked_add_signed(delta),
            before.available.checked_add_signed(delta),
        ) {
            (Some(total), Some(available)) => (total, available),
            _ => {
                self.fail(
                    partition,
                    position,
                    event,
                    format!("delta {delta} takes the pool below zero: {before:?}"),
                );
                return Vec::new();
            }
        };
        let nums = PoolNums {
            total,
            available,
            ..before
        };
        self.set_pool(&pool, position + 1, nums);
        if (said_total, u64_field(event, "available")) != (Some(total), Some(available)) {
            self.fail(
                partition,
                position,
                event,
                format!("the model has total {total}, available {available}"),
            );
        }
        if self.crossed(&pool, Some(before.available), available) {
            vec![pool]
        } else {
            Vec::new()
        }
    }

    /// A spread pool's own event: a snapshot of the whole pool. Its total and available are the
    /// event's (the model does not know the segments' numbers); they must add up with the
    /// deltas: `effective_total` is the sum of the deltas, and the units written off by refunds
    /// (`effective_total - total`) never come back. Whether they fit the holds is `spread.rs`'s.
    fn spread_snapshot(
        &mut self,
        (partition, position, event): (usize, usize, &Value),
        pool: &str,
        delta: i64,
    ) {
        let Some(line) = self.replay.spread.get(pool) else {
            return;
        };
        if line.partition != partition {
            let pool_partition = line.partition;
            self.fail(
                partition,
                position,
                event,
                format!(
                    "the pool's events are in two partitions ({pool_partition} and {partition})"
                ),
            );
            return;
        }
        let before = line.snapshots.last().map(|(_, snapshot)| *snapshot);
        let (Some(total), Some(available)) =
            (u64_field(event, "total"), u64_field(event, "available"))
        else {
            self.fail(
                partition,
                position,
                event,
                "no total or available".to_string(),
            );
            return;
        };
        let effective = before
            .map_or(0, |b| b.effective_total)
            .checked_add_signed(delta);
        let written_before = before.map_or(0, |b| b.effective_total - b.total);
        let why = match effective {
            _ if available > total => Some(format!("available {available} above total {total}")),
            None => Some(format!("delta {delta} takes the pool's total below zero")),
            Some(effective) if effective < total + written_before => Some(format!(
                "total {total} is more than the deltas leave ({effective}, {written_before}                  written off by refunds before)"
            )),
            _ => None,
        };
        if let Some(why) = why {
            self.fail(partition, position, event, why);
            return;
        }
        let snapshot = Snapshot {
            total,
            available,
            effective_total: effective.unwrap_or(total),
        };
        if let Some(line) = self.replay.spread.get_mut(pool) {
            line.snapshots.push((position + 1, snapshot));
        }
    }

    /// A hold event's `segments`: per spread pool of a segment count above one, which segments
    /// gave how many units: distinct segments below the count, adding up to the item's qty.
    fn check_segments(&mut self, partition: usize, position: usize, event: &Value, items: &[Item]) {
        let takes = event.get("segments");
        let mut why = Vec::new();
        let parsed: Option<Vec<(String, u64, u64)>> = match takes {
            None | Some(Value::Null) => Some(Vec::new()),
            Some(takes) => takes.as_array().and_then(|takes| {
                takes
                    .iter()
                    .map(|t| {
                        Some((
                            str_field(t, "pool")?.to_string(),
                            u64_field(t, "segment")?,
                            u64_field(t, "qty")?,
                        ))
                    })
                    .collect()
            }),
        };
        let Some(parsed) = parsed else {
            self.fail(
                partition,
                position,
                event,
                "segments is not a list of {pool, segment, qty}".to_string(),
            );
            return;
        };
        for (pool, _, _) in &parsed {
            if !items.iter().any(|item| &item.pool == pool) {
                why.push(format!("segments name pool {pool}, not an item"));
            }
        }
        for item in items {
            let count = self
                .replay
                .spread
                .get(&item.pool)
                .and_then(|line| line.segments);
            let mine: Vec<(u64, u64)> = parsed
                .iter()
                .filter(|(pool, _, _)| pool == &item.pool)
                .map(|(_, segment, qty)| (*segment, *qty))
                .collect();
            if mine.is_empty() {
                if count.is_some_and(|count| count > 1) {
                    why.push(format!(
                        "no segments of pool {}, which has {} segments",
                        item.pool,
                        count.unwrap_or(0)
                    ));
                }
                continue;
            }
            let distinct: BTreeSet<u64> = mine.iter().map(|(segment, _)| *segment).collect();
            if distinct.len() != mine.len() {
                why.push(format!("segments of pool {} repeat a segment", item.pool));
            }
            if let Some(count) = count {
                if let Some(segment) = distinct.iter().find(|&&segment| segment >= count) {
                    why.push(format!(
                        "segment {segment} of pool {}, which has {count} segments",
                        item.pool
                    ));
                }
            }
            let sum: u64 = mine.iter().map(|(_, qty)| qty).sum();
            if sum != item.qty {
                why.push(format!(
                    "segments of pool {} add up to {sum}, the item takes {}",
                    item.pool, item.qty
                ));
            }
        }
        if !why.is_empty() {
            self.fail(partition, position, event, why.join("; "));
        }
    }

    /// Moves the units a spread pool's holds in `partition` have taken by `delta` from state `s`.
    fn take_spread(&mut self, pool: &str, partition: usize, s: usize, delta: i64) {
        let Some(line) = self.replay.spread.get_mut(pool) else {
            return;
        };
        let timeline = line.taken.entry(partition).or_default();
        let now = timeline.last().map_or(0, |(_, units)| *units);
        let next = now.saturating_add_signed(delta);
        match timeline.last_mut() {
            Some((from, units)) if *from == s => *units = next,
            _ => timeline.push((s, next)),
        }
    }

    fn change_usage(&mut self, s: usize, user: &Option<String>, items: &[Item], add: bool) {
        let Some(user) = user else { return };
        for item in items {
            if self
                .replay
                .split_users
                .contains(&(item.pool.clone(), user.clone()))
            {
                continue;
            }
            let line = self
                .replay
                .usage
                .entry((item.pool.clone(), user.clone()))
                .or_default();
            let now = line.last().map_or(0, |(_, units)| *units);
            let next = if add {
                now + item.qty
            } else {
                now.saturating_sub(item.qty)
            };
            match line.last_mut() {
                Some((from, units)) if *from == s => *units = next,
                _ => line.push((s, next)),
            }
        }
    }

    fn held(&mut self, partition: usize, position: usize, event: &Value) -> Vec<String> {
        let hold_id = str_field(event, "hold_id").unwrap_or("").to_string();
        let at = u64_field(event, "at_ms").unwrap_or(0);
        let expires = u64_field(event, "expires_at_ms").unwrap_or(0);
        let user = str_field(event, "user").map(str::to_string);
        let Some(items) = event.get("items").and_then(items_of) else {
            self.fail(partition, position, event, "no items".to_string());
            return Vec::new();
        };
        if let Some(line) = self.replay.holds.get(&hold_id) {
            let (status, _) = line.now();
            self.fail(
                partition,
                position,
                event,
                format!(
                    "hold {hold_id} applied twice (it is already {})",
                    status.name()
                ),
            );
            return Vec::new();
        }

        // The creator: the reserve answered 201 if there is one, or else one whose answer is
        // unknown. A reserve answered 200 only replayed a hold that existed.
        let candidates = self.index.of_hold(&hold_id);
        let created: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&i| {
                matches!(self.history.ops[i].request, Request::Reserve { .. })
                    && answered(&self.history.ops[i]).is_some_and(|(status, _)| status == 201)
            })
            .collect();
        let cause = if created.is_empty() {
            self.pick(&candidates, at, true, |op| {
                matches!(op.request, Request::Reserve { .. }) && answered(op).is_none()
            })
        } else {
            self.pick(&created, at, true, |_| true)
        };
        let why = || {
            if created.is_empty() {
                format!("no reserve of {hold_id} without a certain answer explains it")
            } else {
                format!(
                    "its at_ms lies outside the window of the reserve answered 201 (op #{})",
                    created[0]
                )
            }
        };
        let Some(cause) = self.claim(cause, (partition, position, event), why) else {
            return Vec::new();
        };
        let creators = match &self.cause {
            Cause::Ops(ops) => ops.clone(),
            _ => vec![cause],
        };
        let Request::Reserve {
            user: sent_user,
            items: sent_items,
            ttl_ms,
            confirm,
            ..
        } = &self.history.ops[cause].request
        else {
            unreachable!("picked a reserve");
        };
        if (&user, &items) != (sent_user, sent_items) {
            self.fail(
                partition,
                position,
                event,
                format!(
                    "user and items differ from the request (op #{cause}: {sent_user:?}, \
                     {sent_items:?})"
                ),
            );
        }
        // A hold of one partition is created when it is held; one that takes from a spread pool
        // may be over several partitions, created first. A stockd older than the field sends no
        // created_at_ms.
        let spread = items
            .iter()
            .any(|item| self.replay.spread.contains_key(&item.pool));
        let created = u64_field(event, "created_at_ms").unwrap_or(at);
        if created != at && !(spread && created < at) {
            self.fail(
                partition,
                position,
                event,
                "created_at_ms is not at_ms".to_string(),
            );
        }
        if expires != created + ttl_ms {
            self.fail(
                partition,
                position,
                event,
                format!("expires_at_ms is not created_at_ms + ttl_ms {ttl_ms}"),
            );
        }
        self.check_segments(partition, position, event, &items);

        let s = position + 1;
        let mut crossed = Vec::new();
        for item in &items {
            if self.replay.spread.contains_key(&item.pool) {
                self.held_spread(partition, position, event, item, &user);
                continue;
            }
            let Some(before) = self.pool_nums(&item.pool) else {
                self.fail(
                    partition,
                    position,
                    event,
                    format!("pool {} does not exist", item.pool),
                );
                continue;
            };
            let line = &self.replay.pools[&item.pool];
            let (pool_partition, limit) = (line.partition, line.per_user_limit);
            if pool_partition != partition {
                self.fail(
                    partition,
                    position,
                    event,
                    format!(
                        "pool {} is in partition {pool_partition}: a hold over several \
                         partitions, which this checker does not order",
                        item.pool
                    ),
                );
            }
            if before.available < item.qty {
                self.fail(
                    partition,
                    position,
                    event,
                    format!(
                        "OVERSELL: pool {} has {} available, the hold takes {}",
                        item.pool, before.available, item.qty
                    ),
                );
            }
            let nums = PoolNums {
                available: before.available.saturating_sub(item.qty),
                held: before.held + item.qty,
                ..before
            };
            self.set_pool(&item.pool, s, nums);
            if self.crossed(&item.pool, Some(before.available), nums.available) {
                crossed.push(item.pool.clone());
            }
            if let (Some(limit), Some(user)) = (limit, &user) {
                let used = self
                    .replay
                    .usage
                    .get(&(item.pool.clone(), user.clone()))
                    .and_then(|line| line.last().map(|(_, units)| *units))
                    .unwrap_or(0);
                if used + item.qty > limit {
                    self.fail(
                        partition,
                        position,
                        event,
                        format!(
                            "per-user limit of {} is {limit}: {user} had {used}, the hold adds {}",
                            item.pool, item.qty
                        ),
                    );
                }
            }
        }
        self.change_usage(s, &user, &items, true);
        self.replay.holds.insert(
            hold_id,
            HoldLine {
                partition,
                user,
                items,
                created_at_ms: created,
                held_at_ms: at,
                creator: cause,
                creators,
                segments: event.get("segments").cloned(),
                confirm_on_create: *confirm,
                timeline: vec![(s, Status::Held, expires)],
            },
        );
        crossed
    }

    /// An item of a held event taken from a spread pool: the units its partition has taken
    /// grow (whether the pool had them is `spread.rs`'s), and a per-user limit holds exactly
    /// when the user's holds of the pool are all in this partition (their order is this feed's).
    fn held_spread(
        &mut self,
        partition: usize,
        position: usize,
        event: &Value,
        item: &Item,
        user: &Option<String>,
    ) {
        self.take_spread(&item.pool, partition, position + 1, item.qty as i64);
        let limit = self.replay.spread[&item.pool].per_user_limit;
        let (Some(limit), Some(user)) = (limit, user) else {
            return;
        };
        let key = (item.pool.clone(), user.clone());
        if self.replay.split_users.contains(&key) {
            self.replay.spread_unchecked += 1;
            return;
        }
        let used = self
            .replay
            .usage
            .get(&key)
            .and_then(|line| line.last().map(|(_, units)| *units))
            .unwrap_or(0);
        if used + item.qty > limit {
            self.fail(
                partition,
                position,
                event,
                format!(
                    "per-user limit of {} is {limit}: {user} had {used}, the hold adds {}",
                    item.pool, item.qty
                ),
            );
        }
    }

    fn transition(
        &mut self,
        partition: usize,
        position: usize,
        event: &Value,
        kind: &str,
    ) -> Vec<String> {
        let hold_id = str_field(event, "hold_id").unwrap_or("").to_string();
        let at = u64_field(event, "at_ms").unwrap_or(0);
        let Some(line) = self.replay.holds.get(&hold_id) else {
            self.fail(
                partition,
                position,
                event,
                format!("{kind} of a hold that was never held"),
            );
            return Vec::new();
        };
        let (status, expires) = line.now();
        let (user, items) = (line.user.clone(), line.items.clone());
        let hold_partition = line.partition;
        let first_after_create = line.timeline.len() == 1;
        let confirm_on_create = line.confirm_on_create;
        if hold_partition != partition {
            self.fail(
                partition,
                position,
                event,
                format!(
                    "the hold's events are in two partitions ({hold_partition} and {partition})"
                ),
            );
        }
        if kind != "extended"
            && (
                str_field(event, "user").map(str::to_string),
                event.get("items").and_then(items_of),
            ) != (user.clone(), Some(items.clone()))
        {
            self.fail(
                partition,
                position,
                event,
                format!("user and items differ from the held event's ({user:?}, {items:?})"),
            );
        }
        let segments = self.replay.holds[&hold_id].segments.clone();
        if (kind != "extended" || event.get("segments").is_some())
            && event.get("segments") != segments.as_ref()
        {
            self.fail(
                partition,
                position,
                event,
                format!("segments differ from the held event's ({segments:?})"),
            );
        }
        if confirm_on_create && first_after_create && kind != "confirmed" {
            self.fail(
                partition,
                position,
                event,
                "a confirm: true reserve must be confirmed in the same step as held".to_string(),
            );
        }

        // Which status the hold must be in, and where it goes.
        let (from, to) = match kind {
            "confirmed" => (Status::Held, Status::Confirmed),
            "released" => (Status::Held, Status::Released),
            "expired" => (Status::Held, Status::Expired),
            "refunded" => (Status::Confirmed, Status::Refunded),
            _ => (Status::Held, Status::Held),
        };
        if status != from {
            self.fail(
                partition,
                position,
                event,
                format!("illegal transition: {kind} of a {} hold", status.name()),
            );
            return Vec::new();
        }
        let past_deadline = at >= expires;
        match kind {
            "expired" => {
                if !past_deadline {
                    self.fail(
                        partition,
                        position,
                        event,
                        format!("expired before its deadline {expires}"),
                    );
                }
                let lag = at.saturating_sub(expires);
                self.replay.expiry_lags_ms.push(lag);
                if lag > self.bounds.expiry_lag_max_ms {
                    self.fail(
                        partition,
                        position,
                        event,
                        format!(
                            "expired {lag} ms after its deadline (bound {} ms)",
                            self.bounds.expiry_lag_max_ms
                        ),
                    );
                }
            }
            _ if past_deadline && from == Status::Held => {
                self.fail(
                    partition,
                    position,
                    event,
                    format!("{kind} of a hold past its deadline {expires}: it is expired"),
                );
            }
            _ => {}
        }

        // Attribution.
        let candidates = self.index.of_hold(&hold_id);
        let event_expires = u64_field(event, "expires_at_ms").unwrap_or(0);
        let cause = match kind {
            "expired" => {
                self.cause = Cause::Deadline(expires);
                None
            }
            "confirmed" if confirm_on_create && first_after_create => {
                let creator = Some(self.replay.holds[&hold_id].creator);
                self.cause = Cause::Ops(self.replay.holds[&hold_id].creators.clone());
                if at != self.replay.holds[&hold_id].held_at_ms {
                    self.fail(
                        partition,
                        position,
                        event,
                        "a confirm: true reserve's confirmed has another at_ms than its held"
                            .to_string(),
                    );
                }
                creator
            }
            _ => {
                let once = kind == "extended";
                let found = self.pick(&candidates, at, once, |op| match (kind, &op.request) {
                    ("confirmed", Request::Confirm { .. })
                    | ("released", Request::Release { .. }) => true,
                    // The first refund decides where the units go; its event says which.
                    ("refunded", Request::Refund { restock, .. }) => {
                        event.get("restock") == Some(&Value::Bool(*restock))
                    }
                    ("extended", Request::Extend { ttl_ms, .. }) => {
                        at + ttl_ms == event_expires
                            && answered(op).is_none_or(|(_, body)| {
                                u64_field(body, "expires_at_ms") == Some(event_expires)
                            })
                    }
                    _ => false,
                });
                if found.is_none() {
                    self.fail(
                        partition,
                        position,
                        event,
                        format!("no {kind} request of {hold_id} explains it"),
                    );
                }
                if once {
                    if let Some(op) = found {
                        self.used[op] = true;
                    }
                }
                found
            }
        };
        if let Some(op) = cause {
            self.caused_by(op, partition, position);
        }

        let s = position + 1;
        let mut crossed = Vec::new();
        if kind == "extended" {
            if event_expires == 0 {
                self.fail(partition, position, event, "no expires_at_ms".to_string());
            }
        } else {
            for item in &items {
                if self.replay.spread.contains_key(&item.pool) {
                    self.transition_spread(kind, (partition, position, event), item);
                    continue;
                }
                let Some(before) = self.pool_nums(&item.pool) else {
                    continue;
                };
                let mut nums = before;
                match kind {
                    "confirmed" => {
                        nums.held = nums.held.saturating_sub(item.qty);
                        nums.sold += item.qty;
                    }
                    "released" | "expired" => {
                        nums.held = nums.held.saturating_sub(item.qty);
                        nums.available += item.qty;
                    }
                    _ => {
                        // A refund puts the units back on sale, or with `"restock": false`
                        // takes them out of the pool (sold and total both shrink).
                        nums.sold = nums.sold.saturating_sub(item.qty);
                        if event.get("restock") == Some(&Value::Bool(false)) {
                            nums.total = nums.total.saturating_sub(item.qty);
                        } else {
                            nums.available += item.qty;
                        }
                    }
                }
                self.set_pool(&item.pool, s, nums);
                if self.crossed(&item.pool, Some(before.available), nums.available) {
                    crossed.push(item.pool.clone());
                }
            }
            if kind != "confirmed" {
                self.change_usage(s, &user, &items, false);
            }
        }
        let new_expires = if kind == "extended" {
            event_expires
        } else {
            expires
        };
        if let Some(line) = self.replay.holds.get_mut(&hold_id) {
            line.timeline.push((s, to, new_expires));
        }
        crossed
    }

    /// An item of a spread pool in a hold's transition: returned units leave what its
    /// partition has taken; units written off by a refund stay (they left the total too).
    fn transition_spread(
        &mut self,
        kind: &str,
        (partition, position, event): (usize, usize, &Value),
        item: &Item,
    ) {
        let Some(line) = self.replay.spread.get_mut(&item.pool) else {
            return;
        };
        let written_off = kind == "refunded" && event.get("restock") == Some(&Value::Bool(false));
        if written_off {
            line.write_offs.push((partition, position, item.qty));
        } else if kind != "confirmed" {
            line.returns.push((partition, position, item.qty));
            self.take_spread(&item.pool, partition, position + 1, -(item.qty as i64));
        }
    }

    /// Holds left held long past their deadline when the feed was read were never expired, and a
    /// `confirm: true` hold left held was never confirmed.
    fn end_of_feed(&mut self) {
        let read_ms = self.history.feed_read_us / 1000;
        let mut problems = Vec::new();
        for (hold_id, line) in &self.replay.holds {
            let (status, expires) = line.now();
            if status != Status::Held {
                continue;
            }
            if line.confirm_on_create {
                problems.push(format!(
                    "hold {hold_id}: a confirm: true reserve left held, never confirmed"
                ));
            }
            if expires + self.bounds.expiry_lag_max_ms < read_ms {
                problems.push(format!(
                    "hold {hold_id}: still held {} ms after its deadline {expires} when the \
                     feed was read: it never expired",
                    read_ms - expires
                ));
            }
        }
        problems.sort();
        self.violations.extend(problems);
    }
}

/// The spread pools of a history: those a hold event names from a partition other than the one
/// of the pool's own events, or takes from by segment; those made with several segments; those
/// of a reserve over several partitions; and every pool a reserve names with a spread one. Also
/// the (pool, user) pairs of those pools whose holds are in several partitions.
fn spread_pools(history: &History) -> (HashMap<String, SpreadLine>, HashSet<(String, String)>) {
    let mut home: HashMap<&str, usize> = HashMap::new();
    for (partition, events) in history.feed.iter().enumerate() {
        for event in events {
            if str_field(event, "type") == Some("pool_upserted") {
                if let Some(pool) = str_field(event, "pool") {
                    home.entry(pool).or_insert(partition);
                }
            }
        }
    }
    let mut spread: BTreeSet<&str> = BTreeSet::new();
    let mut user_partitions: HashMap<(String, String), BTreeSet<usize>> = HashMap::new();
    for (partition, events) in history.feed.iter().enumerate() {
        for event in events {
            let Some(items) = event.get("items").and_then(Value::as_array) else {
                continue;
            };
            let by_segment: Vec<&str> = event
                .get("segments")
                .and_then(Value::as_array)
                .map(|takes| takes.iter().filter_map(|t| str_field(t, "pool")).collect())
                .unwrap_or_default();
            for pool in items.iter().filter_map(|item| str_field(item, "pool")) {
                let Some((&name, &pool_partition)) = home.get_key_value(pool) else {
                    continue;
                };
                if pool_partition != partition || by_segment.contains(&pool) {
                    spread.insert(name);
                }
                if let Some(user) = str_field(event, "user") {
                    user_partitions
                        .entry((pool.to_string(), user.to_string()))
                        .or_default()
                        .insert(partition);
                }
            }
        }
    }
    // A PUT with several segments on a dataset of several partitions (one partition keeps a
    // segmented pool whole), and the pools of a reserve over several partitions: their units
    // may be held by a part of an attempt before any event says so. Then every pool a reserve
    // names with a spread one, to a fixpoint (its hold may be in another partition).
    let partitioned = history.feed.len() > 1;
    for op in history.ops.iter().filter(|_| partitioned) {
        if let Request::PutPool {
            pool,
            segments: Some(segments),
            ..
        } = &op.request
        {
            if let Some((&name, _)) = home.get_key_value(pool.as_str()) {
                if *segments > 1 {
                    spread.insert(name);
                }
            }
        }
    }
    let reserves: Vec<Vec<&str>> = history
        .ops
        .iter()
        .filter_map(|op| match &op.request {
            Request::Reserve { items, .. } => Some(
                items
                    .iter()
                    .filter_map(|item| home.get_key_value(item.pool.as_str()).map(|(&n, _)| n))
                    .collect(),
            ),
            _ => None,
        })
        .collect();
    for pools in &reserves {
        let partitions: BTreeSet<usize> = pools.iter().map(|pool| home[pool]).collect();
        if partitions.len() > 1 {
            spread.extend(pools.iter().copied());
        }
    }
    loop {
        let before = spread.len();
        for pools in &reserves {
            if pools.iter().any(|pool| spread.contains(pool)) {
                spread.extend(pools.iter().copied());
            }
        }
        if spread.len() == before {
            break;
        }
    }
    let lines = spread
        .iter()
        .map(|&pool| {
            let puts: Vec<(Option<u64>, Option<u64>)> = history
                .ops
                .iter()
                .filter_map(|op| match &op.request {
                    Request::PutPool {
                        pool: put,
                        per_user_limit,
                        segments,
                        ..
                    } if put == pool => Some((*per_user_limit, *segments)),
                    _ => None,
                })
                .collect();
            // The most any PUT allowed: sound whichever PUT was in force.
            let per_user_limit = if puts.iter().all(|(limit, _)| limit.is_some()) {
                puts.iter().filter_map(|(limit, _)| *limit).max()
            } else {
                None
            };
            let line = SpreadLine {
                partition: home[pool],
                segments: puts.iter().filter_map(|(_, segments)| *segments).max(),
                per_user_limit,
                snapshots: Vec::new(),
                taken: BTreeMap::new(),
                returns: Vec::new(),
                write_offs: Vec::new(),
            };
            (pool.to_string(), line)
        })
        .collect();
    let split_users = user_partitions
        .into_iter()
        .filter(|((pool, _), partitions)| spread.contains(pool.as_str()) && partitions.len() > 1)
        .map(|(key, _)| key)
        .collect();
    (lines, split_users)
}
