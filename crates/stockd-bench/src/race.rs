//! The team race's order: did the buyers who came first win?
//!
//! Every buyer of a team sends one hold for one slot, all at once, and the first `team_size` to
//! be decided win. The embedded engine decides requests a group at a time: its writer takes
//! what has arrived, decides it in order, and the group's answers go out together once its
//! records (if any) are synced. Two buyers who arrive within one group of each other may
//! therefore win in either order; a buyer who arrived more than a group's time before a winner
//! and still lost was passed over somewhere between the socket and the writer (accept,
//! scheduling, the HTTP workers).
//!
//! The client sees when each request went: not before it began writing it, not after it had
//! written it whole (on loopback, the write puts the bytes in the server's socket). A loser was
//! surely overtaken when a winner of its team began writing after the loser's request was all
//! written; by how much is the gap between the two instants, which is never more than the gap
//! between their arrivals. Only outcomes the client knows count: a request whose answer was lost
//! is left out.
//!
//! A group's time is the load's window over the groups the writer decided meanwhile
//! (`stockd_engine_batches_total` in `/metrics`), not over the log's syncs: a refusal changes
//! nothing, so a race's groups of refusals need no sync, though they are answered only once
//! what was decided before them is durable. The counter also counts the writer's idle wake-ups
//! (one a second, up to ten with parked requests); a race keeps the writer busy, so they barely
//! shorten the mean.

use serde::Serialize;
use tokio::time::{Duration, Instant};

/// One buyer's try, as the client saw it.
#[derive(Clone, Copy, Debug)]
pub struct Entrant {
    /// The team's index among the run's pools.
    pub team: usize,
    pub began: Instant,
    pub written: Instant,
    pub won: bool,
}

/// How close to arrival order the race was decided.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RaceOrder {
    /// Buyers refused with `insufficient_stock`, whose request was all written: the buyers the
    /// order is judged for.
    pub losers: u64,
    /// Losers that a winner of their team surely arrived after.
    pub overtaken: u64,
    /// How long after an overtaken loser's request was written the latest winner of its team
    /// began writing: percentiles over the overtaken losers, 0 when there are none.
    pub overtaken_by_p50_ms: f64,
    pub overtaken_by_p99_ms: f64,
    pub overtaken_by_max_ms: f64,
    /// The server's mean time per group over the load: the load's window over the groups its
    /// writer decided meanwhile (`stockd_engine_batches_total` in `/metrics`). `None` when the
    /// server has no writer of its own (a Redis backend) or its metrics could not be read.
    pub group_commit_ms: Option<f64>,
    /// Losers overtaken by more than one group's time: the arrival order the server did not
    /// keep. `None` without `group_commit_ms`.
    pub beyond_one_commit: Option<u64>,
}

/// Judges the race's order from its entrants. `group_commit` is the server's mean time per
/// group, when known.
pub fn race_order(entrants: &[Entrant], group_commit: Option<Duration>) -> RaceOrder {
    let teams = entrants.iter().map(|e| e.team + 1).max().unwrap_or(0);
    let mut last_winner: Vec<Option<Instant>> = vec![None; teams];
    for entrant in entrants.iter().filter(|e| e.won) {
        let latest = &mut last_winner[entrant.team];
        *latest = Some(latest.map_or(entrant.began, |at| at.max(entrant.began)));
    }
    let mut losers = 0u64;
    let mut overtaken_by: Vec<Duration> = Vec::new();
    for loser in entrants.iter().filter(|e| !e.won) {
        losers += 1;
        if let Some(winner) = last_winner[loser.team] {
            if winner > loser.written {
                overtaken_by.push(winner - loser.written);
            }
        }
    }
    overtaken_by.sort_unstable();
    let at = |quantile: f64| -> f64 {
        if overtaken_by.is_empty() {
            return 0.0;
        }
        // Nearest rank: the smallest value with at least `quantile` of them at or below it.
        let rank = ((quantile * overtaken_by.len() as f64).ceil() as usize).max(1);
        millis(overtaken_by[rank.min(overtaken_by.len()) - 1])
    };
    RaceOrder {
        losers,
        overtaken: overtaken_by.len() as u64,
        overtaken_by_p50_ms: at(0.50),
        overtaken_by_p99_ms: at(0.99),
        overtaken_by_max_ms: at(1.0),
        group_commit_ms: group_commit.map(millis),
        beyond_one_commit: group_commit
            .map(|commit| overtaken_by.iter().filter(|&&by| by > commit).count() as u64),
    }
}

fn millis(duration: Duration) -> f64 {
    duration.as_nanos() as f64 / 1e6
}

/// The mean time per group over a load `window` in which the server's writer decided `groups`
/// groups; `None` when it decided none.
pub fn group_commit(window: Duration, groups: u64) -> Option<Duration> {
    (groups > 0).then(|| window / u32::try_from(groups).unwrap_or(u32::MAX))
}

