//! The runner: drives one [`Target`] and the [`Model`] through a sequence, step by step, and
//! compares everything a client could see after each step: every outcome, the events (seqs
//! included), every pool and every hold of the universe, and the invariants the target can check
//! itself. On a mismatch it fails with the transcript of the run, so that proptest's shrunk case
//! reads as a story.
//!
//! It must not know which implementation it drives: how time passes, where events are read from
//! and how views are fetched are the target's business. Nothing here decides a rule either: the
//! model does.

use std::collections::BTreeMap;

use proptest::test_runner::TestCaseError;
use stockd_core::{
    Command, Error, Event, EventKind, HoldId, HoldView, Outcome, PoolId, PoolView, Reply,
};

use crate::model::{Expect, Model};
use crate::steps::{hold_id, Memory, Step, CONFIG, HOLDS, START_MS};

/// What the runner needs of an implementation under test. The target's clock starts at
/// [`START_MS`] and its retention is [`CONFIG`]'s; every `wait_ms` it gets is 0.
pub trait Target {
    /// Runs one request: `commands` in order, at the target's current time, one outcome each.
    fn execute(&mut self, commands: &[Command]) -> Result<Vec<Outcome>, String>;

    /// Moves the target's clock `ms` forward. With `sweep`, then makes what time does happen,
    /// as `State::tick` does: holds past their deadline expire, leases lapse, holds past
    /// retention are forgotten; it returns once all of that is done and its events can be read.
    /// Without, nothing may happen until the next request.
    fn advance(&mut self, ms: u64, sweep: bool) -> Result<(), String>;

    /// True for a target that does what time did before every request whatever the runner
    /// wants (the engine's writer ticks first in every batch): the runner then sweeps the model
    /// whenever time passes.
    fn sweeps_before_every_request(&self) -> bool {
        false
    }

    /// Every event with seq above `after`, in seq order. A target of several partitions
    /// (`partitions` > 1) ignores `after`: it answers every event it has not answered before,
    /// partition by partition, each in its partition's seq order.
    fn events_after(&mut self, after: u64) -> Result<Vec<Event>, String>;

    /// How many event-feed partitions the target has. With more than one, seqs are per
    /// partition and there is no order between partitions: the runner compares, partition by
    /// partition, the model's events that belong there (`event_partition`) with the target's, in
    /// order, seqs aside (the target checks that its seqs strictly increase).
    fn partitions(&self) -> u32 {
        1
    }

    /// The partition an event belongs to (its pool's, or its hold's home).
    fn event_partition(&self, _event: &Event) -> u32 {
        0
    }

    /// Every pool in id order, and each of `holds` (`None` when unknown or forgotten). Reading
    /// must change nothing.
    fn views(&mut self, holds: &[HoldId]) -> Result<Views, String>;

