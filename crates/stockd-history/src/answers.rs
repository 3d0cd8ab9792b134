//! Every answer held to the replayed model: an answer is right when the model was in a state that
//! gives it somewhere within the request's window, the states between the last event surely
//! applied before the request was sent and the first event surely applied after its answer came
//! back. A change the request made itself is held to its own event. Unknown outcomes (and 503s)
//! are not checked here; they only widen what the feed may contain (`replay.rs`).
//!
//! The error codes and statuses below are written out on purpose, not taken from the core's
//! table of errors (`stockd_core::ERRORS`): this checker is an independent oracle of the
//! contract, so a code or status changed by mistake in the table shows up here as a violation.
//!
//! Answers about a spread pool's numbers are held to `spread.rs`'s bounds where those decide
//! (a stock refusal); what they cannot decide exactly (a read's held/sold split, a per-user
//! limit refusal) is checked as far as it goes and counted in `Stats::spread_unchecked`.

use std::cell::Cell;

use serde_json::Value;

use crate::replay::{changes_within, items_of, value_at, HoldLine, PoolNums, Replay, Status};
use crate::spread::Spread;
use crate::{answered, Bounds, History, Op, Request, Stats};

pub(crate) fn check_answers(
    history: &History,
    replay: &Replay,
    spread: &Spread,
    violations: &mut Vec<String>,
    stats: &mut Stats,
) {
    let bounds = spread.bounds;
    for (index, op) in history.ops.iter().enumerate() {
        let Some((status, body)) = answered(op) else {
            stats.unknown += 1;
            continue;
        };
        stats.answered += 1;
        let code = body.get("error").and_then(Value::as_str).unwrap_or("");
        *stats
            .answers
            .entry(
                format!("{} {status} {code}", kind(&op.request))
                    .trim()
                    .to_string(),
            )
            .or_insert(0) += 1;
        let check = Check {
            history,
            replay,
            spread,
            bounds,
            op,
            index,
            unchecked: Cell::new(false),
        };
        let verdict = check.run(status, body, code);
        if check.unchecked.get() {
            stats.spread_unchecked += 1;
        }
        if let Err(why) = verdict {
            violations.push(format!(
                "op #{index} (client {}, {:?}) answered {status} {body}: {why}",
                op.process, op.request
            ));
        }
    }
}

fn kind(request: &Request) -> &'static str {
    match request {
        Request::PutPool { .. } => "put_pool",
        Request::Reserve { .. } => "reserve",
        Request::Confirm { .. } => "confirm",
        Request::Release { .. } => "release",
        Request::Extend { .. } => "extend",
        Request::Refund { .. } => "refund",
        Request::GetHold { .. } => "get_hold",
        Request::GetPool { .. } => "get_pool",
        Request::Restock { .. } => "restock",
        Request::LockAcquire { .. } => "lock_acquire",
        Request::LockRenew { .. } => "lock_renew",
        Request::LockRelease { .. } => "lock_release",
    }
}

struct Check<'a> {
    history: &'a History,
    replay: &'a Replay,
    spread: &'a Spread<'a>,
    bounds: Bounds,
    op: &'a Op,
    index: usize,
    /// Set when part of the answer was left unchecked (a spread pool's numbers).
    unchecked: Cell<bool>,
}

type Verdict = Result<(), String>;

fn require(ok: bool, why: impl FnOnce() -> String) -> Verdict {
    if ok {
        Ok(())
    } else {
        Err(why())
    }
}

