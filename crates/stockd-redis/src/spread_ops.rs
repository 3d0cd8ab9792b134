//! The commands on a whole pool spread over partitions, each one pool op (segments.rs): a PUT
//! (making the pool, or its total and rules), a restock, a delete, and the rebalance that finds
//! units for a reserve short in its own segment; and the reads, by collect. Each plan decides
//! from what the op's freeze read, as stockd-core decides for a whole pool (the same errors,
//! with the whole pool's numbers), and spreads the pool's available units evenly over its
//! segments.

use stockd_core::limits::TOTAL_MAX;
use stockd_core::{BackendError, Command, Error, Outcome, PoolId, PoolView, Reply};

use crate::backend::RedisBackend;
use crate::segments::{delta_words, spread, watches, word, Decision, Frozen, OpOutcome, Plan};

/// What a reserve asks of a spread pool: the pool, its segment count, the reserve's segment
/// (`segments::home_segment`) and the units it needs there.
pub(crate) struct SegmentNeed<'a> {
    pub pool: &'a PoolId,
    pub segments: u32,
    pub home: u32,
    pub need: u64,
}

/// What a rebalance found.
pub(crate) enum Rebalanced {
    /// Units were moved (or were there already): send the reserve again.
    Ready,
    /// The whole pool has fewer available than asked, at the freeze's instant.
    Short(u64),
    /// The pool does not exist (any more).
    Gone,
}

/// The pool's low-stock state after an op: its threshold and whether it is at or below it.
#[derive(Clone, Copy)]
struct Low {
    threshold: Option<u64>,
    fired: bool,
}

impl Low {
    fn after(threshold: Option<u64>, available: u64) -> Low {
        Low {
            threshold,
            fired: threshold.is_some_and(|t| available <= t),
        }
    }

    fn word(self) -> String {
        if self.fired { "1" } else { "0" }.to_string()
    }
}

/// Deltas that spread `available` units over `frozen`'s segments, with the pool's rules and
/// generation: `(segment 0's words, the other segments' parts)`. `home` and `need`, when given,
/// make segment `home` end with at least `need` units more than its even share of the rest.
fn respread(
    frozen: &Frozen,
    available: u64,
    generation: u64,
    rules: [Option<u64>; 3],
    home: Option<(usize, u64)>,
    low: Low,
) -> (String, Vec<(u32, String)>) {
    let count = frozen.segments.len() as u32;
    let (need_at, need) = home.unwrap_or((0, 0));
    let mut shares = spread(available - need, count);
    shares[need_at] += need;
    let watch = watches(&shares, low.threshold, low.fired);
    // The total's change goes with the available units: each segment's total is its available
    // plus what is held and sold there.
    let mut zero = String::new();
    let mut parts = Vec::new();
    for (index, share) in shares.iter().enumerate() {
        let before = frozen.segments[index].as_ref();
        let had = before.map_or(0, |s| s.available);
        let delta_available = *share as i64 - had as i64;
        let words = delta_words(
            delta_available,
            delta_available,
            generation,
            rules,
            watch[index],
        );
        if index == 0 {
            zero = words;
        } else {
            parts.push((index as u32, words));
        }
    }
    (zero, parts)
}

fn end_args(part_zero: String, low: Low, segments: u32, event: Vec<String>) -> Vec<String> {
    let mut end = vec![
        part_zero,
        word(low.threshold),
        segments.to_string(),
        low.word(),
    ];
    end.extend(event);
    end
}

fn rules_of(view: &PoolView) -> [Option<u64>; 3] {
    [view.per_user_limit, view.starts_at_ms, view.ends_at_ms]
}