    /// Checks the target's own invariants after a step; by default there are none it can check.
    fn check_invariants(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// What a target shows of its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Views {
    pub pools: Vec<PoolView>,
    /// One per hold id asked for, in that order.
    pub holds: Vec<Option<HoldView>>,
}

/// How often each kind of thing happened (`"reserve -> insufficient_stock"`, `"event Expired"`,
/// ...), to show that the generator reaches the interesting cases.
pub type Coverage = BTreeMap<String, usize>;

/// Runs `steps` against `target` and the model; fails at the first difference.
pub fn check_sequence(target: &mut impl Target, steps: &[Step]) -> Result<(), TestCaseError> {
    check_sequence_counting(target, steps, &mut Coverage::new())
}

/// As [`check_sequence`], counting what happened into `coverage`.
pub fn check_sequence_counting(
    target: &mut impl Target,
    steps: &[Step],
    coverage: &mut Coverage,
) -> Result<(), TestCaseError> {
    let mut run = Run {
        model: Model::new(CONFIG),
        now_ms: START_MS,
        memory: Memory::default(),
        seen_seq: 0,
        holds: HOLDS.iter().map(|name| hold_id(name)).collect(),
        transcript: Vec::new(),
    };
    for (index, step) in steps.iter().enumerate() {
        if let Err(why) = run.step(target, index, step, coverage) {
            return Err(TestCaseError::fail(format!(
                "{why}\n\nwhat ran, the failing step last:\n{}",
                run.transcript.join("\n")
            )));
        }
    }
    Ok(())
}

fn note_segments(segments: &mut BTreeMap<PoolId, u64>, model: &Model) {
    for (pool, count) in model.segment_counts() {
        let seen = segments.entry(pool.clone()).or_insert(count);
        *seen = (*seen).max(count);
    }
}

/// Error messages of `invalid_request` are prose; the code is the contract.
pub fn normalise(outcome: &Outcome) -> Outcome {
    match outcome {
        Err(Error::InvalidRequest { .. }) => Err(Error::invalid("")),
        other => other.clone(),
    }
}

/// Cases per property: `PROPTEST_CASES` when set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

struct Run {
    model: Model,
    now_ms: u64,
    memory: Memory,
    /// The seq of the last event already compared.
    seen_seq: u64,
    holds: Vec<HoldId>,
    transcript: Vec<String>,
}

impl Run {
    fn step(
        &mut self,
        target: &mut impl Target,
        index: usize,
        step: &Step,
        coverage: &mut Coverage,
    ) -> Result<(), String> {
        let context = format!("step {index} at {} ms", self.now_ms);
        // The most segments each pool had during the step: its events are checked after all
        // its commands ran, and one of them may have deleted or remade the pool.
        let mut segments: BTreeMap<PoolId, u64> = BTreeMap::new();
        note_segments(&mut segments, &self.model);
        match step {
            Step::Advance { ms, sweep } => {
                let sweep = *sweep || target.sweeps_before_every_request();
                self.transcript.push(format!(
                    "{context}: time passes {ms} ms{}",
                    if sweep {
                        ", then a sweep"
                    } else {
                        ", no sweep"
                    }
                ));
                self.now_ms += ms;
                target
                    .advance(*ms, sweep)
                    .map_err(|e| format!("{context}: advancing time: {e}"))?;
                if sweep {
                    self.model.tick(self.now_ms);
                }
            }
            Step::Commands(ops) => {
                // Every command of a request is made before any runs, as a client sends them.
                let commands: Vec<Command> = ops
                    .iter()
                    .map(|op| op.command(self.now_ms, &self.memory))
                    .collect();
                self.transcript.push(format!("{context}:"));
                let outcomes = target
                    .execute(&commands)
                    .map_err(|e| format!("{context}: executing: {e}"))?;
                if outcomes.len() != commands.len() {
                    return Err(format!(
                        "{context}: {} outcomes for {} commands",
                        outcomes.len(),
                        commands.len()
                    ));
                }
                for (command, outcome) in commands.iter().zip(&outcomes) {
                    self.transcript
                        .push(format!("    {command:?}\n      -> {}", brief(outcome)));
                    count(
                        coverage,
                        format!(
                            "{} -> {}",
                            command_name(command),
                            result_name(command, outcome)
                        ),
                    );
                    self.memory.note(command, Some(outcome));
                    self.compare_outcome(command, outcome)
                        .map_err(|e| format!("{context}: {e}"))?;
                    note_segments(&mut segments, &self.model);
                }
            }
        }
        note_segments(&mut segments, &self.model);
        let expected = self.model.take_events();
        let mut got = target
            .events_after(self.seen_seq)
            .map_err(|e| format!("{context}: reading events: {e}"))?;
        // A hold's events say which segments of a segmented pool spread over partitions gave
        // its units; the model keeps every pool whole, so they are checked here (per pool they
        // add up to the item's qty, in segments the pool has) and then left out.
        for event in &mut got {
            if let Some(takes) = event.segments.take() {
                let items = event.items.as_deref().unwrap_or_default();
                for item in items {
                    let taken: u64 = takes
                        .iter()
                        .filter(|take| take.pool == item.pool)
                        .map(|take| take.qty)
                        .sum();
                    let count = segments.get(&item.pool).copied().unwrap_or(1);
                    let listed = takes.iter().any(|take| take.pool == item.pool);
                    if listed && taken != item.qty {
                        return Err(format!(
                            "{context}: event {event:?}: segments {takes:?} give {taken} of {}",
                            item.qty
                        ));
                    }
                    if takes
                        .iter()
                        .any(|take| take.pool == item.pool && u64::from(take.segment) >= count)
                    {
                        return Err(format!(
                            "{context}: event {event:?}: segments {takes:?} past the pool's {count}"
                        ));
                    }
                }
                if takes
                    .iter()
                    .any(|take| !items.iter().any(|item| item.pool == take.pool))
                {
                    return Err(format!(
                        "{context}: event {event:?}: segments {takes:?} of a pool it does not hold"
                    ));
                }
            }
        }
        if target.partitions() > 1 {
            // A pool of several segments is spread over partitions there: its low_stock comes
            // from a count of the whole pool made after the change that crossed (a pool op), so
            // in its partition it follows the request's other events rather than sitting
            // between a hold's `held` and `confirmed`. Those are compared as a set, the rest in
            // order.
            let spread_low = |event: &Event| {
                event.kind == EventKind::LowStock
                    && event
                        .pool
                        .as_ref()
                        .and_then(|pool| segments.get(pool))
                        .is_some_and(|&count| count > 1)
            };
            for partition in 0..target.partitions() {
                let in_partition = |events: &[Event]| -> (Vec<Event>, Vec<String>) {
                    let mut ordered = Vec::new();
                    let mut unordered = Vec::new();
                    for event in events
                        .iter()
                        .filter(|event| target.event_partition(event) == partition)
                    {
                        let event = Event {
                            seq: 0,
                            ..event.clone()
                        };
                        if spread_low(&event) {
                            unordered.push(format!("{event:?}"));
                        } else {
                            ordered.push(event);
                        }
                    }
                    unordered.sort();
                    (ordered, unordered)
                };
                let (expected, got) = (in_partition(&expected), in_partition(&got));
                if got != expected {
                    return Err(format!(
                        "{context}: events of partition {partition} differ\n  expected \
                         {expected:?}\n  got      {got:?}"
                    ));
                }
            }
        } else if got != expected {
            return Err(format!(
                "{context}: events differ\n  expected {expected:?}\n  got      {got:?}"
            ));
        }
        if matches!(step, Step::Advance { .. }) && expected.len() >= 2 {
            count(coverage, "tick expiring 2+ holds".to_string());
        }
        for event in &expected {
            count(coverage, format!("event {:?}", event.kind));
            if matches!(step, Step::Commands(_)) && event.kind == EventKind::Expired {
                count(coverage, "hold expired by a command".to_string());
            }
        }
        self.seen_seq = self.model.next_seq() - 1;
        // A hold time has acted on while nothing swept would change if read; such holds are
        // compared once a command or a sweep has settled them.
        let readable: Vec<HoldId> = self
            .holds
            .iter()
            .filter(|id| self.model.settled(id, self.now_ms))
            .cloned()
            .collect();
        let views = target
            .views(&readable)
            .map_err(|e| format!("{context}: reading views: {e}"))?;
        let pools = self.model.pool_views();
        if views.pools != pools {
            return Err(format!(
                "{context}: pool views differ\n  expected {pools:?}\n  got      {:?}",
                views.pools
            ));
        }
        if views.holds.len() != readable.len() {
            return Err(format!("{context}: views of {} holds", views.holds.len()));
        }
        for (id, got) in readable.iter().zip(&views.holds) {
            let expected = self.model.hold_view(id, self.now_ms);
            if *got != expected {
                return Err(format!(
                    "{context}: hold {id} differs\n  expected {expected:?}\n  got      {got:?}"
                ));
            }
        }
        target
            .check_invariants()
            .map_err(|e| format!("{context}: invariant broken: {e}"))
    }

