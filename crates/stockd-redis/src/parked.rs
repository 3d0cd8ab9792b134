//! A parked command's wait (a reserve waiting for stock, a lock acquire waiting for the lock):
//! until the library serves it (a wake over pub/sub, `waits`) or its `wait_ms` is over, then one
//! call collects its final answer. A client that goes away cancels its waiter. The wait only
//! decides when to ask; whether the command was served is the library's answer.

use std::time::Duration;

use stockd_core::{BackendError, Command, Outcome};

use crate::backend::RedisBackend;
use crate::waits;
use crate::wire::{self, Answer, Op, Route};

impl RedisBackend {
    /// Waits for a parked command until it is served or its wait is over, then collects its
    /// final answer. A client that goes away cancels its waiter.
    pub(crate) async fn wait(
        &self,
        partition: u32,
        ticket: u64,
        command: &Command,
    ) -> Result<Outcome, BackendError> {
        let (kind, wait_ms) = match command {
            Command::Reserve(request) => ("stock", request.wait_ms),
            Command::LockAcquire(request) => ("lock", request.wait_ms),
            _ => {
                return Err(BackendError::Unavailable(
                    "parked a command that cannot wait".into(),
                ))
            }
        };
        let words = wire::encode(command, Route::Only).args;
        let guard =
            waits::CancelGuard::new(self.shared.clone(), partition, ticket, kind, words.clone());
        let woken = self.shared.waits.register(partition, ticket);
        self.wait_timer(wait_ms, woken).await;
        let mut args = vec![ticket.to_string(), kind.to_string()];
        args.extend(words);
        let answer = self
            .shared
            .submit_one(
                partition,
                Op {
                    name: "wait_end",
                    args,
                },
            )
            .await;
        self.shared.waits.forget(partition, ticket);
        guard.disarm();
        match answer? {
            Answer::Done(outcome) => Ok(outcome),
            other => Err(BackendError::Unavailable(format!(
                "unexpected answer {other:?}"
            ))),
        }
    }

    /// Until `woken` fires or `wait_ms` has passed: by this process's timer, or in test builds
    /// with a test clock, by that clock as of the test's sweeps (`sweep_now`), so that a test
    /// decides when a wait ends as it decides when holds expire.
    async fn wait_timer(&self, wait_ms: u64, woken: impl std::future::Future) {
        #[cfg(feature = "test-clock")]
        if let Some(clock) = &self.shared.config.clock {
            let now = clock.0.clone();
            let deadline = now().saturating_add(wait_ms);
            tokio::pin!(woken);
            loop {
                let moved = self.shared.clock_moved.notified();
                tokio::pin!(moved);
                moved.as_mut().enable();
                if now() >= deadline {
                    return;
                }
                tokio::select! {
                    _ = &mut woken => return,
                    _ = moved => {}
                }
            }
        }
        let _ = tokio::time::timeout(Duration::from_millis(wait_ms), woken).await;
    }
}