impl RedisBackend {
    /// A command on a whole pool the library says is spread in `segments` segments: run as a
    /// pool op, or read by collect.
    pub(crate) async fn on_spread_pool(
        &self,
        command: &Command,
        segments: u32,
    ) -> Result<Outcome, BackendError> {
        let shared = &self.shared;
        match command {
            Command::GetPool { pool } => Ok(match shared.collect(pool, segments).await? {
                Some(states) => Ok(Reply::Pool {
                    pool: shared.whole_pool(pool, &states),
                    created: false,
                    replayed: false,
                }),
                None => Err(Error::PoolNotFound { pool: pool.clone() }),
            }),
            Command::GetSegments { pool } => Ok(match shared.collect(pool, segments).await? {
                Some(states) => Ok(Reply::Segments {
                    segments: shared.segment_list(pool, &states),
                }),
                None => Err(Error::PoolNotFound { pool: pool.clone() }),
            }),
            Command::PutPool { .. } => self.put_spread(command, segments).await,
            Command::Restock {
                pool,
                delta,
                request_id,
            } => {
                self.restock_spread(pool, *delta, request_id.as_ref(), segments)
                    .await
            }
            Command::DeletePool { pool } => self.delete_spread(pool, segments).await,
            other => Err(BackendError::Unavailable(format!(
                "a spread pool answered for {other:?}"
            ))),
        }
    }

    /// A PUT on a dataset of several partitions with more than one segment, or on a pool that
    /// is spread: makes the pool spread, or sets its total and rules.
    pub(crate) async fn put_spread(
        &self,
        command: &Command,
        segments: u32,
    ) -> Result<Outcome, BackendError> {
        let Command::PutPool {
            pool,
            spec,
            segments: requested,
            if_absent,
        } = command
        else {
            unreachable!("put_spread takes PutPool")
        };
        let shared = &self.shared;
        let rules = [spec.per_user_limit, spec.starts_at_ms, spec.ends_at_ms];
        let outcome = shared
            .pool_op(pool, "put", vec![segments.to_string()], |frozen| {
                let Some(zero) = frozen.zero() else {
                    // A new pool, spread over `segments`.
                    let count = frozen.segments.len() as u32;
                    let after = Low::after(spec.low_stock_threshold, spec.total);
                    let (part_zero, parts) =
                        respread(frozen, spec.total, frozen.generation, rules, None, after);
                    let low = after.fired;
                    let event = vec![
                        "upserted".to_string(),
                        spec.total.to_string(),
                        spec.total.to_string(),
                        spec.total.to_string(),
                        if low { "1" } else { "0" }.to_string(),
                    ];
                    let view = PoolView {
                        pool: pool.clone(),
                        total: spec.total,
                        available: spec.total,
                        held: 0,
                        sold: 0,
                        per_user_limit: spec.per_user_limit,
                        starts_at_ms: spec.starts_at_ms,
                        ends_at_ms: spec.ends_at_ms,
                        low_stock_threshold: spec.low_stock_threshold,
                        partition: 0,
                        segments: count,
                    };
                    let plan = Plan {
                        parts,
                        end: end_args(part_zero, after, count, event),
                    };
                    return Decision::Apply(plan, Ok((view, true)));
                };
                if !zero.spread {
                    // A pool kept whole (one segment, or made by an earlier version): the
                    // partition answers for it alone.
                    return Decision::Nothing(Err(None));
                }
                let states: Vec<_> = frozen.segments.iter().flatten().cloned().collect();
                let view = shared.whole_pool(pool, &states);
                if *if_absent {
                    return Decision::Nothing(Ok((view, false)));
                }
                if let Some(requested) = requested {
                    if *requested != u64::from(zero.segments) {
                        return Decision::Nothing(Err(Some(Error::SegmentsFixed {
                            pool: pool.clone(),
                            segments: u64::from(zero.segments),
                            requested: *requested,
                        })));
                    }
                }
                let committed = view.held + view.sold;
                if spec.total < committed {
                    return Decision::Nothing(Err(Some(Error::TotalBelowCommitted {
                        pool: pool.clone(),
                        total: spec.total,
                        committed,
                    })));
                }
                let available = spec.total - committed;
                let delta = spec.total as i64 - view.total as i64;
                let low_after = Low::after(spec.low_stock_threshold, available);
                let (part_zero, parts) =
                    respread(frozen, available, zero.g, rules, None, low_after);
                let low = low_after.fired;
                let event = vec![
                    "upserted".to_string(),
                    spec.total.to_string(),
                    available.to_string(),
                    delta.to_string(),
                    if low { "1" } else { "0" }.to_string(),
                ];
                let after = PoolView {
                    total: spec.total,
                    available,
                    per_user_limit: spec.per_user_limit,
                    starts_at_ms: spec.starts_at_ms,
                    ends_at_ms: spec.ends_at_ms,
                    low_stock_threshold: spec.low_stock_threshold,
                    ..view
                };
                let plan = Plan {
                    parts,
                    end: end_args(part_zero, low_after, zero.segments, event),
                };
                Decision::Apply(plan, Ok((after, false)))
            })
            .await?;
        Ok(match outcome {
            OpOutcome::Done(Ok((mut view, created))) => {
                view.partition = stockd_redis_partition(shared, pool);
                shared.spread.note(pool.as_str(), view.segments);
                Ok(Reply::Pool {
                    pool: view,
                    created,
                    replayed: false,
                })
            }
            OpOutcome::Done(Err(Some(error))) | OpOutcome::Refused(error) => Err(error),
            OpOutcome::Done(Err(None)) => {
                // Kept whole: the plain command, in the pool's partition.
                return self.whole_put(command).await;
            }
            OpOutcome::Replayed => unreachable!("only a restock is replayed"),
        })
    }

