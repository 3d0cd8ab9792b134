//! Waiting requests (a reserve or a lock acquire with `wait_ms`), scenario by scenario, through
//! one target: the core's `State` (stockd-core's tests), the embedded engine (stockd-engine's)
//! and the Redis library on a single Redis and on a 16-partition Cluster (stockd-redis's), so
//! that the second implementation of the waiting rules (`lua/waiters.lua`) is held to the same
//! expectations as the first.
//!
//! The random sequences of the model do not wait (the model has no waiters); these scenarios are
//! where waiting is judged. Each is written from the contract: who is served when units come
//! back (arrival order, skipping a waiter that still cannot be satisfied), what a wait's deadline
//! answers, retries of a waiting reserve, pool deletion, the bound on a queue, lock waiters.
//!
//! A target tells when it holds a request parked and how many it holds ([`WaitTarget::parked`]),
//! so that the driver never guesses with a timer: after each step it knows how many parked
//! requests were answered by it, and waits for exactly those answers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use stockd_core::limits::{HOLD_TTL_MS_DEFAULT, WAITERS_PER_KEY_MAX};
use stockd_core::{
    Backend, Command, Error, Event, EventKind, HoldId, HoldItem, HoldStatus, HoldView, LockName,
    LockRequest, Outcome, OwnerId, PoolId, PoolSpec, PoolView, Reply, ReserveRequest, StateConfig,
};
use tokio::runtime::Runtime;

/// A parked request, numbered in the order the driver sent it.
pub type Ticket = usize;

/// What a target did with a request.
#[derive(Debug)]
pub enum Sent {
    Answered(Outcome),
    /// Parked: its answer comes later, through [`WaitTarget::answers`].
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
pub trait WaitTarget {
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

    fn ok(self) -> Done {
        assert!(self.outcome().is_ok(), "expected success: {self:?}");
        self
    }
}

/// Drives a [`WaitTarget`], numbering the parked requests and collecting what each step did.
pub struct Driver<'t> {
    target: &'t mut dyn WaitTarget,
    sent: Ticket,
    parked: usize,
}

