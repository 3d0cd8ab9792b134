//! The verdict on one seed, once it is quiet: what the judge server reads (every hold id the
//! plan ever used, every pool, every partition's feed) and what Redis holds (the library's
//! keys, read directly), held to what the clients were told and to the pools' arithmetic.
//! Then the history checker (stockd-history) over every request sent and the feed.
//!
//! The raw reads know the library's key layout (lua/state.lua, lua/cross.lua): the queues
//! `pendingq` and `applyq`, the hold record's status `st`, a part's `st` and `it` ("pool qty
//! generation ..."), a pool's counters `t a h s` and its `usage` hash. That is the one place
//! the simulation looks under the contract, so that what the API cannot show (units a part
//! holds for no hold, a record left pending) is judged too.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{json, Value};
use stockd_core::{
    Backend, BackendError, Command, Error, Event, EventKind, EventsRequest, HoldStatus, HoldView,
    Outcome, PoolView, Reply,
};
use stockd_history::{Bounds, History, Item, Op, Outcome as HistoryOutcome, Request};
use stockd_redis::keys::{split_segment, PartitionKeys, Placement};

use crate::deploy::Raw;
use crate::plan::PoolPlan;
use crate::run::{show_result, Run, Sent, Server};

/// Events read per page of the feed.
const FEED_PAGE: usize = 1_000;

fn keys(run: &Run, partition: u32) -> PartitionKeys {
    PartitionKeys::new(partition, run.plan.partitions)
}

/// Where segmented pools' segments live: the dataset's placement, as partition 0's meta holds
/// it.
async fn placement(run: &Run, raw: &mut Raw) -> Result<Placement, String> {
    let meta = hash(raw, &keys(run, 0).meta()).await?;
    match meta.get("placement") {
        Some(text) => Placement::parse(text, run.plan.partitions),
        None => Ok(Placement::whole(run.plan.partitions)),
    }
}

/// Each segment of a planned pool as the library keeps it: its name and partition.
fn segment_keys(placement: &Placement, pool: &PoolPlan) -> Vec<(String, u32)> {
    (0..pool.segments)
        .map(|j| match j {
            0 => (pool.name.clone(), pool.partition),
            j => (
                format!("{}~{j}", pool.name),
                placement.segment_partition(&pool.name, j),
            ),
        })
        .collect()
}

/// Every part of every planned hold id, in any partition, that names `pool` (or a segment of
/// it): (partition, hold id, the part's fields), to show where units went.
async fn parts_naming(
    run: &Run,
    raw: &mut Raw,
    pool: &str,
) -> Result<Vec<(u32, String, HashMap<String, String>)>, String> {
    let mut found = Vec::new();
    for hold in &run.plan.holds {
        for partition in 0..run.plan.partitions {
            let key = format!("{}part:{}", keys(run, partition).prefix, hold.id);
            let part = hash(raw, &key).await?;
            let names = part.get("it").is_some_and(|it| {
                it.split_whitespace()
                    .step_by(3)
                    .any(|name| split_segment(name).0 == pool)
            });
            if names {
                found.push((partition, hold.id.clone(), part));
            }
        }
    }
    Ok(found)
}

/// Where each item of a hold on segmented pools took its units, from its `held` event (the
/// segments of a segmented pool's items, every other pool's own partition): (pool, qty,
/// partition). None without such an event.
fn taken_where(
    last: &Final,
    plan: &crate::plan::Plan,
    placement: &Placement,
    id: &str,
) -> Option<Vec<(String, u64, u32)>> {
    let held = last.feed.iter().flatten().find(|e| {
        e.kind == EventKind::Held && e.hold_id.as_ref().is_some_and(|h| h.as_str() == id)
    })?;
    let mut taken = Vec::new();
    for item in held.items.iter().flat_map(|items| items.iter()) {
        let takes: Vec<_> = held
            .segments
            .iter()
            .flatten()
            .filter(|take| take.pool == item.pool)
            .collect();
        if takes.is_empty() {
            let partition = plan
                .pools
                .iter()
                .find(|pool| pool.name == item.pool.as_str())
                .map_or(0, |pool| pool.partition);
            taken.push((item.pool.to_string(), item.qty, partition));
        }
        for take in takes {
            let partition = placement.segment_partition(take.pool.as_str(), take.segment);
            taken.push((take.pool.to_string(), take.qty, partition));
        }
    }
    Some(taken)
}

