//! Snapshot jobs: when the writer starts one, where it runs, and the final snapshot at a clean
//! stop.
//!
//! The writer freezes its state between two batches, when everything it has applied is durable
//! (`State::freeze`: the holds' pages shared copy-on-write, the small rest copied) and takes the
//! retained feed as shared chunks; a thread of its own encodes and writes that, then deletes the
//! files it makes obsolete. This module must never make the writer encode its live state while
//! it serves (only at shutdown, when no request waits), never freeze a state that holds a record
//! not yet durable, never run two builds at once, and never let a build outlive the engine's
//! hold on the data directory.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use super::{LogJob, Writer};
use crate::feed::Retained;
use crate::storage::{Fs, Storage};
use stockd_core::state::snapshot::write_snapshot_of_encoded;
use stockd_core::FrozenSnapshot;

use crate::Shared;

/// Where snapshot builds run.
pub enum SnapshotRunner {
    /// On a thread of their own; the one in flight is joined before the writer ends, so that
    /// no snapshot is still being written into the directory once the engine has let go of it.
    Thread(Option<std::thread::JoinHandle<()>>),
    /// Queued for the deterministic simulation, which runs each when its seed says, between
    /// (or instead of) writer steps, on the one simulation thread.
    #[cfg(test)]
    Queued(Vec<SnapshotJob>),
}

/// One snapshot build: the state frozen when every record up to `up_to_lsn` was applied and
/// durable, and the events retained then.
pub struct SnapshotJob {
    fs: Arc<dyn Fs>,
    dir: std::path::PathBuf,
    pub(crate) up_to_lsn: u64,
    state: FrozenSnapshot,
    events: Retained,
    done_lsn: Arc<AtomicU64>,
    in_flight: Arc<AtomicBool>,
    shared: Arc<Shared>,
}

impl SnapshotJob {
    /// Encodes and writes the snapshot, deletes the files it makes obsolete, then tells the
    /// writer (`done_lsn`) so that the log forgets them. A failed snapshot loses nothing: the
    /// log still has every record.
    pub fn run(self) {
        // Clears the in-flight flag however the build ends, a panic included.
        let _in_flight = FlagGuard(self.in_flight);
        let started = Instant::now();
        let (state, events) = (self.state, self.events);
        let written =
            Storage::write_snapshot_with(&*self.fs, &self.dir, self.up_to_lsn, &mut |out| {
                write_snapshot_of_encoded(&state, events.len(), events.iter(), out)
            });
        // What the build shared with the writer goes as soon as it is written: pages the writer
        // changes from now on need not be copied.
        drop(state);
        drop(events);
        match written {
            Ok(()) => {
                let build_ms = started.elapsed().as_millis() as u64;
                let stats = &self.shared.stats;
                stats.snapshots.fetch_add(1, Relaxed);
                stats.snapshot_build_ms_last.store(build_ms, Relaxed);
                tracing::info!(lsn = self.up_to_lsn, build_ms, "snapshot written");
                // Here rather than on the writer, which must not stop for file deletions.
                let removed = Storage::remove_obsolete_files(&*self.fs, &self.dir, self.up_to_lsn);
                if let Err(error) = removed {
                    tracing::warn!(%error, "cannot remove obsolete log segments and snapshots");
                }
                self.done_lsn.store(self.up_to_lsn, Relaxed);
            }
            Err(error) => tracing::warn!(%error, "snapshot failed; will retry later"),
        }
    }
}

impl Writer {
    /// Waits for the snapshot build in flight, if any, to finish.
    pub(super) fn join_snapshot_thread(&mut self) {
        match &mut self.snapshots {
            SnapshotRunner::Thread(thread) => {
                if let Some(thread) = thread.take() {
                    let _ = thread.join();
                }
            }
            // Joining a queued build is letting it run to its end now.
            #[cfg(test)]
            SnapshotRunner::Queued(jobs) => jobs.drain(..).for_each(SnapshotJob::run),
        }
    }