    fn compare_outcome(&mut self, command: &Command, outcome: &Outcome) -> Result<(), String> {
        check_outcome(&mut self.model, command, outcome, self.now_ms)
    }
}

/// Runs `command` on `model` at `now_ms` and checks `outcome`, the target's answer to it: equal
/// to the model's (invalid-request messages aside), or for a lock grant, a lease ending when the
/// model says with a fencing token above every earlier one (which the model then records).
pub fn check_outcome(
    model: &mut Model,
    command: &Command,
    outcome: &Outcome,
    now_ms: u64,
) -> Result<(), String> {
    match model.execute(command, now_ms) {
        Expect::Exact(expected) => {
            let got = normalise(outcome);
            if got != expected {
                return Err(format!(
                    "outcome of {command:?}\n  expected {expected:?}\n  got      {got:?}"
                ));
            }
        }
        Expect::LockGranted {
            name,
            owner,
            expires_at_ms,
        } => {
            let Ok(Reply::Lock {
                token,
                expires_at_ms: got_expires_at_ms,
            }) = outcome
            else {
                return Err(format!(
                    "expected a lock grant for {command:?}, got {outcome:?}"
                ));
            };
            if *got_expires_at_ms != expires_at_ms {
                return Err(format!(
                    "lease of {command:?} ends at {got_expires_at_ms}, expected {expires_at_ms}"
                ));
            }
            if let Some(last) = model.last_token(&name) {
                if *token <= last {
                    return Err(format!(
                        "fence {token} of {command:?} not above the last one, {last}"
                    ));
                }
            }
            model.granted(name, owner, *token, expires_at_ms);
        }
    }
    Ok(())
}

fn count(coverage: &mut Coverage, key: String) {
    *coverage.entry(key).or_default() += 1;
}

fn command_name(command: &Command) -> &'static str {
    match command {
        Command::PutPool { .. } => "put_pool",
        Command::Restock {
            request_id: Some(_),
            ..
        } => "restock_request_id",
        Command::Restock { .. } => "restock",
        Command::GetPool { .. } => "get_pool",
        Command::GetSegments { .. } => "get_segments",
        Command::ListPools { .. } => "list_pools",
        Command::DeletePool { .. } => "delete_pool",
        Command::Reserve(request) if request.confirm => "reserve_confirm",
        Command::Reserve(_) => "reserve",
        Command::Confirm { .. } => "confirm",
        Command::Release { .. } => "release",
        Command::Refund { .. } => "refund",
        Command::Extend { .. } => "extend",
        Command::GetHold { .. } => "get_hold",
        Command::ListHolds { .. } => "list_holds",
        Command::LockAcquire(_) => "lock_acquire",
        Command::LockRenew { .. } => "lock_renew",
        Command::LockRelease { .. } => "lock_release",
    }
}

