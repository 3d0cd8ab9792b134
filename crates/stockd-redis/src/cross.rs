//! The cross-partition protocol, driven from the server: a hold whose pools live in several
//! partitions of a Redis Cluster (see lua/cross.lua and docs/redis.md).
//!
//! Every step is one atomic library call that names its attempt, so the server may die between
//! any two and a step may arrive late or twice: the hold record (home) decides, the parts follow,
//! each participant refuses a step of an attempt other than the one it holds, and the sweepers of
//! every server finish what a dead server left (roll forward a decided transition, roll back an
//! unfinished reserve, return a part whose home lost its hold). This module orders the steps; it
//! decides no rule (each step's checks are the library's).

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::future::select_all;
use serde_json::Value;
use stockd_core::{BackendError, Error, HoldItem, HoldView, Outcome, ReserveRequest};

use crate::fault;
use crate::keys;
use crate::shared::Shared;
use crate::wire::{self, Answer, Op, Route};

fn unexpected(answer: &Answer) -> BackendError {
    BackendError::Unavailable(format!("unexpected answer from Redis: {answer:?}"))
}

fn op(name: &'static str, args: Vec<String>) -> Op {
    Op { name, args }
}

/// An item of a hold as a part sees it: its position in the hold, its pool, its quantity.
type PartItem = (usize, String, u64);

/// Items grouped by partition, in the order each partition first appears.
fn parts<'a>(
    placement: &keys::Placement,
    items: impl Iterator<Item = (&'a str, u64)>,
) -> Vec<(u32, Vec<PartItem>)> {
    let mut order: Vec<u32> = Vec::new();
    let mut by_partition: BTreeMap<u32, Vec<PartItem>> = BTreeMap::new();
    for (index, (pool, qty)) in items.enumerate() {
        let partition = placement.pool_partition(pool);
        if !by_partition.contains_key(&partition) {
            order.push(partition);
        }
        by_partition
            .entry(partition)
            .or_default()
            .push((index, pool.to_string(), qty));
    }
    order
        .into_iter()
        .map(|partition| {
            let items = by_partition.remove(&partition).unwrap_or_default();
            (partition, items)
        })
        .collect()
}

fn part_words(
    check_only: bool,
    request: &ReserveRequest,
    attempt: &str,
    home: u32,
    items: &[PartItem],
) -> Vec<String> {
    let mut args = vec![
        if check_only { "1" } else { "0" }.to_string(),
        request.hold_id.to_string(),
        attempt.to_string(),
        home.to_string(),
        request
            .user
            .as_ref()
            .map_or_else(|| "-".to_string(), |u| u.to_string()),
        items.len().to_string(),
    ];
    for (index, pool, qty) in items {
        args.extend([pool.clone(), qty.to_string(), index.to_string()]);
    }
    args
}

/// What a part answered to `part_reserve`.
enum PartAnswer {
    Taken,
    /// Refused, for the item at this position in the hold.
    Refused(usize, Error),
    /// A pool of the part is spread over partitions (the server did not know it), or a pool op
    /// froze it: the request is sent again (segments.rs).
    Again,
}

fn part_answer(shared: &Shared, text: &str) -> Result<PartAnswer, BackendError> {
    match wire::decode(text).map_err(|e| BackendError::Unavailable(e.to_string()))? {
        Answer::Segmented { pool, segments } => {
            shared.spread.note(&pool, segments);
            Ok(PartAnswer::Again)
        }
        Answer::Frozen { .. } => Ok(PartAnswer::Again),
        _ => Ok(match refusal(text)? {
            Some((index, error)) => PartAnswer::Refused(index, error),
            None => PartAnswer::Taken,
        }),
    }
}

/// A part's refusal and the position (in the hold) of the item it names.
fn refusal(text: &str) -> Result<Option<(usize, Error)>, BackendError> {
    match wire::decode(text).map_err(|e| BackendError::Unavailable(e.to_string()))? {
        Answer::Done(Err(error)) => {
            let index = serde_json::from_str::<Value>(text)
                .ok()
                .and_then(|v| v.get("index").and_then(Value::as_u64))
                .unwrap_or(0) as usize;
            Ok(Some((index, error)))
        }
        Answer::PartOk => Ok(None),
        other => Err(unexpected(&other)),
    }
}