    async fn restock_spread(
        &self,
        pool: &PoolId,
        delta: i64,
        request_id: Option<&stockd_core::RequestId>,
        segments: u32,
    ) -> Result<Outcome, BackendError> {
        let shared = &self.shared;
        let rid = request_id.map_or_else(|| "-".to_string(), |r| r.to_string());
        let outcome = shared
            .pool_op(
                pool,
                "restock",
                vec![segments.to_string(), delta.to_string(), rid.clone()],
                |frozen| {
                    let Some(zero) = frozen.zero() else {
                        return Decision::Nothing(Err(Error::PoolNotFound { pool: pool.clone() }));
                    };
                    let states: Vec<_> = frozen.segments.iter().flatten().cloned().collect();
                    let view = shared.whole_pool(pool, &states);
                    if delta < 0 && delta.unsigned_abs() > view.available {
                        return Decision::Nothing(Err(Error::InsufficientStock {
                            pool: pool.clone(),
                            available: view.available,
                            requested: delta.unsigned_abs(),
                        }));
                    }
                    if delta > 0 && view.total + delta.unsigned_abs() > TOTAL_MAX {
                        return Decision::Nothing(Err(Error::invalid(format!(
                            "restock would take total of pool {pool} above {TOTAL_MAX}"
                        ))));
                    }
                    let available = (view.available as i64 + delta) as u64;
                    let total = (view.total as i64 + delta) as u64;
                    let rules = rules_of(&view);
                    let low_after = Low::after(view.low_stock_threshold, available);
                    let (part_zero, parts) =
                        respread(frozen, available, zero.g, rules, None, low_after);
                    let low = view
                        .low_stock_threshold
                        .is_some_and(|t| view.available > t && available <= t);
                    let event = vec![
                        "restocked".to_string(),
                        delta.to_string(),
                        total.to_string(),
                        available.to_string(),
                        rid.clone(),
                        if low { "1" } else { "0" }.to_string(),
                    ];
                    let after = PoolView {
                        total,
                        available,
                        ..view
                    };
                    let plan = Plan {
                        parts,
                        end: end_args(part_zero, low_after, zero.segments, event),
                    };
                    Decision::Apply(plan, Ok(after))
                },
            )
            .await?;
        Ok(match outcome {
            OpOutcome::Done(Ok(mut view)) => {
                view.partition = stockd_redis_partition(shared, pool);
                Ok(Reply::Pool {
                    pool: view,
                    created: false,
                    replayed: false,
                })
            }
            OpOutcome::Done(Err(error)) | OpOutcome::Refused(error) => Err(error),
            OpOutcome::Replayed => match shared.collect(pool, segments).await? {
                Some(states) => Ok(Reply::Pool {
                    pool: shared.whole_pool(pool, &states),
                    created: false,
                    replayed: true,
                }),
                None => Err(Error::PoolNotFound { pool: pool.clone() }),
            },
        })
    }

