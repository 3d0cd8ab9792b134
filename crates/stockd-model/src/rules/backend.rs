//! A [`RuleTarget`] over a [`Backend`] (the engine, Redis): each request is a task of a tokio
//! runtime, so that a parked one goes on waiting while later ones run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use stockd_core::{Backend, Command, Event, Outcome, PoolId, PoolView, Reply};
use tokio::runtime::Runtime;

use super::{RuleTarget, Sent, Ticket, T0};

/// What a target over a [`Backend`] (the engine, Redis) must give [`OnBackend`]: its clock, its
/// sweep, and where it keeps parked requests.
pub trait Parking {
    /// The backend requests go to.
    fn backend(&self) -> Arc<dyn Backend>;

    /// Sets the backend's clock (never backwards).
    fn set_clock(&mut self, now_ms: u64);

    /// Makes what time does happen at the clock's now, and returns once it is done.
    fn sweep(&mut self, runtime: &Runtime) -> Result<(), String>;

    /// How many requests the backend holds parked that `command` would join (all of them, or
    /// those of its hold id or lock name): read before and after sending it, it tells whether
    /// `command` parked.
    fn parked_with(&mut self, command: &Command) -> Result<usize, String>;

    /// How many requests the backend holds parked.
    fn parked(&mut self) -> Result<usize, String>;

    /// Every event since the last call, as [`RuleTarget::events`].
    fn events(&mut self, runtime: &Runtime) -> Result<Vec<Event>, String>;

    /// An answer as the scenarios expect it (a Cluster's partition numbers aside).
    fn normalise(&mut self, _outcome: &mut Outcome) {}
}

/// How long a step may take on a backend before the driver gives up on it.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);

type Pending = tokio::task::JoinHandle<Result<Vec<Outcome>, String>>;

/// A [`RuleTarget`] over a [`Backend`]: each request is a task of `runtime`, so that a parked
/// one goes on waiting while later ones run.
pub struct OnBackend<'r, P> {
    runtime: &'r Runtime,
    parking: P,
    now_ms: u64,
    sent: Ticket,
    /// Parked requests not yet collected: ticket, the clock's time their wait ends, the task.
    pending: Vec<(Ticket, u64, Pending)>,
}

impl<'r, P: Parking> OnBackend<'r, P> {
    pub fn new(runtime: &'r Runtime, parking: P) -> Self {
        OnBackend {
            runtime,
            parking,
            now_ms: T0,
            sent: 0,
            pending: Vec::new(),
        }
    }

    fn move_clock(&mut self, now_ms: u64) -> Result<(), String> {
        if now_ms < self.now_ms {
            return Err(format!("time goes back from {} to {now_ms}", self.now_ms));
        }
        self.now_ms = now_ms;
        self.parking.set_clock(now_ms);
        Ok(())
    }

    fn outcome(
        &mut self,
        joined: Result<Result<Vec<Outcome>, String>, tokio::task::JoinError>,
    ) -> Result<Outcome, String> {
        let mut outcomes = joined.map_err(|e| e.to_string())??;
        let mut outcome = outcomes.pop().ok_or("no outcome")?;
        self.parking.normalise(&mut outcome);
        Ok(outcome)
    }
}

impl<P: Parking> RuleTarget for OnBackend<'_, P> {
    fn send(&mut self, command: Command, now_ms: u64) -> Result<Sent, String> {
        self.move_clock(now_ms)?;
        let ticket = self.sent;
        self.sent += 1;
        let wait_ms = match &command {
            Command::Reserve(request) => request.wait_ms,
            Command::LockAcquire(request) => request.wait_ms,
            _ => 0,
        };
        let may_wait = wait_ms > 0;
        let before = if may_wait {
            self.parking.parked_with(&command)?
        } else {
            0
        };
        let backend = self.parking.backend();
        let task = self.runtime.spawn({
            let command = command.clone();
            async move {
                backend
                    .execute(vec![command])
                    .await
                    .map_err(|e| e.to_string())
            }
        });
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            if task.is_finished() {
                let joined = self.runtime.block_on(task);
                return Ok(Sent::Answered(self.outcome(joined)?));
            }
            if may_wait && self.parking.parked_with(&command)? > before {
                self.pending.push((ticket, now_ms + wait_ms, task));
                return Ok(Sent::Parked);
            }
            if Instant::now() > deadline {
                return Err(format!("neither answered nor parked in {STEP_TIMEOUT:?}"));
            }
            self.runtime
                .block_on(async { tokio::time::sleep(Duration::from_millis(1)).await });
        }
    }

    /// Returns once the sweep is done and every parked request whose wait is over has its
    /// answer (its final attempt ran).
    fn tick(&mut self, now_ms: u64) -> Result<(), String> {
        self.move_clock(now_ms)?;
        self.parking.sweep(self.runtime)?;
        let deadline = Instant::now() + STEP_TIMEOUT;
        while self
            .pending
            .iter()
            .any(|(_, ends_ms, task)| *ends_ms <= now_ms && !task.is_finished())
        {
            if Instant::now() > deadline {
                return Err(format!(
                    "waits over at {now_ms} not ended in {STEP_TIMEOUT:?}"
                ));
            }
            self.runtime
                .block_on(async { tokio::time::sleep(Duration::from_millis(1)).await });
        }
        Ok(())
    }

    fn parked(&mut self) -> Result<usize, String> {
        self.parking.parked()
    }

    fn answers(&mut self, count: usize) -> Result<Vec<(Ticket, Outcome)>, String> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        while self
            .pending
            .iter()
            .filter(|(_, _, task)| task.is_finished())
            .count()
            < count
        {
            if Instant::now() > deadline {
                return Err(format!(
                    "{count} answers expected, none in {STEP_TIMEOUT:?}"
                ));
            }
            self.runtime
                .block_on(async { tokio::time::sleep(Duration::from_millis(1)).await });
        }
        let (finished, waiting) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition::<Vec<_>, _>(|(_, _, task)| task.is_finished());
        self.pending = waiting;
        finished
            .into_iter()
            .map(|(ticket, _, task)| {
                let joined = self.runtime.block_on(task);
                Ok((ticket, self.outcome(joined)?))
            })
            .collect()
    }

    fn events(&mut self) -> Result<Vec<Event>, String> {
        self.parking.events(self.runtime)
    }

    fn pool(&mut self, pool: &PoolId) -> Result<PoolView, String> {
        let backend = self.parking.backend();
        let command = Command::GetPool { pool: pool.clone() };
        let mut outcomes = self
            .runtime
            .block_on(backend.execute(vec![command]))
            .map_err(|e| e.to_string())?;
        match outcomes.pop() {
            Some(Ok(Reply::Pool { pool, .. })) => Ok(pool),
            other => Err(format!("reading pool {pool}: {other:?}")),
        }
    }
}
