//! The actors around the protocol and the transition system they make: who sends which step,
//! when it may arrive, and what may go wrong on the way. Also the invariants, checked in every
//! state, and the quiescence check. It never decides a rule of the protocol: that is
//! `world.rs`.
//!
//! Each actor is a small sequential program with one step in flight at a time (the step its
//! program counter names), as `crates/stockd-redis/src/cross.rs` sends them. A transition is
//! one of:
//! - a step in flight is delivered (applied atomically by `world.rs`, its answer moves the actor
//!   on), and maybe also kept in flight to be delivered once more later (a duplicate);
//! - an actor dies, its step dropped or left in flight (the server died after sending it);
//! - a step left in flight (of a dead actor, or a duplicate) is delivered, its answer lost;
//! - a sweeper starts a task from what it reads; the restocker changes the flickering pool.
//!
//! Delivery order between actors is therefore arbitrary. A read that changes nothing (a
//! sweeper reading `applyq`, `partq` or `x_state`) is taken when its task starts: a read
//! delivered later is the same as a read taken then and the next step sent later. Three
//! shortcuts keep out states that add no behaviour; each says why it is exact where it is made:
//! the restocker acts only while a `part_reserve` in its partition is in flight
//! (`reserve_in_flickering_partition_next`), a roll back's read of `pendingq` is taken with its
//! `x_abort(*)`, and the orphan sweep's reads of `partq` and `x_owner` are taken together
//! (`sweeper_tasks`). The retry's and the client's first steps are simply enabled once what
//! they wait for has happened (both triggers, once true, stay true).

use std::fmt;

use crate::world::{
    Attempt, Breach, Decision, Invariant, PartOp, PartStatus, Pool, RecordStatus, Reply, Rules,
    World, PARTITIONS_MAX,
};

/// R1 and R2 (two copies of one reserve request, sent at once) and R3 (the client's retry).
pub const REQUESTERS: usize = 3;
/// Sweepers the model can run.
pub const SWEEPERS_MAX: usize = 2;
/// Steps that can be in flight without their sender: one per death and per duplicate.
pub const IN_FLIGHT_MAX: usize = 4;
/// The partition whose pool the restocker flickers (the hold's second item, B).
pub const FLICKERING_PARTITION: usize = 1;
/// Tasks a lone sweeper may need to finish everything, before quiescence counts as failed.
const QUIESCENCE_TASKS_MAX: usize = 8;

/// One configuration of the model: the hold, the actors and the fault budgets.
#[derive(Clone, Debug)]
pub struct Config {
    pub name: &'static str,
    /// Partitions of the hold's items (2: items A and B; 3: A, B and C), home being A's.
    pub partitions: u8,
    /// The hold id hashes to its home (`x_begin` takes the attempt from home's counter) rather
    /// than to another partition (`x_attempt` there first).
    pub counter_at_home: bool,
    /// The reserve is `confirm: true` (`x_commit` makes `confirmed(A)`, `ap = confirm`).
    pub confirm_on_commit: bool,
    /// R3, the client's retry, runs once R1 or R2 has answered "rolled back" or refused.
    pub retry: bool,
    /// R3 may also start once R1 or R2 died (the client saw the connection close).
    pub retry_after_death: bool,
    /// Sweepers running (0 to 2). Each rolls back a pending or aborting record at any time,
    /// rolls forward a decided transition, and returns orphan parts.
    pub sweepers: u8,
    /// The client's decisions once a copy answered "held", in order (each refused one ends it).
    pub decisions: &'static [Decision],
    /// A sweeper may expire a held hold at any time.
    pub expiry: bool,
    /// Actors that may die, steps that may be delivered twice, restocks of pool B (each +1
    /// or -1, flickering its stock between 0 and 1).
    pub deaths_max: u8,
    pub duplicates_max: u8,
    pub restocks_max: u8,
    /// Units available in pool B at the start (A and C start with one).
    pub b_available_at_start: i8,
    /// From every state, run a lone fault-free sweeper and check it ends well (invariant 6).
    pub check_quiescence: bool,
    /// Invariants not checked (to show a later violation hidden behind an earlier one).
    pub unchecked: &'static [Invariant],
    pub rules: Rules,
}

impl Config {
    /// Two partitions, the attempt counter in another partition, R1, R2 and the retry R3, two
    /// sweepers, one death, one duplicate, B flickering three times, the design's rules.
    pub fn base(name: &'static str) -> Config {
        Config {
            name,
            partitions: 2,
            counter_at_home: false,
            confirm_on_commit: false,
            retry: true,
            retry_after_death: false,
            sweepers: 2,
            decisions: &[],
            expiry: false,
            deaths_max: 1,
            duplicates_max: 1,
            restocks_max: 3,
            b_available_at_start: 0,
            check_quiescence: true,
            unchecked: &[],
            rules: Rules::DESIGN,
        }
    }

    fn checks(&self, invariant: Invariant) -> bool {
        !self.unchecked.contains(&invariant)
    }
}

/// The answer a requester gave its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    Held,
    Refused,
    RolledBack,
}

