//! Model-based testing of stockd, shared by every implementation of the contract.
//!
//! [`Model`] is a deliberately naive second implementation of the contract; [`sequences`]
//! generates random command sequences with time passing; [`check_sequence`] runs one sequence
//! against the model and a [`Target`] and compares every outcome, event and view. The targets
//! are the core's `State` (stockd-core's tests), the embedded engine (stockd-engine's tests) and
//! the Redis library (stockd-redis's tests), so all three are held to one model by one runner.
//! The model does not wait; [`rules`] holds the same targets to the rules, scenario by
//! scenario.
//!
//! A dev-only crate (never published, never a normal dependency): it owns no rule of the
//! contract, only the model that judges them, and must never borrow code from what it judges.

mod backend;
mod model;
pub mod rules;
mod runner;
mod steps;

pub use backend::{read_events, read_views};
pub use model::{Expect, Model};
pub use runner::{
    cases, check_outcome, check_sequence, check_sequence_counting, normalise, Coverage, Target,
    Views,
};
pub use steps::{
    hold_id, pool_id, sequences, sequences_with_waits, Memory, Op, Step, TokenPick, CONFIG, HOLDS,
    POOLS, REQUEST_IDS, START_MS,
};
