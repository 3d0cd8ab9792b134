//! Spread pools judged in real time. Each partition is in one state at any instant, so at an
//! instant `t` the units a spread pool's holds have taken are at least the sum over partitions
//! of the least their possible states (`Instants::states_at`) have taken, and at most the sum
//! of the most. Those bounds are sound however the partitions interleave, and on them rest the
//! checks: never oversold (what is surely taken never exceeds the largest total the pool may
//! have had), every snapshot of the whole pool (its own events) possible at an instant of its
//! event, and a stock refusal's `available` possible at an instant within the request.
//!
//! What the feed cannot show is taken into account, never guessed: a reserve over several
//! partitions holds its units before its `held` event, and returns them after its release (the
//! hold record decides, the parts follow). So the events' count of units taken is a lower bound
//! of the real one, and the real one is higher by at most the units of reserves in flight and
//! of returns not known to be finished ([`Spread::in_flight`]). It reads the replay and the
//! instants, and judges nothing the replay judges.

use crate::instants::Instants;
use crate::replay::{changes_within, value_at, Cause, Replay, Snapshot, SpreadLine};
use crate::{answered, Bounds, History, Request};

const US_PER_MS: u64 = 1_000;

pub(crate) struct Spread<'a> {
    pub history: &'a History,
    pub replay: &'a Replay,
    pub instants: &'a Instants,
    pub bounds: Bounds,
}

/// Units that may be taken without an event saying so, from `from` to `until` (µs).
struct InFlight {
    from: u64,
    until: u64,
    units: u64,
    /// The reserve holding them, if they are a reserve's.
    op: Option<usize>,
}

/// The least and the most of a timeline over states `a..=b` (0 before its first entry).
fn extremes<T: Copy>(
    timeline: &[(usize, T)],
    a: usize,
    b: usize,
    get: impl Fn(T) -> u64,
) -> (u64, u64) {
    let first = value_at(timeline, a).map_or(0, &get);
    changes_within(timeline, a, b)
        .into_iter()
        .filter_map(|s| value_at(timeline, s).map(&get))
        .fold((first, first), |(least, most), v| {
            (least.min(v), most.max(v))
        })
}

