//! A model of the pool-op protocol of segmented pools on a Redis Cluster (a design, not yet in
//! the library): a change to a whole pool (a rebalance that moves available units between
//! segments, a total change) freezes the pool's segments, plans per-segment deltas from what the
//! freeze collected, records the plan at segment 0 (the decision), applies it to each segment
//! exactly once and unfreezes. Explored exhaustively like the hold protocol (`explore.rs`).
//!
//! # What is modelled
//!
//! One pool of two segments: segment 0 in partition K0 (the pool's own, keeping the op record
//! `pop`) and segment 1 in K1. Each segment keeps available, held and sold, `fz` (the op that
//! froze it, 0 for none) and `ao` (the newest op it applied or closed: a step of an op at or
//! below it changes nothing). The actors, each with one step in flight:
//!
//! - M1, a rebalance (a reserve short in segment 1): `pop_begin` at K0 (the record, segment 0
//!   frozen, its available read), `seg_freeze` at K1 (its available read), `pop_plan` (move all
//!   of segment 0's available read to segment 1), `seg_apply` at K1 (still frozen), `pop_end` at
//!   K0 (segment 0's delta, unfreeze, record gone: the op takes effect), `seg_unfreeze` at K1;
//! - M2, a total decrease by one unit taken from segment 1's available (refused when the freeze
//!   read none): the same steps;
//! - a reserver taking one unit in an unfrozen segment, a releaser giving one back in any
//!   segment, frozen or not (confirm, release and expiry still run under a freeze: they only ever
//!   grow available, so a plan made from the freeze's reads stays valid);
//! - sweepers, at the end (`quiesce`): at K0, a record without a plan is rolled back
//!   (`pop_abort`, then `seg_unfreeze` at K1), one with a plan rolled forward (`seg_apply`, then
//!   `pop_end`); at K1, a segment frozen by an op K0 has no record of (`pop_owner`) is unfrozen.
//!
//! Steps arrive in any order; within a budget one is delivered twice, and an actor dies, its
//! step still delivered later or never.
//!
//! # Invariants
//!
//! (1) no count negative: a plan applied to a segment never takes more than it has; (2) the
//! pool's total as a reader collects it (the segments' counts, less the delta of segment 1 when
//! it applied the planned op K0 still records) is the total the ops decided; (3) each op applied
//! at most once per segment; at the end, after the sweepers: (4) no record, no segment frozen,
//! and (2) again.

use std::fmt;

use crate::explore::{Model, Transition};

/// Segments of the pool.
const SEGMENTS: usize = 2;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Segment {
    available: i8,
    held: i8,
    sold: i8,
    /// The op that froze it (0: not frozen).
    frozen_by: u8,
    /// The newest op applied or closed here.
    op_seen: u8,
    /// Ghost: the ops applied here (bit per op id).
    applied: u8,
}

impl Segment {
    fn counted(&self) -> i8 {
        self.available + self.held + self.sold
    }
}

/// The op record at segment 0's partition.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Record {
    op: u8,
    /// The decided deltas of available (and total) per segment.
    plan: Option<[i8; SEGMENTS]>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Step {
    Begin,
    Freeze(u8),
    Plan(u8, [i8; SEGMENTS]),
    Apply(u8, i8),
    End(u8),
    /// A sweeper's `seg_unfreeze` at K1 (after `pop_abort`, or after `pop_owner` said no).
    Unfreeze(u8),
    /// The orphan check's `pop_owner` at K0: does K0 still record this op?
    Owner(u8),
}

