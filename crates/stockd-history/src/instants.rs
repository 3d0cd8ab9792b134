//! Every event placed in real time: the earliest and latest instant (client clock, µs) at which
//! it may have been applied. What bounds an event: its `at_ms` (give or take
//! [`Bounds::clock_skew_ms`]), the window of every request that may have caused it (give or
//! take [`Bounds::slack_ms`]; an unknown outcome may apply at any time after it was sent), an
//! expiry's deadline, and its partition's order: an event comes no earlier than the one before
//! it and no later than the one after it. An event no instant fits is a violation (the feed
//! contradicts what the clients saw). It only reads the replay; spread pools' checks
//! (`spread.rs`) evaluate the model at these instants.

use crate::replay::{Cause, Replay};
use crate::{answered, Bounds, History};

const US_PER_MS: u64 = 1_000;

pub(crate) struct Instants {
    /// Per partition, per event: `(earliest, latest)` in µs.
    pub events: Vec<Vec<(u64, u64)>>,
}

impl Instants {
    pub(crate) fn place(
        history: &History,
        replay: &Replay,
        bounds: Bounds,
        violations: &mut Vec<String>,
    ) -> Instants {
        let slack_us = bounds.slack_ms * US_PER_MS;
        let skew_us = bounds.clock_skew_ms * US_PER_MS;
        let mut events = Vec::with_capacity(replay.at_ms.len());
        for (partition, at_ms) in replay.at_ms.iter().enumerate() {
            let causes = &replay.causes[partition];
            let mut placed: Vec<(u64, u64)> = at_ms
                .iter()
                .zip(causes)
                .map(|(&at, cause)| {
                    let at_us = at.saturating_mul(US_PER_MS);
                    let by_clock = (
                        at_us.saturating_sub(skew_us),
                        at_us + US_PER_MS - 1 + skew_us,
                    );
                    let by_cause = match cause {
                        Cause::Unknown => (0, u64::MAX),
                        Cause::Ops(ops) if ops.is_empty() => (0, u64::MAX),
                        Cause::Deadline(expires_ms) => {
                            ((expires_ms * US_PER_MS).saturating_sub(skew_us), u64::MAX)
                        }
                        Cause::Ops(ops) => ops.iter().fold((u64::MAX, 0), |(lo, hi), &i| {
                            let op = &history.ops[i];
                            let until = if answered(op).is_some() {
                                op.complete_us + slack_us
                            } else {
                                u64::MAX
                            };
                            (lo.min(op.invoke_us.saturating_sub(slack_us)), hi.max(until))
                        }),
                    };
                    (by_clock.0.max(by_cause.0), by_clock.1.min(by_cause.1))
                })
                .collect();
            // The feed's order: no earlier than the event before, no later than the one after.
            for i in 1..placed.len() {
                placed[i].0 = placed[i].0.max(placed[i - 1].0);
            }
            for i in (0..placed.len().saturating_sub(1)).rev() {
                placed[i].1 = placed[i].1.min(placed[i + 1].1);
            }
            if let Some(i) = placed.iter().position(|(lo, hi)| lo > hi) {
                let (lo, hi) = placed[i];
                violations.push(format!(
                    "feed partition {partition}, event {i} ({}): no instant fits it: the events \
                     up to it cannot be applied before {lo} µs, the events from it on must be \
                     applied by {hi} µs (their requests' windows and at_ms)",
                    history.feed[partition][i]
                ));
            }
            events.push(placed);
        }
        Instants { events }
    }

    /// The states partition `partition` may have been in at instant `t`: `[sure, possible]`,
    /// the events surely applied by then and those possibly applied.
    pub(crate) fn states_at(&self, partition: usize, t: u64) -> (usize, usize) {
        let Some(events) = self.events.get(partition) else {
            return (0, 0);
        };
        let sure = events.partition_point(|&(_, hi)| hi < t);
        let possible = events.partition_point(|&(lo, _)| lo <= t);
        (sure.min(possible), possible.max(sure))
    }

    /// When event `position` of `partition` may have been applied.
    pub(crate) fn of(&self, partition: usize, position: usize) -> (u64, u64) {
        self.events[partition][position]
    }
}