impl Spread<'_> {
    pub(crate) fn line(&self, pool: &str) -> Option<&SpreadLine> {
        self.replay.spread.get(pool)
    }

    /// Units the pool's holds have taken at instant `t`: (at least, at most) by the events.
    /// `pinned` fixes one partition's state (a snapshot's own).
    fn taken(&self, line: &SpreadLine, t: u64, pinned: Option<(usize, usize)>) -> (u64, u64) {
        line.taken
            .iter()
            .map(|(&partition, timeline)| {
                let (a, b) = match pinned {
                    Some((p, s)) if p == partition => (s, s),
                    _ => self.instants.states_at(partition, t),
                };
                extremes(timeline, a, b, |units| units)
            })
            .fold((0, 0), |(least, most), (l, m)| (least + l, most + m))
    }

    /// The pool's effective total (`Snapshot::effective_total`) at instant `t`: (least, most).
    fn effective_total(&self, line: &SpreadLine, t: u64) -> (u64, u64) {
        let (a, b) = self.instants.states_at(line.partition, t);
        extremes(&line.snapshots, a, b, |s: Snapshot| s.effective_total)
    }

    /// What may be taken without an event: the units of every reserve naming the pool while it
    /// is in flight (to its answer, or for ever when none came), and the units of every return
    /// from its event until its request was answered (for ever for an expiry, which a sweeper
    /// finishes).
    fn in_flight(&self, pool: &str, line: &SpreadLine) -> Vec<InFlight> {
        let slack_us = self.bounds.slack_ms * US_PER_MS;
        let until = |op: &crate::Op| {
            if answered(op).is_some() {
                op.complete_us + slack_us
            } else {
                u64::MAX
            }
        };
        let mut spans = Vec::new();
        for (index, op) in self.history.ops.iter().enumerate() {
            let Request::Reserve { items, .. } = &op.request else {
                continue;
            };
            if let Some(item) = items.iter().find(|item| item.pool == pool) {
                spans.push(InFlight {
                    from: op.invoke_us.saturating_sub(slack_us),
                    until: until(op),
                    units: item.qty,
                    op: Some(index),
                });
            }
        }
        for &(partition, position, units) in &line.returns {
            let (from, _) = self.instants.of(partition, position);
            let end = match &self.replay.causes[partition][position] {
                Cause::Ops(ops) if !ops.is_empty() => ops
                    .iter()
                    .map(|&i| until(&self.history.ops[i]))
                    .max()
                    .unwrap_or(u64::MAX),
                _ => u64::MAX,
            };
            spans.push(InFlight {
                from,
                until: end,
                units,
                op: None,
            });
        }
        spans
    }

    fn in_flight_at(spans: &[InFlight], t: u64, except: Option<usize>) -> u64 {
        spans
            .iter()
            .filter(|span| {
                span.from <= t && t <= span.until && (span.op.is_none() || span.op != except)
            })
            .map(|span| span.units)
            .sum()
    }

    /// The instants at which any bound above may change, sorted.
    fn breakpoints(&self, line: &SpreadLine, spans: &[InFlight]) -> Vec<u64> {
        let mut points = Vec::new();
        let mut event = |partition: usize, s: usize| {
            let (lo, hi) = self.instants.of(partition, s - 1);
            points.push(lo);
            points.push(hi.saturating_add(1));
        };
        for (&partition, timeline) in &line.taken {
            for &(s, _) in timeline {
                event(partition, s);
            }
        }
        for &(s, _) in &line.snapshots {
            event(line.partition, s);
        }
        for span in spans {
            points.push(span.from);
            points.push(span.until.saturating_add(1));
        }
        points.sort_unstable();
        points.dedup();
        points
    }

    /// `from` and every breakpoint within `(from, until]`.
    fn within(points: &[u64], from: u64, until: u64) -> impl Iterator<Item = u64> + '_ {
        std::iter::once(from).chain(
            points
                .iter()
                .copied()
                .skip_while(move |&t| t <= from)
                .take_while(move |&t| t <= until),
        )
    }

    pub(crate) fn check_pools(&self, violations: &mut Vec<String>) {
        let mut pools: Vec<(&String, &SpreadLine)> = self.replay.spread.iter().collect();
        pools.sort_by(|a, b| a.0.cmp(b.0));
        for (pool, line) in pools {
            let spans = self.in_flight(pool, line);
            let points = self.breakpoints(line, &spans);
            // Never oversold.
            for &t in &points {
                let (surely, _) = self.taken(line, t, None);
                let (_, total_max) = self.effective_total(line, t);
                if surely > total_max {
                    violations.push(format!(
                        "OVERSELL of spread pool {pool}: at {t} µs its holds' events have \
                         surely taken {surely} units over partitions {:?}, and its total (with \
                         what refunds wrote off) was at most {total_max}",
                        line.taken.keys().collect::<Vec<_>>()
                    ));
                    break;
                }
            }
            for &(s, snapshot) in &line.snapshots {
                self.check_snapshot(pool, line, (s, snapshot), (&spans, &points), violations);
            }
        }
    }

    /// A snapshot of the whole pool fits the holds' events at some instant of its own event,
    /// and writes off no more than the refunds without restock that may have come before.
    fn check_snapshot(
        &self,
        pool: &str,
        line: &SpreadLine,
        (s, snapshot): (usize, Snapshot),
        (spans, points): (&[InFlight], &[u64]),
        violations: &mut Vec<String>,
    ) {
        let (lo, hi) = self.instants.of(line.partition, s - 1);
        if lo > hi {
            return; // no instant fits the event: a violation already
        }
        let event = &self.history.feed[line.partition][s - 1];
        let committed = snapshot.effective_total - snapshot.available;
        let mut seen = Vec::new();
        let fits = Self::within(points, lo, hi).any(|t| {
            let (surely, possibly) = self.taken(line, t, Some((line.partition, s)));
            let flying = Self::in_flight_at(spans, t, None);
            if seen.len() < 4 {
                seen.push(format!(
                    "{t} µs: {surely}..={possibly} + {flying} in flight"
                ));
            }
            surely <= committed && committed <= possibly + flying
        });
        if !fits {
            violations.push(format!(
                "feed partition {}, event {} ({event}): spread pool {pool} has {committed} units \
                 held or sold (or written off) by this event, which no instant it may have \
                 been applied at gives (units its holds' events have taken: {})",
                line.partition,
                s - 1,
                seen.join("; ")
            ));
        }
        let written_off = snapshot.effective_total - snapshot.total;
        let may_have_left: u64 = line
            .write_offs
            .iter()
            .filter(|&&(partition, position, _)| self.instants.of(partition, position).0 <= hi)
            .map(|&(_, _, units)| units)
            .sum();
        if written_off > may_have_left {
            violations.push(format!(
                "feed partition {}, event {} ({event}): spread pool {pool}'s total is \
                 {written_off} below what its deltas add up to, but refunds without restock \
                 took out at most {may_have_left} by then",
                line.partition,
                s - 1
            ));
        }
    }

    /// A stock refusal (of op `index`, within `[from, until]` µs) saying the pool had
    /// `available`: some instant in the window may give it.
    pub(crate) fn refusal(
        &self,
        pool: &str,
        window: (u64, u64),
        available: u64,
        index: usize,
    ) -> Result<(), String> {
        self.some_instant(pool, window, Some(index), None, available)
    }

    /// A read of the whole pool within `[from, until]` µs saying it had `total` and `available`:
    /// some instant in the window may give both (the total no more than the pool's own events
    /// had set, the available what the holds' events leave of it).
    pub(crate) fn read(
        &self,
        pool: &str,
        window: (u64, u64),
        total: u64,
        available: u64,
    ) -> Result<(), String> {
        self.some_instant(pool, window, None, Some(total), available)
    }

    fn some_instant(
        &self,
        pool: &str,
        (from, until): (u64, u64),
        except: Option<usize>,
        total: Option<u64>,
        available: u64,
    ) -> Result<(), String> {
        let line = self
            .line(pool)
            .ok_or_else(|| format!("pool {pool} is not spread"))?;
        let spans = self.in_flight(pool, line);
        let points = self.breakpoints(line, &spans);
        let mut seen = Vec::new();
        let fits = Self::within(&points, from, until).any(|t| {
            let (surely, possibly) = self.taken(line, t, None);
            let (total_min, total_max) = self.effective_total(line, t);
            let flying = Self::in_flight_at(&spans, t, except);
            let most = total_max.saturating_sub(surely);
            let least = total_min.saturating_sub(possibly + flying);
            let (a, b) = self.instants.states_at(line.partition, t);
            let (_, set_max) = extremes(&line.snapshots, a, b, |s: Snapshot| s.total);
            if seen.len() < 6 {
                seen.push(format!(
                    "{t} µs: available {least}..={most}, total at most {set_max}"
                ));
            }
            least <= available && available <= most && total.is_none_or(|total| total <= set_max)
        });
        if fits {
            Ok(())
        } else {
            Err(format!(
                "no instant within the request's window gives spread pool {pool} {}{available} \
                 available (what the events allow: {})",
                total.map_or(String::new(), |total| format!("total {total} and ")),
                seen.join("; ")
            ))
        }
    }
}