/// A sweeper: K0's (roll back or forward, at any time) or K1's (the orphan check).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Sweeper {
    /// Runs it may still start.
    runs: u8,
    in_flight: Option<Step>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Kind {
    Rebalance,
    Shrink,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Stage {
    /// About to send `pop_begin` (again, after a busy answer).
    Start,
    Waiting,
    Done,
    Dead,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Mover {
    kind: Kind,
    stage: Stage,
    /// Segment 0's available as `pop_begin` read it.
    read0: i8,
    in_flight: Option<Step>,
    /// Busy answers it may still retry after.
    retries: u8,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct State {
    segments: [Segment; SEGMENTS],
    record: Option<Record>,
    next_op: u8,
    movers: [Mover; 2],
    /// K0's sweeper, then K1's.
    sweepers: [Sweeper; 2],
    /// A delivered step that may be delivered once more (from mover i).
    duplicate: Option<(u8, Step)>,
    duplicates_left: u8,
    deaths_left: u8,
    reserves_left: u8,
    releases_left: u8,
    /// Ghost: the total the ops decided.
    total: i8,
}

/// The rules under test, so that the tests can show what each one is for.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// Reserves are refused by a frozen segment.
    pub freeze_blocks_reserves: bool,
    /// A segment refuses a step of an op at or below `op_seen`.
    pub fence_by_op: bool,
}

impl Rules {
    pub const DESIGN: Rules = Rules {
        freeze_blocks_reserves: true,
        fence_by_op: true,
    };
}

#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub name: &'static str,
    pub rules: Rules,
    /// Initial available units per segment.
    pub available: [i8; SEGMENTS],
    pub duplicates: u8,
    pub deaths: u8,
    pub reserves: u8,
    pub releases: u8,
    /// Whether M2 (a total decrease) runs beside M1.
    pub shrink: bool,
    /// Runs of each sweeper while the movers run (the end's sweep comes on top).
    pub sweeps: u8,
}

#[derive(Debug, Clone)]
pub struct Breach {
    pub invariant: &'static str,
    pub what: String,
}

impl fmt::Display for Breach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.invariant, self.what)
    }
}

pub struct PoolOps {
    config: Config,
}

fn breach(invariant: &'static str, what: String) -> Option<Breach> {
    Some(Breach { invariant, what })
}

impl PoolOps {
    pub fn new(config: Config) -> PoolOps {
        PoolOps { config }
    }

    fn fenced(&self, segment: &Segment, op: u8) -> bool {
        self.config.rules.fence_by_op && op <= segment.op_seen
    }

    /// Segment 1's delta of `op` as applied (a planned op whose record K0 still keeps has been
    /// applied at K1 but not yet at K0: a reader takes it off).
    fn collected_total(state: &State) -> i8 {
        let mut total: i8 = state.segments.iter().map(Segment::counted).sum();
        if let Some(Record {
            op,
            plan: Some(plan),
        }) = state.record
        {
            if state.segments[1].applied & (1 << op) != 0 {
                total -= plan[1];
            }
        }
        total
    }

    /// Applies `delta` of `op` to segment `index`, once, and unfreezes it.
    fn apply(&self, state: &mut State, index: usize, op: u8, delta: i8) -> Option<Breach> {
        let segment = &mut state.segments[index];
        if self.fenced(segment, op) {
            return None;
        }
        if segment.applied & (1 << op) != 0 {
            return breach(
                "applied once",
                format!("op {op} applied twice to segment {index}"),
            );
        }
        segment.applied |= 1 << op;
        segment.available += delta;
        // Segment 0 applies at `pop_end`, the op's decision made visible, and unfreezes there;
        // another segment stays frozen until a `seg_unfreeze` after `pop_end`, so that no reserve
        // takes its new units before the pool, as K0 shows it, has them.
        if index == 0 && segment.frozen_by == op {
            segment.frozen_by = 0;
        }
        segment.op_seen = segment.op_seen.max(op);
        if segment.available < 0 {
            return breach(
                "no count negative",
                format!(
                    "segment {index} available {} after op {op}",
                    segment.available
                ),
            );
        }
        None
    }

