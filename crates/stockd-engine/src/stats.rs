//! Counters the engine keeps for `/metrics`: hold transitions by outcome, expiry lag, the
//! write-ahead log's work and how long its fsyncs take. Plain atomics, written by the engine
//! threads and read at scrape time; nothing here may block the writer or the log stage.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use stockd_core::{BackendStats, Event, EventKind, HistogramStats};

/// Upper bounds (ms) of the expiry-lag histogram buckets.
pub const EXPIRY_LAG_BUCKETS_MS: [u64; 10] = [1, 5, 10, 50, 100, 250, 500, 1000, 2500, 5000];

/// Upper bounds (ns) of the log fsync histogram: 1 ms doubling to 8.192 s, the buckets of etcd's
/// `wal_fsync_duration_seconds` (`ExponentialBuckets(0.001, 2, 14)`), so that dashboards and
/// alerts written for etcd read ours alike. A healthy small `fdatasync` takes about 1 ms on the
/// disks we run on (less on NVMe with power-loss protection): a healthy log fills the first two
/// buckets, and its median is read coarsely. The histogram is for the tail: doubling keeps the
/// relative error of a quantile the same from 2 ms to seconds, so a stall of 20 ms and one of
/// 2 s both read for what they are, in 15 series; past 8 s the disk has stopped, and `+Inf`
/// says enough.
pub const WAL_FSYNC_BUCKETS_NS: [u64; 14] = [
    1_000_000,
    2_000_000,
    4_000_000,
    8_000_000,
    16_000_000,
    32_000_000,
    64_000_000,
    128_000_000,
    256_000_000,
    512_000_000,
    1_024_000_000,
    2_048_000_000,
    4_096_000_000,
    8_192_000_000,
];

const NANOS_PER_SECOND: f64 = 1e9;

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
    /// Every fdatasync of a log frame, in ns. Its count is `wal_syncs_total`: there is no
    /// separate counter that could drift from it.
    wal_fsync_ns: Histogram<{ WAL_FSYNC_BUCKETS_NS.len() }>,
    pub wal_records: AtomicU64,
    pub wal_bytes: AtomicU64,
    pub snapshots: AtomicU64,
    /// How long the snapshot thread took to build and write the last snapshot (the writer
    /// does not wait for it).
    pub snapshot_build_ms_last: AtomicU64,
    /// Set while a snapshot is being built (the writer's flag: at most one build at a time).
    pub snapshot_in_flight: Arc<AtomicBool>,
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
            wal_fsync_ns: Histogram::new(WAL_FSYNC_BUCKETS_NS),
            wal_records: AtomicU64::new(0),
            wal_bytes: AtomicU64::new(0),
            snapshots: AtomicU64::new(0),
            snapshot_build_ms_last: AtomicU64::new(0),
            snapshot_in_flight: Arc::new(AtomicBool::new(false)),
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

    /// Counts one fdatasync of a log frame that succeeded, and how long it took: the one place
    /// `wal_syncs_total` grows.
    pub fn observe_wal_fsync(&self, took: Duration) {
        let took_ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.wal_fsync_ns.observe(took_ns);
    }

    pub fn to_backend_stats(&self) -> BackendStats {
        let wal_fsync = self
            .wal_fsync_ns
            .read("wal_fsync_duration_seconds", NANOS_PER_SECOND);
        let wal_syncs = wal_fsync.count;
        BackendStats {
            hold_transitions: vec![
                ("held", self.held.load(Relaxed)),
                ("confirmed", self.confirmed.load(Relaxed)),
                ("released", self.released.load(Relaxed)),
                ("expired", self.expired.load(Relaxed)),
                ("refunded", self.refunded.load(Relaxed)),
            ],
            histograms: vec![self.expiry_lag_ms.read("expiry_lag_ms", 1.0), wal_fsync],
            gauges: vec![
                ("pools", self.pools.load(Relaxed) as f64),
                ("holds", self.holds.load(Relaxed) as f64),
                ("waiters", self.waiters.load(Relaxed) as f64),
                ("events_retained", self.events_retained.load(Relaxed) as f64),
                (
                    "snapshot_build_ms_last",
                    self.snapshot_build_ms_last.load(Relaxed) as f64,
                ),
                (
                    "snapshot_in_progress",
                    f64::from(u8::from(self.snapshot_in_flight.load(Relaxed))),
                ),
            ],
            counters: vec![
                ("wal_syncs_total", wal_syncs),
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

    fn counter(stats: &BackendStats, name: &str) -> u64 {
        stats
            .counters
            .iter()
            .find(|(counter, _)| *counter == name)
            .unwrap_or_else(|| panic!("no counter {name}"))
            .1
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
    fn the_fsync_buckets_are_etcds_one_millisecond_doubling_to_8_192_seconds() {
        let bounds: Vec<f64> = Stats::default()
            .to_backend_stats()
            .histograms
            .into_iter()
            .find(|histogram| histogram.name == "wal_fsync_duration_seconds")
            .unwrap()
            .buckets
            .into_iter()
            .map(|(bound, _)| bound)
            .collect();
        assert_eq!(
            bounds,
            [
                0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048,
                4.096, 8.192
            ]
        );
    }

    #[test]
    fn an_fsync_lands_in_the_first_bucket_whose_bound_it_does_not_exceed() {
        let one_ms = 1_000_000;
        let last = WAL_FSYNC_BUCKETS_NS[WAL_FSYNC_BUCKETS_NS.len() - 1];
        let edges = [
            // value in ns, index of the first bucket that counts it (14: only +Inf)
            (0, 0),
            (one_ms, 0),
            (one_ms + 1, 1),
            (2 * one_ms, 1),
            (2 * one_ms + 1, 2),
            (last - 1, 13),
            (last, 13),
            (last + 1, 14),
            (u64::MAX, 14),
        ];
        for (value, first) in edges {
            let (cumulative, count) = cumulative_after(WAL_FSYNC_BUCKETS_NS, &[value]);
            let expected: Vec<u64> = (0..WAL_FSYNC_BUCKETS_NS.len())
                .map(|bucket| u64::from(bucket >= first))
                .collect();
            assert_eq!(cumulative, expected, "{value} ns");
            assert_eq!(count, 1, "{value} ns");
        }
    }

    #[test]
    fn an_expiry_lag_lands_in_the_first_bucket_whose_bound_it_does_not_exceed() {
        let (cumulative, count) = cumulative_after(EXPIRY_LAG_BUCKETS_MS, &[0, 1, 2, 5000, 5001]);
        assert_eq!(cumulative, [2, 3, 3, 3, 3, 3, 3, 3, 3, 4]);
        assert_eq!(count, 5);
    }

    #[test]
    fn fsyncs_are_counted_by_the_histogram_that_times_them() {
        let stats = Stats::default();
        for took_us in [900, 1_000, 1_500, 40_000, 9_000_000] {
            stats.observe_wal_fsync(Duration::from_micros(took_us));
        }
        let read = stats.to_backend_stats();
        let fsync = histogram(&read, "wal_fsync_duration_seconds");
        assert_eq!(counter(&read, "wal_syncs_total"), 5);
        assert_eq!(fsync.count, 5);
        assert!((fsync.sum - 9.0434).abs() < 1e-9, "{}", fsync.sum);
        let cumulative: Vec<u64> = fsync.buckets.iter().map(|&(_, count)| count).collect();
        // 0.9 and 1 ms in the first bucket, 1.5 ms in the second, 40 ms in le=0.064, 9 s in
        // +Inf only.
        assert_eq!(cumulative, [2, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4]);
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