fn result_name(command: &Command, outcome: &Outcome) -> &'static str {
    match outcome {
        Ok(Reply::Hold { created: false, .. }) if matches!(command, Command::Reserve(_)) => {
            "ok (replay)"
        }
        Ok(Reply::Pool { created: true, .. }) => "ok (created)",
        Ok(Reply::Pool { replayed: true, .. }) => "ok (replay)",
        Ok(Reply::PoolList { next: Some(_), .. }) | Ok(Reply::HoldList { next: Some(_), .. }) => {
            "ok (more)"
        }
        Ok(_) => "ok",
        Err(error) => error.code(),
    }
}

/// An outcome in a few words, for the transcript.
fn brief(outcome: &Outcome) -> String {
    match outcome {
        Ok(Reply::Hold { hold, created }) => format!(
            "hold {} {} (created {created}, expires at {}, finished at {:?})",
            hold.hold_id,
            hold.status.as_str(),
            hold.expires_at_ms,
            hold.finished_at_ms
        ),
        Ok(Reply::Pool {
            pool,
            created,
            replayed,
        }) => format!(
            "pool {}: total {} available {} held {} sold {} (created {created}, replayed \
             {replayed})",
            pool.pool, pool.total, pool.available, pool.held, pool.sold
        ),
        Ok(Reply::PoolList { pools, next }) => format!(
            "pools {:?}, next {next:?}",
            pools.iter().map(|p| p.pool.as_str()).collect::<Vec<_>>()
        ),
        Ok(Reply::HoldList { holds, next }) => format!(
            "holds {:?}, next {next:?}",
            holds
                .iter()
                .map(|h| format!("{} {}", h.hold_id, h.status.as_str()))
                .collect::<Vec<_>>()
        ),
        Ok(other) => format!("{other:?}"),
        Err(error) => format!("{}: {error}", error.code()),
    }
}