    /// Delivers mover `i`'s `step`; `reply` says whether the mover (alive) hears the answer.
    fn deliver(&self, state: &mut State, i: usize, step: Step, reply: bool) -> Option<Breach> {
        match step {
            Step::Begin => {
                if state.record.is_some() {
                    if reply {
                        let mover = &mut state.movers[i];
                        if mover.retries > 0 {
                            mover.retries -= 1;
                            mover.stage = Stage::Start;
                        } else {
                            mover.stage = Stage::Done;
                        }
                    }
                    return None;
                }
                state.next_op += 1;
                let op = state.next_op;
                state.record = Some(Record { op, plan: None });
                state.segments[0].frozen_by = op;
                if reply {
                    let read0 = state.segments[0].available;
                    let mover = &mut state.movers[i];
                    mover.read0 = read0;
                    mover.in_flight = Some(Step::Freeze(op));
                }
            }
            Step::Freeze(op) => {
                let segment = &mut state.segments[1];
                let ok = !self.fenced(segment, op)
                    && (segment.frozen_by == 0 || segment.frozen_by == op);
                if ok {
                    segment.frozen_by = op;
                }
                let read1 = segment.available;
                if reply {
                    let mover = &mut state.movers[i];
                    if !ok {
                        // Given up: the record is rolled back by a sweeper.
                        mover.stage = Stage::Done;
                        return None;
                    }
                    let plan = match mover.kind {
                        Kind::Rebalance => [-mover.read0, mover.read0],
                        Kind::Shrink if read1 >= 1 => [0, -1],
                        Kind::Shrink => {
                            mover.stage = Stage::Done;
                            return None;
                        }
                    };
                    mover.in_flight = Some(Step::Plan(op, plan));
                }
            }
            Step::Plan(op, plan) => {
                let ok = matches!(state.record, Some(Record { op: o, plan: None }) if o == op);
                if ok {
                    state.record = Some(Record {
                        op,
                        plan: Some(plan),
                    });
                }
                if reply {
                    let mover = &mut state.movers[i];
                    if ok {
                        mover.in_flight = Some(Step::Apply(op, plan[1]));
                    } else {
                        mover.stage = Stage::Done;
                    }
                }
            }
            Step::Apply(op, delta) => {
                if let Some(found) = self.apply(state, 1, op, delta) {
                    return Some(found);
                }
                if reply {
                    state.movers[i].in_flight = Some(Step::End(op));
                }
            }
            Step::End(op) => {
                if let Some(found) = self.end(state, op) {
                    return Some(found);
                }
                if reply {
                    state.movers[i].in_flight = Some(Step::Unfreeze(op));
                }
            }
            Step::Unfreeze(op) => {
                self.unfreeze(state, op);
                if reply {
                    state.movers[i].stage = Stage::Done;
                }
            }
            other => unreachable!("a mover never sends {other:?}"),
        }
        None
    }

    /// `seg_unfreeze(op)` at K1: unfrozen if `op` froze it; `op` fenced out either way (a late
    /// `seg_freeze` of it must not freeze it again).
    fn unfreeze(&self, state: &mut State, op: u8) {
        let one = &mut state.segments[1];
        if one.frozen_by == op {
            one.frozen_by = 0;
        }
        one.op_seen = one.op_seen.max(op);
    }

    /// Delivers sweeper `j`'s step.
    fn deliver_sweep(&self, state: &mut State, j: usize, step: Step) -> Option<Breach> {
        state.sweepers[j].in_flight = None;
        match step {
            Step::Unfreeze(op) => self.unfreeze(state, op),
            Step::Owner(op) => {
                if state.record.map(|r| r.op) != Some(op) {
                    state.sweepers[j].in_flight = Some(Step::Unfreeze(op));
                }
            }
            Step::Apply(op, delta) => {
                if let Some(found) = self.apply(state, 1, op, delta) {
                    return Some(found);
                }
                state.sweepers[j].in_flight = Some(Step::End(op));
            }
            Step::End(op) => {
                if let Some(found) = self.end(state, op) {
                    return Some(found);
                }
                state.sweepers[j].in_flight = Some(Step::Unfreeze(op));
            }
            other => unreachable!("a sweeper never sends {other:?}"),
        }
        None
    }

    /// A sweeper starts a run: K0's looks at the record (rolls back one without a plan at once,
    /// `pop_abort`, then unfreezes K1; rolls forward one with a plan), K1's reads its segment's
    /// freeze and asks K0 whether that op is still recorded.
    fn start_sweep(&self, state: &mut State, j: usize) {
        state.sweepers[j].runs -= 1;
        if j == 0 {
            match state.record {
                None => {}
                Some(Record { op, plan: None }) => {
                    state.record = None;
                    let zero = &mut state.segments[0];
                    if zero.frozen_by == op {
                        zero.frozen_by = 0;
                    }
                    zero.op_seen = zero.op_seen.max(op);
                    state.sweepers[0].in_flight = Some(Step::Unfreeze(op));
                }
                Some(Record {
                    op,
                    plan: Some(plan),
                }) => state.sweepers[0].in_flight = Some(Step::Apply(op, plan[1])),
            }
        } else if state.segments[1].frozen_by != 0 {
            state.sweepers[1].in_flight = Some(Step::Owner(state.segments[1].frozen_by));
        }
    }