fn redis_error(what: &str, error: redis::RedisError) -> String {
    format!("reading {what} from Redis: {error}")
}

/// Hold ids still in some partition's `pendingq` or `applyq`: work the protocol has not
/// finished.
pub async fn unfinished(run: &Run, raw: &mut Raw) -> Result<Vec<String>, String> {
    let mut left = Vec::new();
    for partition in 0..run.plan.partitions {
        let keys = keys(run, partition);
        for queue in ["pendingq", "applyq"] {
            let ids: Vec<String> = raw
                .query(
                    redis::cmd("ZRANGE")
                        .arg(format!("{}{queue}", keys.prefix))
                        .arg(0)
                        .arg(-1),
                )
                .await
                .map_err(|e| redis_error(queue, e))?;
            left.extend(
                ids.into_iter()
                    .map(|id| format!("{id} in {queue} of partition {partition}")),
            );
        }
    }
    Ok(left)
}

async fn hash(raw: &mut Raw, key: &str) -> Result<HashMap<String, String>, String> {
    raw.query(redis::cmd("HGETALL").arg(key))
        .await
        .map_err(|e| redis_error(key, e))
}

/// What the judge read at the end.
pub struct Final {
    pub holds: Vec<Option<HoldView>>,
    pub pools: Vec<Option<PoolView>>,
    pub feed: Vec<Vec<Event>>,
}

/// Totals the checks add up over seeds.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    pub requests: u64,
    pub unknown: u64,
    pub holds_acknowledged: u64,
    pub cross_holds_acknowledged: u64,
    pub cross_reserves_refused: u64,
    pub rolled_back_answers: u64,
    pub events: u64,
    pub histories_checked: u64,
    pub history_ops: u64,
    /// Seeds with segmented pools spread over partitions.
    pub segmented_seeds: u64,
    /// Seeds where a copy of the history with an oversold segmented pool was judged an
    /// oversell (the proof that the checker sees their segmented pools).
    pub oversell_proofs: u64,
}

impl Counts {
    pub fn add(&mut self, other: &Counts) {
        self.requests += other.requests;
        self.unknown += other.unknown;
        self.holds_acknowledged += other.holds_acknowledged;
        self.cross_holds_acknowledged += other.cross_holds_acknowledged;
        self.cross_reserves_refused += other.cross_reserves_refused;
        self.rolled_back_answers += other.rolled_back_answers;
        self.events += other.events;
        self.histories_checked += other.histories_checked;
        self.history_ops += other.history_ops;
        self.segmented_seeds += other.segmented_seeds;
        self.oversell_proofs += other.oversell_proofs;
    }
}

/// A client left with a 503 for its reserve sends it once more, now that all is quiet: it must
/// get an answer (a hold id wedged by an unfinished attempt answers 503 for good).
async fn retry_unknown_reserves(run: &Run, judge: &Server, violations: &mut Vec<String>) {
    let unknown: Vec<usize> = {
        let sent = run.sent.lock().expect("sent lock");
        (0..run.plan.holds.len())
            .filter(|&hold| {
                let id = run.plan.holds[hold].id.as_str();
                sent.iter()
                    .rev()
                    .find(|s| matches!(&s.command, Command::Reserve(r) if r.hold_id.as_str() == id))
                    .is_some_and(|s| s.result.is_err())
            })
            .collect()
    };
    let process = run.new_process();
    for hold in unknown {
        let result = run.send(process, judge, &run.reserve_command(hold)).await;
        if result.is_err() {
            violations.push(format!(
                "hold {}: after quiescing, its reserve still answers {}",
                run.plan.holds[hold].id,
                show_result(&result)
            ));
        }
    }
}