/// The value of the counter `name` in a Prometheus text exposition, if it is there.
pub fn counter(exposition: &str, name: &str) -> Option<u64> {
    exposition.lines().find_map(|line| {
        let value = line.strip_prefix(name)?.strip_prefix(' ')?;
        let value: f64 = value.split_whitespace().next()?.parse().ok()?;
        (value.is_finite() && value >= 0.0).then_some(value as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, micros: u64) -> Instant {
        start + Duration::from_micros(micros)
    }

    /// A buyer of `team` whose request was written from `began` to `written` (µs from start).
    fn entrant(start: Instant, team: usize, began: u64, written: u64, won: bool) -> Entrant {
        Entrant {
            team,
            began: at(start, began),
            written: at(start, written),
            won,
        }
    }

    #[test]
    fn a_loser_is_overtaken_only_by_a_winner_of_its_team_that_began_after_it_was_written() {
        let t = Instant::now();
        let entrants = [
            // Team 0: winners began at 100 and 4,990 µs; losers written at 50 (overtaken by
            // 4,940 µs), at 4,000 (by 990), at 4,990 (not: the winner began as it was written)
            // and at 5,100 (not: written after every winner began).
            entrant(t, 0, 100, 110, true),
            entrant(t, 0, 4_990, 5_010, true),
            entrant(t, 0, 0, 50, false),
            entrant(t, 0, 3_990, 4_000, false),
            entrant(t, 0, 4_980, 4_990, false),
            entrant(t, 0, 5_090, 5_100, false),
            // Team 1: its winner began before its loser was written, though a winner of team 0
            // began much later: other teams' winners do not overtake it.
            entrant(t, 1, 10, 20, true),
            entrant(t, 1, 15, 30, false),
        ];
        let order = race_order(&entrants, Some(Duration::from_micros(1_000)));
        assert_eq!(order.losers, 5);
        assert_eq!(order.overtaken, 2);
        assert_eq!(order.overtaken_by_p50_ms, 0.99);
        assert_eq!(order.overtaken_by_max_ms, 4.94);
        assert_eq!(order.overtaken_by_p99_ms, 4.94);
        assert_eq!(order.group_commit_ms, Some(1.0));
        // 4.94 ms is beyond one commit of 1 ms; 0.99 ms is not.
        assert_eq!(order.beyond_one_commit, Some(1));
    }

    #[test]
    fn a_race_decided_in_arrival_order_has_nobody_overtaken() {
        let t = Instant::now();
        let entrants: Vec<Entrant> = (0..40u64)
            .map(|n| entrant(t, (n % 4) as usize, n * 10, n * 10 + 5, n < 8))
            .collect();
        let order = race_order(&entrants, None);
        assert_eq!(order.losers, 32);
        assert_eq!(order.overtaken, 0);
        assert_eq!(order.overtaken_by_max_ms, 0.0);
        assert_eq!(order.group_commit_ms, None);
        assert_eq!(order.beyond_one_commit, None);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let t = Instant::now();
        // One winner at 1,000 µs; 200 losers written 1..=200 µs after the start: overtaken by
        // 999 down to 800 µs.
        let mut entrants = vec![entrant(t, 0, 1_000, 1_001, true)];
        entrants.extend((1..=200u64).map(|n| entrant(t, 0, 0, n, false)));
        let order = race_order(&entrants, Some(Duration::from_micros(900)));
        assert_eq!(order.overtaken, 200);
        assert_eq!(order.overtaken_by_max_ms, 0.999);
        // Rank 100 of 200 ascending (800..=999 µs) is 899 µs; rank 198 is 997 µs.
        assert_eq!(order.overtaken_by_p50_ms, 0.899);
        assert_eq!(order.overtaken_by_p99_ms, 0.997);
        // Overtaken by more than 900 µs: losers written at 1..=99 µs.
        assert_eq!(order.beyond_one_commit, Some(99));
    }

    #[test]
    fn a_group_takes_the_window_over_the_groups() {
        assert_eq!(
            group_commit(Duration::from_millis(1_500), 1_000),
            Some(Duration::from_micros(1_500))
        );
        assert_eq!(group_commit(Duration::from_secs(1), 0), None);
    }

    #[test]
    fn a_counter_is_read_by_its_whole_name() {
        let exposition = "# HELP stockd_engine_batches_total Batches.\n\
                          # TYPE stockd_engine_batches_total counter\n\
                          stockd_engine_batches_total_other 7\n\
                          stockd_engine_batches_total 1234\n\
                          stockd_wal_records_total 99\n";
        assert_eq!(
            counter(exposition, "stockd_engine_batches_total"),
            Some(1234)
        );
        assert_eq!(counter(exposition, "stockd_wal_records_total"), Some(99));
        assert_eq!(counter(exposition, "stockd_wal_bytes_total"), None);
        assert_eq!(counter("stockd_x 1e3\n", "stockd_x"), Some(1000));
        assert_eq!(counter("stockd_x NaN\n", "stockd_x"), None);
    }
}
