//! The sweeper: every server sweeps every partition a few times a second, with or without
//! traffic, and finishes the cross-partition work a sweep reports left behind. Which holds
//! expire, and that each expires exactly once whoever sweeps, is the library's decision; this
//! module only calls.

use std::sync::atomic::Ordering;
use std::sync::Arc;
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
/// exactly once whoever sweeps.
pub(crate) async fn sweep(shared: Arc<Shared>) {
    let mut interval = tokio::time::interval(SWEEP_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        for partition in 0..shared.partitions {
            if let Err(error) = sweep_partition(&shared, partition).await {
                tracing::debug!(partition, %error, "sweep failed");
            }
        }
    }
}

/// One sweep of one partition: calls until nothing more is due (each call expires a bounded
/// number), finishing the cross-partition work the library reports left behind.
pub(crate) async fn sweep_partition(shared: &Shared, partition: u32) -> Result<(), BackendError> {
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
                // Pool ops a server left (segments.rs): rolled back or forward; segments whose
                // op is over at segment 0 but still frozen: unfrozen.
                for pool in pool_ops {
                    if let Err(error) = shared.finish_left_op(&pool).await {
                        tracing::debug!(partition, %error, "finishing a pool op");
                    }
                }
                for entry in frozen {
                    if let Err(error) = shared.unfreeze_left_segment(&entry).await {
                        tracing::debug!(partition, %error, "unfreezing a segment");
                    }
                }
                for pool in low {
                    let Ok(pool) = stockd_core::PoolId::parse(&pool) else {
                        continue;
                    };
                    if let Err(error) = shared.low_check(&pool).await {
                        tracing::debug!(partition, %error, "checking a pool's low stock");
                    }
                }
                let left = cross::LeftBehind {
                    forward,
                    back,
                    parts,
                };
                if !left.is_empty() {
                    let left = cross::finish_left_behind(shared, partition, left);
                    if let Err(error) = left.await {
                        tracing::debug!(partition, %error, "finishing cross-partition work");
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
