//! Recovery: the state and the retained feed rebuilt from the newest snapshot and the log
//! after it, at start.
//!
//! It replays the logged records through the core's `apply_record`, the very path that
//! applied them live, so a restarted engine reaches the state it had. This module must never
//! decide anything a record does not say, nor write to the log beyond the torn tail
//! `Storage::open` cuts off.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use stockd_core::state::snapshot::{decode_snapshot_encoded, SnapshotError};
use stockd_core::{State, StateConfig};

use crate::clock::Clock;
use crate::feed::Window;
use crate::storage::{self, Fs, Storage, StorageConfig};
use crate::{frame_codec, writer, EngineConfig, EngineError, Shared};

/// Opens the data directory on `fs`, recovers snapshot + log (the same code whether the disk
/// is real or simulated), and returns the writer ready to serve, not yet running on a thread.
pub(crate) fn recover(
    config: EngineConfig,
    clock: Arc<dyn Clock>,
    fs: Arc<dyn Fs>,
) -> Result<writer::Writer, EngineError> {
    let started = std::time::Instant::now();
    let (storage, mut recovered) = Storage::open(StorageConfig {
        fs,
        dir: config.data_dir.clone(),
        segment_bytes_max: config.segment_bytes_max,
    })?;
    if recovered.truncated_tail_bytes > 0 {
        tracing::warn!(
            bytes = recovered.truncated_tail_bytes,
            "cut a torn tail off the write-ahead log (a write that was never acknowledged)"
        );
    }
    let read_ms = started.elapsed().as_millis() as u64;
    let shared = Arc::new(Shared::new(config.event_retention_max));
    let Rebuilt {
        state,
        events,
        replayed,
        counts_checked,
    } = rebuild(
        recovered.snapshot.take(),
        &recovered.records,
        config.state,
        config.event_retention_max,
    )?;
    drop(recovered.records);
    let rebuilt_ms = started.elapsed().as_millis() as u64;
    shared.feed.restore(events);
    let fed_ms = started.elapsed().as_millis() as u64;
    match counts_checked {
        true => state.check_loaded_indexes(),
        false => state.check_loaded(),
    }
    .map_err(EngineError::Invariant)?;
    let checked_ms = started.elapsed().as_millis() as u64;
    shared.feed.mark_durable(state.next_seq() - 1);
    shared
        .stats
        .recovered_records
        .store(replayed, Ordering::Relaxed);
    tracing::info!(
        pools = state.pool_count(),
        holds = state.hold_count(),
        replayed_records = replayed,
        snapshot_lsn = recovered.snapshot_lsn,
        read_ms,
        rebuild_ms = rebuilt_ms - read_ms,
        feed_ms = fed_ms - rebuilt_ms,
        check_ms = checked_ms - fed_ms,
        "recovered"
    );

    shared
        .durable_lsn
        .store(storage.last_lsn(), Ordering::Relaxed);
    let next_lsn = storage.last_lsn() + 1;
    let log = writer::Log::new(storage, shared.clone());
    Ok(writer::Writer::new(
        state, config, clock, shared, log, next_lsn, replayed,
    ))
}

/// What a server restarted on `dir` would hold on the heap, structure by structure, estimated
/// from the state and the feed rebuilt from the newest snapshot alone (the log after it is not
/// replayed: after a clean stop there is none). Reads, and changes nothing; for sizing
/// (`stockd bench memory`), on a directory no server is using.
pub fn memory_estimate(
    dir: &std::path::Path,
    config: StateConfig,
    event_retention_max: usize,
) -> Result<Vec<(&'static str, usize)>, EngineError> {
    let recovered = storage::read_newest_snapshot(&crate::storage::RealFs, dir)?;
    let rebuilt = rebuild(recovered.snapshot, &[], config, event_retention_max)?;
    let mut estimate = rebuilt.state.memory_estimate();
    estimate.push(("retained events (encoded)", rebuilt.events.heap_bytes()));
    Ok(estimate)
}

