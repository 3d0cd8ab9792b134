//! The state one backend shares with its dispatch tasks, its sweeper and its pub/sub listener
//! ([`Shared`]), and the way every part of the backend sends commands: through a partition's
//! dispatch queue ([`Shared::submit`]), never around it, so that concurrent requests batch.
//! It holds what this server has seen of Redis; it must never decide a rule.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Mutex, OnceLock};

use stockd_core::BackendError;
use tokio::sync::{oneshot, watch};

use crate::dataset::Marker;
use crate::wire::{self, Answer, Op};
use crate::{dispatch, keys, link, waits, RedisConfig};

/// State shared by the backend, its dispatch tasks, its sweeper and its pub/sub listener.
pub(crate) struct Shared {
    pub(crate) config: RedisConfig,
    pub(crate) link: link::Link,
    pub(crate) partitions: u32,
    /// Where segmented pools' segments live (the dataset's, dataset.rs).
    pub(crate) placement: keys::Placement,
    pub(crate) keys: Vec<keys::PartitionKeys>,
    pub(crate) marker: Mutex<Marker>,
    /// Per partition: the highest event seq this server has seen. Redis answering with less is
    /// a dataset that lost acknowledged changes.
    pub(crate) seq_seen: Vec<AtomicU64>,
    /// Per partition: the highest change counter (`rev`, one per call that changed anything,
    /// evented or not) this server has seen. Redis answering with less lost a change.
    pub(crate) rev_seen: Vec<AtomicU64>,
    /// Per partition: whether the next sweep makes every held part due for its ownership check
    /// (at start, and after adopting a dataset an operator accepted: its homes may have lost
    /// the holds of parts held elsewhere).
    pub(crate) recheck_parts: Vec<AtomicBool>,
    /// Per partition: the latest seq known, for long-polls.
    pub(crate) seq_watch: Vec<watch::Sender<u64>>,
    pub(crate) waits: waits::Waits,
    /// Told when this server adopts a dataset an operator accepted: the pub/sub listener then
    /// moves to the new dataset's wake-up channel.
    pub(crate) marker_adopted: tokio::sync::Notify,
    /// Whether the last call reached Redis and was accepted.
    pub(crate) healthy: AtomicBool,
    pub(crate) queues: OnceLock<Vec<dispatch::Queue>>,
    pub(crate) calls_total: AtomicU64,
    pub(crate) commands_total: AtomicU64,
    /// On a Cluster, calls carry `CALL_PREFIX-N` so that one the client sends twice runs once.
    pub(crate) call_prefix: Option<String>,
    pub(crate) next_call: AtomicU64,
    /// Pools spread over partitions, as far as this server has met them (segments.rs).
    pub(crate) spread: crate::segments::SpreadPools,
    /// Test builds with a test clock: told after each `sweep_now`, when parked requests look
    /// whether their wait is over by that clock.
    #[cfg(feature = "test-clock")]
    pub(crate) clock_moved: tokio::sync::Notify,
}

impl Shared {
    /// Sends one request's commands to a partition's queue and waits for their answers.
    pub(crate) async fn submit(
        &self,
        partition: u32,
        ops: Vec<Op>,
    ) -> Result<Vec<String>, BackendError> {
        let (reply, answer) = oneshot::channel();
        let queue = &self.queues.get().expect("queues started")[partition as usize];
        queue
            .try_send(dispatch::Job { ops, reply })
            .map_err(|_| BackendError::Unavailable("too many requests queued for Redis".into()))?;
        answer
            .await
            .map_err(|_| BackendError::Unavailable("the Redis dispatcher stopped".into()))?
    }

    pub(crate) async fn submit_raw(&self, partition: u32, op: Op) -> Result<String, BackendError> {
        let mut answers = self.submit(partition, vec![op]).await?;
        answers
            .pop()
            .ok_or_else(|| BackendError::Unavailable("no answer".into()))
    }

    /// One command, decoded. A spread pool whose low-stock watch the command crossed is
    /// counted first (spread_ops.rs `low_check`), so that its low_stock follows the change.
    pub(crate) async fn submit_one(&self, partition: u32, op: Op) -> Result<Answer, BackendError> {
        let text = self.submit_raw(partition, op).await?;
        let (low, text) = wire::split_low(&text);
        for pool in &low {
            if let Ok(pool) = stockd_core::PoolId::parse(pool) {
                self.low_check(&pool).await?;
            }
        }
        decode(text)
    }
}

pub(crate) fn decode(text: &str) -> Result<Answer, BackendError> {
    wire::decode(text).map_err(|e| BackendError::Unavailable(e.to_string()))
}