    /// `pop_end(op)` at K0: segment 0's delta, the decided total, the record gone.
    fn end(&self, state: &mut State, op: u8) -> Option<Breach> {
        let Some(Record {
            op: recorded,
            plan: Some(plan),
        }) = state.record
        else {
            return None;
        };
        if recorded != op {
            return None;
        }
        if let Some(found) = self.apply(state, 0, op, plan[0]) {
            return Some(found);
        }
        state.total += plan[0] + plan[1];
        state.record = None;
        None
    }

    /// The sweepers, run until nothing is left: what a dead or slow server leaves is finished.
    fn quiesce(&self, state: &mut State) -> Option<Breach> {
        if let Some(Record { op, plan }) = state.record {
            match plan {
                None => {
                    // pop_abort at K0, then seg_unfreeze at K1.
                    state.record = None;
                    let zero = &mut state.segments[0];
                    if zero.frozen_by == op {
                        zero.frozen_by = 0;
                    }
                    zero.op_seen = zero.op_seen.max(op);
                    self.unfreeze(state, op);
                }
                Some(plan) => {
                    if let Some(found) = self.apply(state, 1, op, plan[1]) {
                        return Some(found);
                    }
                    if let Some(found) = self.end(state, op) {
                        return Some(found);
                    }
                    self.unfreeze(state, op);
                }
            }
        }
        // K1's orphan check: frozen by an op K0 has no record of.
        let one = &mut state.segments[1];
        if one.frozen_by != 0 && state.record.map(|r| r.op) != Some(one.frozen_by) {
            one.op_seen = one.op_seen.max(one.frozen_by);
            one.frozen_by = 0;
        }
        None
    }

    fn settled(state: &State) -> bool {
        state
            .movers
            .iter()
            .all(|m| matches!(m.stage, Stage::Done | Stage::Dead) && m.in_flight.is_none())
            && state.sweepers.iter().all(|s| s.in_flight.is_none())
    }
}