/// Reads everything through the judge (recorded as requests of their own, for the history).
async fn read_final(run: &Run, judge: &Server, violations: &mut Vec<String>) -> Final {
    let process = run.new_process();
    let mut holds = Vec::new();
    for hold in 0..run.plan.holds.len() {
        let command = Command::GetHold {
            hold_id: run.hold_id(hold),
        };
        holds.push(match run.send(process, judge, &command).await {
            Ok(Ok(Reply::Hold { hold, .. })) => Some(hold),
            Ok(Err(Error::HoldNotFound { .. })) => None,
            other => {
                violations.push(format!(
                    "hold {}: after quiescing, reading it answers {}",
                    run.plan.holds[hold].id,
                    show_result(&other)
                ));
                None
            }
        });
    }
    let mut pools = Vec::new();
    for pool in 0..run.plan.pools.len() {
        let command = Command::GetPool {
            pool: run.pool_id(pool),
        };
        pools.push(match run.send(process, judge, &command).await {
            Ok(Ok(Reply::Pool { pool, .. })) => Some(pool),
            other => {
                violations.push(format!(
                    "pool {}: after quiescing, reading it answers {}",
                    run.plan.pools[pool].name,
                    show_result(&other)
                ));
                None
            }
        });
    }
    let mut feed = Vec::new();
    for partition in 0..run.plan.partitions {
        let mut events = Vec::new();
        let mut after = 0;
        loop {
            let request = EventsRequest::at_once(partition, after, FEED_PAGE);
            match judge.backend.events(request).await {
                Ok(Ok(page)) if page.events.is_empty() => break,
                Ok(Ok(page)) => {
                    after = page.next_after;
                    events.extend(page.events);
                }
                other => {
                    violations.push(format!(
                        "partition {partition}: reading the feed after {after} answers {other:?}"
                    ));
                    break;
                }
            }
        }
        feed.push(events);
    }
    Final { holds, pools, feed }
}

fn status_name(hold: Option<&HoldView>) -> &'static str {
    hold.map_or("absent", |hold| hold.status.as_str())
}

