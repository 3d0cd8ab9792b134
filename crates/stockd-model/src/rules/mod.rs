//! The core's rules, scenario by scenario, through one target: the core's `State`
//! (stockd-core's tests), the embedded engine (stockd-engine's) and the Redis library on a single
//! Redis (stockd-redis's), so that every implementation of the contract is held to the same
//! expectations, written once.
//!
//! The random sequences of the model reach most of the contract; these scenarios are for what
//! they do not (waiting: the model has no waiters) or reach only by luck (the edges of retention,
//! of lazy expiry, of request ids, of fencing, of the sale window and of every limit; refunds of
//! deleted pools; replays; the fields of events). Each is written from the contract, with time
//! passed in as a number: every target runs on a clock only the driver moves.
//!
//! A target tells when it holds a request parked and how many it holds
//! ([`RuleTarget::parked`]), so that the driver never guesses with a timer: after each step it
//! knows how many parked requests were answered by it, and waits for exactly those answers.

mod backend;
mod commands;
mod locks;
mod pools;
mod requests;
mod retention;
mod waits;

pub use backend::{OnBackend, Parking};
pub use waits::{WAITERS_ACROSS_POOLS, WAIT_DEADLINE_ACROSS_POOLS, WAIT_QUEUE_BOUNDED};

use stockd_core::{Command, Error, Event, EventKind, Outcome, PoolId, PoolView, StateConfig};

use commands::pool_id;

/// A parked request, numbered in the order the driver sent it.
pub type Ticket = usize;

/// What a target did with a request.
#[derive(Debug)]
pub enum Sent {
    Answered(Outcome),
    /// Parked: its answer comes later, through [`RuleTarget::answers`].
    Parked,
}

/// The retention the scenarios' targets run with.
pub const CONFIG: StateConfig = StateConfig {
    hold_retention_ms: 10_000,
    confirmed_retention_ms: 50_000,
};

/// The time every scenario starts at; a target's clock starts here.
pub const T0: u64 = 1_000_000;

/// An implementation of the contract that can park requests.
pub trait RuleTarget {
    /// Runs `command` at `now_ms` (never earlier than the last time given) and returns its
    /// answer, or [`Sent::Parked`] once the target holds it parked (its ticket is the number of
    /// requests sent before it).
    fn send(&mut self, command: Command, now_ms: u64) -> Result<Sent, String>;

    /// Moves the clock to `now_ms` and makes what time does happen (holds expire, leases lapse,
    /// waits end), as `State::tick` does; returns once all of that is done.
    fn tick(&mut self, now_ms: u64) -> Result<(), String>;

    /// How many requests the target holds parked now.
    fn parked(&mut self) -> Result<usize, String>;

    /// Waits (bounded) until `count` parked requests have their answers, and returns every answer
    /// given since the last call, each with its ticket.
    fn answers(&mut self, count: usize) -> Result<Vec<(Ticket, Outcome)>, String>;

    /// Every event since the last call: one partition's in seq order, then the next one's.
    fn events(&mut self) -> Result<Vec<Event>, String>;

    /// A pool's numbers (at the time of the last step).
    fn pool(&mut self, pool: &PoolId) -> Result<PoolView, String>;
}

/// Everything one step did.
#[derive(Debug)]
pub struct Done {
    /// The answer, `None` for a parked request or a tick.
    answer: Option<Outcome>,
    /// The ticket of a parked request.
    ticket: Option<Ticket>,
    pub events: Vec<Event>,
    /// Parked requests this step answered, by ticket.
    pub woken: Vec<(Ticket, Outcome)>,
}

impl Done {
    pub fn outcome(&self) -> &Outcome {
        self.answer
            .as_ref()
            .unwrap_or_else(|| panic!("expected an answer, got {self:?}"))
    }

    pub fn waiter(&self) -> Ticket {
        self.ticket
            .unwrap_or_else(|| panic!("expected a parked request, got {self:?}"))
    }

    pub fn error_code(&self) -> Option<&'static str> {
        self.outcome().as_ref().err().map(Error::code)
    }

    pub fn kinds(&self) -> Vec<EventKind> {
        self.events.iter().map(|e| e.kind).collect()
    }

    pub(crate) fn ok(self) -> Done {
        assert!(self.outcome().is_ok(), "expected success: {self:?}");
        self
    }
}

/// Drives a [`RuleTarget`], numbering the parked requests and collecting what each step did.
pub struct Driver<'t> {
    target: &'t mut dyn RuleTarget,
    sent: Ticket,
    parked: usize,
}

