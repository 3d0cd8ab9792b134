//! The `core_sequence` target: arbitrary bytes as a sequence of steps (requests of one to four
//! commands, and time passing with or without a sweep) applied to stockd-core's `State`.
//!
//! The steps are stockd-model's own [`Step`]s over its small universe of ids, decoded by hand
//! from the bytes (each byte picks a variant or a value from a table of edges), and run by
//! stockd-model's runner, which compares every outcome, event, pool and hold with the naive
//! model and checks `State::check_invariants` after every step. Then the records the run logged
//! are replayed into a fresh state, which must rebuild the same events and the same snapshot, as
//! recovery relies on.
//!
//! Waiters are not modelled: against the model a `wait_ms` is 0, or above the limit (refused).
//! Inputs that start with `0xFF` let requests wait and are judged without the model: invariants
//! after every step, every parked request answered exactly once, and the replay.

use std::collections::BTreeMap;
use stockd_core::limits::{
    HOLD_TTL_MS_MAX, LOCK_TTL_MS_MAX, PER_USER_LIMIT_MAX, QTY_MAX, TIME_MS_MAX, TOTAL_MAX,
    WAIT_MS_MAX,
};

use stockd_core::{
    Command, Effects, Event, HoldId, Outcome, Record, State, Step as Decision, WaiterId,
};
use stockd_model::{
    check_sequence_counting, Coverage, Memory, Op, Step, Target, TokenPick, Views, CONFIG, START_MS,
};

/// Steps per input at most, so that one input stays fast.
const STEPS_MAX: usize = 256;

/// Reads values from the input; past its end every byte is 0.
struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Whether reserves and lock acquisitions may wait (a mode without the model).
    waits: bool,
}

impl Input<'_> {
    fn is_empty(&self) -> bool {
        self.at >= self.bytes.len()
    }

    fn byte(&mut self) -> u8 {
        let byte = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        byte
    }

    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }

    fn pick<T: Copy>(&mut self, table: &[T]) -> T {
        table[self.below(table.len())]
    }

    fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }
}

const POOLS: usize = 3;
const HOLDS: usize = 6;
const USERS: usize = 2;
const LOCKS: usize = 2;
const OWNERS: usize = 2;

fn total(input: &mut Input) -> u64 {
    input.pick(&[
        0,
        1,
        2,
        3,
        4,
        5,
        10,
        TOTAL_MAX - 1,
        TOTAL_MAX,
        TOTAL_MAX + 1,
        u64::MAX,
    ])
}

fn qty(input: &mut Input) -> u64 {
    input.pick(&[1, 1, 2, 2, 3, 4, 0, QTY_MAX, QTY_MAX + 1])
}

fn hold_ttl_ms(input: &mut Input) -> u64 {
    input.pick(&[
        1_000,
        1_500,
        2_500,
        4_000,
        8_000,
        999,
        HOLD_TTL_MS_MAX,
        HOLD_TTL_MS_MAX + 1,
    ])
}

fn lock_ttl_ms(input: &mut Input) -> u64 {
    input.pick(&[
        100,
        1_000,
        2_500,
        5_000,
        99,
        LOCK_TTL_MS_MAX,
        LOCK_TTL_MS_MAX + 1,
    ])
}

/// 0, or a wait above the limit (refused); a wait the model would have to serve is made only in
/// the mode without the model.
fn wait_ms(input: &mut Input) -> u64 {
    if input.waits {
        input.pick(&[0, 0, 1_000, 2_500, WAIT_MS_MAX, WAIT_MS_MAX + 1])
    } else {
        input.pick(&[0, 0, 0, WAIT_MS_MAX + 1])
    }
}

fn offset_ms(input: &mut Input) -> Option<i64> {
    input.pick(&[
        None,
        None,
        None,
        Some(-4_000),
        Some(-1),
        Some(0),
        Some(1),
        Some(2_500),
        Some(4_000),
        Some(TIME_MS_MAX as i64),
    ])
}

fn optional(input: &mut Input, table: &[u64]) -> Option<u64> {
    match input.below(table.len() + 2) {
        index if index < table.len() => Some(table[index]),
        _ => None,
    }
}

