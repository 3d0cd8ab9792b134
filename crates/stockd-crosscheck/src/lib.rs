//! An exhaustive model checker of the cross-partition hold protocol of the Redis backend
//! (docs/redis.md, "Holds over several partitions"). Test-only: it runs no Redis and shares no
//! code with `stockd-redis`; it holds the specification's state machine to its invariants in
//! every state that a small but adversarial world can reach, and prints a shortest trace when
//! one fails. `explore.rs` is the explorer (breadth first over hashed states, with a bound),
//! `world.rs` the protocol's state and steps, `system.rs` the actors and invariants,
//! `configs.rs` the configurations the tests explore.
//!
//! # What is modelled
//!
//! One hold id, reserving one unit of pool A (home, partition P0) and one of pool B (P1), or
//! also one of pool C (P2). Each partition keeps the hold's part (`st`, `at`, `hi`) and its pool
//! (available, held, sold, total); home keeps the record (absent, `pending(A)`, `aborting(A)`,
//! `held(A)`, `confirmed(A)`, `released`, `expired`, `refunded`, with `ap`, which stands for the
//! `applyq` entry too), whether `pendingq` lists the hold id, and `xdead`; the hold id's
//! partition keeps the attempt counter (home's own, in the configurations where the hold id
//! hashes to home). The actors, each a sequential program with one step in flight:
//!
//! - R1 and R2, two copies of one reserve request sent at once, and R3, the client's retry (or
//!   a copy's own retry loop), which starts once a copy answered "rolled back" or refused (in
//!   one configuration also once a copy died);
//! - a restocker flickering pool B between 0 and 1 units;
//! - one or two sweepers: roll back (`x_abort(*)` on a pending or aborting record, then
//!   `part_apply(return, A)` everywhere, then `x_forget(A)`), roll forward (`x_state`, then
//!   `part_apply(ap, A)` everywhere, then `x_applied(A, ap)`), the orphan sweep (a held part
//!   whose home record is gone or of another attempt: `x_owner(A)` at home, which writes
//!   `xdead`, then `part_apply(return, A)`) and, in some configurations, expiry;
//! - in some configurations the client deciding the committed hold (release; confirm then
//!   refund; refund without restock) and applying its decision to the parts.
//!
//! Steps of different actors arrive in any order. Within a budget, a delivered step is
//! delivered once more later (a duplicate), and an actor dies at any point, its step dropped or
//! still delivered after its death. The timeouts only delay the sweepers, so a sweeper may roll
//! back a pending record, roll forward or expire at any time.
//!
//! # From the model to the library (crates/stockd-redis/lua/cross.lua)
//!
//! | model (`world.rs`) | library function |
//! | --- | --- |
//! | `World::x_attempt` | `x_attempt` (the hold id's partition) |
//! | `World::x_begin` (candidate 0: `-`) | `x_begin` |
//! | `World::part_reserve` | `part_reserve` (not `CHECK_ONLY`, a pass that only reads) |
//! | `World::x_commit` | `x_commit` |
//! | `World::x_abort` (attempt 0: `*`) | `x_abort` |
//! | `World::x_forget` | `x_forget` |
//! | `World::part_apply` | `part_apply` (confirm, return, refund, writeoff; commit changes nothing here) |
//! | `World::x_applied` | `x_applied` |
//! | `World::x_owner` | `x_owner` |
//! | `World::decide` | the decisions at home (`release`, `confirm`, `refund`, the expiry sweep), each ending in `S.queue_apply` |
//! | `System::sweeper_tasks` | `S.cross_due` (`pendingq`, `applyq`, `partq`) and `x_state` |
//!
//! The actors' programs follow `crates/stockd-redis/src/cross.rs`: `reserve_once` and
//! `roll_back` (requesters), `apply_parts` (after a commit or a decision), `finish_left_behind`
//! (sweepers).
//!
//! # Invariants
//!
//! In every state: (1) every pool's `total = available + held + sold`, none negative, and its
//! held and sold units exactly those of the part that holds or sold them, so no unit is
//! returned twice; (2) a decided record's parts are all of its attempt, in a state its decision
//! allows: no committed hold with a part returned or missing unless released or expired;
//! (5) `pendingq` lists the hold id exactly while its record is pending or aborting; (8) no
//! orphan: a held part's attempt is the record's at home (the orphan sweep is for a home that
//! lost data). On every transition: (3) no step moves the units of another attempt than its
//! own; (7) no step meets a case the specification's tables leave open. At every end (nothing
//! in flight, nobody left to act, the live sweepers idle with nothing to do): (4) the hold id is
//! decided or absent, no part is held without a record of its attempt that holds it, and every
//! part agrees with its decided record (a committed hold's units held or sold). From every
//! state, (6): the requesters and the client stop, the steps in flight arrive, the sweepers
//! finish what they began, then a lone sweeper without faults works until nothing is left; the
//! end it reaches satisfies 4.
//!
//! # The hole it found, and the fix
//!
//! As first written, docs/redis.md let `x_begin(A)` make `pending(A)` on an absent record whatever
//! A was (unless `xdead`, which only the orphan sweep wrote, forbade it). When the hold id hashes
//! to another partition than home, `x_begin` carries A, and a duplicate of it delivered after A
//! was rolled back and forgotten made `pending(A)` again; a late `x_commit(A)` of a copy still
//! running then committed a hold whose parts were all returned (`tests/design.rs`,
//! `late_begin_...`, with [`Rules::FIRST_DESIGN`]). The design now has `x_forget(A)` write
//! `xdead = A` too ([`Rules::DESIGN`], lua/cross.lua), and every configuration runs with it.
//!
//! # Reductions
//!
//! Symmetry: R1 and R2 are interchangeable, so are the sweepers, and steps in flight are a
//! multiset. And steps that would only add states, not behaviours, are left out or merged: the
//! restocker acts only while a `part_reserve` in B is in flight; a sweeper's read of `pendingq`
//! is taken with its `x_abort(*)`, and the orphan sweep's read of `partq` with its `x_owner`
//! (`system.rs` says why each is exact); `part_apply(commit)` changes nothing modelled.
//!
//! # What is not modelled
//!
//! Time (timeouts, grace times and TTLs only delay a step); several hold ids, users, pool
//! generations and quantities above one unit; `check_only` passes and `hold_id_conflict`;
//! low_stock events and the feed; `part_refundable`; retention forgetting a decided record;
//! Redis losing acknowledged writes and `stockd redis accept`: the only way a part outlives its
//! record, so the orphan sweep never finds work here (invariant 8), and the rows it serves (a
//! held part of an older attempt, `hi` moved alone, `xdead` from `x_owner`) are never
//! exercised; the Lua code itself (the conformance and fault tests run the real library). The
//! budgets bound deaths, duplicates and restocks: a trace that needs more is not explored.