/// A reserve request's program (`cross::reserve_once` and `cross::roll_back`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Requester {
    NotStarted,
    Attempt,
    Begin {
        candidate: Attempt,
    },
    Reserve {
        attempt: Attempt,
        item: u8,
    },
    Commit {
        attempt: Attempt,
    },
    Apply {
        attempt: Attempt,
        op: PartOp,
        item: u8,
    },
    Applied {
        attempt: Attempt,
        op: PartOp,
    },
    Abort {
        attempt: Attempt,
    },
    Return {
        attempt: Attempt,
        item: u8,
    },
    Forget {
        attempt: Attempt,
    },
    Answered(Outcome),
    Dead,
}

/// A sweeper's program (`cross::finish_left_behind` and the orphan sweep).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Sweeper {
    Idle,
    RollBackAbort,
    RollBackReturn {
        attempt: Attempt,
        item: u8,
    },
    RollBackForget {
        attempt: Attempt,
    },
    ForwardApply {
        attempt: Attempt,
        op: PartOp,
        item: u8,
    },
    ForwardApplied {
        attempt: Attempt,
        op: PartOp,
    },
    OrphanReturn {
        partition: u8,
        attempt: Attempt,
    },
    Dead,
}

/// The client deciding a committed hold (`cross::apply_parts` after a decision).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Decider {
    Waiting,
    Decide {
        index: u8,
    },
    Apply {
        index: u8,
        attempt: Attempt,
        op: PartOp,
        item: u8,
    },
    Applied {
        index: u8,
        attempt: Attempt,
        op: PartOp,
    },
    Done,
    Dead,
}

/// A step in flight: a library call with its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    XAttempt,
    /// Candidate 0: `-`, home's own counter.
    XBegin {
        candidate: Attempt,
    },
    PartReserve {
        attempt: Attempt,
        partition: u8,
    },
    XCommit {
        attempt: Attempt,
    },
    /// Attempt 0: `*`, a sweeper's roll back of whichever attempt is there.
    XAbort {
        attempt: Attempt,
    },
    XForget {
        attempt: Attempt,
    },
    PartApply {
        op: PartOp,
        attempt: Attempt,
        partition: u8,
    },
    XApplied {
        attempt: Attempt,
        op: PartOp,
    },
    Decide(Decision),
}

impl Msg {
    /// `part_apply(op, attempt)` in `partition`.
    fn part_apply(op: PartOp, attempt: Attempt, partition: u8) -> Msg {
        Msg::PartApply {
            op,
            attempt,
            partition,
        }
    }

    /// Whether delivering it again could change anything that matters: `x_attempt` (a
    /// counter moving on, a number nobody sees) is not duplicated, to keep the state space small.
    fn duplicable(self) -> bool {
        self != Msg::XAttempt
    }
}

impl fmt::Display for Msg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Msg::XAttempt => f.write_str("x_attempt (hold id's partition)"),
            Msg::XBegin { candidate: 0 } => f.write_str("x_begin(-) at P0"),
            Msg::XBegin { candidate } => write!(f, "x_begin({candidate}) at P0"),
            Msg::PartReserve { attempt, partition } => {
                write!(f, "part_reserve({attempt}) in P{partition}")
            }
            Msg::XCommit { attempt } => write!(f, "x_commit({attempt}) at P0"),
            Msg::XAbort { attempt: 0 } => f.write_str("x_abort(*) at P0"),
            Msg::XAbort { attempt } => write!(f, "x_abort({attempt}) at P0"),
            Msg::XForget { attempt } => write!(f, "x_forget({attempt}) at P0"),
            Msg::PartApply {
                op,
                attempt,
                partition,
            } => write!(f, "part_apply({op}, {attempt}) in P{partition}"),
            Msg::XApplied { attempt, op } => write!(f, "x_applied({attempt}, {op}) at P0"),
            Msg::Decide(decision) => write!(f, "{decision} at P0"),
        }
    }
}

impl Requester {
    fn message(self) -> Option<Msg> {
        Some(match self {
            Requester::Attempt => Msg::XAttempt,
            Requester::Begin { candidate } => Msg::XBegin { candidate },
            Requester::Reserve { attempt, item } => Msg::PartReserve {
                attempt,
                partition: item,
            },
            Requester::Commit { attempt } => Msg::XCommit { attempt },
            Requester::Apply { attempt, op, item } => Msg::part_apply(op, attempt, item),
            Requester::Applied { attempt, op } => Msg::XApplied { attempt, op },
            Requester::Abort { attempt } => Msg::XAbort { attempt },
            Requester::Return { attempt, item } => Msg::part_apply(PartOp::Return, attempt, item),
            Requester::Forget { attempt } => Msg::XForget { attempt },
            Requester::NotStarted | Requester::Answered(_) | Requester::Dead => return None,
        })
    }

    fn start(config: &Config) -> Requester {
        if config.counter_at_home {
            Requester::Begin { candidate: 0 }
        } else {
            Requester::Attempt
        }
    }