    async fn delete_spread(&self, pool: &PoolId, segments: u32) -> Result<Outcome, BackendError> {
        let shared = &self.shared;
        let outcome = shared
            .pool_op(pool, "delete", vec![segments.to_string()], |frozen| {
                let Some(zero) = frozen.zero() else {
                    return Decision::Nothing(Err(Error::PoolNotFound { pool: pool.clone() }));
                };
                let held = frozen.sum(|s| s.held);
                if held > 0 {
                    return Decision::Nothing(Err(Error::PoolHasActiveHolds {
                        pool: pool.clone(),
                        held,
                    }));
                }
                let event = vec![
                    "deleted".to_string(),
                    frozen.sum(|s| s.total).to_string(),
                    frozen.sum(|s| s.available).to_string(),
                ];
                let parts = (1..frozen.segments.len() as u32)
                    .map(|segment| (segment, "delete".to_string()))
                    .collect();
                let plan = Plan {
                    parts,
                    end: end_args(
                        "delete".to_string(),
                        Low::after(None, 0),
                        zero.segments,
                        event,
                    ),
                };
                Decision::Apply(plan, Ok(()))
            })
            .await?;
        Ok(match outcome {
            OpOutcome::Done(Ok(())) => {
                shared.spread.forget(pool.as_str());
                Ok(Reply::PoolDeleted)
            }
            OpOutcome::Done(Err(error)) | OpOutcome::Refused(error) => Err(error),
            OpOutcome::Replayed => unreachable!("only a restock is replayed"),
        })
    }

    /// Moves available units of a spread pool to segment `home`, so that it has `need`; or
    /// finds that the whole pool has fewer.
    pub(crate) async fn rebalance(
        &self,
        asked: &SegmentNeed<'_>,
    ) -> Result<Rebalanced, BackendError> {
        let SegmentNeed {
            pool,
            segments,
            home,
            need,
        } = *asked;
        let outcome = self
            .shared
            .pool_op(
                pool,
                "rebalance",
                vec![segments.to_string(), home.to_string(), need.to_string()],
                |frozen| {
                    let Some(zero) = frozen.zero() else {
                        return Decision::Nothing(Rebalanced::Gone);
                    };
                    let available = frozen.sum(|s| s.available);
                    if available < need {
                        return Decision::Nothing(Rebalanced::Short(available));
                    }
                    let at = home as usize;
                    if frozen.segments[at]
                        .as_ref()
                        .is_some_and(|s| s.available >= need)
                    {
                        return Decision::Nothing(Rebalanced::Ready);
                    }
                    let rules = [zero.per_user_limit, zero.starts_at_ms, zero.ends_at_ms];
                    let low = Low {
                        threshold: zero.low_stock_threshold,
                        fired: zero.low_fired,
                    };
                    let (part_zero, parts) =
                        respread(frozen, available, zero.g, rules, Some((at, need)), low);
                    let plan = Plan {
                        parts,
                        end: end_args(part_zero, low, zero.segments, vec!["none".to_string()]),
                    };
                    Decision::Apply(plan, Rebalanced::Ready)
                },
            )
            .await?;
        Ok(match outcome {
            OpOutcome::Done(found) => found,
            OpOutcome::Refused(_) | OpOutcome::Replayed => Rebalanced::Gone,
        })
    }
}

fn stockd_redis_partition(shared: &crate::shared::Shared, pool: &PoolId) -> u32 {
    crate::keys::partition_of(pool.as_str(), shared.partitions)
}

