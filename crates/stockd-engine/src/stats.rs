//! Counters the engine keeps for `/metrics`: hold transitions by outcome, expiry lag, and the
//! write-ahead log's work. Plain atomics, written by the engine threads and read at scrape time;
//! nothing here may block the writer.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use stockd_core::{BackendStats, Event, EventKind};

/// Upper bounds (ms) of the expiry-lag histogram buckets.
pub const EXPIRY_LAG_BUCKETS_MS: [f64; 10] = [
    1.0, 5.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
];

#[derive(Default)]
pub struct Stats {
    pub held: AtomicU64,
    pub confirmed: AtomicU64,
    pub released: AtomicU64,
    pub expired: AtomicU64,
    pub refunded: AtomicU64,
    expiry_lag_buckets: [AtomicU64; EXPIRY_LAG_BUCKETS_MS.len()],
    expiry_lag_sum_ms: AtomicU64,
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
                    self.expiry_lag_sum_ms.fetch_add(lag_ms, Relaxed);
                    let bucket = EXPIRY_LAG_BUCKETS_MS
                        .iter()
                        .position(|&bound| lag_ms as f64 <= bound)
                        .unwrap_or(EXPIRY_LAG_BUCKETS_MS.len());
                    if let Some(b) = self.expiry_lag_buckets.get(bucket) {
                        b.fetch_add(1, Relaxed);
                    }
                    &self.expired
                }
                _ => continue,
            };
            counter.fetch_add(1, Relaxed);
        }
    }

    pub fn to_backend_stats(&self) -> BackendStats {
        let expired = self.expired.load(Relaxed);
        let mut cumulative = 0;
        let expiry_lag_ms_buckets = EXPIRY_LAG_BUCKETS_MS
            .iter()
            .zip(&self.expiry_lag_buckets)
            .map(|(&bound, count)| {
                cumulative += count.load(Relaxed);
                (bound, cumulative)
            })
            .collect();
        BackendStats {
            hold_transitions: vec![
                ("held", self.held.load(Relaxed)),
                ("confirmed", self.confirmed.load(Relaxed)),
                ("released", self.released.load(Relaxed)),
                ("expired", expired),
                ("refunded", self.refunded.load(Relaxed)),
            ],
            expiry_lag_ms_buckets,
            expiry_lag_ms_sum: self.expiry_lag_sum_ms.load(Relaxed) as f64,
            expiry_lag_count: expired,
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