    fn next(self, reply: Reply, partitions: u8) -> Requester {
        let last = |item: u8| item + 1 >= partitions;
        match (self, reply) {
            (Requester::Attempt, Reply::NextAttempt(attempt)) => {
                Requester::Begin { candidate: attempt }
            }
            (Requester::Begin { .. }, Reply::Begun(attempt)) => {
                Requester::Reserve { attempt, item: 0 }
            }
            (Requester::Begin { .. }, Reply::BeginRolledBack) => {
                Requester::Answered(Outcome::RolledBack)
            }
            (Requester::Begin { .. }, Reply::Replay) => Requester::Answered(Outcome::Held),
            (Requester::Reserve { attempt, item }, Reply::PartOk) if last(item) => {
                Requester::Commit { attempt }
            }
            (Requester::Reserve { attempt, item }, Reply::PartOk) => Requester::Reserve {
                attempt,
                item: item + 1,
            },
            (Requester::Reserve { .. }, Reply::PartAborted) => {
                Requester::Answered(Outcome::RolledBack)
            }
            (Requester::Reserve { attempt, .. }, Reply::PartShort) => Requester::Abort { attempt },
            // `part_apply(commit)` only fires the low_stock of the reserve, which the model
            // leaves out: it changes nothing here, so the program goes on to `x_applied`.
            (Requester::Commit { attempt }, Reply::Committed(PartOp::Commit)) => {
                Requester::Applied {
                    attempt,
                    op: PartOp::Commit,
                }
            }
            (Requester::Commit { attempt }, Reply::Committed(op)) => Requester::Apply {
                attempt,
                op,
                item: 0,
            },
            (Requester::Commit { .. }, Reply::Replay) => Requester::Answered(Outcome::Held),
            (Requester::Commit { .. }, Reply::CommitAborted) => {
                Requester::Answered(Outcome::RolledBack)
            }
            (Requester::Apply { attempt, op, item }, _) if last(item) => {
                Requester::Applied { attempt, op }
            }
            (Requester::Apply { attempt, op, item }, _) => Requester::Apply {
                attempt,
                op,
                item: item + 1,
            },
            (Requester::Applied { .. }, _) => Requester::Answered(Outcome::Held),
            (Requester::Abort { .. }, Reply::Aborting(attempt)) => {
                Requester::Return { attempt, item: 0 }
            }
            (Requester::Abort { .. }, Reply::Gone) => Requester::Answered(Outcome::Refused),
            (Requester::Return { attempt, item }, _) if last(item) => Requester::Forget { attempt },
            (Requester::Return { attempt, item }, _) => Requester::Return {
                attempt,
                item: item + 1,
            },
            (Requester::Forget { .. }, _) => Requester::Answered(Outcome::Refused),
            (program, reply) => unreachable!("requester {program:?} answered {reply:?}"),
        }
    }
}

impl Sweeper {
    fn message(self) -> Option<Msg> {
        Some(match self {
            Sweeper::RollBackAbort => Msg::XAbort { attempt: 0 },
            Sweeper::RollBackReturn { attempt, item } => {
                Msg::part_apply(PartOp::Return, attempt, item)
            }
            Sweeper::RollBackForget { attempt } => Msg::XForget { attempt },
            Sweeper::ForwardApply { attempt, op, item } => Msg::part_apply(op, attempt, item),
            Sweeper::ForwardApplied { attempt, op } => Msg::XApplied { attempt, op },
            Sweeper::OrphanReturn { partition, attempt } => {
                Msg::part_apply(PartOp::Return, attempt, partition)
            }
            Sweeper::Idle | Sweeper::Dead => return None,
        })
    }

    fn next(self, reply: Reply, partitions: u8) -> Sweeper {
        let last = |item: u8| item + 1 >= partitions;
        match (self, reply) {
            (Sweeper::RollBackAbort, Reply::Aborting(attempt)) => {
                Sweeper::RollBackReturn { attempt, item: 0 }
            }
            (Sweeper::RollBackAbort, Reply::Gone) => Sweeper::Idle,
            (Sweeper::RollBackReturn { attempt, item }, _) if last(item) => {
                Sweeper::RollBackForget { attempt }
            }
            (Sweeper::RollBackReturn { attempt, item }, _) => Sweeper::RollBackReturn {
                attempt,
                item: item + 1,
            },
            (Sweeper::RollBackForget { .. }, _) => Sweeper::Idle,
            (Sweeper::ForwardApply { attempt, op, item }, _) if last(item) => {
                Sweeper::ForwardApplied { attempt, op }
            }
            (Sweeper::ForwardApply { attempt, op, item }, _) => Sweeper::ForwardApply {
                attempt,
                op,
                item: item + 1,
            },
            (Sweeper::ForwardApplied { .. }, _) => Sweeper::Idle,
            (Sweeper::OrphanReturn { .. }, _) => Sweeper::Idle,
            (program, reply) => unreachable!("sweeper {program:?} answered {reply:?}"),
        }
    }
}

impl Decider {
    fn message(self, config: &Config) -> Option<Msg> {
        Some(match self {
            Decider::Decide { index } => Msg::Decide(config.decisions[index as usize]),
            Decider::Apply {
                attempt, op, item, ..
            } => Msg::part_apply(op, attempt, item),
            Decider::Applied { attempt, op, .. } => Msg::XApplied { attempt, op },
            Decider::Waiting | Decider::Done | Decider::Dead => return None,
        })
    }

    fn next(self, reply: Reply, config: &Config) -> Decider {
        let last = |item: u8| item + 1 >= config.partitions;
        match (self, reply) {
            (Decider::Decide { index }, Reply::Decided(attempt, op)) => Decider::Apply {
                index,
                attempt,
                op,
                item: 0,
            },
            (Decider::Decide { .. }, Reply::DecisionRefused) => Decider::Done,
            (
                Decider::Apply {
                    index,
                    attempt,
                    op,
                    item,
                },
                _,
            ) if last(item) => Decider::Applied { index, attempt, op },
            (
                Decider::Apply {
                    index,
                    attempt,
                    op,
                    item,
                },
                _,
            ) => Decider::Apply {
                index,
                attempt,
                op,
                item: item + 1,
            },
            (Decider::Applied { index, .. }, _)
                if usize::from(index) + 1 < config.decisions.len() =>
            {
                Decider::Decide { index: index + 1 }
            }
            (Decider::Applied { .. }, _) => Decider::Done,
            (program, reply) => unreachable!("decider {program:?} answered {reply:?}"),
        }
    }
}