/// A transition's label.
pub struct Label(String);

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Model for PoolOps {
    type State = State;
    type Label = Label;
    type Breach = Breach;

    fn initial(&self) -> State {
        let mover = |kind| Mover {
            kind,
            stage: Stage::Start,
            read0: 0,
            in_flight: None,
            retries: 1,
        };
        let mut segments = [Segment::default(); SEGMENTS];
        for (segment, available) in segments.iter_mut().zip(self.config.available) {
            segment.available = available;
        }
        let mut second = mover(Kind::Shrink);
        if !self.config.shrink {
            second.stage = Stage::Done;
        }
        State {
            segments,
            record: None,
            next_op: 0,
            movers: [mover(Kind::Rebalance), second],
            sweepers: [Sweeper {
                runs: self.config.sweeps,
                in_flight: None,
            }; 2],
            duplicate: None,
            duplicates_left: self.config.duplicates,
            deaths_left: self.config.deaths,
            reserves_left: self.config.reserves,
            releases_left: self.config.releases,
            total: self.config.available.iter().sum(),
        }
    }

    fn successors(&self, state: &State, _canonical: bool, out: &mut Vec<Transition<Self>>) {
        for i in 0..2 {
            let mover = state.movers[i];
            // Send: a mover at the start puts `pop_begin` in flight.
            if mover.stage == Stage::Start && mover.in_flight.is_none() {
                let mut next = *state;
                next.movers[i].stage = Stage::Waiting;
                next.movers[i].in_flight = Some(Step::Begin);
                out.push((Label(format!("M{} sends pop_begin", i + 1)), next, None));
            }
            if let Some(step) = mover.in_flight {
                let alive = mover.stage != Stage::Dead;
                // Delivered (its answer heard if the mover is alive), maybe kept as a duplicate.
                for keep in [false, true] {
                    if keep && (state.duplicates_left == 0 || state.duplicate.is_some()) {
                        continue;
                    }
                    let mut next = *state;
                    next.movers[i].in_flight = None;
                    if keep {
                        next.duplicates_left -= 1;
                        next.duplicate = Some((i as u8, step));
                    }
                    let found = self.deliver(&mut next, i, step, alive);
                    let label = format!(
                        "M{} {:?} delivered{}",
                        i + 1,
                        step,
                        if keep { " (and again later)" } else { "" }
                    );
                    out.push((Label(label), next, found));
                }
                // Dropped: only a dead mover's step can be lost.
                if !alive {
                    let mut next = *state;
                    next.movers[i].in_flight = None;
                    out.push((Label(format!("M{} {step:?} lost", i + 1)), next, None));
                }
            }
            if state.deaths_left > 0 && matches!(mover.stage, Stage::Waiting | Stage::Start) {
                let mut next = *state;
                next.deaths_left -= 1;
                next.movers[i].stage = Stage::Dead;
                out.push((Label(format!("M{} dies", i + 1)), next, None));
            }
        }
        for j in 0..2 {
            let sweeper = state.sweepers[j];
            if let Some(step) = sweeper.in_flight {
                let mut next = *state;
                let found = self.deliver_sweep(&mut next, j, step);
                out.push((
                    Label(format!("sweeper K{j} {step:?} delivered")),
                    next,
                    found,
                ));
            } else if sweeper.runs > 0 {
                let mut next = *state;
                self.start_sweep(&mut next, j);
                out.push((Label(format!("sweeper K{j} runs")), next, None));
            }
        }
        if let Some((i, step)) = state.duplicate {
            let mut next = *state;
            next.duplicate = None;
            let found = self.deliver(&mut next, i as usize, step, false);
            out.push((
                Label(format!("M{} {step:?} delivered again", i + 1)),
                next,
                found,
            ));
        }
        for index in 0..SEGMENTS {
            let segment = state.segments[index];
            let open = segment.frozen_by == 0 || !self.config.rules.freeze_blocks_reserves;
            if state.reserves_left > 0 && open && segment.available >= 1 {
                let mut next = *state;
                next.reserves_left -= 1;
                next.segments[index].available -= 1;
                next.segments[index].held += 1;
                out.push((
                    Label(format!("a reserve takes a unit of segment {index}")),
                    next,
                    None,
                ));
            }
            if state.releases_left > 0 && segment.held >= 1 {
                let mut next = *state;
                next.releases_left -= 1;
                next.segments[index].held -= 1;
                next.segments[index].available += 1;
                out.push((
                    Label(format!("a release gives a unit back to segment {index}")),
                    next,
                    None,
                ));
            }
        }
    }

    fn canonical(&self, state: &State) -> State {
        *state
    }

    fn check(&self, state: &State) -> Result<bool, Breach> {
        for (index, segment) in state.segments.iter().enumerate() {
            if segment.available < 0 || segment.held < 0 || segment.sold < 0 {
                return Err(Breach {
                    invariant: "no count negative",
                    what: format!("segment {index}: {segment:?}"),
                });
            }
        }
        let collected = Self::collected_total(state);
        if collected != state.total {
            return Err(Breach {
                invariant: "the collected total is the decided one",
                what: format!("collected {collected}, decided {}", state.total),
            });
        }
        if !Self::settled(state) {
            return Ok(false);
        }
        let mut end = *state;
        if let Some(found) = self.quiesce(&mut end) {
            return Err(found);
        }
        if end.record.is_some() || end.segments.iter().any(|s| s.frozen_by != 0) {
            return Err(Breach {
                invariant: "nothing left frozen",
                what: format!("after the sweepers: {end:?}"),
            });
        }
        if Self::collected_total(&end) != end.total {
            return Err(Breach {
                invariant: "the collected total is the decided one",
                what: format!("after the sweepers: {end:?}"),
            });
        }
        Ok(true)
    }

    fn describe(&self, state: &State) -> String {
        format!(
            "segments {:?} record {:?} movers {:?} total {}",
            state
                .segments
                .iter()
                .map(|s| (s.available, s.held, s.frozen_by, s.op_seen))
                .collect::<Vec<_>>(),
            state.record,
            state
                .movers
                .iter()
                .map(|m| (m.stage, m.in_flight))
                .collect::<Vec<_>>(),
            state.total
        )
    }
}
