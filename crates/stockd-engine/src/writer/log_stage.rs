//! The log stage, run inline on the writer thread: append a batch's frames, fsync, and only then
//! release its answers, in log order.
//!
//! It owns the log files' writing side ([`Log`]) and the hand-off of answers to the async
//! runtime ([`Release`]). It must never decide anything nor release an answer before the fsync
//! that covers it; once the log fails it acknowledges nothing again (fail-stop).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use stockd_core::{BackendError, Outcome};
use tokio::sync::oneshot;

use super::{Completion, Reply};
use crate::storage::Storage;
use crate::Shared;

pub enum LogJob {
    Batch {
        /// Encoded records of the batch, one log frame each (a big batch is split); none when
        /// the batch changed nothing (reads must still wait for earlier batches to be durable,
        /// so they travel the same way).
        payloads: Vec<Vec<u8>>,
        /// Lsn of the first frame; the others follow consecutively.
        first_lsn: u64,
        records: u64,
        /// Seq of the last event the batch produced (or earlier): durable once this is synced.
        last_seq: u64,
        completions: Vec<Completion>,
    },
    RemoveObsolete {
        snapshot_lsn: u64,
    },
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

/// The log stage, run inline on the writer thread: append, fsync, then release answers in
/// order. Requests that arrive during an fsync queue up and form the next group (group commit).
///
/// A separate log thread, pipelined with the writer, was measured and dropped: it was no
/// faster on small machines, and syncing several writer batches together is exactly what would
/// let a crash leave a hole before valid frames, which recovery must treat as corruption.
pub struct Log {
    pub(super) storage: Storage,
    shared: Arc<Shared>,
    pub(super) release: Option<Release>,
}

/// The answers of one group commit, in log order.
type Answers = Vec<(Reply, Result<Vec<Outcome>, BackendError>)>;

/// Hands each group commit's answers to a task on the async runtime, which sends them.
///
/// Every answer sent from the writer thread is a wake-up from outside the runtime: a task
/// pushed on the runtime's shared queue, often a parked worker woken with a syscall, once per
/// request. Sent from a task on the runtime, the wake-ups are local: the answered tasks join
/// that worker's own run queue, in log order, and the writer wakes the runtime once per group
/// commit. Under a crowd it is also fairness: a worker takes a task from the shared queue only
/// once in a while when its own queue is busy, so answers woken from outside waited behind
/// newly arrived requests.
pub struct Release {
    groups: tokio::sync::mpsc::UnboundedSender<Answers>,
}

impl Release {
    /// Spawns the releasing task on `runtime`; it ends when the log is dropped.
    pub fn spawn(runtime: &tokio::runtime::Handle) -> Release {
        let (groups, mut received) = tokio::sync::mpsc::unbounded_channel::<Answers>();
        runtime.spawn(async move {
            while let Some(answers) = received.recv().await {
                for (reply, answer) in answers {
                    let _ = reply.send(answer);
                }
            }
        });
        Release { groups }
    }

    /// Sends the answers through the task; gives them back if the task is gone (its runtime
    /// shutting down).
    fn send(&self, answers: Answers) -> Result<(), Answers> {
        self.groups.send(answers).map_err(|unsent| unsent.0)
    }
}

impl Log {
    pub fn new(storage: Storage, shared: Arc<Shared>) -> Self {
        Log {
            storage,
            shared,
            release: None,
        }
    }