/// Rebuilds the state and the retained feed from a snapshot and the log records after it, by
/// replaying the records through the same `apply_record` that applied them live. The
/// snapshot's bytes (mapped, at ten million holds most of a gigabyte) go once decoded,
/// before the indexes are built.
fn rebuild(
    snapshot: Option<storage::SnapshotPayload>,
    records: &[(u64, Vec<u8>)],
    config: StateConfig,
    event_retention_max: usize,
) -> Result<Rebuilt, EngineError> {
    // The snapshot's events go into the window as the payload has them, encoded: never an
    // `Event` each.
    let mut events = Window::new();
    let retention = event_retention_max.max(1);
    let mut counts_checked = false;
    let mut state = match snapshot {
        Some(bytes) => {
            let (snapshot, snapshot_events) =
                decode_snapshot_encoded(&bytes).map_err(|error| match error {
                    SnapshotError::Decode(source) => EngineError::Decode {
                        what: "snapshot",
                        source,
                    },
                    SnapshotError::Format { found } => EngineError::SnapshotFormat { found },
                })?;
            for event in snapshot_events
                .iter()
                .skip(snapshot_events.len().saturating_sub(retention))
            {
                events.push_encoded(event);
            }
            drop(snapshot_events);
            drop(bytes);
            let decoded = std::time::Instant::now();
            let state = if records.is_empty() {
                // Nothing to replay: the data decoded is the state that will serve, so its
                // counts are checked on a second thread while this one builds the indexes,
                // rather than after (a sixth of a ten-million-hold restart).
                let (indexes, counts) = std::thread::scope(|scope| {
                    let counts = scope.spawn(|| snapshot.check_counts());
                    let indexes = snapshot.indexes(&config);
                    (indexes, counts.join())
                });
                let counts = counts.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                counts.map_err(EngineError::Invariant)?;
                counts_checked = true;
                State::from_snapshot_and_indexes(config, snapshot, indexes)
            } else {
                State::from_snapshot(config, snapshot)
            };
            tracing::debug!(
                index_ms = decoded.elapsed().as_millis() as u64,
                counts_checked,
                "snapshot decoded and indexed"
            );
            state
        }
        None => State::new(config),
    };
    let mut new_events = Vec::new();
    let mut replayed = 0u64;
    let mut last_at_ms = None;
    for (_lsn, payload) in records {
        let records = frame_codec::decode_frame(payload).map_err(|source| EngineError::Decode {
            what: "log record",
            source,
        })?;
        for record in &records {
            state.apply_record(record, &mut new_events);
        }
        last_at_ms = records.last().map(|r| r.at_ms).or(last_at_ms);
        replayed += records.len() as u64;
        for event in new_events.drain(..) {
            events.push(&event);
        }
        events.trim(retention);
    }
    // Forgetting finished holds past retention writes no record, so replay alone would keep
    // every hold ever made; forget them as the live engine did, as of the last record's time.
    if let Some(at_ms) = last_at_ms {
        state.forget_past_retention(at_ms);
    }
    Ok(Rebuilt {
        state,
        events,
        replayed,
        counts_checked,
    })
}

/// What [`rebuild`] made.
struct Rebuilt {
    state: State,
    /// The retained feed.
    events: Window,
    /// Log records replayed after the snapshot.
    replayed: u64,
    /// Whether the data's counts were checked already ([`stockd_core::Snapshot::check_counts`]), which
    /// [`State::check_loaded`] would check again.
    counts_checked: bool,
}

#[cfg(test)]
mod tests {
    use stockd_core::{Command, HoldId, HoldItem, PoolId, PoolSpec, ReserveRequest};

    use super::*;
    use crate::storage::RealFs;
    use crate::{Engine, ManualClock};

    const T0: u64 = 1_700_000_000_000;

    /// Puts pool "p" with `total` units.
    fn put_pool(total: u64) -> Command {
        Command::PutPool {
            pool: PoolId::parse("p").unwrap(),
            spec: PoolSpec {
                total,
                ..PoolSpec::default()
            },
            segments: None,
            if_absent: false,
        }
    }

    fn reserve(n: usize) -> Command {
        Command::Reserve(ReserveRequest {
            hold_id: HoldId::parse(&format!("h{n}")).unwrap(),
            user: None,
            items: vec![HoldItem {
                pool: PoolId::parse("p").unwrap(),
                qty: 1,
            }]
            .into(),
            ttl_ms: 60_000,
            confirm: false,
            wait_ms: 0,
        })
    }