/// A reserve whose pools span partitions, with `home` holding the record. Waits (polling on the
/// partitions' feeds) when stock is short and the request allows it; such waiters are not
/// queued with the others (see docs/redis.md).
/// `None`: a pool of the hold turned out to be spread over partitions, or frozen by a pool op;
/// the attempt was rolled back, and the request is to be sent again.
pub(crate) async fn reserve(
    shared: &Shared,
    home: u32,
    request: &ReserveRequest,
) -> Result<Option<Outcome>, BackendError> {
    let started = tokio::time::Instant::now();
    let deadline = started + Duration::from_millis(request.wait_ms);
    loop {
        let mut watches: Vec<_> = parts(
            &shared.placement,
            request.items.iter().map(|i| (i.pool.as_str(), i.qty)),
        )
        .iter()
        .map(|(partition, _)| shared.seq_watch[*partition as usize].subscribe())
        .collect();
        let outcome = match reserve_once(shared, home, request).await? {
            Attempt::Done(outcome) => outcome,
            Attempt::Again => return Ok(None),
            // Another request with this hold id is rolling back its attempt (the same request
            // sent twice at once, or a retry while a sweeper rolls back): once it is done, this
            // one starts afresh.
            Attempt::RolledBack(why) => {
                if started.elapsed() >= ROLLED_BACK_RETRY_MAX {
                    return Err(BackendError::Unavailable(format!("{why}; retry")));
                }
                tokio::time::sleep(ROLLED_BACK_RETRY_PAUSE).await;
                continue;
            }
        };
        let short = matches!(outcome, Err(Error::InsufficientStock { .. }));
        if !short || tokio::time::Instant::now() >= deadline {
            return Ok(Some(outcome));
        }
        // Something happened in one of the partitions (units may have come back): try again.
        let changed = select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
        let _ = tokio::time::timeout_at(deadline, changed).await;
    }
}

/// How long a reserve keeps trying while another attempt of its hold id is being rolled back,
/// and how long it pauses between tries.
const ROLLED_BACK_RETRY_MAX: Duration = Duration::from_secs(2);
const ROLLED_BACK_RETRY_PAUSE: Duration = Duration::from_millis(20);