/// A state of the whole system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    pub world: World,
    pub requesters: [Requester; REQUESTERS],
    pub sweepers: [Sweeper; SWEEPERS_MAX],
    pub decider: Decider,
    /// Steps in flight without a sender waiting for them, sorted (a multiset).
    pub in_flight: [Option<Msg>; IN_FLIGHT_MAX],
    pub deaths_left: u8,
    pub duplicates_left: u8,
    pub restocks_left: u8,
}

/// Who took a transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Actor {
    Requester(u8),
    Sweeper(u8),
    Decider,
    Restocker,
    /// A step in flight whose sender no longer waits for it.
    Network,
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Requester(2) => f.write_str("R3 (retry)"),
            Actor::Requester(i) => write!(f, "R{}", i + 1),
            Actor::Sweeper(i) => write!(f, "sweeper {}", i + 1),
            Actor::Decider => f.write_str("client"),
            Actor::Restocker => f.write_str("restocker"),
            Actor::Network => f.write_str("network"),
        }
    }
}

/// What happened in a transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Delivered {
        msg: Msg,
        reply: Reply,
        duplicated: bool,
    },
    Died {
        left_in_flight: Option<Msg>,
    },
    RollBack,
    RollForward {
        attempt: Attempt,
        op: PartOp,
    },
    OrphanCheck {
        partition: u8,
        attempt: Attempt,
    },
    Expired(Reply),
    Restocked {
        delta: i8,
    },
}

/// A transition's label: enough to replay it and to read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label {
    pub actor: Actor,
    pub event: Event,
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.actor)?;
        match self.event {
            Event::Delivered {
                msg,
                reply,
                duplicated,
            } => {
                write!(f, "{msg} -> {reply}")?;
                if self.actor == Actor::Network {
                    f.write_str(" (nobody waits for the answer)")?;
                }
                if duplicated {
                    f.write_str(" [and delivered once more, later]")?;
                }
                Ok(())
            }
            Event::Died {
                left_in_flight: None,
            } => f.write_str("dies"),
            Event::Died {
                left_in_flight: Some(msg),
            } => write!(f, "dies, {msg} still in flight"),
            Event::RollBack => f.write_str("rolls back the pending/aborting record (pendingq)"),
            Event::RollForward { attempt, op } => {
                write!(
                    f,
                    "rolls forward ap = {op} of attempt {attempt} (applyq, x_state)"
                )
            }
            Event::OrphanCheck { partition, attempt } => write!(
                f,
                "orphan sweep: P{partition}'s part held({attempt}) is due (partq) and home \
                 does not own it (x_owner)"
            ),
            Event::Expired(reply) => write!(f, "expiry at P0 -> {reply}"),
            Event::Restocked { delta } => write!(f, "restock of pool B by {delta:+}"),
        }
    }
}

/// A successor of a state: the transition, the state it leads to, what it broke itself.
pub type Successor = (Label, State, Option<Breach>);

/// The whole system for one configuration.
pub struct System {
    pub config: Config,
}

impl System {
    pub fn new(config: Config) -> System {
        assert!((2..=PARTITIONS_MAX as u8).contains(&config.partitions));
        assert!(usize::from(config.sweepers) <= SWEEPERS_MAX);
        assert!(usize::from(config.deaths_max + config.duplicates_max) <= IN_FLIGHT_MAX);
        assert!(config.decisions.len() < usize::from(u8::MAX));
        System { config }
    }

    pub fn initial(&self) -> State {
        let config = &self.config;
        let mut pools = [Pool::default(); PARTITIONS_MAX];
        for (partition, pool) in pools
            .iter_mut()
            .enumerate()
            .take(usize::from(config.partitions))
        {
            *pool = Pool::with_available(if partition == FLICKERING_PARTITION {
                config.b_available_at_start
            } else {
                1
            });
        }
        let mut sweepers = [Sweeper::Dead; SWEEPERS_MAX];
        for sweeper in sweepers.iter_mut().take(usize::from(config.sweepers)) {
            *sweeper = Sweeper::Idle;
        }
        let state = State {
            world: World::new(pools),
            requesters: [
                Requester::start(config),
                Requester::start(config),
                Requester::NotStarted,
            ],
            sweepers,
            decider: Decider::Waiting,
            in_flight: [None; IN_FLIGHT_MAX],
            deaths_left: config.deaths_max,
            duplicates_left: config.duplicates_max,
            restocks_left: config.restocks_max,
        };
        self.canonical(state)
    }

    /// One representative of the states equal up to symmetry: the two copies R1 and R2 are
    /// interchangeable, so are the sweepers, and steps in flight are a multiset.
    pub fn canonical(&self, mut state: State) -> State {
        state.requesters[..2].sort_unstable();
        state.sweepers.sort_unstable();
        state.in_flight.sort_unstable();
        state
    }

