//! Counters the engine keeps for `/metrics`: hold transitions by outcome, expiry lag, and the
//! write-ahead log's work. Plain atomics, written by the engine threads and read at scrape time;
//! nothing here may block the writer or the log stage.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use stockd_core::{BackendStats, Event, EventKind, HistogramStats};

/// Upper bounds (ms) of the expiry-lag histogram buckets.
pub const EXPIRY_LAG_BUCKETS_MS: [u64; 10] = [1, 5, 10, 50, 100, 250, 500, 1000, 2500, 5000];

/// A Prometheus histogram of plain atomics, recorded in an integer unit (ms, ns): observing is
/// three relaxed additions, with no lock and no allocation, so the writer and the log stage
/// never wait for a scrape.
///
/// Its count is the sum of its buckets, not a counter of its own: a reading is always
/// consistent (cumulative buckets never exceed `+Inf`, which is the count), whatever is being
/// observed meanwhile. Only the sum can be one observation ahead or behind.
pub struct Histogram<const N: usize> {
    /// Ascending; an observation goes in the first bucket whose bound it does not exceed
    /// (Prometheus's `le`).
    upper_bounds: [u64; N],
    /// Observations per bucket (not cumulative).
    counts: [AtomicU64; N],
    /// Observations above the last bound: only in `+Inf`.
    above: AtomicU64,
    sum: AtomicU64,
}

impl<const N: usize> Histogram<N> {
    pub fn new(upper_bounds: [u64; N]) -> Self {
        assert!(
            upper_bounds.windows(2).all(|pair| pair[0] < pair[1]),
            "histogram bounds must ascend"
        );
        Histogram {
            upper_bounds,
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            above: AtomicU64::new(0),
            sum: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, value: u64) {
        self.sum.fetch_add(value, Relaxed);
        let bucket = self.upper_bounds.partition_point(|&bound| bound < value);
        self.counts
            .get(bucket)
            .unwrap_or(&self.above)
            .fetch_add(1, Relaxed);
    }

    /// The histogram now, named `name`, its bounds and sum divided by `recorded_per_shown`
    /// into the unit the name ends with (1e9 ns per second). Divided, not multiplied by the
    /// inverse, so that a bound of 1,000,000 ns shows as exactly `0.001`.
    pub fn read(&self, name: &'static str, recorded_per_shown: f64) -> HistogramStats {
        let mut cumulative = 0;
        let buckets = self
            .upper_bounds
            .iter()
            .zip(&self.counts)
            .map(|(&bound, count)| {
                cumulative += count.load(Relaxed);
                (bound as f64 / recorded_per_shown, cumulative)
            })
            .collect();
        HistogramStats {
            name,
            buckets,
            sum: self.sum.load(Relaxed) as f64 / recorded_per_shown,
            count: cumulative + self.above.load(Relaxed),
        }
    }
}

pub struct Stats {
    pub held: AtomicU64,
    pub confirmed: AtomicU64,
    pub released: AtomicU64,
    pub expired: AtomicU64,
    pub refunded: AtomicU64,
    expiry_lag_ms: Histogram<{ EXPIRY_LAG_BUCKETS_MS.len() }>,
    pub wal_syncs: AtomicU64,
    pub wal_records: AtomicU64,
    pub wal_bytes: AtomicU64,
    pub snapshots: AtomicU64,
    /// How long the snapshot thread took to build and write the last snapshot (the writer
    /// does not wait for it).
    pub snapshot_build_ms_last: AtomicU64,
    pub batches: AtomicU64,
    pub commands: AtomicU64,
    pub pools: AtomicU64,
    pub holds: AtomicU64,
    pub waiters: AtomicU64,
    pub events_retained: AtomicU64,
    pub recovered_records: AtomicU64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            held: AtomicU64::new(0),
            confirmed: AtomicU64::new(0),
            released: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            refunded: AtomicU64::new(0),
            expiry_lag_ms: Histogram::new(EXPIRY_LAG_BUCKETS_MS),
            wal_syncs: AtomicU64::new(0),
            wal_records: AtomicU64::new(0),
            wal_bytes: AtomicU64::new(0),
            snapshots: AtomicU64::new(0),
            snapshot_build_ms_last: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            pools: AtomicU64::new(0),
            holds: AtomicU64::new(0),
            waiters: AtomicU64::new(0),
            events_retained: AtomicU64::new(0),
            recovered_records: AtomicU64::new(0),
        }
    }
}