pub mod configs;
pub mod explore;
pub mod poolop;
pub mod system;
pub mod world;

use std::fmt;

pub use explore::{explore, Counterexample, Outcome, Report};
pub use system::{Config, Label, State, System};
pub use world::{Breach, Decision, Invariant, Rules};

impl fmt::Display for Breach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:\n     {}", self.invariant, self.what)
    }
}

impl explore::Model for System {
    type State = State;
    type Label = Label;
    type Breach = Breach;

    fn initial(&self) -> State {
        System::initial(self)
    }

    fn successors(
        &self,
        state: &State,
        canonical: bool,
        out: &mut Vec<explore::Transition<System>>,
    ) {
        System::successors(self, state, canonical, out);
    }

    fn canonical(&self, state: &State) -> State {
        System::canonical(self, *state)
    }

    fn check(&self, state: &State) -> Result<bool, Breach> {
        System::check(self, state)
    }

    fn describe(&self, state: &State) -> String {
        System::describe(self, state)
    }
}

/// The most states an exploration of the crate's tests may visit before giving up.
pub const STATE_LIMIT: usize = 20_000_000;

/// Explores `config` exhaustively (up to [`STATE_LIMIT`] states).
pub fn check(config: Config) -> Report<Breach> {
    let name = config.name;
    explore(&System::new(config), name, STATE_LIMIT)
}