    fn deliver(&self, world: &mut World, msg: Msg, breach: &mut Option<Breach>) -> Reply {
        let rules = &self.config.rules;
        match msg {
            Msg::XAttempt => world.x_attempt(),
            Msg::XBegin { candidate } => world.x_begin(candidate),
            Msg::PartReserve { attempt, partition } => {
                world.part_reserve(rules, attempt, usize::from(partition), breach)
            }
            Msg::XCommit { attempt } => world.x_commit(attempt, self.config.confirm_on_commit),
            Msg::XAbort { attempt } => world.x_abort(attempt),
            Msg::XForget { attempt } => world.x_forget(rules, attempt),
            Msg::PartApply {
                op,
                attempt,
                partition,
            } => world.part_apply(rules, op, attempt, usize::from(partition), breach),
            Msg::XApplied { attempt, op } => world.x_applied(attempt, op),
            Msg::Decide(decision) => world.decide(decision),
        }
    }

    fn push(
        &self,
        out: &mut Vec<Successor>,
        canonical: bool,
        label: Label,
        next: State,
        breach: Option<Breach>,
    ) {
        let next = if canonical {
            self.canonical(next)
        } else {
            next
        };
        let breach = breach.filter(|b| self.config.checks(b.invariant));
        out.push((label, next, breach));
    }

    /// The transitions of an actor's step in flight: delivered (and maybe kept in flight for a
    /// second delivery), or its sender dies, the step dropped or still in flight.
    fn sent(
        &self,
        (state, canonical): (&State, bool),
        out: &mut Vec<Successor>,
        (actor, msg): (Actor, Msg),
        advance: &dyn Fn(&mut State, Reply),
    ) {
        for duplicated in [false, true] {
            if duplicated && (state.duplicates_left == 0 || !msg.duplicable()) {
                continue;
            }
            let mut next = *state;
            let mut breach = None;
            let reply = self.deliver(&mut next.world, msg, &mut breach);
            advance(&mut next, reply);
            if duplicated {
                next.duplicates_left -= 1;
                put_in_flight(&mut next, msg);
            }
            let event = Event::Delivered {
                msg,
                reply,
                duplicated,
            };
            self.push(out, canonical, Label { actor, event }, next, breach);
        }
        if state.deaths_left > 0 {
            for keep in [false, true] {
                let mut next = *state;
                next.deaths_left -= 1;
                kill(&mut next, actor);
                if keep {
                    put_in_flight(&mut next, msg);
                }
                let event = Event::Died {
                    left_in_flight: keep.then_some(msg),
                };
                self.push(out, canonical, Label { actor, event }, next, None);
            }
        }
    }

    /// Every successor of `state`; `canonical` folds each into its representative.
    pub fn successors(&self, state: &State, canonical: bool, out: &mut Vec<Successor>) {
        out.clear();
        let config = &self.config;
        let push = |out: &mut Vec<Successor>, label: Label, next: State, breach: Option<Breach>| {
            self.push(out, canonical, label, next, breach)
        };

        for index in 0..REQUESTERS {
            let requester = state.requesters[index];
            let actor = Actor::Requester(index as u8);
            if let Some(msg) = requester.message() {
                self.sent((state, canonical), out, (actor, msg), &|next, reply| {
                    next.requesters[index] = requester.next(reply, config.partitions)
                });
            } else if requester == Requester::NotStarted && self.retry_may_start(state) {
                // The retry's first step, sent once a copy answered (starting sends it).
                let start = Requester::start(config);
                let msg = start.message().expect("a started requester sends a step");
                self.sent((state, canonical), out, (actor, msg), &|next, reply| {
                    next.requesters[index] = start.next(reply, config.partitions)
                });
            }
        }

        for index in 0..SWEEPERS_MAX {
            let sweeper = state.sweepers[index];
            let actor = Actor::Sweeper(index as u8);
            if let Some(msg) = sweeper.message() {
                self.sent((state, canonical), out, (actor, msg), &|next, reply| {
                    next.sweepers[index] = sweeper.next(reply, config.partitions)
                });
            } else if sweeper == Sweeper::Idle {
                let (tasks, count) = self.sweeper_tasks(&state.world);
                for &(task, event) in &tasks[..count] {
                    if task == Sweeper::RollBackAbort {
                        // Its read of `pendingq` and its `x_abort(*)` together: `x_abort(*)`
                        // changes nothing exactly when `pendingq` is empty (invariant 5), so a
                        // read taken earlier adds states, not behaviours.
                        let msg = task.message().expect("a roll back starts with x_abort(*)");
                        self.sent((state, canonical), out, (actor, msg), &|next, reply| {
                            next.sweepers[index] = task.next(reply, config.partitions)
                        });
                        continue;
                    }
                    let mut next = *state;
                    start_task(&mut next.world, task);
                    next.sweepers[index] = task;
                    push(out, Label { actor, event }, next, None);
                }
                if config.expiry {
                    let mut next = *state;
                    let reply = next.world.decide(Decision::Expire);
                    if reply != Reply::DecisionRefused {
                        push(
                            out,
                            Label {
                                actor,
                                event: Event::Expired(reply),
                            },
                            next,
                            None,
                        );
                    }
                }
            }
        }

        let decider = state.decider;
        if let Some(msg) = decider.message(config) {
            self.sent(
                (state, canonical),
                out,
                (Actor::Decider, msg),
                &|next, reply| next.decider = decider.next(reply, config),
            );
        } else if decider == Decider::Waiting && self.decider_may_start(state) {
            // The first decision, sent once a copy answered "held".
            let start = Decider::Decide { index: 0 };
            let msg = start.message(config).expect("a decision is a step");
            self.sent(
                (state, canonical),
                out,
                (Actor::Decider, msg),
                &|next, reply| next.decider = start.next(reply, config),
            );
        }

        if state.restocks_left > 0 && self.reserve_in_flickering_partition_next(state) {
            let delta = if state.world.pools[FLICKERING_PARTITION].available == 0 {
                1
            } else {
                -1
            };
            let mut next = *state;
            next.restocks_left -= 1;
            if next.world.restock(FLICKERING_PARTITION, delta) {
                push(
                    out,
                    Label {
                        actor: Actor::Restocker,
                        event: Event::Restocked { delta },
                    },
                    next,
                    None,
                );
            }
        }

        for slot in 0..IN_FLIGHT_MAX {
            let Some(msg) = state.in_flight[slot] else {
                continue;
            };
            if slot > 0 && state.in_flight[slot - 1] == Some(msg) && canonical {
                continue; // the same step twice in flight: one successor is enough
            }
            let mut next = *state;
            next.in_flight[slot] = None;
            let mut breach = None;
            let reply = self.deliver(&mut next.world, msg, &mut breach);
            push(
                out,
                Label {
                    actor: Actor::Network,
                    event: Event::Delivered {
                        msg,
                        reply,
                        duplicated: false,
                    },
                },
                next,
                breach,
            );
        }
    }

