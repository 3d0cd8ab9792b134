//! History checking of stockd, in the spirit of Jepsen's checkers: concurrent clients record every
//! request and answer (timeouts and lost connections as "unknown"), and [`check`] verifies that
//! the whole history is explained by one order of the operations.
//!
//! The order is the **event feed**: each partition's feed is the order in which the backend
//! applied changes, and every change of a pool or a hold is in its partition. The checker replays
//! the feed through a naive model ([`replay`]) and attributes every event to the request that
//! could have caused it (or to time, for expiries); then it holds every answer to the state the
//! model was in somewhere within the request's time window ([`answers`]), checks that requests
//! acknowledged one after the other appear in that order in the feed, and checks locks from their
//! answers alone ([`locks`], locks make no events). What it finds is a list of violations; an
//! empty list means the history is explained.
//!
//! It is a dev-only crate that knows stockd only through its HTTP contract (docs/api.md): it must
//! never borrow code from the implementation it judges.
//!
//! Time: the clients stamp requests with the machine's wall clock, and stockd stamps events with
//! the same clock (the embedded engine's, or Redis's on the same machine). An event caused by a
//! request carries an `at_ms` inside the request's window, give or take [`Bounds::slack_ms`]; the
//! checker relies on that, and on `at_ms` never going backwards within a partition, which it
//! checks.
//!
//! Segmented pools, and pools taken from by holds over several partitions, are **spread**: their
//! units are held in partitions other than the one of their own events, and no single feed
//! orders them. For those the checker places every event at an instant of real time instead
//! ([`instants`]) and judges the pool with sure and possible sums over partitions ([`spread`]).

mod answers;
mod history;
mod instants;
mod locks;
mod replay;
mod spread;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

pub use history::{History, Item, Op, Outcome, Request};

/// Tolerances of the checker.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// How far an event's `at_ms` may lie outside the window of the request that caused it
    /// (clock granularity and the moment a client reads the clock around a request).
    pub slack_ms: u64,
    /// The latest an expiry may be applied after its deadline. The contract says 1 s; runs with
    /// killed servers allow the time a server is down on top.
    pub expiry_lag_max_ms: u64,
    /// How far an event's `at_ms` may lie from the clients' clock at the instant it was applied
    /// (0 when both read one clock). Only spread pools' checks place events in real time.
    pub clock_skew_ms: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            slack_ms: 25,
            expiry_lag_max_ms: 5_000,
            clock_skew_ms: 25,
        }
    }
}

/// Totals of one checked history.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub ops: usize,
    /// Operations with an answer the checker held to the model (503s are unknown).
    pub answered: usize,
    pub unknown: usize,
    pub events: usize,
    pub holds: usize,
    pub expiries: usize,
    pub expiry_lag_max_ms: u64,
    pub lock_grants: usize,
    /// Ops left out of the real-time order check: another request could as well have caused
    /// an event attributed to them.
    pub unsure: usize,
    /// How many answers of each kind (`reserve 201`, `confirm 409 hold_expired`, ...).
    pub answers: HashMap<String, usize>,
    /// Pools judged as spread over partitions (see the crate documentation).
    pub spread_pools: usize,
    /// What the checker could not judge exactly for spread pools and left unchecked: answers
    /// (a pool read, a limit refusal, the held/sold split of a PUT's answer) and per-user limits
    /// of a user whose holds of the pool are in several partitions.
    pub spread_unchecked: usize,
}

/// The verdict on one history.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub violations: Vec<String>,
    pub stats: Stats,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Checks a whole history. See the crate documentation.
pub fn check(history: &History, bounds: Bounds) -> Report {
    let mut violations = Vec::new();
    let replay = replay::Replay::run(history, bounds, &mut violations);
    let mut stats = Stats {
        ops: history.ops.len(),
        events: history.feed.iter().map(Vec::len).sum(),
        holds: replay.holds.len(),
        expiries: replay.expiry_lags_ms.len(),
        expiry_lag_max_ms: replay.expiry_lags_ms.iter().copied().max().unwrap_or(0),
        unsure: replay.unsure.iter().filter(|&&u| u).count(),
        spread_pools: replay.spread.len(),
        spread_unchecked: replay.spread_unchecked,
        ..Stats::default()
    };
    let instants = instants::Instants::place(history, &replay, bounds, &mut violations);
    let spread = spread::Spread {
        history,
        replay: &replay,
        instants: &instants,
        bounds,
    };
    spread.check_pools(&mut violations);
    answers::check_answers(history, &replay, &spread, &mut violations, &mut stats);
    real_time_order(history, &replay, &mut violations);
    stats.lock_grants = locks::check_locks(history, bounds, &mut violations);
    Report { violations, stats }
}

/// Whether the outcome is an answer the checker can hold the server to (503
/// `backend_unavailable` is not: the contract says such a call may or may not have happened).
pub(crate) fn answered(op: &Op) -> Option<(u16, &serde_json::Value)> {
    match &op.outcome {
        Outcome::Answered { status, body } if *status != 503 => Some((*status, body)),
        _ => None,
    }
}

/// Whether the request may have changed something: a success, or no answer to trust.
pub(crate) fn may_have_applied(op: &Op) -> bool {
    match answered(op) {
        Some((status, _)) => (200..300).contains(&status) || status >= 500,
        None => true,
    }
}

/// An operation acknowledged before another was sent comes first in the feed, when both changed
/// something in one partition. Ops are ordered by the first event attributed to each; an op
/// whose events another request could as well have caused (see `Replay::unsure`) is left out,
/// since its place in the feed is a guess.
fn real_time_order(history: &History, replay: &replay::Replay, violations: &mut Vec<String>) {
    let mut by_partition: HashMap<usize, Vec<(usize, usize)>> = HashMap::new();
    for (index, effect) in replay.first_effect.iter().enumerate() {
        if replay.unsure[index] {
            continue;
        }
        if let Some((partition, position)) = effect {
            by_partition
                .entry(*partition)
                .or_default()
                .push((*position, index));
        }
    }
    for (partition, mut ops) in by_partition {
        ops.sort();
        // Walking back from the end of the feed, the earliest completion among the ops placed
        // after this one: if it came before this op was even sent, the feed has them backwards.
        let mut earliest_later: Option<usize> = None;
        for &(position, index) in ops.iter().rev() {
            let op = &history.ops[index];
            if let Some(later) = earliest_later {
                let later_op = &history.ops[later];
                if answered(later_op).is_some() && later_op.complete_us < op.invoke_us {
                    violations.push(format!(
                        "real-time order: op #{later} ({:?}) was acknowledged before op #{index} \
                         ({:?}) was sent, yet its event comes after op #{index}'s \
                         (partition {partition}, event {position})",
                        later_op.request, op.request
                    ));
                }
            }
            if answered(op).is_some()
                && earliest_later.is_none_or(|e| op.complete_us < history.ops[e].complete_us)
            {
                earliest_later = Some(index);
            }
        }
    }
}