/// Every check of one quiet seed; an empty list is a pass.
pub async fn judge(
    run: &Run,
    judge: &Server,
    raw: &mut Raw,
    counts: &mut Counts,
) -> Result<Vec<String>, String> {
    let mut violations = Vec::new();
    let plan = &run.plan;
    let placement = placement(run, raw).await?;
    if plan.pools.iter().any(|pool| pool.segments > 1) {
        counts.segmented_seeds += 1;
    }

    for left in unfinished(run, raw).await? {
        violations.push(format!("unfinished after quiescing: {left}"));
    }
    retry_unknown_reserves(run, judge, &mut violations).await;
    let last = read_final(run, judge, &mut violations).await;
    let sent = std::mem::take(&mut *run.sent.lock().expect("sent lock"));

    counts.requests += sent.len() as u64;
    counts.unknown += sent.iter().filter(|s| s.result.is_err()).count() as u64;
    counts.rolled_back_answers += sent
        .iter()
        .filter(|s| {
            matches!(&s.result, Err(BackendError::Unavailable(why)) if why.contains("rolled back"))
        })
        .count() as u64;
    counts.events += last.feed.iter().map(Vec::len).sum::<usize>() as u64;

    // The feed: seqs 1, 2, ... in every partition; one `held` per hold id at most.
    let mut held_events: HashMap<String, usize> = HashMap::new();
    for (partition, events) in last.feed.iter().enumerate() {
        for (position, event) in events.iter().enumerate() {
            if event.seq != position as u64 + 1 {
                violations.push(format!(
                    "partition {partition}: event {position} has seq {} (the feed must count up \
                     by one from 1)",
                    event.seq
                ));
            }
            if event.kind == EventKind::Held {
                if let Some(hold_id) = &event.hold_id {
                    *held_events.entry(hold_id.to_string()).or_default() += 1;
                }
            }
        }
    }

    // Holds: what the clients were told, what the judge reads, what Redis keeps.
    for (index, hold_plan) in plan.holds.iter().enumerate() {
        let id = hold_plan.id.as_str();
        let found = last.holds[index].as_ref();
        let cross = hold_plan.cross(&plan.pools);
        let mine = |s: &&Sent| command_hold(&s.command) == Some(id);
        let answers: Vec<&Sent> = sent.iter().filter(mine).collect();
        // Reserves acknowledged, and whether each created the hold (201).
        let acknowledged: Vec<(&HoldView, bool)> = answers
            .iter()
            .filter(|s| matches!(s.command, Command::Reserve(_)))
            .filter_map(|s| match &s.result {
                Ok(Ok(Reply::Hold { hold, created })) => Some((hold, *created)),
                _ => None,
            })
            .collect();
        let created = answers
            .iter()
            .filter(|s| matches!(s.command, Command::Reserve(_)))
            .filter(|s| matches!(&s.result, Ok(Ok(Reply::Hold { created: true, .. }))))
            .count();
        if !acknowledged.is_empty() {
            counts.holds_acknowledged += 1;
            if cross {
                counts.cross_holds_acknowledged += 1;
            }
        }
        if cross {
            counts.cross_reserves_refused += answers
                .iter()
                .filter(|s| matches!(s.command, Command::Reserve(_)))
                .filter(|s| matches!(&s.result, Ok(Err(_))))
                .count() as u64;
        }
        if created > 1 {
            violations.push(format!("hold {id}: {created} reserves answered 201"));
        }
        if held_events.get(id).copied().unwrap_or(0) > 1 {
            violations.push(format!(
                "hold {id}: held {} times in the feed",
                held_events[id]
            ));
        }
        if held_events.contains_key(id) && found.is_none() {
            violations.push(format!("hold {id}: held in the feed, but gone"));
        }
        let want_items: Vec<(String, u64)> = hold_plan
            .items
            .iter()
            .map(|&(pool, qty)| (plan.pools[pool].name.clone(), qty))
            .collect();
        if let Some(hold) = found {
            let items: Vec<(String, u64)> = hold
                .items
                .iter()
                .map(|item| (item.pool.to_string(), item.qty))
                .collect();
            if items != want_items
                || hold.user.as_ref().map(|u| u.as_str()) != hold_plan.user.as_deref()
            {
                violations.push(format!(
                    "hold {id}: is {items:?} for {:?}, the request was {want_items:?} for {:?}",
                    hold.user, hold_plan.user
                ));
            }
            if hold_plan.confirm && hold.status == HoldStatus::Held {
                violations.push(format!("hold {id}: a confirm: true reserve left held"));
            }
        }
        for &(ack, created) in &acknowledged {
            match found {
                None => violations.push(format!(
                    "hold {id}: a reserve was answered {} but the hold is gone",
                    ack.status.as_str()
                )),
                Some(hold) => {
                    if (ack.created_at_ms, ack.expires_at_ms)
                        != (hold.created_at_ms, hold.expires_at_ms)
                    {
                        violations.push(format!(
                            "hold {id}: a reserve was answered created {} expiring {}, the hold \
                             is created {} expiring {}",
                            ack.created_at_ms,
                            ack.expires_at_ms,
                            hold.created_at_ms,
                            hold.expires_at_ms
                        ));
                    }
                }
            }
            let want = if hold_plan.confirm {
                HoldStatus::Confirmed
            } else {
                HoldStatus::Held
            };
            if created && ack.status != want {
                violations.push(format!(
                    "hold {id}: a reserve created it {}, not {}",
                    ack.status.as_str(),
                    want.as_str()
                ));
            }
        }
        // Transitions acknowledged stay done.
        for answer in &answers {
            let Ok(Ok(Reply::Hold { hold: told, .. })) = &answer.result else {
                continue;
            };
            let now = found.map(|h| h.status);
            let allowed: &[HoldStatus] = match answer.command {
                Command::Confirm { .. } => &[HoldStatus::Confirmed, HoldStatus::Refunded],
                Command::Release { .. } => &[told.status],
                Command::Refund { .. } => &[HoldStatus::Refunded],
                _ => continue,
            };
            if !now.is_some_and(|now| allowed.contains(&now)) {
                violations.push(format!(
                    "hold {id}: {} was answered {}, the hold is now {}",
                    crate::run::show_command(&answer.command),
                    told.status.as_str(),
                    status_name(found)
                ));
            }
        }

        // Redis: the record is not left pending, and every part follows the hold. A hold on a
        // segmented pool lives where its units were taken (its `held` event says): its record
        // is looked for in every partition.
        let on_segments = hold_plan
            .items
            .iter()
            .any(|&(pool, _)| plan.pools[pool].segments > 1);
        let homes: Vec<u32> = if on_segments {
            (0..plan.partitions).collect()
        } else {
            vec![plan.pools[hold_plan.items[0].0].partition]
        };
        for home in homes {
            let record = hash(raw, &keys(run, home).hold(id)).await?;
            if let Some(status) = record.get("st") {
                if status == "pending" || status == "aborting" {
                    violations.push(format!("hold {id}: its record is left {status}"));
                }
            }
        }
        let mut by_partition: BTreeMap<u32, Vec<(String, u64)>> = BTreeMap::new();
        if on_segments {
            for (pool, qty, partition) in
                taken_where(&last, plan, &placement, id).unwrap_or_default()
            {
                by_partition.entry(partition).or_default().push((pool, qty));
            }
        } else {
            for &(pool, qty) in &hold_plan.items {
                by_partition
                    .entry(plan.pools[pool].partition)
                    .or_default()
                    .push((plan.pools[pool].name.clone(), qty));
            }
        }
        if by_partition.len() > 1 {
            for (partition, items) in by_partition {
                let key = format!("{}part:{id}", keys(run, partition).prefix);
                let part = hash(raw, &key).await?;
                let status = part.get("st").map(String::as_str);
                let want: &[&str] = match found.map(|h| h.status) {
                    Some(HoldStatus::Held) => &["held"],
                    Some(HoldStatus::Confirmed) => &["confirmed"],
                    Some(HoldStatus::Released | HoldStatus::Expired) => &["returned"],
                    Some(HoldStatus::Refunded) => &["refunded"],
                    None => &["returned"],
                };
                let fine = match status {
                    None => found.is_none(),
                    Some(status) => want.contains(&status),
                };
                if !fine {
                    violations.push(format!(
                        "hold {id} is {}, but its part in partition {partition} is {:?} ({part:?})",
                        status_name(found),
                        status.unwrap_or("absent")
                    ));
                }
                if status.is_some_and(|s| s != "returned") {
                    let words: Vec<&str> = part
                        .get("it")
                        .map(|it| it.split_whitespace().collect())
                        .unwrap_or_default();
                    let mut held: Vec<(String, u64)> = words
                        .chunks(3)
                        .map(|w| {
                            (
                                split_segment(w[0]).0.to_string(),
                                w.get(1).and_then(|q| q.parse().ok()).unwrap_or(0),
                            )
                        })
                        .collect();
                    let mut want = items.clone();
                    held.sort();
                    want.sort();
                    if held != want {
                        violations.push(format!(
                            "hold {id}: its part in partition {partition} has {held:?}, the hold \
                             takes {want:?} there"
                        ));
                    }
                }
            }
        }
    }

    // Pools: the arithmetic, against the holds and the feed.
    for (index, pool_plan) in plan.pools.iter().enumerate() {
        let name = pool_plan.name.as_str();
        let Some(view) = &last.pools[index] else {
            continue;
        };
        // Every segment adds up, and the segments add up to what the pool reads.
        let (mut t, mut a, mut h, mut s) = (0, 0, 0, 0);
        let mut raw_segments = Vec::new();
        for (segment, partition) in segment_keys(&placement, pool_plan) {
            let raw_pool = hash(raw, &keys(run, partition).pool(&segment)).await?;
            let number = |field: &str| -> i64 {
                raw_pool
                    .get(field)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(i64::MIN / 8)
            };
            let counts = (number("t"), number("a"), number("h"), number("s"));
            if [counts.0, counts.1, counts.2, counts.3]
                .iter()
                .any(|&n| n < 0)
                || counts.0 != counts.1 + counts.2 + counts.3
            {
                violations.push(format!(
                    "pool {name}: Redis holds total {}, available {}, held {}, sold {} in \
                     {segment}",
                    counts.0, counts.1, counts.2, counts.3
                ));
            }
            (t, a, h, s) = (t + counts.0, a + counts.1, h + counts.2, s + counts.3);
            raw_segments.push(raw_pool);
        }
        if (view.total, view.available, view.held, view.sold)
            != (t as u64, a as u64, h as u64, s as u64)
        {
            violations.push(format!(
                "pool {name}: reads {view:?}, Redis holds {raw_segments:?}"
            ));
        }
        let in_pool = |hold: &HoldView| -> u64 {
            hold.items
                .iter()
                .filter(|item| item.pool.as_str() == name)
                .map(|item| item.qty)
                .sum()
        };
        let sum = |status: HoldStatus| -> u64 {
            last.holds
                .iter()
                .flatten()
                .filter(|hold| hold.status == status)
                .map(in_pool)
                .sum()
        };
        let (held, sold) = (sum(HoldStatus::Held), sum(HoldStatus::Confirmed));
        if (view.held, view.sold) != (held, sold) {
            let counted = view.held + view.sold;
            let what = if counted < held + sold {
                "OVERSELL: units its holds own are on sale again"
            } else if counted > held + sold {
                "units lost: held or sold for no hold"
            } else {
                "held and sold mixed up"
            };
            let parts = parts_naming(run, raw, name).await?;
            violations.push(format!(
                "pool {name}: held {} and sold {}, but its holds hold {held} and have bought \
                 {sold} ({what}); the parts naming it: {parts:?}; its segments: \
                 {raw_segments:?}",
                view.held, view.sold
            ));
        }
        let feed = &last.feed[pool_plan.partition as usize];
        let restocked: i64 = feed
            .iter()
            .filter(|e| {
                e.kind == EventKind::Restocked
                    && e.pool.as_ref().is_some_and(|p| p.as_str() == name)
            })
            .filter_map(|e| e.delta)
            .sum();
        let written_off: u64 = last
            .feed
            .iter()
            .flatten()
            .filter(|e| e.kind == EventKind::Refunded && e.restock == Some(false))
            .flat_map(|e| e.items.iter().flat_map(|items| items.iter()))
            .filter(|item| item.pool.as_str() == name)
            .map(|item| item.qty)
            .sum();
        let want_total = pool_plan.total as i64 + restocked - written_off as i64;
        if view.total as i64 != want_total {
            violations.push(format!(
                "pool {name}: total {}, but it was made with {}, restocked by {restocked} and \
                 lost {written_off} to refunds without restock",
                view.total, pool_plan.total
            ));
        }
        let mut usages = Vec::new();
        for (segment, partition) in segment_keys(&placement, pool_plan) {
            usages.push(hash(raw, &keys(run, partition).usage(&segment)).await?);
        }
        for user in ["u1", "u2"] {
            let used: u64 = usages
                .iter()
                .map(|usage| {
                    usage
                        .get(user)
                        .and_then(|u| u.parse::<u64>().ok())
                        .unwrap_or(0)
                })
                .sum();
            let want: u64 = last
                .holds
                .iter()
                .flatten()
                .filter(|hold| hold.user.as_ref().is_some_and(|u| u.as_str() == user))
                .filter(|hold| matches!(hold.status, HoldStatus::Held | HoldStatus::Confirmed))
                .map(in_pool)
                .sum();
            if used != want {
                violations.push(format!(
                    "pool {name}: user {user} uses {used}, but holds {want} in held and \
                     confirmed holds"
                ));
            }
        }
    }

    // Restock request ids: each restocks at most once, and an acknowledged one exactly once.
    let mut last_answer: BTreeMap<String, &Result<Outcome, BackendError>> = BTreeMap::new();
    for s in &sent {
        if let Command::Restock {
            request_id: Some(request_id),
            ..
        } = &s.command
        {
            last_answer.insert(request_id.to_string(), &s.result);
        }
    }
    let mut applied: HashMap<String, usize> = HashMap::new();
    for event in last.feed.iter().flatten() {
        if let (EventKind::Restocked, Some(request_id)) = (event.kind, &event.request_id) {
            *applied.entry(request_id.to_string()).or_default() += 1;
        }
    }
    for (request_id, answer) in &last_answer {
        let times = applied.get(request_id).copied().unwrap_or(0);
        let fine = match answer {
            Ok(Ok(_)) => times == 1,
            Ok(Err(_)) => times == 0,
            Err(_) => times <= 1,
        };
        if !fine {
            violations.push(format!(
                "restock {request_id}: finally answered {}, restocked {times} times",
                show_result(answer)
            ));
        }
    }

    // The history checker, over every request and the whole feed (see `history`).
    let history = history(run, &sent, &last);
    let bounds = Bounds {
        slack_ms: 0,
        expiry_lag_max_ms: EXPIRY_LAG_UNCHECKED_MS,
        // Every primary and every client read the test clock.
        clock_skew_ms: 0,
    };
    let report = stockd_history::check(&history, bounds);
    counts.histories_checked += 1;
    counts.history_ops += history.ops.len() as u64;
    for violation in report.violations {
        violations.push(format!("history checker: {violation}"));
    }
    // Proof that the checker judges this seed's segmented pools: a copy of the history where a
    // hold of one of them takes more than any stock is an oversell.
    if let Some(copy) = oversold_copy(&history) {
        let report = stockd_history::check(&copy, bounds);
        if report.violations.iter().any(|v| v.contains("OVERSELL")) {
            counts.oversell_proofs += 1;
        } else {
            violations.push(format!(
                "history checker: a copy where a hold takes {OVERSOLD_UNITS} units of a \
                 segmented pool was not judged an oversell: {:?}",
                report.violations
            ));
        }
    }
    Ok(violations)
}