fn op(input: &mut Input) -> Op {
    match input.below(16) {
        0 | 1 => Op::PutPool {
            pool: input.below(POOLS),
            total: total(input),
            per_user_limit: optional(
                input,
                &[1, 2, 3, 0, PER_USER_LIMIT_MAX, PER_USER_LIMIT_MAX + 1],
            ),
            starts_offset_ms: offset_ms(input),
            ends_offset_ms: offset_ms(input),
            low_stock_threshold: optional(input, &[0, 1, 2, 4, TOTAL_MAX, TOTAL_MAX + 1]),
            segments: optional(input, &[1, 2, 3, 0, 64, 65]),
            if_absent: input.flag(),
        },
        2 => Op::Restock {
            pool: input.below(POOLS),
            delta: input.pick(&[
                1,
                2,
                5,
                -1,
                -2,
                -5,
                0,
                TOTAL_MAX as i64,
                -(TOTAL_MAX as i64),
                TOTAL_MAX as i64 + 1,
                i64::MAX,
                i64::MIN,
            ]),
            request: input
                .flag()
                .then(|| input.below(stockd_model::REQUEST_IDS.len())),
        },
        3 => Op::DeletePool {
            pool: input.below(POOLS),
        },
        4 => {
            if input.flag() {
                Op::GetPool {
                    pool: input.below(POOLS),
                }
            } else {
                Op::ListPools {
                    prefix: input.below(4),
                    after: input.pick(&[None, Some(0), Some(1), Some(2), Some(3)]),
                    limit: input.pick(&[1, 2, 3, 1_000, 0, 1_001]),
                }
            }
        }
        5..=7 => {
            let hold = input.below(HOLDS);
            let user = input.pick(&[None, Some(0), Some(1)]);
            let count = input.pick(&[1, 1, 2, 3, 0]);
            let items = (0..count)
                .map(|_| (input.below(POOLS), qty(input)))
                .collect();
            Op::Reserve {
                hold,
                user: user.filter(|&u| u < USERS),
                items,
                ttl_ms: hold_ttl_ms(input),
                confirm: input.below(4) == 0,
                wait_ms: wait_ms(input),
            }
        }
        8 => Op::ReserveAgain {
            hold: input.below(HOLDS),
            rotate: input.below(3),
            tweak: input.byte() % 10,
        },
        9 => Op::Confirm {
            hold: input.below(HOLDS),
        },
        10 => Op::Release {
            hold: input.below(HOLDS),
        },
        11 => Op::Refund {
            hold: input.below(HOLDS),
            restock: input.flag(),
        },
        12 => {
            if input.flag() {
                Op::Extend {
                    hold: input.below(HOLDS),
                    ttl_ms: hold_ttl_ms(input),
                }
            } else {
                Op::GetHold {
                    hold: input.below(HOLDS),
                }
            }
        }
        13 => Op::LockAcquire {
            lock: input.below(LOCKS),
            owner: input.below(OWNERS),
            ttl_ms: lock_ttl_ms(input),
            wait_ms: wait_ms(input),
        },
        14 => Op::LockRenew {
            lock: input.below(LOCKS),
            owner: input.below(OWNERS),
            token: token(input),
            ttl_ms: lock_ttl_ms(input),
        },
        _ => Op::LockRelease {
            lock: input.below(LOCKS),
            owner: input.below(OWNERS),
            token: token(input),
        },
    }
}

fn token(input: &mut Input) -> TokenPick {
    match input.below(4) {
        0 | 1 => TokenPick::Current,
        2 => TokenPick::Previous,
        _ => TokenPick::Literal(u64::from(input.byte() % 6)),
    }
}