impl crate::shared::Shared {
    /// The command as the library takes it: a reserve names its segment of each pool known to
    /// be spread, and does not park there at first: a segment short of units may not be the
    /// pool, so `spread_refusal` looks at the whole pool before it parks the reserve.
    pub(crate) fn wire_command(&self, command: &Command) -> Command {
        match command {
            Command::Reserve(request) => {
                let wired = self.wire_reserve(request);
                if wired.items != request.items {
                    return Command::Reserve(stockd_core::ReserveRequest {
                        wait_ms: 0,
                        ..wired
                    });
                }
                command.clone()
            }
            _ => command.clone(),
        }
    }
}

/// How long a reserve waiting for a spread pool's stock, parked in its segment, waits between
/// two looks at the whole pool for units that came back in other segments; and, for a hold over
/// several partitions (which cannot park), between two tries.
const SPREAD_WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(20);

impl RedisBackend {
    /// A reserve of a spread pool refused in its segment: short there, a rebalance finds the
    /// units elsewhere (then the reserve is sent again), or finds the whole pool short (the
    /// refusal, or a wait for units while `wait_ms` lasts); a segment gone means this server's
    /// knowledge of the pool is stale. `None`: send the reserve again.
    pub(crate) async fn spread_refusal(
        &self,
        command: &Command,
        error: Error,
        started: tokio::time::Instant,
    ) -> Result<Option<Outcome>, BackendError> {
        let Command::Reserve(request) = command else {
            return Ok(Some(Err(error)));
        };
        let shared = &self.shared;
        match &error {
            Error::InsufficientStock { pool, .. } => {
                let Some(segments) = shared.spread.get(pool.as_str()) else {
                    return Ok(Some(Err(error)));
                };
                let need = request
                    .items
                    .iter()
                    .find(|item| item.pool == *pool)
                    .map_or(0, |item| item.qty);
                let asked = SegmentNeed {
                    pool,
                    segments,
                    home: crate::segments::home_segment(request, segments),
                    need,
                };
                match self.find_units(&asked).await? {
                    Rebalanced::Ready => Ok(None),
                    Rebalanced::Gone => {
                        shared.spread.forget(pool.as_str());
                        Ok(None)
                    }
                    Rebalanced::Short(available) => {
                        let deadline = started + std::time::Duration::from_millis(request.wait_ms);
                        let refusal = Error::InsufficientStock {
                            pool: pool.clone(),
                            available,
                            requested: need,
                        };
                        if tokio::time::Instant::now() + SPREAD_WAIT_POLL >= deadline {
                            return Ok(Some(Err(refusal)));
                        }
                        let wired = shared.wire_reserve(request);
                        let partitions: Vec<u32> = wired
                            .items
                            .iter()
                            .map(|item| shared.placement.pool_partition(item.pool.as_str()))
                            .collect();
                        if partitions.iter().all(|&k| k == partitions[0]) {
                            return self
                                .park_spread(request, wired, &asked, started, deadline)
                                .await;
                        }
                        // A hold over several partitions cannot park: it looks again.
                        tokio::time::sleep(SPREAD_WAIT_POLL).await;
                        Ok(None)
                    }
                }
            }
            Error::PoolNotFound { pool } if shared.spread.get(pool.as_str()).is_some() => {
                shared.spread.forget(pool.as_str());
                Ok(None)
            }
            _ => Ok(Some(Err(error))),
        }
    }

    /// A command that met a pool (or its segment) frozen by pool op `op`: sent again after a
    /// pause, a segment frozen by an op that is over unfrozen first (`unfreeze_if_orphaned`),
    /// until `OP_WAIT` after `started` (then 503: a sweeper ends an op left by a dead server).
    /// `None`: send the command again.
    pub(crate) async fn frozen(
        &self,
        command: &Command,
        pool: &str,
        op: u64,
        started: tokio::time::Instant,
    ) -> Result<Option<Outcome>, BackendError> {
        let shared = &self.shared;
        let waited = started.elapsed();
        if waited > crate::segments::OP_WAIT {
            return Err(BackendError::Unavailable(format!(
                "pool {pool} is being changed as a whole (pool op {op}) and stayed so for {} ms; \
                 try again",
                waited.as_millis()
            )));
        }
        if waited > crate::segments::ORPHAN_AFTER {
            if let (Command::Reserve(request), Some(segments)) = (command, shared.spread.get(pool))
            {
                let segment = crate::segments::home_segment(request, segments);
                shared.unfreeze_if_orphaned(pool, segment, op).await?;
            }
        }
        tokio::time::sleep(crate::segments::OP_POLL).await;
        Ok(None)
    }

