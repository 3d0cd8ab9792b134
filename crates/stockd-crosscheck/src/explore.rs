//! A small explicit-state explorer: breadth first over hashed states, up to a bound on the
//! number of states, checking every state it reaches and every transition it takes. Breadth
//! first, so the first violation found has a shortest trace, replayed into readable steps.
//!
//! It knows nothing of the protocol: a [`Model`] gives the initial state, the successors, the
//! symmetry reduction and the checks. States are stored once, in discovery order (which is the
//! queue), and found again through an open-addressing table of their indexes.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

/// A transition: its label, the state it leads to, and what it broke itself.
pub type Transition<M> = (
    <M as Model>::Label,
    <M as Model>::State,
    Option<<M as Model>::Breach>,
);

/// What the explorer needs of a model.
pub trait Model {
    type State: Clone + Eq + Hash;
    type Label: fmt::Display;
    type Breach: fmt::Display;

    fn initial(&self) -> Self::State;
    /// Successors of `state`, each with its label and what the transition itself broke; with
    /// `canonical`, each folded into the representative of its symmetry class.
    fn successors(&self, state: &Self::State, canonical: bool, out: &mut Vec<Transition<Self>>);
    fn canonical(&self, state: &Self::State) -> Self::State;
    /// Checks a state: `Ok(true)` if it is an end (counted), `Err` if an invariant fails.
    fn check(&self, state: &Self::State) -> Result<bool, Self::Breach>;
    fn describe(&self, state: &Self::State) -> String;
}

/// One step of a counterexample: the transition taken and the state it led to.
pub struct TraceStep {
    pub label: String,
    pub state: String,
}

/// A violation and the shortest way to it.
pub struct Counterexample<B> {
    pub breach: B,
    pub initial: String,
    pub steps: Vec<TraceStep>,
}

impl<B> Counterexample<B> {
    /// Whether some step's label contains `text`.
    pub fn has_step(&self, text: &str) -> bool {
        self.steps.iter().any(|step| step.label.contains(text))
    }

    /// The index of the first step at or after `from` whose label contains `text`.
    pub fn step_index(&self, from: usize, text: &str) -> Option<usize> {
        (from..self.steps.len()).find(|&i| self.steps[i].label.contains(text))
    }
}

impl<B: fmt::Display> fmt::Display for Counterexample<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "violation of invariant {}", self.breach)?;
        writeln!(f, "  0. initial state")?;
        writeln!(f, "     {}", self.initial)?;
        for (index, step) in self.steps.iter().enumerate() {
            writeln!(f, "  {}. {}", index + 1, step.label)?;
            writeln!(f, "     {}", step.state)?;
        }
        Ok(())
    }
}

/// How an exploration ended.
pub enum Outcome<B> {
    /// Every reachable state was explored and none broke an invariant.
    Complete,
    /// A violation, with its trace.
    Violation(Box<Counterexample<B>>),
    /// More states than the bound: nothing was proven.
    StateLimit,
}

/// What an exploration did.
pub struct Report<B> {
    pub name: String,
    pub states: usize,
    pub transitions: u64,
    pub ends: u64,
    pub depth: usize,
    pub elapsed: Duration,
    pub outcome: Outcome<B>,
}

impl<B> Report<B> {
    pub fn complete(&self) -> bool {
        matches!(self.outcome, Outcome::Complete)
    }

    pub fn counterexample(&self) -> Option<&Counterexample<B>> {
        match &self.outcome {
            Outcome::Violation(counterexample) => Some(counterexample),
            _ => None,
        }
    }
}

impl<B: fmt::Display> fmt::Display for Report<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} states, {} transitions, {} ends, depth {}, {:.2} s: ",
            self.name,
            self.states,
            self.transitions,
            self.ends,
            self.depth,
            self.elapsed.as_secs_f64()
        )?;
        match &self.outcome {
            Outcome::Complete => write!(f, "every state explored, no violation"),
            Outcome::StateLimit => write!(f, "state bound reached, nothing proven"),
            Outcome::Violation(counterexample) => write!(f, "\n{counterexample}"),
        }
    }
}

const EMPTY: u32 = u32::MAX;

