//! Fuzz targets of stockd, as library code so that the libFuzzer binaries (`fuzz_targets/`) and
//! the corpus replay test (`tests/corpus.rs`, plain `cargo test` on stable) run the very same
//! checks.
//!
//! - [`request`]: arbitrary bytes as a sequence of HTTP requests sent to the in-process router
//!   over [`backend::FuzzBackend`] (stockd-core's `State` in memory), with the oracles of the
//!   HTTP contract and a differential check against [`naive`], a second, deliberately simple
//!   decoder of the requests written from the contract.
//! - [`sequence`]: arbitrary bytes as a sequence of commands and clock steps applied to the
//!   core's `State`, judged step by step by stockd-model's naive model, then by replaying the
//!   records into a fresh state.
//! - [`storage`]: arbitrary bytes as the files of an engine data directory (log segments and a
//!   snapshot, checksums computed so that the fuzzer gets past them) opened by the engine's
//!   recovery.
//!
//! Every check panics on failure: a panic is what libFuzzer reports as a crash. Nothing here may
//! decide a rule of the contract by calling the code it judges.

pub mod backend;
pub mod naive;
pub mod request;
pub mod sequence;
pub mod storage;
