//! Waking parked requests and long-polls across servers.
//!
//! The library publishes one message per call that produced events or served waiters, on its
//! dataset's channel `stockd:wake:MARKER`: `PARTITION SEQ TICKET...`. Redis's pub/sub is
//! server-wide (it ignores the DB number), so the channel carries the dataset marker: two
//! datasets in one Redis (other DBs) never hear each other's wake-ups, and a server moves to
//! the new channel when it adopts a dataset an operator accepted. Each server keeps one
//! subscriber connection; a message wakes the partition's long-polls and the tickets this
//! server parked. A wake can arrive before the parker has registered (the serving call may
//! complete first), so an unclaimed wake is kept for a while. A lost message (subscriber
//! reconnecting) costs latency only: a parked request still collects its answer at its deadline.
//!
//! A message is a hint, never a fact: it must not raise the seq this server holds Redis to
//! (`seq_seen`), which only Redis's own answers do, so that no message can make a server fail
//! closed.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::sync::Notify;

use crate::shared::Shared;
use crate::wire::Op;

/// The wake-up channel of the dataset whose marker is `marker` (main.lua's `S.wake_channel`).
pub fn channel(marker: &str) -> String {
    format!("stockd:wake:{marker}")
}
/// How long an unclaimed wake is kept, and how many before old ones are dropped.
const UNCLAIMED_KEEP: Duration = Duration::from_secs(120);
const UNCLAIMED_PRUNE_AT: usize = 10_000;

enum Slot {
    Waiting(Arc<Notify>),
    Woken(Instant),
}

#[derive(Default)]
pub(crate) struct Waits {
    slots: Mutex<HashMap<(u32, u64), Slot>>,
}

impl Waits {
    /// Resolves when the ticket is woken (at once if it already was).
    pub fn register(&self, partition: u32, ticket: u64) -> impl Future<Output = ()> {
        let mut slots = self.slots.lock().expect("waits lock");
        let notify = Arc::new(Notify::new());
        if let Some(Slot::Woken(_)) = slots.get(&(partition, ticket)) {
            notify.notify_one();
        }
        slots.insert((partition, ticket), Slot::Waiting(notify.clone()));
        async move { notify.notified().await }
    }

    pub fn wake(&self, partition: u32, ticket: u64) {
        let mut slots = self.slots.lock().expect("waits lock");
        match slots.get(&(partition, ticket)) {
            Some(Slot::Waiting(notify)) => notify.notify_one(),
            _ => {
                if slots.len() >= UNCLAIMED_PRUNE_AT {
                    slots.retain(|_, slot| match slot {
                        Slot::Woken(at) => at.elapsed() < UNCLAIMED_KEEP,
                        Slot::Waiting(_) => true,
                    });
                }
                slots.insert((partition, ticket), Slot::Woken(Instant::now()));
            }
        }
    }

    pub fn forget(&self, partition: u32, ticket: u64) {
        self.slots
            .lock()
            .expect("waits lock")
            .remove(&(partition, ticket));
    }
}

/// Cancels a waiter in Redis if the request is dropped (its client went away) before it ended.
pub(crate) struct CancelGuard {
    shared: Arc<Shared>,
    partition: u32,
    ticket: u64,
    kind: &'static str,
    words: Vec<String>,
    armed: bool,
}

impl CancelGuard {
    pub fn new(
        shared: Arc<Shared>,
        partition: u32,
        ticket: u64,
        kind: &'static str,
        words: Vec<String>,
    ) -> Self {
        CancelGuard {
            shared,
            partition,
            ticket,
            kind,
            words,
            armed: true,
        }
    }

    pub fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let shared = self.shared.clone();
        let partition = self.partition;
        shared.waits.forget(partition, self.ticket);
        let mut args = vec![self.ticket.to_string(), self.kind.to_string()];
        args.append(&mut self.words);
        tokio::spawn(async move {
            let op = Op {
                name: "wait_cancel",
                args,
            };
            if let Err(error) = shared.submit_one(partition, op).await {
                tracing::debug!(%error, "cancelling a waiter failed; it lapses at its deadline");
            }
        });
    }
}

/// The subscriber: reconnects for as long as the backend runs, and subscribes again when the
/// server adopts another dataset.
pub(crate) async fn listen(shared: Arc<Shared>) {
    for attempt in 0.. {
        let client = match shared.link.pubsub_client(attempt).await {
            Ok(client) => client,
            Err(error) => {
                tracing::warn!(%error, "pub/sub: no node to subscribe on");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let mut adopted = false;
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => {
                let marker = shared.marker.lock().expect("marker lock").text.clone();
                if pubsub.subscribe(channel(&marker)).await.is_ok() {
                    let mut messages = pubsub.on_message();
                    loop {
                        tokio::select! {
                            message = messages.next() => {
                                let Some(message) = message else { break };
                                if let Ok(payload) = message.get_payload::<String>() {
                                    handle(&shared, &payload);
                                }
                            }
                            () = shared.marker_adopted.notified() => {
                                adopted = true;
                                break;
                            }
                        }
                    }
                }
            }
            Err(error) => tracing::debug!(%error, "pub/sub connection failed"),
        }
        if !adopted {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn handle(shared: &Shared, payload: &str) {
    let mut words = payload.split_ascii_whitespace().map(str::parse::<u64>);
    let (Some(Ok(partition)), Some(Ok(seq))) = (words.next(), words.next()) else {
        return;
    };
    let Ok(partition) = u32::try_from(partition) else {
        return;
    };
    if partition >= shared.partitions {
        return;
    }
    // Long-polls wake and read the feed; the seq Redis is held to is not raised (a hint).
    shared.seq_watch[partition as usize].send_if_modified(|known| {
        let newer = seq > *known;
        if newer {
            *known = seq;
        }
        newer
    });
    for ticket in words.flatten() {
        shared.waits.wake(partition, ticket);
    }
}
