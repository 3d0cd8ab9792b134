//! Snapshot jobs: when the writer starts one, where it runs, and the final snapshot at a clean
//! stop.
//!
//! A job rolls the newest snapshot on disk forward through the durable log (the same replay
//! recovery does) on a thread of its own, then deletes the files it makes obsolete. The writer
//! hands over only an lsn. This module must never make the writer encode its live state while
//! it serves (only at shutdown, when no request waits), never run two builds at once, and never
//! let a build outlive the engine's hold on the data directory.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use super::{LogJob, Writer};
use crate::storage::{Fs, Storage};
use stockd_core::state::snapshot::encode_snapshot_of_encoded;

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

/// One snapshot build: everything durable up to `up_to_lsn`, rolled forward from the newest
/// snapshot on disk through the log (the same replay recovery does).
pub struct SnapshotJob {
    fs: Arc<dyn Fs>,
    dir: std::path::PathBuf,
    pub(crate) up_to_lsn: u64,
    state_config: stockd_core::StateConfig,
    event_retention_max: usize,
    done_lsn: Arc<AtomicU64>,
    in_flight: Arc<AtomicBool>,
    shared: Arc<Shared>,
}

impl SnapshotJob {
    /// Builds and writes the snapshot, deletes the files it makes obsolete, then tells the writer
    /// (`done_lsn`) so that the log forgets them. A failed snapshot loses nothing: the log still
    /// has every record.
    pub fn run(self) {
        // Clears the in-flight flag however the build ends, a panic included.
        let _in_flight = FlagGuard(self.in_flight);
        let started = Instant::now();
        let built = crate::recovery::build_snapshot(
            &*self.fs,
            &self.dir,
            self.up_to_lsn,
            self.state_config,
            self.event_retention_max,
        );
        match built {
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

    /// Starts building a snapshot of everything durable so far on the snapshot thread, which
    /// rolls the newest snapshot on disk forward through the log (the same replay recovery
    /// does). The writer hands over only an lsn: it never stops to encode its own state, so a
    /// snapshot of millions of holds costs requests no pause.
    pub(super) fn start_snapshot(&mut self) {
        if self.snapshot_in_flight.swap(true, Relaxed) {
            return;
        }
        self.records_since_snapshot = 0;
        let job = SnapshotJob {
            fs: self.log.storage.fs().clone(),
            dir: self.config.data_dir.clone(),
            up_to_lsn: self.shared.durable_lsn.load(Relaxed),
            state_config: self.config.state,
            event_retention_max: self.config.event_retention_max,
            done_lsn: self.snapshot_done_lsn.clone(),
            in_flight: self.snapshot_in_flight.clone(),
            shared: self.shared.clone(),
        };
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
        let payload = encode_snapshot_of_encoded(&self.state, retained.len(), retained.iter());
        let fs = self.log.storage.fs().clone();
        match Storage::write_snapshot(&*fs, &self.config.data_dir, lsn, &payload) {
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
