//! The sweeper: every server sweeps every partition a few times a second, with or without
//! traffic, and finishes the cross-partition work a sweep reports left behind. Which holds
//! expire, and that each expires exactly once whoever sweeps, is the library's decision; this
//! module only calls.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stockd_core::BackendError;

use crate::cross;
use crate::shared::Shared;
use crate::wire::{Answer, Op};

/// How often each server sweeps each partition for holds past their deadline (the contract
/// allows 1 s of lag; several servers sweeping only make it shorter).
pub const SWEEP_INTERVAL: Duration = Duration::from_millis(100);

/// Expires holds past their deadline and frees lapsed leases on every partition, a few times a
/// second, with or without traffic. Every server runs one; the library makes each expiry happen
/// exactly once whoever sweeps. Each partition is swept on its own, and the work a sweep
/// reports (`Reported`) is finished beside the sweeps, never before the next one: a pool op of a
/// segmented pool may wait seconds for another to end (`segments::OP_WAIT`), and the expiries
/// of every other hold must not wait with it. Ending this task ends all of it (a `JoinSet`).
pub(crate) async fn sweep(shared: Arc<Shared>) {
    let mut partitions = tokio::task::JoinSet::new();
    for partition in 0..shared.partitions {
        partitions.spawn(sweep_loop(shared.clone(), partition));
    }
    while let Some(ended) = partitions.join_next().await {
        if let Err(error) = ended {
            tracing::error!(%error, "a partition's sweeper ended");
        }
    }
}

/// One partition's sweeps, and beside them the finishing of what they report.
async fn sweep_loop(shared: Arc<Shared>, partition: u32) {
    let follow = FollowUp::default();
    let sweeping = async {
        let mut interval = tokio::time::interval(SWEEP_INTERVAL);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            if let Err(error) = sweep_partition(&shared, partition, Some(&follow)).await {
                tracing::debug!(partition, %error, "sweep failed");
            }
        }
    };
    let finishing = async {
        loop {
            follow.ready.notified().await;
            let batch = std::mem::take(&mut *follow.queued.lock().expect("follow-up lock"));
            if !batch.is_empty() {
                finish(&shared, partition, batch).await;
            }
        }
    };
    tokio::join!(sweeping, finishing);
}

/// What a sweep reports for the server to finish: pool ops and frozen segments a server left,
/// spread pools whose low-stock watch a change crossed, and cross-partition work left behind.
/// Sets: the library reports what is still due again at the next sweep.
#[derive(Default)]
struct Reported {
    pool_ops: BTreeSet<String>,
    frozen: BTreeSet<String>,
    low: BTreeSet<String>,
    forward: BTreeSet<String>,
    back: BTreeSet<String>,
    parts: BTreeSet<String>,
}

impl Reported {
    fn add(&mut self, more: Reported) {
        self.pool_ops.extend(more.pool_ops);
        self.frozen.extend(more.frozen);
        self.low.extend(more.low);
        self.forward.extend(more.forward);
        self.back.extend(more.back);
        self.parts.extend(more.parts);
    }

    fn is_empty(&self) -> bool {
        self.pool_ops.is_empty()
            && self.frozen.is_empty()
            && self.low.is_empty()
            && self.forward.is_empty()
            && self.back.is_empty()
            && self.parts.is_empty()
    }
}

/// One partition's reported work not finished yet, and the signal that there is some.
#[derive(Default)]
pub(crate) struct FollowUp {
    queued: Mutex<Reported>,
    ready: tokio::sync::Notify,
}

impl FollowUp {
    fn hand(&self, reported: Reported) {
        self.queued.lock().expect("follow-up lock").add(reported);
        self.ready.notify_one();
    }
}

/// Finishes what one or more sweeps of `partition` reported.
async fn finish(shared: &Shared, partition: u32, reported: Reported) {
    // Pool ops a server left (segments.rs): rolled back or forward; segments whose op is over
    // at segment 0 but still frozen: unfrozen.
    for pool in reported.pool_ops {
        if let Err(error) = shared.finish_left_op(&pool).await {
            tracing::debug!(partition, %error, "finishing a pool op");
        }
    }
    for entry in reported.frozen {
        if let Err(error) = shared.unfreeze_left_segment(&entry).await {
            tracing::debug!(partition, %error, "unfreezing a segment");
        }
    }
    for pool in reported.low {
        let Ok(pool) = stockd_core::PoolId::parse(&pool) else {
            continue;
        };
        if let Err(error) = shared.low_check(&pool).await {
            tracing::debug!(partition, %error, "checking a pool's low stock");
        }
    }
    let left = cross::LeftBehind {
        forward: reported.forward.into_iter().collect(),
        back: reported.back.into_iter().collect(),
        parts: reported.parts.into_iter().collect(),
    };
    if !left.is_empty() {
        if let Err(error) = cross::finish_left_behind(shared, partition, left).await {
            tracing::debug!(partition, %error, "finishing cross-partition work");
        }
    }
}

/// One sweep of one partition: calls until nothing more is due (each call expires a bounded
/// number). The work the library reports left behind is handed to `follow` (the background
/// sweeper), or finished before this returns (`None`: a test's sweep, which decides when
/// time's effects happen).
pub(crate) async fn sweep_partition(
    shared: &Arc<Shared>,
    partition: u32,
    follow: Option<&FollowUp>,
) -> Result<(), BackendError> {
    let recheck = &shared.recheck_parts[partition as usize];
    loop {
        let rechecking = recheck.swap(false, Ordering::AcqRel);
        let op = Op {
            name: "sweep",
            args: vec![if rechecking { "1" } else { "0" }.to_string()],
        };
        let answer = shared.submit_one(partition, op).await;
        if rechecking && answer.is_err() {
            recheck.store(true, Ordering::Release);
        }
        match answer? {
            Answer::Swept {
                more,
                forward,
                back,
                parts,
                pool_ops,
                frozen,
                low,
            } => {
                let reported = Reported {
                    pool_ops: pool_ops.into_iter().collect(),
                    frozen: frozen.into_iter().collect(),
                    low: low.into_iter().collect(),
                    forward: forward.into_iter().collect(),
                    back: back.into_iter().collect(),
                    parts: parts.into_iter().collect(),
                };
                if !reported.is_empty() {
                    match follow {
                        Some(follow) => follow.hand(reported),
                        None => finish(shared, partition, reported).await,
                    }
                }
                if !more {
                    return Ok(());
                }
            }
            _ => return Ok(()),
        }
    }
}