impl<'t> Driver<'t> {
    pub fn new(target: &'t mut dyn WaitTarget) -> Driver<'t> {
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
pub const SCENARIOS: &[(&str, Scenario)] = &[
    (
        "a waiting reserve parks, then is served in arrival order",
        parks_then_served_in_arrival_order,
    ),
    (
        "a retry of a waiting reserve is answered when the hold is created",
        a_retry_is_answered_when_the_hold_is_created,
    ),
    (
        "a waiter that still cannot be satisfied is skipped",
        a_waiter_that_cannot_be_satisfied_is_skipped,
    ),
    (
        "waiters across pools are served in arrival order",
        waiters_across_pools_are_served_in_arrival_order,
    ),
    (
        "every return of units serves a waiter",
        every_return_of_units_serves_a_waiter,
    ),
    (
        "a wait's deadline gives success when stock came back at that tick",
        deadline_gives_success_when_stock_came_back,
    ),
    (
        "a wait's deadline answers the first failure of the final attempt",
        deadline_answers_the_first_failure,
    ),
    (
        "deleting a pool answers its waiters with pool_not_found",
        pool_deletion_answers_its_waiters,
    ),
    ("only a shortage parks a reserve", only_a_shortage_parks),
    ("a pool's wait queue is bounded", the_wait_queue_is_bounded),
    (
        "lock waiters get the lock on release or lapse, in arrival order",
        lock_waiters_in_arrival_order,
    ),
];

/// Runs every scenario, each on a fresh target from `open`.
pub fn run_scenarios<'a>(mut open: impl FnMut() -> Box<dyn WaitTarget + 'a>) {
    for (name, scenario) in SCENARIOS {
        // Shown by the test harness with the failure.
        eprintln!("scenario: {name}");
        let mut target = open();
        let mut driver = Driver::new(target.as_mut());
        scenario(&mut driver);
    }
}

// ------------------------------------------------------------------------------------ commands

pub fn pool_id(text: &str) -> PoolId {
    PoolId::parse(text).expect("scenario pool id")
}

fn hold_id(text: &str) -> HoldId {
    HoldId::parse(text).expect("scenario hold id")
}

fn put_pool(pool: &str, total: u64) -> Command {
    Command::PutPool {
        pool: pool_id(pool),
        spec: PoolSpec {
            total,
            ..PoolSpec::default()
        },
        if_absent: false,
    }
}

fn restock(pool: &str, delta: i64) -> Command {
    Command::Restock {
        pool: pool_id(pool),
        delta,
        request_id: None,
    }
}

fn reserve_with(hold: &str, items: &[(&str, u64)], ttl_ms: u64, wait_ms: u64) -> Command {
    Command::Reserve(ReserveRequest {
        hold_id: hold_id(hold),
        user: None,
        items: items
            .iter()
            .map(|(pool, qty)| HoldItem {
                pool: pool_id(pool),
                qty: *qty,
            })
            .collect(),
        ttl_ms,
        confirm: false,
        wait_ms,
    })
}

fn reserve(hold: &str, items: &[(&str, u64)]) -> Command {
    reserve_with(hold, items, HOLD_TTL_MS_DEFAULT, 0)
}

fn reserve_waiting(hold: &str, items: &[(&str, u64)], wait_ms: u64) -> Command {
    reserve_with(hold, items, HOLD_TTL_MS_DEFAULT, wait_ms)
}

fn with_confirm(command: Command) -> Command {
    match command {
        Command::Reserve(request) => Command::Reserve(ReserveRequest {
            confirm: true,
            ..request
        }),
        other => other,
    }
}

fn confirm(hold: &str) -> Command {
    Command::Confirm {
        hold_id: hold_id(hold),
    }
}

fn release(hold: &str) -> Command {
    Command::Release {
        hold_id: hold_id(hold),
    }
}

fn refund(hold: &str) -> Command {
    Command::Refund {
        hold_id: hold_id(hold),
        restock: true,
    }
}

fn get_hold(hold: &str) -> Command {
    Command::GetHold {
        hold_id: hold_id(hold),
    }
}

fn delete_pool(pool: &str) -> Command {
    Command::DeletePool {
        pool: pool_id(pool),
    }
}

fn lock_acquire(name: &str, owner: &str, ttl_ms: u64, wait_ms: u64) -> Command {
    Command::LockAcquire(LockRequest {
        name: LockName::parse(name).expect("scenario lock name"),
        owner: OwnerId::parse(owner).expect("scenario owner"),
        ttl_ms,
        wait_ms,
    })
}

fn lock_renew(name: &str, owner: &str, token: u64, ttl_ms: u64) -> Command {
    Command::LockRenew {
        name: LockName::parse(name).expect("scenario lock name"),
        owner: OwnerId::parse(owner).expect("scenario owner"),
        token,
        ttl_ms,
    }
}

fn lock_release(name: &str, owner: &str, token: u64) -> Command {
    Command::LockRelease {
        name: LockName::parse(name).expect("scenario lock name"),
        owner: OwnerId::parse(owner).expect("scenario owner"),
        token,
    }
}

// ------------------------------------------------------------------------------------ answers

fn hold_view(outcome: &Outcome) -> &HoldView {
    match outcome {
        Ok(Reply::Hold { hold, .. }) => hold,
        other => panic!("expected a hold, got {other:?}"),
    }
}

fn created(outcome: &Outcome) -> bool {
    match outcome {
        Ok(Reply::Hold { created, .. }) => *created,
        other => panic!("expected a hold, got {other:?}"),
    }
}

fn status(outcome: &Outcome) -> HoldStatus {
    hold_view(outcome).status
}

fn lock_token(outcome: &Outcome) -> u64 {
    match outcome {
        Ok(Reply::Lock { token, .. }) => *token,
        other => panic!("expected a lock, got {other:?}"),
    }
}

fn insufficient(pool: &str, available: u64, requested: u64) -> Outcome {
    Err(Error::InsufficientStock {
        pool: pool_id(pool),
        available,
        requested,
    })
}

fn tickets(woken: &[(Ticket, Outcome)]) -> Vec<Ticket> {
    woken.iter().map(|(ticket, _)| *ticket).collect()
}

// ------------------------------------------------------------------------------------ scenarios

fn parks_then_served_in_arrival_order(t: &mut Driver) {
    t.run(put_pool("p", 2), T0).ok();
    t.run(reserve("a", &[("p", 2)]), T0).ok();

    let first = t.run(reserve_waiting("w1", &[("p", 2)], 5_000), T0);
    let w1 = first.waiter();
    assert!(first.events.is_empty(), "a parked request writes nothing");
    let w2 = t
        .run(reserve_waiting("w2", &[("p", 1)], 5_000), T0 + 1)
        .waiter();
    assert_eq!(t.parked(), 2);
    // A parked request is not a hold yet.
    assert_eq!(
        t.run(get_hold("w1"), T0 + 2).error_code(),
        Some("hold_not_found")
    );

    // Both units come back: the first waiter asked for both and gets them.
    let released = t.run(release("a"), T0 + 10).ok();
    assert_eq!(tickets(&released.woken), [w1], "{:?}", released.woken);
    let hold = hold_view(&released.woken[0].1);
    assert_eq!(
        (hold.status, hold.created_at_ms),
        (HoldStatus::Held, T0 + 10)
    );
    assert!(created(&released.woken[0].1));
    assert_eq!(
        released.kinds(),
        [EventKind::Released, EventKind::Held],
        "the waiter's hold follows the release that fed it"
    );
    assert_eq!(t.available("p"), 0);
    assert_eq!(t.parked(), 1);

    // The second waiter's deadline: nothing came back, so the final answer is the shortage.
    assert!(t.tick(T0 + 1 + 4_999).woken.is_empty());
    let timed_out = t.tick(T0 + 1 + 5_000);
    assert_eq!(timed_out.woken, [(w2, insufficient("p", 0, 1))]);
    assert_eq!(t.parked(), 0);
    assert!(timed_out.events.is_empty());
}

/// A client that retries a waiting reserve (the same hold id and body, while the first is still
/// parked) is answered the moment the hold exists, with the replay, not at its own deadline; a
/// different request with that id gets the conflict at the same moment.
fn a_retry_is_answered_when_the_hold_is_created(t: &mut Driver) {
    t.run(put_pool("p", 1), T0).ok();
    t.run(reserve("a", &[("p", 1)]), T0).ok();
    let first = t.run(reserve_waiting("w", &[("p", 1)], 5_000), T0).waiter();
    let retry = t
        .run(reserve_waiting("w", &[("p", 1)], 5_000), T0 + 1)
        .waiter();
    let other = t
        .run(reserve_waiting("w", &[("p", 2)], 5_000), T0 + 2)
        .waiter();
    assert_eq!(t.parked(), 3);

    let released = t.run(release("a"), T0 + 10).ok();
    assert_eq!(
        tickets(&released.woken),
        [first, retry, other],
        "{:?}",
        released.woken
    );
    assert!(created(&released.woken[0].1));
    assert!(!created(&released.woken[1].1), "the retry is a replay");
    assert_eq!(
        hold_view(&released.woken[1].1),
        hold_view(&released.woken[0].1)
    );
    assert_eq!(
        released.woken[2].1.as_ref().unwrap_err().code(),
        "hold_id_conflict"
    );
    assert_eq!(t.parked(), 0);
    // Nothing is left to time out.
    assert!(t.tick(T0 + 5_002).woken.is_empty());
}

fn a_waiter_that_cannot_be_satisfied_is_skipped(t: &mut Driver) {
    t.run(put_pool("p", 3), T0).ok();
    t.run(reserve("a", &[("p", 2)]), T0).ok();
    t.run(reserve("b", &[("p", 1)]), T0).ok();
    let big = t
        .run(reserve_waiting("big", &[("p", 3)], 5_000), T0)
        .waiter();
    let small = t
        .run(reserve_waiting("small", &[("p", 1)], 5_000), T0)
        .waiter();

    // One unit back: the first waiter needs three, so it is skipped; the second is served.
    let released = t.run(release("b"), T0 + 1).ok();
    assert_eq!(tickets(&released.woken), [small]);
    assert_eq!(status(&released.woken[0].1), HoldStatus::Held);
    assert_eq!(t.parked(), 1);

    // Nothing is left for a request that does not wait.
    let late = t.run(reserve("late", &[("p", 1)]), T0 + 2);
    assert_eq!(late.outcome(), &insufficient("p", 0, 1));

    // Two more back: still not enough for the big waiter, so a non-waiting request gets them.
    let released = t.run(release("a"), T0 + 3).ok();
    assert!(released.woken.is_empty(), "{:?}", released.woken);
    assert_eq!(t.available("p"), 2);
    t.run(reserve("late", &[("p", 2)]), T0 + 4).ok();

    let timed_out = t.tick(T0 + 5_000);
    assert_eq!(timed_out.woken, [(big, insufficient("p", 0, 3))]);
}

/// Units that come back go to waiters in arrival order, also when the released hold spans
/// several pools and the waiters each want a different subset of them. The cases run one after
/// the other on one target, each on pools of its own.
fn waiters_across_pools_are_served_in_arrival_order(t: &mut Driver) {
    // (the first waiter's items, the second waiter's items), by pool: 0 is p, 1 is q.
    type Items = &'static [(usize, u64)];
    let cases: [(Items, Items); 4] = [
        (&[(0, 1)], &[(0, 1), (1, 1)]),
        (&[(1, 1)], &[(0, 1), (1, 1)]),
        (&[(0, 1)], &[(1, 1), (0, 1)]),
        (&[(1, 1)], &[(1, 1), (0, 1)]),
    ];
    let mut now = T0;
    for (case, (first_items, second_items)) in cases.into_iter().enumerate() {
        let pools = [format!("p{case}"), format!("q{case}")];
        let items = |picked: Items| -> Vec<(&str, u64)> {
            picked
                .iter()
                .map(|(pool, qty)| (pools[*pool].as_str(), *qty))
                .collect()
        };
        let hold = |name: &str| format!("{name}{case}");
        t.run(put_pool(&pools[0], 1), now).ok();
        t.run(put_pool(&pools[1], 1), now).ok();
        t.run(reserve(&hold("a"), &items(&[(0, 1), (1, 1)])), now)
            .ok();
        let first = t
            .run(
                reserve_waiting(&hold("w1"), &items(first_items), 5_000),
                now,
            )
            .waiter();
        let second = t
            .run(
                reserve_waiting(&hold("w2"), &items(second_items), 5_000),
                now,
            )
            .waiter();

        let released = t.run(release(&hold("a")), now + 1).ok();
        assert_eq!(
            tickets(&released.woken),
            [first],
            "first waiter {first_items:?} arrived before {second_items:?} and can be satisfied"
        );
        assert!(released.woken[0].1.is_ok());
        assert_eq!(t.parked(), 1);
        let timed_out = t.tick(now + 5_000);
        assert_eq!(tickets(&timed_out.woken), [second]);
        assert_eq!(
            timed_out.woken[0].1.as_ref().unwrap_err().code(),
            "insufficient_stock"
        );
        now += 5_001;
    }
}

/// Every way units come back serves a parked reserve at once. The cases run one after the other
/// on one target, each on a pool and holds of its own.
fn every_return_of_units_serves_a_waiter(t: &mut Driver) {
    let cases = [
        "release",
        "restock",
        "put pool with a larger total",
        "refund",
        // Past its deadline, the hold expires on the first command that touches it.
        "lazy expiry through a read",
    ];
    let mut now = T0;
    for (case, name) in cases.into_iter().enumerate() {
        let (pool, hold, waiter) = (format!("p{case}"), format!("a{case}"), format!("w{case}"));
        t.run(put_pool(&pool, 2), now).ok();
        t.run(reserve_with(&hold, &[(&pool, 2)], 10_000, 0), now)
            .ok();
        if name == "refund" {
            t.run(confirm(&hold), now).ok();
        }
        let ticket = t
            .run(reserve_waiting(&waiter, &[(&pool, 1)], 30_000), now)
            .waiter();
        let (command, at_ms) = match name {
            "release" => (release(&hold), now + 1),
            "restock" => (restock(&pool, 1), now + 1),
            "put pool with a larger total" => (put_pool(&pool, 3), now + 1),
            "refund" => (refund(&hold), now + 1),
            _ => (get_hold(&hold), now + 10_000),
        };
        let done = t.run(command, at_ms).ok();
        assert_eq!(tickets(&done.woken), [ticket], "{name}: {:?}", done.woken);
        assert_eq!(status(&done.woken[0].1), HoldStatus::Held, "{name}");
        assert_eq!(t.parked(), 0, "{name}");
        now = at_ms + 1;
    }
}

fn deadline_gives_success_when_stock_came_back(t: &mut Driver) {
    // (hold ttl, waiter arrives after, tick after): the hold's deadline is at or before the tick
    // that ends the wait, and the expiry runs before the waiter's final attempt. Times are from
    // the case's start; each case has a pool of its own.
    let mut start = T0;
    for (case, (ttl_ms, waits_from_ms, tick_ms)) in
        [(1_000, 0, 1_000), (1_200, 0, 1_500), (1_000, 100, 1_100)]
            .into_iter()
            .enumerate()
    {
        let (pool, hold, waiter) = (format!("p{case}"), format!("a{case}"), format!("w{case}"));
        t.run(put_pool(&pool, 1), start).ok();
        t.run(reserve_with(&hold, &[(&pool, 1)], ttl_ms, 0), start)
            .ok();
        let ticket = t
            .run(
                reserve_waiting(&waiter, &[(&pool, 1)], 1_000),
                start + waits_from_ms,
            )
            .waiter();
        let done = t.tick(start + tick_ms);
        assert_eq!(tickets(&done.woken), [ticket], "case {case}");
        assert_eq!(status(&done.woken[0].1), HoldStatus::Held, "case {case}");
        assert_eq!(
            done.kinds(),
            [EventKind::Expired, EventKind::Held],
            "case {case}"
        );
        assert_eq!(t.pool(&pool).held, 1, "case {case}");
        start += tick_ms + 1;
    }
}

fn deadline_answers_the_first_failure(t: &mut Driver) {
    t.run(put_pool("p", 1), T0).ok();
    t.run(put_pool("q", 1), T0).ok();
    t.run(reserve("a", &[("p", 1)]), T0).ok();
    t.run(reserve("b", &[("q", 1)]), T0).ok();
    let waiter = t
        .run(reserve_waiting("w", &[("p", 1), ("q", 1)], 2_000), T0)
        .waiter();
    // p comes back but q is still short: the waiter keeps waiting.
    let released = t.run(release("a"), T0 + 1).ok();
    assert!(released.woken.is_empty());
    assert_eq!(t.available("p"), 1);
    let done = t.tick(T0 + 2_000);
    assert_eq!(done.woken, [(waiter, insufficient("q", 0, 1))]);
    assert_eq!(t.available("p"), 1, "a failed attempt changes nothing");
}

fn pool_deletion_answers_its_waiters(t: &mut Driver) {
    t.run(put_pool("p", 1), T0).ok();
    // Sold out (confirmed), so nothing is held and the pool may be deleted.
    t.run(with_confirm(reserve("a", &[("p", 1)])), T0).ok();
    let waiter = t.run(reserve_waiting("w", &[("p", 1)], 5_000), T0).waiter();
    let deleted = t.run(delete_pool("p"), T0 + 1).ok();
    assert_eq!(
        deleted.woken,
        [(waiter, Err(Error::PoolNotFound { pool: pool_id("p") }))]
    );
    assert_eq!(t.parked(), 0);
    assert!(t.tick(T0 + 5_000).woken.is_empty());
}

fn only_a_shortage_parks(t: &mut Driver) {
    t.run(put_pool("p", 1), T0).ok();
    let cases = [
        (
            reserve_waiting("w", &[("nope", 1)], 5_000),
            "pool_not_found",
        ),
        (reserve_waiting("w", &[("p", 0)], 5_000), "invalid_request"),
        (reserve_waiting("w", &[("p", 1)], 30_001), "invalid_request"),
    ];
    for (command, code) in cases {
        assert_eq!(t.run(command, T0).error_code(), Some(code));
    }
    // Enough stock: a waiting reserve is answered at once.
    let done = t.run(reserve_waiting("w", &[("p", 1)], 5_000), T0);
    assert!(created(done.outcome()));
    assert_eq!(t.parked(), 0);
}

fn the_wait_queue_is_bounded(t: &mut Driver) {
    t.run(put_pool("p", 0), T0).ok();
    let first = t
        .run(reserve_waiting("w0", &[("p", 1)], 5_000), T0)
        .waiter();
    for i in 1..WAITERS_PER_KEY_MAX {
        t.run(reserve_waiting(&format!("w{i}"), &[("p", 1)], 5_000), T0)
            .waiter();
    }
    let refused = t.run(reserve_waiting("over", &[("p", 1)], 5_000), T0);
    assert_eq!(refused.outcome(), &insufficient("p", 0, 1));
    // Arrival order still holds with a full queue: one unit goes to the first waiter.
    let restocked = t.run(restock("p", 1), T0 + 1).ok();
    assert_eq!(tickets(&restocked.woken), [first]);
    assert_eq!(hold_view(&restocked.woken[0].1).hold_id, hold_id("w0"));
}

fn lock_waiters_in_arrival_order(t: &mut Driver) {
    let first = t.run(lock_acquire("l", "o1", 1_000, 0), T0);
    let token1 = lock_token(first.outcome());
    assert!(first.events.is_empty(), "locks give no events");

    let w2 = t
        .run(lock_acquire("l", "o2", 2_000, 5_000), T0 + 1)
        .waiter();
    let w3 = t.run(lock_acquire("l", "o3", 500, 5_000), T0 + 2).waiter();

    // Released: the first waiter gets it, with a new, larger token; the second keeps waiting.
    let released = t.run(lock_release("l", "o1", token1), T0 + 10);
    assert_eq!(released.outcome(), &Ok(Reply::LockReleased));
    assert_eq!(tickets(&released.woken), [w2]);
    let token2 = lock_token(&released.woken[0].1);
    assert!(token2 > token1);
    assert_eq!(
        released.woken[0].1,
        Ok(Reply::Lock {
            token: token2,
            expires_at_ms: T0 + 10 + 2_000
        })
    );

    // The old owner lost it for good.
    let stale = t.run(lock_renew("l", "o1", token1, 1_000), T0 + 11);
    assert_eq!(stale.outcome(), &Err(Error::NotLockOwner));

    // o2's lease lapses: the next waiter gets the lock at that tick.
    assert!(t.tick(T0 + 10 + 1_999).woken.is_empty());
    let lapsed = t.tick(T0 + 10 + 2_000);
    assert_eq!(tickets(&lapsed.woken), [w3]);
    let token3 = lock_token(&lapsed.woken[0].1);
    assert!(token3 > token2);
    assert_eq!(
        t.run(lock_release("l", "o2", token2), T0 + 2_011).outcome(),
        &Err(Error::NotLockOwner)
    );

    // A waiter whose wait ends while the lock is still held gets `lock_held`.
    let w4 = t
        .run(lock_acquire("l", "o4", 1_000, 100), T0 + 2_100)
        .waiter();
    let renewed = t.run(lock_renew("l", "o3", token3, 60_000), T0 + 2_150);
    assert_eq!(
        renewed.outcome(),
        &Ok(Reply::Lock {
            token: token3,
            expires_at_ms: T0 + 2_150 + 60_000
        })
    );
    let timed_out = t.tick(T0 + 2_200);
    assert_eq!(
        timed_out.woken,
        [(
            w4,
            Err(Error::LockHeld {
                expires_at_ms: T0 + 2_150 + 60_000
            })
        )]
    );
}

// ------------------------------------------------------------------------------------ backends

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

    /// Every event since the last call, as [`WaitTarget::events`].
    fn events(&mut self, runtime: &Runtime) -> Result<Vec<Event>, String>;

    /// An answer as the scenarios expect it (a Cluster's partition numbers aside).
    fn normalise(&mut self, _outcome: &mut Outcome) {}
}

/// How long a step may take on a backend before the driver gives up on it.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);

type Pending = tokio::task::JoinHandle<Result<Vec<Outcome>, String>>;

/// A [`WaitTarget`] over a [`Backend`]: each request is a task of `runtime`, so that a parked
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

impl<P: Parking> WaitTarget for OnBackend<'_, P> {
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