    /// Starts building a snapshot of everything applied so far, which must all be durable, on
    /// the snapshot thread. The writer only freezes its state (`State::freeze`: reference
    /// counts for the holds' pages, a copy of the pools and locks) and takes the retained feed
    /// as shared chunks: it never stops to encode, so a snapshot of millions of holds costs
    /// requests no pause, and the build costs memory only for the pages the writer changes
    /// while it runs.
    pub(super) fn start_snapshot(&mut self) {
        let applied_lsn = self.next_lsn - 1;
        if self.shared.failure().is_some()
            || self.shared.durable_lsn.load(Relaxed) != applied_lsn
            || self.snapshot_in_flight.swap(true, Relaxed)
        {
            return;
        }
        self.records_since_snapshot = 0;
        let frozen_at = Instant::now();
        let job = SnapshotJob {
            fs: self.log.storage.fs().clone(),
            dir: self.config.data_dir.clone(),
            up_to_lsn: applied_lsn,
            state: self.state.freeze(),
            events: self.shared.feed.retained(),
            done_lsn: self.snapshot_done_lsn.clone(),
            in_flight: self.snapshot_in_flight.clone(),
            shared: self.shared.clone(),
        };
        tracing::debug!(
            lsn = applied_lsn,
            freeze_us = frozen_at.elapsed().as_micros() as u64,
            "snapshot state frozen"
        );
        // A finished thread is joined here; at most one runs (`snapshot_in_flight`).
        self.join_snapshot_thread();
        match &mut self.snapshots {
            SnapshotRunner::Thread(thread) => {
                let spawned = std::thread::Builder::new()
                    .name("stockd-snapshot".into())
                    .spawn(move || job.run());
                match spawned {
                    Ok(spawned) => *thread = Some(spawned),
                    Err(error) => {
                        tracing::warn!(%error, "cannot start the snapshot thread");
                        self.snapshot_in_flight.store(false, Relaxed);
                    }
                }
            }
            #[cfg(test)]
            SnapshotRunner::Queued(jobs) => jobs.push(job),
        }
    }

    /// At shutdown: a snapshot of everything so the next start replays nothing.
    pub(super) fn write_snapshot_now(&mut self) {
        // Wait for a snapshot still being written, so the two never race on the files.
        self.join_snapshot_thread();
        if self.records_since_snapshot == 0 || self.shared.failure().is_some() {
            return;
        }
        // Stopping anyway: encoding the live state here costs no request a pause.
        let lsn = self.next_lsn - 1;
        let retained = self.shared.feed.retained();
        let state = self.state.freeze();
        let fs = self.log.storage.fs().clone();
        let written = Storage::write_snapshot_with(&*fs, &self.config.data_dir, lsn, &mut |out| {
            write_snapshot_of_encoded(&state, retained.len(), retained.iter(), out)
        });
        match written {
            Ok(()) => {
                self.shared.stats.snapshots.fetch_add(1, Relaxed);
                self.log
                    .process(LogJob::RemoveObsolete { snapshot_lsn: lsn });
            }
            Err(error) => tracing::warn!(%error, "final snapshot failed; the log has everything"),
        }
    }
}

/// What the deterministic simulation (`crate::sim`) drives; test builds only.
#[cfg(test)]
impl Writer {
    /// From now on snapshot builds wait in a queue for the simulation to run them.
    pub(crate) fn queue_snapshots(&mut self) {
        self.snapshots = SnapshotRunner::Queued(Vec::new());
    }

    pub(crate) fn take_snapshot_job(&mut self) -> Option<SnapshotJob> {
        match &mut self.snapshots {
            SnapshotRunner::Queued(jobs) => jobs.pop(),
            SnapshotRunner::Thread(_) => None,
        }
    }

    pub(crate) fn has_snapshot_job(&self) -> bool {
        matches!(&self.snapshots, SnapshotRunner::Queued(jobs) if !jobs.is_empty())
    }
}

/// Clears an atomic flag when dropped.
struct FlagGuard(Arc<AtomicBool>);

impl Drop for FlagGuard {
    fn drop(&mut self) {
        self.0.store(false, Relaxed);
    }
}