/// FxHash's mixing step: fast, and good enough for states of small integers.
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        // The table indexes by the high bits: fold the low ones in.
        self.0 ^ (self.0 >> 29)
    }
}

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

fn hash_of<S: Hash>(state: &S) -> u64 {
    let mut hasher = FxHasher(0);
    state.hash(&mut hasher);
    hasher.finish()
}

/// Every state found, in discovery order, with its parent, and a table to find them again.
struct Seen<S> {
    states: Vec<S>,
    parents: Vec<u32>,
    table: Vec<u32>,
}

impl<S: Eq + Hash> Seen<S> {
    fn new() -> Seen<S> {
        Seen {
            states: Vec::new(),
            parents: Vec::new(),
            table: vec![EMPTY; 1 << 16],
        }
    }

    fn slot(&self, state: &S) -> usize {
        let mask = self.table.len() - 1;
        let mut slot = (hash_of(state) as usize) & mask;
        loop {
            let index = self.table[slot];
            if index == EMPTY || self.states[index as usize] == *state {
                return slot;
            }
            slot = (slot + 1) & mask;
        }
    }

    /// Adds `state` unless already seen; answers its index when new.
    fn insert(&mut self, state: S, parent: u32) -> Option<u32> {
        if self.states.len() * 2 >= self.table.len() {
            self.grow();
        }
        let slot = self.slot(&state);
        if self.table[slot] != EMPTY {
            return None;
        }
        let index = u32::try_from(self.states.len()).expect("fewer than 2^32 states");
        self.table[slot] = index;
        self.states.push(state);
        self.parents.push(parent);
        Some(index)
    }

    fn grow(&mut self) {
        self.table = vec![EMPTY; self.table.len() * 2];
        for index in 0..self.states.len() {
            let slot = self.slot(&self.states[index]);
            self.table[slot] = index as u32;
        }
    }

    fn path_to(&self, mut index: u32) -> Vec<u32> {
        let mut path = vec![index];
        while index != 0 {
            index = self.parents[index as usize];
            path.push(index);
        }
        path.reverse();
        path
    }
}

/// Explores every state of `model` reachable from its initial state, up to `state_limit`.
pub fn explore<M: Model>(model: &M, name: &str, state_limit: usize) -> Report<M::Breach> {
    let started = Instant::now();
    let mut seen = Seen::new();
    seen.insert(model.initial(), 0);
    let mut transitions = 0u64;
    let mut ends = 0u64;
    let mut depth = 0usize;
    let mut level_end = 1usize;
    let mut successors = Vec::new();
    let mut next = 0usize;
    let report = |seen: &Seen<M::State>, transitions, ends, depth, outcome| Report {
        name: name.to_string(),
        states: seen.states.len(),
        transitions,
        ends,
        depth,
        elapsed: started.elapsed(),
        outcome,
    };
    while next < seen.states.len() {
        if next == level_end {
            depth += 1;
            level_end = seen.states.len();
        }
        let state = seen.states[next].clone();
        match model.check(&state) {
            Ok(end) => ends += u64::from(end),
            Err(breach) => {
                let trace = trace(model, &seen, next as u32, None, breach);
                return report(&seen, transitions, ends, depth, Outcome::Violation(trace));
            }
        }
        model.successors(&state, true, &mut successors);
        for (_, successor, breach) in successors.drain(..) {
            transitions += 1;
            if let Some(breach) = breach {
                let trace = trace(model, &seen, next as u32, Some(successor), breach);
                return report(
                    &seen,
                    transitions,
                    ends,
                    depth + 1,
                    Outcome::Violation(trace),
                );
            }
            seen.insert(successor, next as u32);
        }
        if seen.states.len() > state_limit {
            return report(&seen, transitions, ends, depth, Outcome::StateLimit);
        }
        next += 1;
    }
    report(&seen, transitions, ends, depth, Outcome::Complete)
}