impl Check<'_> {
    fn invoke_ms(&self) -> u64 {
        self.op.invoke_us / 1000
    }

    fn complete_ms(&self) -> u64 {
        self.op.complete_us / 1000
    }

    /// The request's window in real time (µs).
    fn window_us(&self) -> (u64, u64) {
        let slack_us = self.bounds.slack_ms * 1000;
        (
            self.op.invoke_us.saturating_sub(slack_us),
            self.op.complete_us + slack_us,
        )
    }

    /// Leaves the rest of the answer unchecked, and says so.
    fn skip(&self) -> Verdict {
        self.unchecked.set(true);
        Ok(())
    }

    /// A stock refusal of a spread pool: `available` below what was asked, and the pool as a
    /// whole had that many at some instant while the request was in flight.
    fn spread_short(&self, pool: &str, asked: u64, body: &Value) -> Verdict {
        let available = body
            .get("available")
            .and_then(Value::as_u64)
            .ok_or_else(|| "no available".to_string())?;
        require(available < asked, || {
            format!("refused with {available} available, {asked} asked")
        })?;
        self.spread
            .refusal(pool, self.window_us(), available, self.index)
    }

    /// The states of `partition` the request may have seen: `[lo, hi]`.
    fn window(&self, partition: usize) -> (usize, usize) {
        let Some(at_ms) = self.replay.at_ms.get(partition) else {
            return (0, 0);
        };
        let from = self.invoke_ms().saturating_sub(self.bounds.slack_ms);
        let until = self.complete_ms() + self.bounds.slack_ms;
        let lo = at_ms.partition_point(|&at| at < from);
        let hi = at_ms.partition_point(|&at| at <= until);
        (lo, hi.max(lo))
    }

    fn hold(&self, hold_id: &str) -> Option<&HoldLine> {
        self.replay.holds.get(hold_id)
    }

    /// The (status, expires_at_ms) a hold had within the request's window.
    fn hold_states(&self, hold_id: &str) -> Vec<(Status, u64)> {
        let Some(line) = self.hold(hold_id) else {
            return vec![(Status::Absent, 0)];
        };
        let (lo, hi) = self.window(line.partition);
        let mut states = vec![line.at(lo)];
        states.extend(line.changes_within(lo, hi).into_iter().map(|s| line.at(s)));
        states
    }

    /// Whether the hold was `want` within the window. A held hold past its deadline counts as
    /// expired: the server expires it when a request names it (the event then follows).
    fn was(&self, hold_id: &str, want: Status) -> bool {
        let complete = self.complete_ms() + self.bounds.slack_ms;
        self.hold_states(hold_id).iter().any(|&(status, expires)| {
            status == want
                || (want == Status::Expired && status == Status::Held && expires <= complete)
        })
    }

    fn was_any(&self, hold_id: &str, wants: &[Status]) -> Verdict {
        let states = self.hold_states(hold_id);
        require(wants.iter().any(|&want| self.was(hold_id, want)), || {
            format!(
                "the hold was never {} within the request's window (it was {})",
                wants
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
                    .join(" or "),
                describe(&states)
            )
        })
    }

    /// A hold object in an answer is one of the states the hold had within the window.
    fn hold_body(&self, hold_id: &str, body: &Value) -> Verdict {
        let line = self
            .hold(hold_id)
            .ok_or_else(|| "the feed never held this hold".to_string())?;
        let items = body.get("items").and_then(items_of);
        let user = body.get("user").and_then(Value::as_str).map(str::to_string);
        require(
            body.get("hold_id").and_then(Value::as_str) == Some(hold_id)
                && items.as_ref() == Some(&line.items)
                && user == line.user,
            || {
                format!(
                    "not the hold the feed has ({:?}, {:?})",
                    line.user, line.items
                )
            },
        )?;
        let status = body.get("status").and_then(Value::as_str).unwrap_or("");
        let expires = body.get("expires_at_ms").and_then(Value::as_u64);
        let states = self.hold_states(hold_id);
        require(
            states
                .iter()
                .any(|&(s, e)| s.name() == status && Some(e) == expires),
            || {
                format!(
                    "status {status} expiring {expires:?} is not a state the hold had within \
                     the request's window ({})",
                    describe(&states)
                )
            },
        )?;
        // The server decided at some moment after the request was sent; a hold it calls held
        // must not have been past its deadline then.
        let sent = self.invoke_ms().saturating_sub(self.bounds.slack_ms);
        require(
            status != "held" || expires.is_some_and(|e| e > sent),
            || "a hold past its deadline answered as held (it is expired)".to_string(),
        )?;
        require(
            body.get("created_at_ms").and_then(Value::as_u64) == Some(line.created_at_ms),
            || {
                format!(
                    "created_at_ms is not the held event's {}",
                    line.created_at_ms
                )
            },
        )?;
        require(
            body.get("partition")
                .is_none_or(|p| p.as_u64() == Some(line.partition as u64)),
            || format!("the hold's events are in partition {}", line.partition),
        )
    }

    fn run(&self, status: u16, body: &Value, code: &str) -> Verdict {
        match (&self.op.request, status) {
            (Request::Reserve { .. }, _) => self.reserve(status, body, code),
            (Request::Confirm { hold_id }, 200) => {
                require(body["status"] == "confirmed", || {
                    "status is not confirmed".into()
                })?;
                self.hold_body(hold_id, body)
            }
            (Request::Release { hold_id }, 200) => {
                require(
                    body["status"] == "released" || body["status"] == "expired",
                    || "status is neither released nor expired".into(),
                )?;
                self.hold_body(hold_id, body)
            }
            (Request::Refund { hold_id, .. }, 200) => {
                require(body["status"] == "refunded", || {
                    "status is not refunded".into()
                })?;
                self.hold_body(hold_id, body)
            }
            (Request::GetHold { hold_id }, 200) => self.hold_body(hold_id, body),
            (Request::Extend { hold_id, .. }, 200) => self.extend(hold_id, body),
            (
                Request::Confirm { hold_id }
                | Request::Release { hold_id }
                | Request::Extend { hold_id, .. }
                | Request::Refund { hold_id, .. }
                | Request::GetHold { hold_id },
                404,
            ) if code == "hold_not_found" => self.was_any(hold_id, &[Status::Absent]),
            (
                Request::Confirm { hold_id }
                | Request::Release { hold_id }
                | Request::Extend { hold_id, .. }
                | Request::Refund { hold_id, .. },
                409,
            ) => self.refusal(hold_id, code),
            (Request::GetPool { pool }, 200) => self.pool_body(pool, body, None),
            (
                Request::Restock {
                    pool,
                    delta,
                    request_id: Some(request_id),
                },
                200,
            ) if self.replay.effects[self.index].is_empty() => {
                self.restock_retried(pool, *delta, request_id, body)
            }
            // The event may be another send's of the same id (a first send whose answer was
            // lost): this answer is then a retry's, the pool as it was when the retry came.
            (
                Request::Restock {
                    pool,
                    delta,
                    request_id: Some(request_id),
                },
                200,
            ) if self.replay.unsure[self.index] => self.pool_change(body).or_else(|own| {
                self.restock_retried(pool, *delta, request_id, body)
                    .map_err(|retry| format!("{own}; as a retry: {retry}"))
            }),
            (Request::Restock { .. }, 200) | (Request::PutPool { .. }, 200 | 201) => {
                self.pool_change(body)
            }
            (Request::Restock { pool, delta, .. }, 409) if code == "insufficient_stock" => {
                self.restock_refused(pool, *delta, body)
            }
            (
                Request::Restock {
                    pool,
                    delta,
                    request_id: Some(request_id),
                },
                409,
            ) if code == "request_id_conflict" => {
                self.restock_conflict(pool, *delta, request_id, body)
            }
            (
                Request::LockAcquire { .. }
                | Request::LockRenew { .. }
                | Request::LockRelease { .. },
                _,
            ) => Ok(()), // locks.rs
            _ => Err("an answer this history cannot produce".to_string()),
        }
    }

    /// A 409 of confirm, release, extend or refund: the hold was in a state that refuses it.
    fn refusal(&self, hold_id: &str, code: &str) -> Verdict {
        let refusing: &[Status] = match (&self.op.request, code) {
            (Request::Refund { .. }, "hold_not_confirmed") => {
                &[Status::Held, Status::Released, Status::Expired]
            }
            (Request::Refund { .. }, _) => &[],
            (Request::Release { .. }, "hold_released" | "hold_expired") => &[],
            (_, "hold_expired") => &[Status::Expired],
            (Request::Confirm { .. }, "hold_confirmed") => &[],
            (_, "hold_confirmed") => &[Status::Confirmed],
            (_, "hold_released") => &[Status::Released],
            (_, "hold_refunded") => &[Status::Refunded],
            _ => &[],
        };
        if refusing.is_empty() {
            return Err("a refusal this request cannot get".to_string());
        }
        self.was_any(hold_id, refusing)
    }

    fn extend(&self, hold_id: &str, body: &Value) -> Verdict {
        require(body["status"] == "held", || "status is not held".into())?;
        let line = self
            .hold(hold_id)
            .ok_or_else(|| "the feed never held this hold".to_string())?;
        require(!self.replay.effects[self.index].is_empty(), || {
            "acknowledged, but no extended event of the feed is this request's".to_string()
        })?;
        let expires = body.get("expires_at_ms").and_then(Value::as_u64);
        require(
            line.timeline
                .iter()
                .any(|&(_, status, e)| status == Status::Held && Some(e) == expires),
            || "expires_at_ms is not a deadline the feed gave the hold".to_string(),
        )
    }

    fn reserve(&self, status: u16, body: &Value, code: &str) -> Verdict {
        let Request::Reserve {
            hold_id,
            user,
            items,
            confirm,
            ..
        } = &self.op.request
        else {
            unreachable!("reserve");
        };
        match (status, code) {
            (201, _) => {
                let line = self.hold(hold_id);
                let mine = line.is_some_and(|line| line.creator == self.index)
                    && !self.replay.effects[self.index].is_empty();
                require(mine, || {
                    "answered 201, but the feed's held event of this hold is not this \
                     request's: the hold was lost, or created twice"
                        .to_string()
                })?;
                let line = line.expect("checked");
                let want = if *confirm { "confirmed" } else { "held" };
                let expires = line.timeline[0].2;
                require(
                    body["status"] == want
                        && body.get("expires_at_ms").and_then(Value::as_u64) == Some(expires)
                        && body.get("created_at_ms").and_then(Value::as_u64)
                            == Some(line.created_at_ms),
                    || {
                        format!(
                            "the new hold should be {want}, created at {}, expiring {expires}",
                            line.created_at_ms
                        )
                    },
                )?;
                require(
                    body.get("items").and_then(items_of).as_ref() == Some(items)
                        && body.get("user").and_then(Value::as_str) == user.as_deref(),
                    || "user or items are not the request's".to_string(),
                )
            }
            (200, _) => {
                require(
                    body.get("items").and_then(items_of).as_ref() == Some(items),
                    || "a replay with other items".to_string(),
                )?;
                self.hold_body(hold_id, body)
            }
            (409, "insufficient_stock" | "user_limit_exceeded") => {
                self.reserve_refused(hold_id, user.as_deref(), items, code, body)
            }
            _ => Err("an answer this reserve cannot get".to_string()),
        }
    }

    /// A refused reserve: at some state within the window the hold did not exist, every item
    /// before the one named passed every check, and the one named failed as the answer says.
    fn reserve_refused(
        &self,
        hold_id: &str,
        user: Option<&str>,
        items: &[crate::Item],
        code: &str,
        body: &Value,
    ) -> Verdict {
        let named = body.get("pool").and_then(Value::as_str).unwrap_or("");
        let failing = items
            .iter()
            .position(|item| item.pool == named)
            .ok_or_else(|| format!("names pool {named:?}, not in the request"))?;
        require(
            body.get("requested").and_then(Value::as_u64) == Some(items[failing].qty),
            || "requested is not the item's qty".to_string(),
        )?;
        if items
            .iter()
            .any(|item| self.spread.line(&item.pool).is_some())
        {
            // The earlier items' checks and the hold's absence are left out: sound, not exact.
            return match (code, self.spread.line(named)) {
                ("insufficient_stock", Some(_)) => {
                    self.spread_short(named, items[failing].qty, body)
                }
                _ => self.skip(),
            };
        }
        let lines: Vec<_> = items
            .iter()
            .map(|item| self.replay.pools.get(&item.pool))
            .collect();
        let Some(first) = lines[0] else {
            return Err(format!("pool {} never existed", items[0].pool));
        };
        let partition = first.partition;
        let (lo, hi) = self.window(partition);
        let usage_key = |pool: &str| user.map(|u| (pool.to_string(), u.to_string()));
        let usage_at = |pool: &str, s: usize| {
            usage_key(pool)
                .and_then(|key| self.replay.usage.get(&key))
                .and_then(|line| value_at(line, s))
                .unwrap_or(0)
        };

        // Candidate states: the first of the window and every change of what the answer
        // depends on within it.
        let mut points = vec![lo];
        for (item, line) in items.iter().zip(&lines) {
            if let Some(line) = line {
                points.extend(changes_within(&line.timeline, lo, hi));
            }
            if let Some(usage) = usage_key(&item.pool).and_then(|key| self.replay.usage.get(&key)) {
                points.extend(changes_within(usage, lo, hi));
            }
        }
        if let Some(line) = self.hold(hold_id) {
            points.extend(line.changes_within(lo, hi));
        }
        points.sort_unstable();
        points.dedup();

        let explained_at = |s: usize| -> bool {
            if self
                .hold(hold_id)
                .is_some_and(|line| line.at(s).0 != Status::Absent)
            {
                return false;
            }
            for (i, (item, line)) in items.iter().zip(&lines).enumerate() {
                let Some(nums) = line.and_then(|line| value_at(&line.timeline, s)) else {
                    return false;
                };
                let limit = line.and_then(|line| line.per_user_limit);
                let used = usage_at(&item.pool, s);
                let stock_ok = nums.available >= item.qty;
                let limit_ok = limit.is_none_or(|limit| used + item.qty <= limit);
                if i < failing {
                    if !(stock_ok && limit_ok) {
                        return false;
                    }
                    continue;
                }
                return match code {
                    "insufficient_stock" => {
                        !stock_ok
                            && body.get("available").and_then(Value::as_u64) == Some(nums.available)
                    }
                    _ => {
                        stock_ok
                            && !limit_ok
                            && body.get("limit").and_then(Value::as_u64) == limit
                            && body.get("used").and_then(Value::as_u64) == Some(used)
                    }
                };
            }
            false
        };
        require(points.iter().any(|&s| explained_at(s)), || {
            let seen: Vec<String> = points
                .iter()
                .map(|&s| {
                    let nums = lines[failing].and_then(|line| value_at(&line.timeline, s));
                    format!(
                        "state {s}: {named} {:?}, used {}",
                        nums.map(|n| n.available),
                        usage_at(named, s)
                    )
                })
                .take(8)
                .collect();
            format!(
                "no state within the window (partition {partition}, states {lo}..={hi}) gives \
                 this refusal: {}",
                seen.join("; ")
            )
        })
    }

    /// A pool object that is one of the states the pool had within the window (or, with
    /// `at`, the state right after the request's own event).
    fn pool_body(&self, pool: &str, body: &Value, at: Option<usize>) -> Verdict {
        let line = self
            .replay
            .pools
            .get(pool)
            .ok_or_else(|| "the feed never created this pool".to_string())?;
        let field = |key: &str| body.get(key).and_then(Value::as_u64);
        let said = PoolNums {
            total: field("total").unwrap_or(u64::MAX),
            available: field("available").unwrap_or(u64::MAX),
            held: field("held").unwrap_or(u64::MAX),
            sold: field("sold").unwrap_or(u64::MAX),
        };
        require(said.total == said.available + said.held + said.sold, || {
            "total != available + held + sold".to_string()
        })?;
        require(
            field("per_user_limit") == line.per_user_limit
                && field("low_stock_threshold") == line.low_stock_threshold,
            || "rules differ from the PUT's".to_string(),
        )?;
        if let Some(spread) = self.spread.line(pool) {
            // Right after its own event the pool is that event's snapshot; a read within a
            // window is one the events allow at some instant of it. The held and sold split is
            // beyond the model.
            let Some(s) = at else {
                self.spread
                    .read(pool, self.window_us(), said.total, said.available)?;
                return self.skip();
            };
            let snapshot = value_at(&spread.snapshots, s);
            require(
                snapshot.is_some_and(|n| (n.total, n.available) == (said.total, said.available)),
                || format!("not the pool right after its own event: {snapshot:?}"),
            )?;
            return self.skip();
        }
        let states: Vec<PoolNums> = match at {
            Some(s) => value_at(&line.timeline, s).into_iter().collect(),
            None => {
                let (lo, hi) = self.window(line.partition);
                let mut states: Vec<PoolNums> = value_at(&line.timeline, lo).into_iter().collect();
                states.extend(
                    changes_within(&line.timeline, lo, hi)
                        .into_iter()
                        .filter_map(|s| value_at(&line.timeline, s)),
                );
                states
            }
        };
        require(states.contains(&said), || {
            format!("not a state the pool had within the request's window: {states:?}")
        })
    }

    /// A PUT or restock acknowledged: its own event is in the feed, and the answer is the pool
    /// right after it.
    ///
    /// Identical requests (the same restock sent by two clients at once, without a request
    /// id) cause interchangeable events, and which is whose is a guess: the answer may be the
    /// pool right after any of their events within this request's window.
    fn pool_change(&self, body: &Value) -> Verdict {
        let pool = match &self.op.request {
            Request::PutPool { pool, .. } | Request::Restock { pool, .. } => pool,
            _ => unreachable!("pool change"),
        };
        let Some(&(_, position)) = self.replay.effects[self.index].first() else {
            return Err("acknowledged, but no event of the feed is this request's".to_string());
        };
        let own = self.pool_body(pool, body, Some(position + 1));
        if own.is_ok() {
            return own;
        }
        let (lo, hi) = self
            .replay
            .pools
            .get(pool)
            .map_or((0, 0), |line| self.window(line.partition));
        let twins = self
            .history
            .ops
            .iter()
            .enumerate()
            .filter(|&(j, op)| j != self.index && op.request == self.op.request)
            .flat_map(|(j, _)| self.replay.effects[j].first().copied())
            .filter(|&(_, p)| (lo..hi).contains(&p));
        for (_, p) in twins {
            if self.pool_body(pool, body, Some(p + 1)).is_ok() {
                return Ok(());
            }
        }
        own
    }

    /// A restock with a request id acknowledged without an event of its own: a retry. Another
    /// request with the id restocked this very pool by this very delta, and the answer is a
    /// state the pool had within the request's window.
    fn restock_retried(&self, pool: &str, delta: i64, request_id: &str, body: &Value) -> Verdict {
        let first = self.replay.restock_requests.get(request_id);
        require(
            first.is_some_and(|(first_pool, first_delta)| {
                first_pool == pool && *first_delta == delta
            }),
            || {
                format!(
                    "acknowledged, but no restock of {pool} by {delta} has this request id \
                     (first: {first:?})"
                )
            },
        )?;
        self.pool_body(pool, body, None)
    }

    /// `request_id_conflict`: the id restocked another pool or by another delta, and the
    /// details say which.
    fn restock_conflict(&self, pool: &str, delta: i64, request_id: &str, body: &Value) -> Verdict {
        let (first_pool, first_delta) = self
            .replay
            .restock_requests
            .get(request_id)
            .ok_or_else(|| "no restock of the feed has this request id".to_string())?;
        require(first_pool != pool || *first_delta != delta, || {
            "the first restock with this id was this very restock".to_string()
        })?;
        require(
            body["request_id"] == request_id
                && body["pool"] == first_pool.as_str()
                && body["delta"].as_i64() == Some(*first_delta),
            || format!("details differ from the first restock ({first_pool} by {first_delta})"),
        )
    }

    fn restock_refused(&self, pool: &str, delta: i64, body: &Value) -> Verdict {
        let line = self
            .replay
            .pools
            .get(pool)
            .ok_or_else(|| "the feed never created this pool".to_string())?;
        if self.spread.line(pool).is_some() {
            require(delta < 0, || {
                "a restock adding units refused for stock".to_string()
            })?;
            return self.spread_short(pool, delta.unsigned_abs(), body);
        }
        let (lo, hi) = self.window(line.partition);
        let mut points = vec![lo];
        points.extend(changes_within(&line.timeline, lo, hi));
        let said = body.get("available").and_then(Value::as_u64);
        require(
            points.iter().any(|&s| {
                value_at(&line.timeline, s).is_some_and(|nums| {
                    nums.available.checked_add_signed(delta).is_none()
                        && said.is_none_or(|said| said == nums.available)
                })
            }),
            || format!("the pool always had enough available for {delta} within the window"),
        )
    }
}

fn describe(states: &[(Status, u64)]) -> String {
    states
        .iter()
        .map(|(status, expires)| format!("{} until {expires}", status.name()))
        .collect::<Vec<_>>()
        .join(", then ")
}