impl Stats {
    /// Counts what the events of one batch say happened.
    pub fn observe_events(&self, events: &[Event]) {
        for event in events {
            let counter = match event.kind {
                EventKind::Held => &self.held,
                EventKind::Confirmed => &self.confirmed,
                EventKind::Released => &self.released,
                EventKind::Refunded => &self.refunded,
                EventKind::Expired => {
                    let lag_ms = event
                        .expires_at_ms
                        .map_or(0, |deadline| event.at_ms.saturating_sub(deadline));
                    self.expiry_lag_ms.observe(lag_ms);
                    &self.expired
                }
                _ => continue,
            };
            counter.fetch_add(1, Relaxed);
        }
    }

    pub fn to_backend_stats(&self) -> BackendStats {
        BackendStats {
            hold_transitions: vec![
                ("held", self.held.load(Relaxed)),
                ("confirmed", self.confirmed.load(Relaxed)),
                ("released", self.released.load(Relaxed)),
                ("expired", self.expired.load(Relaxed)),
                ("refunded", self.refunded.load(Relaxed)),
            ],
            histograms: vec![self.expiry_lag_ms.read("expiry_lag_ms", 1.0)],
            gauges: vec![
                ("pools", self.pools.load(Relaxed) as f64),
                ("holds", self.holds.load(Relaxed) as f64),
                ("waiters", self.waiters.load(Relaxed) as f64),
                ("events_retained", self.events_retained.load(Relaxed) as f64),
                (
                    "snapshot_build_ms_last",
                    self.snapshot_build_ms_last.load(Relaxed) as f64,
                ),
            ],
            counters: vec![
                ("wal_syncs_total", self.wal_syncs.load(Relaxed)),
                ("wal_records_total", self.wal_records.load(Relaxed)),
                ("wal_bytes_total", self.wal_bytes.load(Relaxed)),
                ("snapshots_total", self.snapshots.load(Relaxed)),
                ("engine_batches_total", self.batches.load(Relaxed)),
                ("engine_commands_total", self.commands.load(Relaxed)),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(stats: &BackendStats, name: &str) -> HistogramStats {
        stats
            .histograms
            .iter()
            .find(|histogram| histogram.name == name)
            .unwrap_or_else(|| panic!("no histogram {name}"))
            .clone()
    }

    /// The cumulative count at each bound, after observing `values` alone.
    fn cumulative_after<const N: usize>(bounds: [u64; N], values: &[u64]) -> (Vec<u64>, u64) {
        let histogram = Histogram::new(bounds);
        for &value in values {
            histogram.observe(value);
        }
        let read = histogram.read("h", 1.0);
        let counts = read.buckets.iter().map(|&(_, count)| count).collect();
        (counts, read.count)
    }

    #[test]
    fn an_expiry_lag_lands_in_the_first_bucket_whose_bound_it_does_not_exceed() {
        let (cumulative, count) = cumulative_after(EXPIRY_LAG_BUCKETS_MS, &[0, 1, 2, 5000, 5001]);
        assert_eq!(cumulative, [2, 3, 3, 3, 3, 3, 3, 3, 3, 4]);
        assert_eq!(count, 5);
    }

    #[test]
    fn each_expiry_is_observed_with_its_lag() {
        let stats = Stats::default();
        let expired = |at_ms, expires_at_ms| Event {
            expires_at_ms,
            ..Event::new(1, at_ms, EventKind::Expired)
        };
        stats.observe_events(&[expired(1_010, Some(1_000)), expired(1_000, None)]);
        let read = stats.to_backend_stats();
        let lag = histogram(&read, "expiry_lag_ms");
        assert_eq!(lag.count, 2);
        assert_eq!(lag.sum, 10.0);
        assert_eq!(&lag.buckets[..3], [(1.0, 1), (5.0, 1), (10.0, 2)]);
        assert!(read.hold_transitions.contains(&("expired", 2)));
    }
}