enum Attempt {
    Done(Outcome),
    RolledBack(&'static str),
    /// Rolled back: a pool turned out spread, or frozen by a pool op; send the request again.
    Again,
}

async fn reserve_once(
    shared: &Shared,
    home: u32,
    request: &ReserveRequest,
) -> Result<Attempt, BackendError> {
    let hold_id = request.hold_id.as_str();
    // A new attempt's number comes from the partition the hold id hashes to, whatever the home,
    // so that every attempt of one hold id is ordered (x_begin allocates it when that is home).
    let id_partition = keys::partition_of(hold_id, shared.partitions);
    let candidate = if id_partition == home {
        "-".to_string()
    } else {
        match shared
            .submit_one(id_partition, op("x_attempt", vec![hold_id.to_string()]))
            .await?
        {
            Answer::NextAttempt(attempt) => attempt,
            other => return Err(unexpected(&other)),
        }
    };
    let words = wire::encode(&stockd_core::Command::Reserve(request.clone()), Route::Only).args;
    let mut begin_words = words[..words.len() - 3].to_vec();
    begin_words.push(candidate);
    let attempt = match shared.submit_one(home, op("x_begin", begin_words)).await? {
        Answer::Done(outcome) => return Ok(Attempt::Done(outcome)),
        // The hold this id names expired on the way, and the request does not match it.
        Answer::Settled { error, settled } => {
            for expired in settled {
                let hold_id = expired.hold.hold_id.as_str();
                apply_parts(
                    shared,
                    home,
                    hold_id,
                    &expired.parts,
                    &expired.apply,
                    &expired.attempt,
                )
                .await?;
            }
            return Ok(Attempt::Done(Err(error)));
        }
        Answer::Begun(attempt) => attempt,
        Answer::Aborted => {
            return Ok(Attempt::RolledBack(
                "an earlier attempt of this hold is being rolled back",
            ))
        }
        other => return Err(unexpected(&other)),
    };
    fault::point("cross.after_begin");
    let parts = parts(
        &shared.placement,
        request.items.iter().map(|i| (i.pool.as_str(), i.qty)),
    );
    let mut failure: Option<(usize, Error)> = None;
    // Spread pools whose low-stock watch a part crossed: counted once the hold is committed
    // (a reserve rolled back gives the units back, and fires nothing).
    let mut low: Vec<String> = Vec::new();
    for (position, (partition, items)) in parts.iter().enumerate() {
        let text = shared
            .submit_raw(
                *partition,
                op(
                    "part_reserve",
                    part_words(false, request, &attempt, home, items),
                ),
            )
            .await?;
        low.extend(wire::split_low(&text).0);
        if let Answer::Aborted =
            wire::decode(&text).map_err(|e| BackendError::Unavailable(e.to_string()))?
        {
            return Ok(Attempt::RolledBack(
                "this reserve was rolled back while it ran",
            ));
        }
        let refused = match part_answer(shared, &text)? {
            PartAnswer::Taken => None,
            PartAnswer::Refused(index, error) => Some((index, error)),
            PartAnswer::Again => {
                roll_back(shared, home, hold_id, Some(&attempt)).await?;
                return Ok(Attempt::Again);
            }
        };
        if let Some((index, error)) = refused {
            // Item by item in the order given, the first failure wins: an item of a partition
            // not asked yet may come before this one.
            let mut first = (index, error);
            for (later, items) in &parts[position + 1..] {
                let earlier: Vec<_> = items
                    .iter()
                    .filter(|(i, _, _)| *i < first.0)
                    .cloned()
                    .collect();
                if earlier.is_empty() {
                    continue;
                }
                let text = shared
                    .submit_raw(
                        *later,
                        op(
                            "part_reserve",
                            part_words(true, request, &attempt, home, &earlier),
                        ),
                    )
                    .await?;
                if let PartAnswer::Refused(index, error) = part_answer(shared, &text)? {
                    if index < first.0 {
                        first = (index, error);
                    }
                }
            }
            failure = Some(first);
            break;
        }
        fault::point("cross.after_part");
    }
    if let Some((_, error)) = failure {
        roll_back(shared, home, hold_id, Some(&attempt)).await?;
        return Ok(Attempt::Done(Err(error)));
    }
    let committed = match shared
        .submit_one(home, op("x_commit", vec![hold_id.to_string(), attempt]))
        .await?
    {
        Answer::Done(outcome) => Attempt::Done(outcome),
        Answer::Decided {
            reply,
            apply,
            attempt,
            parts,
        } => {
            fault::point("cross.after_commit");
            apply_parts(shared, home, hold_id, &parts, &apply, &attempt).await?;
            Attempt::Done(Ok(reply))
        }
        Answer::Aborted => {
            return Ok(Attempt::RolledBack(
                "this reserve was rolled back while it ran",
            ))
        }
        other => return Err(unexpected(&other)),
    };
    for pool in &low {
        if let Ok(pool) = stockd_core::PoolId::parse(pool) {
            shared.low_check(&pool).await?;
        }
    }
    Ok(committed)
}

/// Rolls back a reserve that did not finish: attempt `attempt` (`None`: whichever attempt the
/// record is of, a sweeper's roll back) can no longer commit, every part of it gives its units
/// back (or becomes its tombstone), then the record is forgotten.
pub(crate) async fn roll_back(
    shared: &Shared,
    home: u32,
    hold_id: &str,
    attempt: Option<&str>,
) -> Result<(), BackendError> {
    let asked = attempt.unwrap_or("*").to_string();
    let (items, attempt) = match shared
        .submit_one(home, op("x_abort", vec![hold_id.to_string(), asked]))
        .await?
    {
        Answer::Aborting { items, attempt } => (items, attempt),
        Answer::Gone => return Ok(()),
        other => return Err(unexpected(&other)),
    };
    fault::point("cross.after_abort");
    for (partition, _) in parts(
        &shared.placement,
        items.iter().map(|i| (i.pool.as_str(), i.qty)),
    ) {
        let args = vec![
            hold_id.to_string(),
            "return".to_string(),
            attempt.clone(),
            "1".to_string(),
        ];
        shared.submit_one(partition, op("part_apply", args)).await?;
        fault::point("cross.after_return_part");
    }
    shared
        .submit_one(home, op("x_forget", vec![hold_id.to_string(), attempt]))
        .await?;
    Ok(())
}

/// Brings every part of attempt `attempt` of a decided hold to `apply` (commit, confirm,
/// return, refund or writeoff), then tells home.
pub(crate) async fn apply_parts(
    shared: &Shared,
    home: u32,
    hold_id: &str,
    items: &[HoldItem],
    apply: &str,
    attempt: &str,
) -> Result<(), BackendError> {
    for (partition, _) in parts(
        &shared.placement,
        items.iter().map(|i| (i.pool.as_str(), i.qty)),
    ) {
        let args = vec![
            hold_id.to_string(),
            apply.to_string(),
            attempt.to_string(),
            "0".to_string(),
        ];
        shared.submit_one(partition, op("part_apply", args)).await?;
        fault::point("cross.after_apply_part");
    }
    let args = vec![hold_id.to_string(), apply.to_string(), attempt.to_string()];
    shared.submit_one(home, op("x_applied", args)).await?;
    Ok(())
}

/// A refund of a cross-partition hold: every part checks its pools still exist, then home
/// decides (with `restock` or without), then the parts follow.
pub(crate) async fn refund(
    shared: &Shared,
    home: u32,
    hold: &HoldView,
    items: &[HoldItem],
    restock: bool,
) -> Result<Outcome, BackendError> {
    for (partition, _) in parts(
        &shared.placement,
        items.iter().map(|i| (i.pool.as_str(), i.qty)),
    ) {
        let args = vec![hold.hold_id.to_string()];
        match shared
            .submit_one(partition, op("part_refundable", args))
            .await?
        {
            Answer::PartOk => {}
            Answer::Done(Err(error)) => return Ok(Err(error)),
            other => return Err(unexpected(&other)),
        }
    }
    let args = vec![
        hold.hold_id.to_string(),
        "home".to_string(),
        "1".to_string(),
        if restock { "1" } else { "0" }.to_string(),
    ];
    match shared.submit_one(home, op("refund", args)).await? {
        Answer::Decided {
            reply,
            apply,
            attempt,
            parts,
        } => {
            let hold_id = hold.hold_id.as_str();
            apply_parts(shared, home, hold_id, &parts, &apply, &attempt).await?;
            Ok(Ok(reply))
        }
        Answer::Done(outcome) => Ok(outcome),
        other => Err(unexpected(&other)),
    }
}

/// What a sweep of one partition found left behind (see `wire::Answer::Swept`).
pub(crate) struct LeftBehind {
    pub forward: Vec<String>,
    pub back: Vec<String>,
    pub parts: Vec<String>,
}

impl LeftBehind {
    pub fn is_empty(&self) -> bool {
        self.forward.is_empty() && self.back.is_empty() && self.parts.is_empty()
    }
}

/// A sweeper's share: finish what dead servers left in `partition`: roll forward decided
/// transitions, roll back reserves that never finished, and return the held parts whose home
/// no longer has a record of their attempt (a home that lost data).
pub(crate) async fn finish_left_behind(
    shared: &Shared,
    partition: u32,
    left: LeftBehind,
) -> Result<(), BackendError> {
    for hold_id in left.forward {
        if let Answer::State {
            hold,
            apply: Some(apply),
            attempt,
            parts,
        } = shared
            .submit_one(partition, op("x_state", vec![hold_id]))
            .await?
        {
            let hold_id = hold.hold_id.as_str();
            apply_parts(shared, partition, hold_id, &parts, &apply, &attempt).await?;
        }
    }
    for hold_id in left.back {
        roll_back(shared, partition, &hold_id, None).await?;
    }
    // Parts to check, by home: one call per home asks about all of them, and one call per
    // partition returns the orphans.
    let mut by_home: BTreeMap<u32, Vec<(String, String)>> = BTreeMap::new();
    for part in &left.parts {
        let mut words = part.splitn(3, ' ');
        let (Some(attempt), Some(home), Some(hold_id)) = (words.next(), words.next(), words.next())
        else {
            continue;
        };
        match home.parse::<u32>() {
            Ok(home) if home < shared.partitions => by_home
                .entry(home)
                .or_default()
                .push((hold_id.to_string(), attempt.to_string())),
            _ => continue,
        }
    }
    let mut orphans = Vec::new();
    for (home, asked) in by_home {
        let ops = asked
            .iter()
            .map(|(hold_id, attempt)| op("x_owner", vec![hold_id.clone(), attempt.clone()]))
            .collect();
        let answers = shared.submit(home, ops).await?;
        for ((hold_id, attempt), answer) in asked.into_iter().zip(answers) {
            if let Answer::Owner(false) =
                wire::decode(&answer).map_err(|e| BackendError::Unavailable(e.to_string()))?
            {
                tracing::warn!(
                    hold_id,
                    attempt,
                    partition,
                    home,
                    "returning a part whose home has no record of its hold (a lost change)"
                );
                orphans.push(op(
                    "part_apply",
                    vec![hold_id, "return".into(), attempt, "1".into()],
                ));
            }
        }
    }
    if !orphans.is_empty() {
        shared.submit(partition, orphans).await?;
    }
    Ok(())
}