/// More units than any pool of the simulation ever has.
const OVERSOLD_UNITS: u64 = 1_000_000_000;

/// The history with the first hold that took units from segments and never gave them back
/// taking `OVERSOLD_UNITS` of each of its pools instead (all from the first segment it names of
/// each), as its `held` event says; `None` when no such hold exists.
///
/// A hold that gave its units back (released, expired, refunded) is not chosen: when its return
/// may have been applied as early as its `held` event (their requests overlap), no instant
/// surely has its units taken, and the checker rightly judges no oversell (seed 283).
fn oversold_copy(history: &History) -> Option<History> {
    let returned: HashSet<&str> = history
        .feed
        .iter()
        .flatten()
        .filter(|event| {
            matches!(
                event["type"].as_str(),
                Some("released" | "expired" | "refunded")
            )
        })
        .filter_map(|event| event["hold_id"].as_str())
        .collect();
    let position = history
        .feed
        .iter()
        .enumerate()
        .find_map(|(partition, events)| {
            events
                .iter()
                .position(|event| {
                    event["type"] == "held"
                        && event["segments"].is_array()
                        && !event["hold_id"]
                            .as_str()
                            .is_some_and(|hold| returned.contains(hold))
                })
                .map(|position| (partition, position))
        })?;
    let mut copy = history.clone();
    let held = &mut copy.feed[position.0][position.1];
    for item in held["items"].as_array_mut()? {
        item["qty"] = json!(OVERSOLD_UNITS);
    }
    let mut named = Vec::new();
    let mut segments = Vec::new();
    for part in held["segments"].as_array()? {
        if !named.contains(&part["pool"]) {
            named.push(part["pool"].clone());
            let mut part = part.clone();
            part["qty"] = json!(OVERSOLD_UNITS);
            segments.push(part);
        }
    }
    held["segments"] = json!(segments);
    Some(copy)
}