    /// Whether a `part_reserve` in the flickering partition is in flight. The restocker acts
    /// only then: that pool's available units are read by `part_reserve` alone there, and fall
    /// only through it and restocks, so a restock moved later, to just before the next
    /// `part_reserve` there, is still possible and leaves the same state after it; and a restock
    /// keeps every invariant. Restocking at other times adds states, not behaviours.
    fn reserve_in_flickering_partition_next(&self, state: &State) -> bool {
        let flickering = |msg: Option<Msg>| {
            matches!(msg, Some(Msg::PartReserve { partition, .. })
                if usize::from(partition) == FLICKERING_PARTITION)
        };
        state.requesters.iter().any(|r| flickering(r.message()))
            || state.in_flight.iter().any(|m| flickering(*m))
    }

    fn retry_may_start(&self, state: &State) -> bool {
        self.config.retry
            && state.requesters[..2].iter().any(|r| match r {
                Requester::Answered(Outcome::Refused | Outcome::RolledBack) => true,
                Requester::Dead => self.config.retry_after_death,
                _ => false,
            })
    }

    fn decider_may_start(&self, state: &State) -> bool {
        !self.config.decisions.is_empty()
            && state
                .requesters
                .contains(&Requester::Answered(Outcome::Held))
    }

    /// The tasks an idle sweeper may start, from what it reads: a pending or aborting record
    /// (`pendingq`), a decided transition to apply (`applyq`, `x_state`), a held part whose
    /// home does not own it (`partq`, then `x_owner`). Those two reads of the orphan sweep are
    /// taken together: under the design's rules a part's `hi` never falls and a part held by A
    /// stays A's until it is returned, so `part_apply(return, A)` changes a part only if it is
    /// still held by A when it arrives, whenever `partq` was read.
    fn sweeper_tasks(&self, world: &World) -> ([(Sweeper, Event); 2 + PARTITIONS_MAX], usize) {
        let mut tasks = [(Sweeper::Idle, Event::RollBack); 2 + PARTITIONS_MAX];
        let mut count = 0;
        if world.pending_queued {
            tasks[count] = (Sweeper::RollBackAbort, Event::RollBack);
            count += 1;
        }
        if let Some(record) = world.record {
            if let Some(op) = record.apply {
                let attempt = record.attempt;
                let task = if op == PartOp::Commit {
                    // Nothing to apply to the parts in the model (low_stock only).
                    Sweeper::ForwardApplied { attempt, op }
                } else {
                    Sweeper::ForwardApply {
                        attempt,
                        op,
                        item: 0,
                    }
                };
                tasks[count] = (task, Event::RollForward { attempt, op });
                count += 1;
            }
        }
        for partition in 0..self.config.partitions {
            if let Some(part) = world.parts[usize::from(partition)] {
                if part.status == PartStatus::Held && !world.owns(part.attempt) {
                    let attempt = part.attempt;
                    tasks[count] = (
                        Sweeper::OrphanReturn { partition, attempt },
                        Event::OrphanCheck { partition, attempt },
                    );
                    count += 1;
                }
            }
        }
        (tasks, count)
    }

    /// Whether a sweeper has anything left to do.
    fn sweeper_work(&self, world: &World) -> bool {
        self.sweeper_tasks(world).1 > 0
    }

    /// Whether `state` is an end: nothing in flight, no requester or client that can still
    /// act, every live sweeper idle with nothing left to do (and one alive).
    fn is_end(&self, state: &State) -> bool {
        let requesters_done = state.requesters.iter().all(|r| match r {
            Requester::NotStarted => !self.retry_may_start(state),
            r => r.message().is_none(),
        });
        let decider_done = match state.decider {
            Decider::Waiting => !self.decider_may_start(state),
            d => d.message(&self.config).is_none(),
        };
        requesters_done
            && decider_done
            && state.in_flight.iter().all(Option::is_none)
            && state
                .sweepers
                .iter()
                .all(|s| matches!(s, Sweeper::Idle | Sweeper::Dead))
            && state.sweepers.contains(&Sweeper::Idle)
            && !self.sweeper_work(&state.world)
    }