impl<'t> Driver<'t> {
    pub fn new(target: &'t mut dyn RuleTarget) -> Driver<'t> {
        Driver {
            target,
            sent: 0,
            parked: 0,
        }
    }

    pub fn run(&mut self, command: Command, now_ms: u64) -> Done {
        let described = format!("{command:?} at {now_ms}");
        let sent = self
            .target
            .send(command, now_ms)
            .unwrap_or_else(|e| panic!("{described}: {e}"));
        let ticket = self.sent;
        self.sent += 1;
        match sent {
            Sent::Answered(outcome) => {
                let parked = self.parked;
                self.settle(Some(outcome), None, parked, &described)
            }
            Sent::Parked => {
                // A request that parks changed nothing, so it answered no one: the count is
                // known without asking (a queue of thousands stays cheap to fill); the next
                // step that asks would find any answer this one gave.
                self.parked += 1;
                let events = self
                    .target
                    .events()
                    .unwrap_or_else(|e| panic!("{described}: reading events: {e}"));
                Done {
                    answer: None,
                    ticket: Some(ticket),
                    events,
                    woken: Vec::new(),
                }
            }
        }
    }

    pub fn tick(&mut self, now_ms: u64) -> Done {
        let described = format!("a tick at {now_ms}");
        self.target
            .tick(now_ms)
            .unwrap_or_else(|e| panic!("{described}: {e}"));
        self.settle(None, None, self.parked, &described)
    }

    /// How many requests are parked.
    pub fn parked(&self) -> usize {
        self.parked
    }

    pub fn pool(&mut self, pool: &str) -> PoolView {
        self.target
            .pool(&pool_id(pool))
            .unwrap_or_else(|e| panic!("reading pool {pool}: {e}"))
    }

    pub fn available(&mut self, pool: &str) -> u64 {
        self.pool(pool).available
    }

    /// `parked_before`: what was parked before this step; the target now holds fewer, and each
    /// one missing was answered by this step.
    fn settle(
        &mut self,
        answer: Option<Outcome>,
        ticket: Option<Ticket>,
        parked_before: usize,
        described: &str,
    ) -> Done {
        let parked = self
            .target
            .parked()
            .unwrap_or_else(|e| panic!("{described}: counting parked requests: {e}"));
        assert!(
            parked <= parked_before,
            "{described}: {parked} requests parked, more than the {parked_before} sent"
        );
        let mut woken = self
            .target
            .answers(parked_before - parked)
            .unwrap_or_else(|e| panic!("{described}: answers of parked requests: {e}"));
        woken.sort_by_key(|(ticket, _)| *ticket);
        assert_eq!(
            woken.len(),
            parked_before - parked,
            "{described}: answers {woken:?}"
        );
        self.parked = parked;
        let events = self
            .target
            .events()
            .unwrap_or_else(|e| panic!("{described}: reading events: {e}"));
        Done {
            answer,
            ticket,
            events,
            woken,
        }
    }
}

/// One scenario: it drives a fresh target and panics at the first difference.
pub type Scenario = fn(&mut Driver);

/// Every scenario, by name.
pub fn scenarios() -> Vec<(&'static str, Scenario)> {
    [
        waits::SCENARIOS,
        retention::SCENARIOS,
        locks::SCENARIOS,
        pools::SCENARIOS,
        requests::SCENARIOS,
    ]
    .concat()
}

/// Runs every scenario, each on a fresh target from `open`.
pub fn run_scenarios<'a>(open: impl FnMut() -> Box<dyn RuleTarget + 'a>) {
    run_scenarios_but(open, &[]);
}

/// Runs every scenario but those named in `left_out` (each must name one), each on a fresh
/// target from `open`: for a target where the contract allows another behaviour.
pub fn run_scenarios_but<'a>(
    mut open: impl FnMut() -> Box<dyn RuleTarget + 'a>,
    left_out: &[&str],
) {
    let all = scenarios();
    for name in left_out {
        assert!(
            all.iter().any(|(known, _)| known == name),
            "no scenario named {name:?}"
        );
    }
    for (name, scenario) in all {
        if left_out.contains(&name) {
            continue;
        }
        // Shown by the test harness with the failure.
        eprintln!("scenario: {name}");
        let mut target = open();
        let mut driver = Driver::new(target.as_mut());
        scenario(&mut driver);
    }
}