/// Expiry lag is not judged here: time moves in phases of up to a few seconds, and quiescing
/// moves it by minutes before the sweeps that expire.
const EXPIRY_LAG_UNCHECKED_MS: u64 = 1_000_000_000;

fn command_hold(command: &Command) -> Option<&str> {
    match command {
        Command::Reserve(request) => Some(request.hold_id.as_str()),
        Command::Confirm { hold_id }
        | Command::Release { hold_id }
        | Command::Refund { hold_id, .. }
        | Command::GetHold { hold_id } => Some(hold_id.as_str()),
        _ => None,
    }
}

/// The request as the history checker knows it (its HTTP shape).
fn request(command: &Command) -> Option<Request> {
    Some(match command {
        Command::PutPool {
            pool,
            spec,
            segments,
            ..
        } => Request::PutPool {
            pool: pool.to_string(),
            total: spec.total,
            per_user_limit: spec.per_user_limit,
            low_stock_threshold: spec.low_stock_threshold,
            segments: *segments,
        },
        Command::Restock {
            pool,
            delta,
            request_id,
        } => Request::Restock {
            pool: pool.to_string(),
            delta: *delta,
            request_id: request_id.as_ref().map(|r| r.to_string()),
        },
        Command::Reserve(r) => Request::Reserve {
            hold_id: r.hold_id.to_string(),
            user: r.user.as_ref().map(|u| u.to_string()),
            items: r
                .items
                .iter()
                .map(|item| Item {
                    pool: item.pool.to_string(),
                    qty: item.qty,
                })
                .collect(),
            ttl_ms: r.ttl_ms,
            confirm: r.confirm,
            wait_ms: r.wait_ms,
        },
        Command::Confirm { hold_id } => Request::Confirm {
            hold_id: hold_id.to_string(),
        },
        Command::Release { hold_id } => Request::Release {
            hold_id: hold_id.to_string(),
        },
        Command::Refund { hold_id, restock } => Request::Refund {
            hold_id: hold_id.to_string(),
            restock: *restock,
        },
        Command::GetHold { hold_id } => Request::GetHold {
            hold_id: hold_id.to_string(),
        },
        Command::GetPool { pool } => Request::GetPool {
            pool: pool.to_string(),
        },
        _ => return None,
    })
}