/// Decodes the steps of an input: a byte below 40 is time passing, any other starts a request
/// (of 2 to 4 commands when it is 240 or above). `waits` lets requests wait.
pub fn steps(bytes: &[u8], waits: bool) -> Vec<Step> {
    let mut input = Input {
        bytes,
        at: 0,
        waits,
    };
    let mut steps = Vec::new();
    while !input.is_empty() && steps.len() < STEPS_MAX {
        let kind = input.byte();
        if kind < 40 {
            let ms = input.pick(&[
                0u64, 1, 99, 100, 500, 999, 1_000, 1_001, 1_500, 2_500, 3_000, 4_999, 5_000,
                12_000, 86_400_000,
            ]);
            let sweep = !kind.is_multiple_of(3);
            steps.push(Step::Advance { ms, sweep });
        } else {
            let count = if kind >= 240 { 2 + input.below(3) } else { 1 };
            steps.push(Step::Commands((0..count).map(|_| op(&mut input)).collect()));
        }
    }
    steps
}

/// The core as the runner's target, keeping everything it logged for the replay check.
struct CoreTarget {
    state: State,
    now_ms: u64,
    events: Vec<Event>,
    records: Vec<Record>,
}

impl CoreTarget {
    fn keep(&mut self, effects: Effects) -> Result<(), String> {
        if !effects.woken.is_empty() {
            return Err(format!("woke waiters, but none waits: {:?}", effects.woken));
        }
        self.events.extend(effects.events);
        self.records.extend(effects.records);
        Ok(())
    }
}

impl Target for CoreTarget {
    fn execute(&mut self, commands: &[Command]) -> Result<Vec<Outcome>, String> {
        let mut outcomes = Vec::with_capacity(commands.len());
        for command in commands {
            let mut effects = Effects::default();
            let decision = self
                .state
                .execute(command.clone(), self.now_ms, &mut effects);
            self.keep(effects)?;
            match decision {
                Decision::Done(outcome) => outcomes.push(outcome),
                Decision::Waiting(_) => return Err(format!("parked with wait_ms 0: {command:?}")),
            }
        }
        Ok(outcomes)
    }

    fn advance(&mut self, ms: u64, sweep: bool) -> Result<(), String> {
        self.now_ms += ms;
        if sweep {
            let mut effects = Effects::default();
            self.state.tick(self.now_ms, &mut effects);
            self.keep(effects)?;
        }
        Ok(())
    }

    fn events_after(&mut self, after: u64) -> Result<Vec<Event>, String> {
        Ok(self
            .events
            .iter()
            .filter(|event| event.seq > after)
            .cloned()
            .collect())
    }

    fn views(&mut self, holds: &[HoldId]) -> Result<Views, String> {
        Ok(Views {
            pools: self.state.pools().collect(),
            holds: holds.iter().map(|id| self.state.hold_view(id)).collect(),
        })
    }

    fn check_invariants(&mut self) -> Result<(), String> {
        self.state.check_invariants()?;
        let next_seq = self.events.last().map_or(1, |event| event.seq + 1);
        if self.state.next_seq() != next_seq {
            return Err(format!(
                "next seq is {}, but the last event was {}",
                self.state.next_seq(),
                next_seq - 1
            ));
        }
        Ok(())
    }
}

/// The first byte of an input that lets requests wait (see [`run`]).
const WAITS_MODE: u8 = 0xFF;

/// Runs one fuzz input. An input starting with [`WAITS_MODE`] lets reserves and lock
/// acquisitions wait, which the model does not cover: it is judged by the invariants after every
/// step, every parked request answered exactly once (at the latest when its wait is over), and
/// the replay. Any other input is judged by the model too.
pub fn run(data: &[u8]) {
    let target = match data.split_first() {
        Some((&WAITS_MODE, rest)) => run_with_waits(&steps(rest, true)),
        _ => run_against_model(&steps(data, false)),
    };
    check_replay(target);
}

fn new_target() -> CoreTarget {
    CoreTarget {
        state: State::new(CONFIG),
        now_ms: START_MS,
        events: Vec::new(),
        records: Vec::new(),
    }
}

fn run_against_model(steps: &[Step]) -> CoreTarget {
    let mut target = new_target();
    let mut coverage = Coverage::new();
    if let Err(failure) = check_sequence_counting(&mut target, steps, &mut coverage) {
        panic!("the core and the model disagree: {failure}");
    }
    // `STOCKD_FUZZ_TRACE=1`: what the input decoded to and what happened, to read a reproducer.
    if trace() {
        eprintln!("{steps:#?}");
        for (what, count) in &coverage {
            eprintln!("{count:4}  {what}");
        }
    }
    target
}