    /// Units for `need` in segment `home` of a spread pool: a read of the whole pool as of one
    /// instant that finds too few is the refusal already, with no pool op (what every buyer
    /// after a sell-out meets); else a rebalance moves them there.
    async fn find_units(&self, asked: &SegmentNeed<'_>) -> Result<Rebalanced, BackendError> {
        let SegmentNeed {
            pool,
            segments,
            home,
            need,
        } = *asked;
        match self.shared.collect(pool, segments).await? {
            None => Ok(Rebalanced::Gone),
            Some(states) => {
                let available: u64 = states.iter().map(|s| s.available).sum();
                if available < need {
                    return Ok(Rebalanced::Short(available));
                }
                if states
                    .get(home as usize)
                    .is_some_and(|s| s.available >= need)
                {
                    return Ok(Rebalanced::Ready);
                }
                self.rebalance(asked).await
            }
        }
    }

    /// Parks a reserve short of a spread pool in its own segment's queue until `deadline`, so
    /// that the segment's waiters are served in arrival order by the units that come back
    /// there; meanwhile units that come back in other segments are looked for every
    /// `SPREAD_WAIT_POLL` and moved to the waiter's segment (where they serve its queue in
    /// order). At the deadline, a waiter still short in its segment looks at the whole pool
    /// once more: the refusal is true of the whole pool.
    async fn park_spread(
        &self,
        request: &stockd_core::ReserveRequest,
        wired: stockd_core::ReserveRequest,
        waiter: &SegmentNeed<'_>,
        started: tokio::time::Instant,
        deadline: tokio::time::Instant,
    ) -> Result<Option<Outcome>, BackendError> {
        let shared = &self.shared;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let parked = Command::Reserve(stockd_core::ReserveRequest {
            wait_ms: (left.as_millis() as u64).max(1),
            ..wired
        });
        let mut partition = shared.first_partition(&parked);
        let op = crate::wire::encode(&parked, shared.route(&parked, partition, false));
        let mut answer = shared.submit_one(partition, op).await?;
        if let crate::wire::Answer::Moved(home) = answer {
            partition = home;
            let op = crate::wire::encode(&parked, shared.route(&parked, home, true));
            answer = shared.submit_one(home, op).await?;
        }
        let outcome = match answer {
            crate::wire::Answer::Parked(ticket) => {
                self.wait_spread(partition, ticket, &parked, waiter).await?
            }
            crate::wire::Answer::Made { created_at_ms } => {
                return Ok(Some(Ok(Reply::Hold {
                    hold: crate::wire::made_hold(request, partition, created_at_ms),
                    created: true,
                })));
            }
            crate::wire::Answer::Done(outcome) => outcome,
            crate::wire::Answer::Frozen { pool, op } => {
                return self
                    .frozen(&Command::Reserve(request.clone()), &pool, op, started)
                    .await;
            }
            crate::wire::Answer::Segmented { .. } => return Ok(None),
            other => {
                return Err(BackendError::Unavailable(format!(
                    "unexpected answer to a parked reserve: {other:?}"
                )))
            }
        };
        match outcome {
            Err(Error::InsufficientStock { .. }) => {
                match self.find_units(waiter).await? {
                    // Units found at the last moment: the reserve is sent once more, and its
                    // refusal, past its deadline, is final.
                    Rebalanced::Ready | Rebalanced::Gone => Ok(None),
                    Rebalanced::Short(available) => Ok(Some(Err(Error::InsufficientStock {
                        pool: waiter.pool.clone(),
                        available,
                        requested: waiter.need,
                    }))),
                }
            }
            other => Ok(Some(other)),
        }
    }

