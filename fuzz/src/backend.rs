//! The backend the `decode_request` target serves the router from: stockd-core's `State` in
//! memory behind a mutex, with a clock the harness moves, recording every call the server makes.
//!
//! It is a real backend as far as the HTTP layer can tell (the core decides every command), but
//! it never waits: a `wait_ms` is validated, then treated as 0, since nothing else runs while a
//! fuzz input is being served. The recorded calls are what the differential check compares with
//! the naive decoder's expectation. The event feed keeps a small window, so that `after` values
//! older than it get `events_expired`.

use std::sync::{Mutex, MutexGuard};

use stockd_core::{
    Backend, BackendFuture, BackendStats, Command, Effects, Error, Event, EventPage, EventsRequest,
    Outcome, Snapshot, State, StateConfig, Step,
};

/// Where the clock starts for every input.
pub const START_MS: u64 = 1_700_000_000_000;

/// Events kept by the feed; older ones are gone (410 `events_expired`).
const EVENT_WINDOW: usize = 64;

/// Retention short enough for a `TICK` of a few seconds to make finished holds disappear.
const CONFIG: StateConfig = StateConfig {
    hold_retention_ms: 5_000,
    confirmed_retention_ms: 20_000,
};

/// A call the server made to the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Execute(Vec<Command>),
    Events {
        partition: u32,
        after: u64,
        limit: usize,
        wait_ms: u64,
    },
}

/// What a client could observe of the data: the durable state and the feed's next seq.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub snapshot: Snapshot,
    pub next_seq: u64,
}

struct Inner {
    state: State,
    events: Vec<Event>,
    now_ms: u64,
    calls: Vec<Call>,
}

pub struct FuzzBackend {
    inner: Mutex<Inner>,
}

impl Default for FuzzBackend {
    fn default() -> Self {
        FuzzBackend {
            inner: Mutex::new(Inner {
                state: State::new(CONFIG),
                events: Vec::new(),
                now_ms: START_MS,
                calls: Vec::new(),
            }),
        }
    }
}

impl FuzzBackend {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while the lock is held is a crash the fuzzer reports; later inputs start from
        // `reset` anyway.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Back to an empty state at [`START_MS`], for the next input.
    pub fn reset(&self) {
        let mut inner = self.lock();
        inner.state = State::new(CONFIG);
        inner.events.clear();
        inner.now_ms = START_MS;
        inner.calls.clear();
    }

    /// Moves the clock, then does what time does (expiry, retention), so that the next request
    /// meets a settled state: a refused request may then change nothing at all.
    pub fn advance_and_settle(&self, ms: u64) {
        let mut inner = self.lock();
        inner.now_ms = inner.now_ms.saturating_add(ms);
        let Inner {
            state,
            events,
            now_ms,
            ..
        } = &mut *inner;
        let mut effects = Effects::default();
        // One tick expires a bounded number of holds; fuzz inputs make far fewer than that.
        state.tick(*now_ms, &mut effects);
        keep_events(events, &mut effects.events);
        check(state);
    }

    pub fn observe(&self) -> Observed {
        let inner = self.lock();
        Observed {
            snapshot: inner.state.snapshot().clone(),
            next_seq: inner.state.next_seq(),
        }
    }

    /// The calls made since the last `take_calls`.
    pub fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut self.lock().calls)
    }

    fn execute_now(&self, commands: Vec<Command>) -> Vec<Outcome> {
        let mut inner = self.lock();
        inner.calls.push(Call::Execute(commands.clone()));
        let Inner {
            state,
            events,
            now_ms,
            ..
        } = &mut *inner;
        let mut effects = Effects::default();
        state.tick(*now_ms, &mut effects);
        let outcomes = commands
            .into_iter()
            .map(|mut command| {
                command.validate()?;
                // Validated with the wait asked for, answered as if it were 0: nothing else can
                // free stock while one input is served.
                match &mut command {
                    Command::Reserve(request) => request.wait_ms = 0,
                    Command::LockAcquire(request) => request.wait_ms = 0,
                    _ => {}
                }
                match state.execute(command, *now_ms, &mut effects) {
                    Step::Done(outcome) => outcome,
                    Step::Waiting(id) => {
                        panic!("the core parked waiter {id} for a command with wait_ms 0")
                    }
                }
            })
            .collect();
        keep_events(events, &mut effects.events);
        check(state);
        outcomes
    }
}

fn keep_events(events: &mut Vec<Event>, new: &mut Vec<Event>) {
    events.append(new);
    let excess = events.len().saturating_sub(EVENT_WINDOW);
    events.drain(..excess);
}

fn check(state: &State) {
    if let Err(why) = state.check_invariants() {
        panic!("invariant broken: {why}");
    }
}

impl Backend for FuzzBackend {
    fn execute(&self, commands: Vec<Command>) -> BackendFuture<'_, Vec<Outcome>> {
        let outcomes = self.execute_now(commands);
        Box::pin(async move { Ok(outcomes) })
    }

    fn partitions(&self) -> u32 {
        1
    }

    fn events(&self, request: EventsRequest) -> BackendFuture<'_, Result<EventPage, Error>> {
        let EventsRequest {
            partition,
            after,
            limit,
            wait_ms,
        } = request;
        let mut inner = self.lock();
        inner.calls.push(Call::Events {
            partition,
            after,
            limit,
            wait_ms,
        });
        let page = match inner.events.first() {
            Some(oldest) if after.saturating_add(1) < oldest.seq => Err(Error::EventsExpired {
                after,
                oldest_seq: oldest.seq,
            }),
            _ => {
                let events: Vec<Event> = inner
                    .events
                    .iter()
                    .filter(|event| event.seq > after)
                    .take(limit)
                    .cloned()
                    .collect();
                let next_after = events.last().map_or(after, |event| event.seq);
                Ok(EventPage { events, next_after })
            }
        };
        Box::pin(async move { Ok(page) })
    }

    fn ready(&self) -> BackendFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    fn stats(&self) -> BackendStats {
        BackendStats::default()
    }

    fn shutdown(&self) -> BackendFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}