/// An error's HTTP status and body, as stockd-server's error.rs writes them (the details the
/// checker reads).
fn error_answer(error: &Error) -> (u16, Value) {
    let status = match error {
        Error::InvalidRequest { .. } | Error::UserRequired { .. } => 422,
        Error::PoolNotFound { .. } | Error::HoldNotFound { .. } => 404,
        Error::EventsExpired { .. } => 410,
        _ => 409,
    };
    let mut body = json!({"error": error.code(), "message": error.to_string()});
    let details = match error {
        Error::PoolNotFound { pool }
        | Error::UserRequired { pool }
        | Error::PoolDeleted { pool } => json!({"pool": pool}),
        Error::InsufficientStock {
            pool,
            available,
            requested,
        } => json!({"pool": pool, "available": available, "requested": requested}),
        Error::UserLimitExceeded {
            pool,
            limit,
            used,
            requested,
        } => json!({"pool": pool, "limit": limit, "used": used, "requested": requested}),
        Error::TotalBelowCommitted {
            pool,
            total,
            committed,
        } => json!({"pool": pool, "total": total, "committed": committed}),
        Error::HoldNotFound { hold_id }
        | Error::HoldIdConflict { hold_id }
        | Error::HoldExpired { hold_id }
        | Error::HoldReleased { hold_id }
        | Error::HoldConfirmed { hold_id }
        | Error::HoldRefunded { hold_id }
        | Error::HoldNotConfirmed { hold_id } => json!({"hold_id": hold_id}),
        Error::RequestIdConflict {
            request_id,
            pool,
            delta,
        } => json!({"request_id": request_id, "pool": pool, "delta": delta}),
        _ => json!({}),
    };
    if let (Some(body), Value::Object(details)) = (body.as_object_mut(), details) {
        body.extend(details);
    }
    (status, body)
}