    /// A parked reserve's wait (`wait`), while units that came back in other segments are
    /// moved to its segment.
    async fn wait_spread(
        &self,
        partition: u32,
        ticket: u64,
        parked: &Command,
        waiter: &SegmentNeed<'_>,
    ) -> Result<Outcome, BackendError> {
        let waiting = self.wait(partition, ticket, parked);
        tokio::pin!(waiting);
        loop {
            tokio::select! {
                outcome = &mut waiting => return outcome,
                _ = tokio::time::sleep(SPREAD_WAIT_POLL) => {
                    if let Err(error) = self.move_units_to(waiter).await {
                        tracing::debug!(%error, pool = %waiter.pool, "looking for a waiter's units");
                    }
                }
            }
        }
    }

    /// Moves available units of other segments to a waiter's segment when its own has fewer
    /// than it asks and the whole pool has enough. One look per pool at a time on this server,
    /// and none within `SPREAD_WAIT_POLL` of the last, however many of its requests wait.
    async fn move_units_to(&self, waiter: &SegmentNeed<'_>) -> Result<(), BackendError> {
        let shared = &self.shared;
        let turn = shared.spread.look_turn(waiter.pool.as_str());
        let mut last = turn.lock().await;
        if last.is_some_and(|at| at.elapsed() < SPREAD_WAIT_POLL) {
            return Ok(());
        }
        *last = Some(tokio::time::Instant::now());
        self.find_units(waiter).await.map(|_| ())
    }

    /// A PUT of a pool kept whole, in its partition.
    async fn whole_put(&self, command: &Command) -> Result<Outcome, BackendError> {
        let shared = &self.shared;
        let partition = shared.first_partition(command);
        let op = crate::wire::encode(command, shared.route(command, partition, false));
        match shared.submit_one(partition, op).await? {
            crate::wire::Answer::Done(outcome) => Ok(outcome),
            other => Err(BackendError::Unavailable(format!(
                "unexpected answer {other:?}"
            ))),
        }
    }
}

impl crate::shared::Shared {
    /// A spread pool whose low-stock watch a change crossed: counted as of one instant (a `low`
    /// pool op); low_stock fires if it went to or below its threshold since it last was above
    /// (once), or the pool is armed again once above it; new watches either way. Units do not
    /// move.
    pub(crate) async fn low_check(&self, pool: &PoolId) -> Result<(), BackendError> {
        let Some(segments) = self.spread.get(pool.as_str()) else {
            return Ok(());
        };
        self.pool_op(pool, "low", vec![segments.to_string()], |frozen| {
            let Some(zero) = frozen.zero() else {
                return Decision::Nothing(());
            };
            let available = frozen.sum(|s| s.available);
            let total = frozen.sum(|s| s.total);
            let after = Low::after(zero.low_stock_threshold, available);
            let fires = after.fired && !zero.low_fired;
            // The units stay where they are: each segment keeps its available, with a new watch.
            let shares: Vec<u64> = frozen
                .segments
                .iter()
                .map(|s| s.as_ref().map_or(0, |s| s.available))
                .collect();
            let watch = watches(&shares, after.threshold, after.fired);
            let rules = [zero.per_user_limit, zero.starts_at_ms, zero.ends_at_ms];
            let words = |index: usize| delta_words(0, 0, zero.g, rules, watch[index]);
            let parts = (1..shares.len()).map(|i| (i as u32, words(i))).collect();
            let event = if fires {
                vec!["low".to_string(), total.to_string(), available.to_string()]
            } else {
                vec!["none".to_string()]
            };
            let plan = Plan {
                parts,
                end: end_args(words(0), after, zero.segments, event),
            };
            Decision::Apply(plan, ())
        })
        .await?;
        Ok(())
    }
}