    /// Holds in the newest snapshot on disk.
    fn snapshot_holds(dir: &std::path::Path, config: StateConfig) -> usize {
        let recovered = storage::read_newest_snapshot(&RealFs, dir).unwrap();
        let rebuilt = rebuild(recovered.snapshot, &[], config, 1000).unwrap();
        rebuilt.state.hold_count()
    }

    #[test]
    fn a_snapshot_of_another_format_is_refused_not_misread() {
        let untagged = postcard::to_allocvec(&(
            stockd_core::State::new(StateConfig::default()).snapshot(),
            Vec::<stockd_core::Event>::new(),
        ))
        .unwrap();
        let rebuilt = rebuild(Some(untagged.into()), &[], StateConfig::default(), 10);
        assert!(matches!(rebuilt, Err(EngineError::SnapshotFormat { .. })));
        let state = stockd_core::State::new(StateConfig::default());
        let tagged = stockd_core::state::snapshot::encode_snapshot(&state, std::iter::empty());
        assert!(rebuild(Some(tagged.into()), &[], StateConfig::default(), 10).is_ok());
    }

    /// A snapshot whose pool counts do not add up is refused, not served, though its counts
    /// are checked beside the index build rather than after it when no log follows it.
    #[test]
    fn a_snapshot_whose_counts_do_not_add_up_is_refused() {
        let config = StateConfig::default();
        let mut state = State::new(config);
        let mut effects = stockd_core::Effects::default();
        state.execute(put_pool(10), T0, &mut effects);
        state.execute(reserve(1), T0, &mut effects);
        let encode = |snapshot: stockd_core::Snapshot| {
            let state = State::from_snapshot(config, snapshot);
            stockd_core::state::snapshot::encode_snapshot(&state, std::iter::empty())
        };
        let sound = encode(state.snapshot().clone());
        let rebuilt = rebuild(Some(sound.into()), &[], config, 10).unwrap();
        assert!(rebuilt.counts_checked);
        assert_eq!(rebuilt.state.hold_count(), 1);
        let mut json = serde_json::to_value(state.snapshot()).unwrap();
        json["pools"]["p"]["held"] = 2.into();
        json["pools"]["p"]["available"] = 8.into();
        let broken = encode(serde_json::from_value(json).unwrap());
        let rebuilt = rebuild(Some(broken.into()), &[], config, 10);
        assert!(
            matches!(&rebuilt, Err(EngineError::Invariant(reason)) if reason.contains("held 2")),
            "{:?}",
            rebuilt.err()
        );
    }

    #[tokio::test]
    async fn snapshots_built_by_replay_forget_holds_past_retention() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let mut config = EngineConfig::new(dir.path());
        config.state.hold_retention_ms = 1_000;
        config.snapshot_every_records = 100;
        let engine = Engine::open(config.clone(), clock.clone()).unwrap();
        engine.execute(vec![put_pool(1_000)]).await.unwrap();
        for n in 0..150 {
            let release = Command::Release {
                hold_id: HoldId::parse(&format!("h{n}")).unwrap(),
            };
            engine.execute(vec![reserve(n), release]).await.unwrap();
        }
        // Past retention, more traffic: the next snapshot must not carry the 150 finished holds.
        clock.advance(5_000);
        let snapshots = |engine: &Engine| {
            engine
                .stats()
                .counters
                .iter()
                .find(|(name, _)| *name == "snapshots_total")
                .map_or(0, |(_, value)| *value)
        };
        let before = snapshots(&engine);
        let mut n = 1_000;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // Two more builds: a build already running when the clock moved may finish first, and
        // it only saw records from before; the next one starts after it, with newer records.
        while snapshots(&engine) < before + 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "no snapshot was built"
            );
            engine.execute(vec![reserve(n)]).await.unwrap();
            n += 1;
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        // Dropped, not shut down: no final snapshot, so the newest one is the built one.
        drop(engine);
        let held = n - 1_000;
        assert!(
            snapshot_holds(dir.path(), config.state) <= held,
            "finished holds past retention leaked into the snapshot"
        );
    }
}