    /// The invariants of every state (1, 2, 5, 8); with `end`, those of an end (4).
    fn check_world(&self, world: &World, end: bool) -> Option<Breach> {
        let config = &self.config;
        let breach = |invariant: Invariant, what: String| {
            config
                .checks(invariant)
                .then_some(Breach { invariant, what })
        };
        for partition in 0..usize::from(config.partitions) {
            let pool = world.pools[partition];
            let part = world.parts[partition];
            let held_by_part = i8::from(part.is_some_and(|p| p.status == PartStatus::Held));
            let sold_by_part = i8::from(part.is_some_and(|p| p.status == PartStatus::Confirmed));
            if pool.available < 0
                || pool.held < 0
                || pool.sold < 0
                || pool.total != pool.available + pool.held + pool.sold
                || pool.held != held_by_part
                || pool.sold != sold_by_part
            {
                let found = breach(
                    Invariant::Units,
                    format!(
                        "P{partition}'s pool {}/{}/{} of {} (available/held/sold of total) \
                         with its part {:?}",
                        pool.available, pool.held, pool.sold, pool.total, part
                    ),
                );
                if found.is_some() {
                    return found;
                }
            }
        }
        if let Some(record) = world.record {
            if record.status.decided() {
                let allowed: &[PartStatus] = match record.status {
                    RecordStatus::Held => &[PartStatus::Held],
                    RecordStatus::Confirmed => &[PartStatus::Held, PartStatus::Confirmed],
                    RecordStatus::Refunded => &[
                        PartStatus::Held,
                        PartStatus::Confirmed,
                        PartStatus::Refunded,
                    ],
                    RecordStatus::Released | RecordStatus::Expired => {
                        &[PartStatus::Held, PartStatus::Returned]
                    }
                    RecordStatus::Pending | RecordStatus::Aborting => unreachable!(),
                };
                for partition in 0..usize::from(config.partitions) {
                    let part = world.parts[partition];
                    let fine = part.is_some_and(|p| {
                        p.attempt == record.attempt && allowed.contains(&p.status)
                    });
                    if !fine {
                        let found = breach(
                            Invariant::CommittedParts,
                            format!(
                                "the hold is {:?} by attempt {} at home, but P{partition}'s part \
                                 is {:?}",
                                record.status, record.attempt, part
                            ),
                        );
                        if found.is_some() {
                            return found;
                        }
                    }
                }
            }
        }
        for partition in 0..usize::from(config.partitions) {
            if let Some(part) = world.parts[partition] {
                if part.status == PartStatus::Held && !world.owns(part.attempt) {
                    let found = breach(
                        Invariant::Orphan,
                        format!(
                            "P{partition}'s part is held by attempt {} while home is {:?}",
                            part.attempt, world.record
                        ),
                    );
                    if found.is_some() {
                        return found;
                    }
                }
            }
        }
        let rolling = world.record.is_some_and(|r| !r.status.decided());
        if world.pending_queued != rolling {
            let found = breach(
                Invariant::PendingQueue,
                format!(
                    "pendingq {} the hold id while the record is {:?}",
                    if world.pending_queued {
                        "lists"
                    } else {
                        "does not list"
                    },
                    world.record
                ),
            );
            if found.is_some() {
                return found;
            }
        }
        if end {
            return self.check_end(world);
        }
        None
    }

    fn check_end(&self, world: &World) -> Option<Breach> {
        if !self.config.checks(Invariant::End) {
            return None;
        }
        let breach = |what: String| {
            Some(Breach {
                invariant: Invariant::End,
                what,
            })
        };
        if let Some(record) = world.record {
            if !record.status.decided() {
                return breach(format!("the hold id is left undecided: {record:?}"));
            }
        }
        for partition in 0..usize::from(self.config.partitions) {
            let Some(part) = world.parts[partition] else {
                continue;
            };
            let owner = world.record.filter(|r| r.attempt == part.attempt);
            let expected = owner.map(|r| match r.status {
                RecordStatus::Held => PartStatus::Held,
                RecordStatus::Confirmed => PartStatus::Confirmed,
                RecordStatus::Refunded => PartStatus::Refunded,
                _ => PartStatus::Returned,
            });
            if part.status == PartStatus::Held && expected != Some(PartStatus::Held) {
                return breach(format!(
                    "P{partition}'s part is held by attempt {} without its hold (home: {:?})",
                    part.attempt, world.record
                ));
            }
            if let (Some(record), Some(expected)) = (owner, expected) {
                if record.apply.is_none() && part.status != expected {
                    return breach(format!(
                        "the hold is {:?} at home but P{partition}'s part is {:?}",
                        record.status, part.status
                    ));
                }
            }
        }
        if let Some(record) = world.record {
            for partition in 0..usize::from(self.config.partitions) {
                if world.parts[partition].is_none_or(|p| p.attempt != record.attempt) {
                    return breach(format!(
                        "the hold is {:?} by attempt {} at home, but P{partition} has no part of it",
                        record.status, record.attempt
                    ));
                }
            }
        }
        None
    }