fn outcome(result: &Result<Outcome, BackendError>) -> HistoryOutcome {
    let (status, body) = match result {
        Err(error) => (
            503,
            json!({"error": "backend_unavailable", "message": error.to_string()}),
        ),
        Ok(Err(error)) => error_answer(error),
        Ok(Ok(Reply::Hold { hold, created })) => (
            if *created { 201 } else { 200 },
            serde_json::to_value(hold).expect("a hold serialises"),
        ),
        Ok(Ok(Reply::Pool { pool, created, .. })) => (
            if *created { 201 } else { 200 },
            serde_json::to_value(pool).expect("a pool serialises"),
        ),
        Ok(Ok(other)) => (200, json!({"reply": format!("{other:?}")})),
    };
    HistoryOutcome::Answered { status, body }
}

/// The history of the seed for stockd-history's checker: every request sent and every
/// partition's feed. Pools whose units are held in partitions other than their own events'
/// (segmented pools, and pools of holds over several partitions) are judged by the checker in
/// real time (stockd-history's spread.rs).
fn history(run: &Run, sent: &[Sent], last: &Final) -> History {
    let ops = sent
        .iter()
        .filter_map(|s| {
            Some(Op {
                process: s.process,
                invoke_us: s.invoke_us,
                complete_us: s.complete_us,
                request: request(&s.command)?,
                outcome: outcome(&s.result),
            })
        })
        .collect();
    let feed = last
        .feed
        .iter()
        .map(|events| {
            events
                .iter()
                .enumerate()
                .map(|(position, event)| {
                    let mut value = serde_json::to_value(event).expect("an event serialises");
                    value["seq"] = json!(position as u64 + 1);
                    value
                })
                .collect()
        })
        .collect();
    History {
        ops,
        feed,
        feed_read_us: run.clock.stamp_us(),
    }
}