fn trace() -> bool {
    std::env::var_os("STOCKD_FUZZ_TRACE").is_some_and(|value| value == "1")
}

/// Drives the core with waiting requests: what `Memory` needs is noted as answers come, parked
/// requests are remembered until their one answer.
fn run_with_waits(steps: &[Step]) -> CoreTarget {
    let mut target = new_target();
    let mut memory = Memory::default();
    let mut parked: BTreeMap<WaiterId, Command> = BTreeMap::new();
    for (index, step) in steps.iter().enumerate() {
        let mut effects = Effects::default();
        match step {
            Step::Advance { ms, sweep } => {
                target.now_ms += ms;
                if *sweep {
                    target.state.tick(target.now_ms, &mut effects);
                }
            }
            Step::Commands(ops) => {
                let commands: Vec<Command> = ops
                    .iter()
                    .map(|op| op.command(target.now_ms, &memory))
                    .collect();
                for command in commands {
                    let decision =
                        target
                            .state
                            .execute(command.clone(), target.now_ms, &mut effects);
                    match decision {
                        Decision::Done(outcome) => memory.note(&command, Some(&outcome)),
                        Decision::Waiting(id) => {
                            memory.note(&command, None);
                            assert!(
                                parked.insert(id, command).is_none(),
                                "waiter id {id} given twice"
                            );
                        }
                    }
                }
            }
        }
        for (id, outcome) in &effects.woken {
            let command = parked
                .remove(id)
                .unwrap_or_else(|| panic!("step {index}: waiter {id} answered, but not waiting"));
            memory.note(&command, Some(outcome));
        }
        target.events.extend(effects.events);
        target.records.extend(effects.records);
        if trace() {
            eprintln!(
                "step {index} at {} ms: {step:?}; {} parked",
                target.now_ms,
                parked.len()
            );
        }
        if let Err(why) = target.state.check_invariants() {
            panic!("step {index} ({step:?}): invariant broken: {why}");
        }
    }
    // Every wait is over after the longest one: each parked request has had its answer.
    let mut effects = Effects::default();
    target.now_ms += WAIT_MS_MAX + 1;
    target.state.tick(target.now_ms, &mut effects);
    for (id, _) in &effects.woken {
        assert!(
            parked.remove(id).is_some(),
            "waiter {id} answered, but not waiting"
        );
    }
    target.events.extend(effects.events);
    target.records.extend(effects.records);
    assert!(
        parked.is_empty(),
        "requests still waiting after their wait is over: {parked:?}"
    );
    assert_eq!(
        target.state.waiter_count(),
        0,
        "the core still holds waiters"
    );
    target
}

/// Replaying the records the run logged into a fresh state must rebuild the same events and,
/// once time has caught up, the same state: recovery relies on it.
fn check_replay(mut target: CoreTarget) {
    // What time did since the last sweep happens first, as an engine does before serving.
    let mut effects = Effects::default();
    target.state.tick(target.now_ms, &mut effects);
    assert!(
        effects.woken.is_empty(),
        "a waiter answered at the end: {:?}",
        effects.woken
    );
    target.events.extend(effects.events);
    target.records.extend(effects.records);
    let mut replayed = State::new(CONFIG);
    let mut events = Vec::new();
    for record in &target.records {
        replayed.apply_record(record, &mut events);
    }
    assert_eq!(events, target.events, "replayed records give other events");
    if let Err(why) = replayed.check_invariants() {
        panic!("the replayed state breaks an invariant: {why}");
    }
    // Forgetting past retention and lapsed leases writes no record: the replayed state does it
    // on its first tick, which must decide nothing the log does not know.
    let mut effects = Effects::default();
    replayed.tick(target.now_ms, &mut effects);
    assert!(
        effects.is_empty(),
        "a tick after replay did something: {effects:?}"
    );
    assert_eq!(
        replayed.snapshot(),
        target.state.snapshot(),
        "the replayed state differs"
    );
    assert_eq!(replayed.next_seq(), target.state.next_seq());
}