    /// Checks `state`: the invariants of every state, and at an end those of the end. Also,
    /// when configured, quiescence. Answers whether it is an end.
    pub fn check(&self, state: &State) -> Result<bool, Breach> {
        let end = self.is_end(state);
        if let Some(breach) = self.check_world(&state.world, end) {
            return Err(breach);
        }
        if self.config.check_quiescence && self.config.checks(Invariant::Quiescence) {
            if let Err(steps) = self.quiesce(state) {
                return Err(Breach {
                    invariant: Invariant::Quiescence,
                    what: steps.join("\n     "),
                });
            }
        }
        Ok(end)
    }

    /// From `state`, every server but the sweepers' stops (requesters and the client die, their
    /// steps not sent), the steps already in flight arrive, the live sweepers finish what they
    /// started, then a lone sweeper, without faults, does every task it finds until none is
    /// left. The end must satisfy invariant 4. On failure, answers the steps taken and why.
    pub fn quiesce(&self, state: &State) -> Result<World, Vec<String>> {
        // Quietly first (this runs from every state); again with the steps written down when
        // it fails.
        self.quiesce_traced(state, None).map_err(|_| {
            let mut steps = vec!["quiescing (the sweepers alone, no faults):".to_string()];
            let why = self
                .quiesce_traced(state, Some(&mut steps))
                .expect_err("quiescence is deterministic");
            steps.push(why);
            steps
        })
    }

    fn quiesce_traced(
        &self,
        state: &State,
        mut steps: Option<&mut Vec<String>>,
    ) -> Result<World, String> {
        let partitions = self.config.partitions;
        let mut world = state.world;
        let mut run = |world: &mut World, msg: Msg| {
            let mut breach = None;
            let reply = self.deliver(world, msg, &mut breach);
            if let Some(steps) = steps.as_deref_mut() {
                steps.push(format!("{msg} -> {reply}"));
            }
            match breach {
                Some(breach) => Err(breach.to_string()),
                None => Ok(reply),
            }
        };
        for msg in state.in_flight.iter().flatten() {
            run(&mut world, *msg)?;
        }
        let mut sweepers = state.sweepers;
        for task in 0..=QUIESCENCE_TASKS_MAX {
            if task > 0 {
                let (tasks, count) = self.sweeper_tasks(&world);
                if count == 0 {
                    return match self.check_world(&world, true) {
                        Some(breach) => Err(breach.to_string()),
                        None => Ok(world),
                    };
                }
                // A lone sweeper: roll back first, then forward, then the orphans.
                start_task(&mut world, tasks[0].0);
                sweepers = [tasks[0].0, Sweeper::Dead];
            }
            for sweeper in sweepers.iter_mut() {
                while let Some(msg) = sweeper.message() {
                    let reply = run(&mut world, msg)?;
                    *sweeper = sweeper.next(reply, partitions);
                }
            }
        }
        Err(format!(
            "a lone sweeper still has work after {QUIESCENCE_TASKS_MAX} tasks"
        ))
    }

    /// A readable line of `state`: the world, then each actor's program counter.
    pub fn describe(&self, state: &State) -> String {
        let mut line = format!("{}", state.world);
        let names = ["R1", "R2", "R3"];
        for (name, requester) in names.iter().zip(&state.requesters) {
            line.push_str(&format!(" | {name} {}", program(requester)));
        }
        for (index, sweeper) in state
            .sweepers
            .iter()
            .enumerate()
            .take(usize::from(self.config.sweepers))
        {
            line.push_str(&format!(" | S{} {}", index + 1, program(sweeper)));
        }
        if !self.config.decisions.is_empty() {
            line.push_str(&format!(" | client {}", program(&state.decider)));
        }
        let in_flight: Vec<String> = state
            .in_flight
            .iter()
            .flatten()
            .map(|m| m.to_string())
            .collect();
        if !in_flight.is_empty() {
            line.push_str(&format!(" | in flight: {}", in_flight.join(", ")));
        }
        line
    }
}

fn program(program: &impl fmt::Debug) -> String {
    format!("{program:?}")
        .replace(" { ", "(")
        .replace(" }", ")")
        .replace("attempt: ", "")
        .replace("item: ", "#")
}

/// What a sweeper's task writes as it starts: the orphan sweep's `x_owner` marks the attempt
/// dead at home (the reads of the other tasks write nothing).
fn start_task(world: &mut World, task: Sweeper) {
    if let Sweeper::OrphanReturn { attempt, .. } = task {
        let owner = world.x_owner(attempt);
        debug_assert!(
            !owner,
            "an orphan task starts only when home disowns the part"
        );
    }
}

fn put_in_flight(state: &mut State, msg: Msg) {
    let slot = state
        .in_flight
        .iter()
        .position(Option::is_none)
        .expect("in-flight capacity covers every death and duplicate");
    state.in_flight[slot] = Some(msg);
}

/// `actor` dies: its program stops for good.
fn kill(state: &mut State, actor: Actor) {
    match actor {
        Actor::Requester(index) => state.requesters[index as usize] = Requester::Dead,
        Actor::Sweeper(index) => state.sweepers[index as usize] = Sweeper::Dead,
        Actor::Decider => state.decider = Decider::Dead,
        Actor::Restocker | Actor::Network => unreachable!("{actor} sends no step of its own"),
    }
}