/// The path to state `index` (then the breaching transition, if any), replayed without the
/// symmetry reduction so that each actor keeps its own name all along.
fn trace<M: Model>(
    model: &M,
    seen: &Seen<M::State>,
    index: u32,
    last: Option<M::State>,
    breach: M::Breach,
) -> Box<Counterexample<M::Breach>> {
    let mut canonical_path: Vec<M::State> = seen
        .path_to(index)
        .into_iter()
        .map(|i| seen.states[i as usize].clone())
        .collect();
    if let Some(state) = &last {
        canonical_path.push(model.canonical(state));
    }
    let mut raw = model.initial();
    let initial = model.describe(&raw);
    let mut steps = Vec::new();
    let mut successors = Vec::new();
    for (position, wanted) in canonical_path.iter().enumerate().skip(1) {
        model.successors(&raw, false, &mut successors);
        let is_last = position == canonical_path.len() - 1 && last.is_some();
        // The last step is the one that broke something (labels name actors by their place
        // before the symmetry reduction, so they are not compared).
        let found = successors.drain(..).find(|(_, state, breach)| {
            model.canonical(state) == *wanted && (!is_last || breach.is_some())
        });
        let (label, state, _) = found.expect("every step of a path replays");
        steps.push(TraceStep {
            label: label.to_string(),
            state: model.describe(&state),
        });
        raw = state;
    }
    Box::new(Counterexample {
        breach,
        initial,
        steps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two counters, each stepped up by one up to `max`; `bad` is a sum that must not be
    /// reached, `swap` folds (a, b) and (b, a) together.
    struct Counters {
        max: u8,
        bad: u8,
        swap: bool,
    }

    impl Model for Counters {
        type State = (u8, u8);
        type Label = String;
        type Breach = String;

        fn initial(&self) -> (u8, u8) {
            (0, 0)
        }

        fn successors(
            &self,
            &(a, b): &(u8, u8),
            canonical: bool,
            out: &mut Vec<(String, (u8, u8), Option<String>)>,
        ) {
            out.clear();
            for (label, next) in [("a+1", (a + 1, b)), ("b+1", (a, b + 1))] {
                if next.0 <= self.max && next.1 <= self.max {
                    let next = if canonical {
                        self.canonical(&next)
                    } else {
                        next
                    };
                    out.push((label.to_string(), next, None));
                }
            }
        }

        fn canonical(&self, &(a, b): &(u8, u8)) -> (u8, u8) {
            if self.swap {
                (a.min(b), a.max(b))
            } else {
                (a, b)
            }
        }

        fn check(&self, &(a, b): &(u8, u8)) -> Result<bool, String> {
            if a + b == self.bad {
                return Err(format!("sum {}", a + b));
            }
            Ok(a == self.max && b == self.max)
        }

        fn describe(&self, state: &(u8, u8)) -> String {
            format!("{state:?}")
        }
    }

    #[test]
    fn explores_every_state_once() {
        let report = explore(
            &Counters {
                max: 9,
                bad: 99,
                swap: false,
            },
            "counters",
            1_000,
        );
        assert!(report.complete());
        assert_eq!(report.states, 100);
        assert_eq!(report.transitions, 2 * 9 * 10);
        assert_eq!(report.ends, 1);
        assert_eq!(report.depth, 18);
    }

    #[test]
    fn folds_symmetric_states() {
        let report = explore(
            &Counters {
                max: 9,
                bad: 99,
                swap: true,
            },
            "counters",
            1_000,
        );
        assert!(report.complete());
        assert_eq!(report.states, 55);
    }

    #[test]
    fn finds_a_shortest_trace_and_replays_it() {
        let report = explore(
            &Counters {
                max: 9,
                bad: 5,
                swap: true,
            },
            "counters",
            1_000,
        );
        let trace = report.counterexample().expect("sum 5 is reachable");
        assert_eq!(trace.breach, "sum 5");
        assert_eq!(trace.steps.len(), 5);
        // Replayed without the symmetry reduction: each state follows from the one before.
        let mut state = (0u8, 0u8);
        for step in &trace.steps {
            match step.label.as_str() {
                "a+1" => state.0 += 1,
                _ => state.1 += 1,
            }
            assert_eq!(step.state, format!("{state:?}"));
        }
    }

    #[test]
    fn stops_at_the_state_bound() {
        let report = explore(
            &Counters {
                max: 200,
                bad: 255,
                swap: false,
            },
            "counters",
            1_000,
        );
        assert!(matches!(report.outcome, Outcome::StateLimit));
        assert!(report.states > 1_000 && report.states < 1_010);
    }
}