    /// Processes one job; returns true once a shutdown job was handled.
    pub fn process(&mut self, job: LogJob) -> bool {
        let Log {
            storage,
            shared,
            release,
        } = self;
        match job {
            LogJob::Batch {
                payloads,
                first_lsn,
                records,
                last_seq,
                completions,
            } => {
                let mut failed = shared.failure().is_some();
                for (index, payload) in payloads.iter().enumerate() {
                    if failed {
                        break;
                    }
                    let appended = storage.append(payload).map(|lsn| {
                        debug_assert_eq!(lsn, first_lsn + index as u64, "lsn mismatch");
                        shared
                            .stats
                            .wal_bytes
                            .fetch_add(payload.len() as u64, Relaxed);
                    });
                    // One fsync per frame: only the last frame written can then be torn by a
                    // crash, so recovery can tell a torn tail from lost acknowledged data. A
                    // batch needs several frames only past FRAME_BYTES_TARGET (a mass expiry).
                    let synced = appended.and_then(|()| storage.sync());
                    match synced {
                        Ok(fdatasync) => {
                            // Always `Some`: the frame was just appended. Counted and timed in
                            // one observation, so the histogram's count is the syncs counter.
                            if let Some(took) = fdatasync {
                                shared.stats.observe_wal_fsync(took);
                            }
                            shared.durable_lsn.store(storage.durable_lsn(), Relaxed);
                        }
                        Err(error) => {
                            shared.fail(format!("writing the log: {error}"));
                            failed = true;
                        }
                    }
                }
                if !failed {
                    shared.stats.wal_records.fetch_add(records, Relaxed);
                    shared.feed.mark_durable(last_seq);
                }
                let answers: Answers = completions
                    .into_iter()
                    .map(|Completion { reply, outcomes }| {
                        let answer = if failed {
                            Err(BackendError::Unavailable(
                                "the write-ahead log failed; the change is not acknowledged".into(),
                            ))
                        } else {
                            Ok(outcomes)
                        };
                        (reply, answer)
                    })
                    .collect();
                let unsent = match release {
                    Some(release) if !answers.is_empty() => release.send(answers).err(),
                    _ => Some(answers),
                };
                for (reply, answer) in unsent.into_iter().flatten() {
                    let _ = reply.send(answer);
                }
                false
            }
            LogJob::RemoveObsolete { snapshot_lsn } => {
                if let Err(error) = storage.remove_obsolete(snapshot_lsn) {
                    tracing::warn!(%error, "cannot remove obsolete log segments");
                }
                false
            }
            LogJob::Shutdown { done } => {
                let _ = storage.sync();
                let _ = done.send(());
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    type Answer = oneshot::Receiver<Result<Vec<Outcome>, BackendError>>;

    fn answers(count: u64) -> (Answers, Vec<Answer>) {
        (0..count)
            .map(|n| {
                let (reply, answer) = oneshot::channel();
                let outcome = Err(BackendError::Unavailable(n.to_string()));
                ((reply, outcome), answer)
            })
            .unzip()
    }

    fn label(answer: Result<Vec<Outcome>, BackendError>) -> String {
        match answer {
            Err(BackendError::Unavailable(why)) => why,
            other => panic!("unexpected answer {other:?}"),
        }
    }

    /// The log stage times each frame's fdatasync into the histogram whose count is
    /// `wal_syncs_total`: on a disk whose syncs take 5 ms, two frames are two observations of
    /// at least 5 ms each.
    #[test]
    fn the_log_stage_times_every_fsync_into_the_histogram_that_counts_them() {
        use crate::storage::fs::SlowSyncFs;
        use crate::storage::StorageConfig;

        let sync_takes = Duration::from_millis(5);
        let dir = tempfile::tempdir().unwrap();
        let (storage, _) = Storage::open(StorageConfig {
            fs: Arc::new(SlowSyncFs { sync_takes }),
            ..StorageConfig::new(dir.path())
        })
        .unwrap();
        let shared = Arc::new(Shared::new(1_000));
        let mut log = Log::new(storage, Arc::clone(&shared));
        log.process(LogJob::Batch {
            payloads: vec![b"first frame".to_vec(), b"second frame".to_vec()],
            first_lsn: 1,
            records: 2,
            last_seq: 0,
            completions: Vec::new(),
        });
        assert!(shared.failure().is_none());

        let stats = shared.stats.to_backend_stats();
        let syncs = stats
            .counters
            .iter()
            .find(|(name, _)| *name == "wal_syncs_total")
            .unwrap()
            .1;
        let fsync = stats
            .histograms
            .iter()
            .find(|histogram| histogram.name == "wal_fsync_duration_seconds")
            .unwrap();
        assert_eq!(syncs, 2);
        assert_eq!(fsync.count, 2);
        assert!(
            fsync.sum >= 2.0 * sync_takes.as_secs_f64(),
            "sum {} s",
            fsync.sum
        );
        // Nothing at or below 4 ms: each observation is the slow fdatasync's.
        assert_eq!(fsync.buckets[2], (0.004, 0));
    }

    #[test]
    fn the_release_task_answers_each_group_in_order() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let release = Release::spawn(runtime.handle());
        let (first, first_answers) = answers(300);
        let (second, second_answers) = answers(2);
        release.send(first).unwrap();
        release.send(second).unwrap();
        runtime.block_on(async {
            for (n, answer) in first_answers.into_iter().enumerate() {
                assert_eq!(label(answer.await.unwrap()), n.to_string());
            }
            for (n, answer) in second_answers.into_iter().enumerate() {
                assert_eq!(label(answer.await.unwrap()), n.to_string());
            }
        });
    }

    #[test]
    fn answers_come_back_unsent_once_the_runtime_is_gone() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let release = Release::spawn(runtime.handle());
        drop(runtime);
        let (group, mut receivers) = answers(3);
        let unsent = release.send(group).unwrap_err();
        assert_eq!(unsent.len(), 3);
        for (reply, answer) in unsent {
            let _ = reply.send(answer);
        }
        assert_eq!(label(receivers.remove(0).try_recv().unwrap()), "0");
    }
}
