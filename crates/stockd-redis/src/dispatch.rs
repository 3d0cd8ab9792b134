//! Automatic batching: concurrent requests of one server bound for the same partition travel in
//! one function call.
//!
//! Each partition has a queue and a task. The task takes whatever is queued (up to
//! `COMMANDS_PER_CALL_MAX` commands), sends it as one `LIBRARY_call` and hands each request its
//! answers; while a call is in flight the next batch gathers, so under load every round trip and
//! every Redis fsync (AOF `always`) carries many holds. Requests stay independent inside a call
//! (one group each). This module must never reorder the commands of one request or split one
//! request's group over two calls.

use std::sync::Arc;

use redis::Value;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::shared::Shared;
use crate::wire::Op;
use stockd_core::BackendError;

/// Commands one call carries at most; more wait for the next call. Bounds a call's time inside
/// Redis (every other client waits while a function runs) and its reply's size.
pub const COMMANDS_PER_CALL_MAX: usize = 512;
/// Calls in flight per partition: one run by Redis while the next ones are on the wire (3 kept
/// Redis busier than 2 in scripts/bench-redis.sh: 0.18 of raw EVALSHA against 0.17).
pub const CALLS_IN_FLIGHT_MAX: usize = 3;
/// Requests queued per partition before a new one is refused with 503.
pub const QUEUE_DEPTH_MAX: usize = 65_536;

pub struct Job {
    pub ops: Vec<Op>,
    pub reply: oneshot::Sender<Result<Vec<String>, BackendError>>,
}

pub type Queue = mpsc::Sender<Job>;

pub fn start(shared: Arc<Shared>, partition: u32) -> (Queue, tokio::task::JoinHandle<()>) {
    let (sender, receiver) = mpsc::channel(QUEUE_DEPTH_MAX);
    let task = tokio::spawn(run(shared, partition, receiver));
    (sender, task)
}

async fn run(shared: Arc<Shared>, partition: u32, mut receiver: mpsc::Receiver<Job>) {
    let in_flight = Arc::new(Semaphore::new(CALLS_IN_FLIGHT_MAX));
    loop {
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = receiver.recv().await else {
            return;
        };
        let mut commands = first.ops.len();
        let mut jobs = vec![first];
        while commands < COMMANDS_PER_CALL_MAX {
            match receiver.try_recv() {
                Ok(job) => {
                    commands += job.ops.len();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        let shared = shared.clone();
        tokio::spawn(async move {
            let groups: Vec<&[Op]> = jobs.iter().map(|job| job.ops.as_slice()).collect();
            let result = shared.call(partition, &groups).await;
            drop(permit);
            match result {
                Ok(answers) => {
                    let mut answers = answers.into_iter();
                    for job in jobs {
                        let mine: Vec<String> = answers.by_ref().take(job.ops.len()).collect();
                        let _ = job.reply.send(Ok(mine));
                    }
                }
                Err(error) => {
                    for job in jobs {
                        let _ = job.reply.send(Err(error.clone()));
                    }
                }
            }
        });
    }
}

/// The answers of a `LIBRARY_call` reply, after its leading seq and change counter.
pub fn answers(values: Vec<Value>) -> Result<Vec<String>, BackendError> {
    values
        .into_iter()
        .map(|value| match value {
            Value::BulkString(bytes) => String::from_utf8(bytes)
                .map_err(|_| BackendError::Unavailable("non-UTF-8 answer from Redis".into())),
            Value::SimpleString(text) => Ok(text),
            other => Err(BackendError::Unavailable(format!(
                "unexpected answer from Redis: {other:?}"
            ))),
        })
        .collect()
}
