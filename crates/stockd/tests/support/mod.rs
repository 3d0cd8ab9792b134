//! Test harness shared by the black-box suites: starts real `stockd`, `redis-server` and Redis
//! Cluster processes, talks JSON over HTTP to `stockd`, and compares answers against expected
//! shapes. One file per concern:
//!
//! - [`process`]: the one launcher of every child process (spawn, log, readiness deadline,
//!   SIGKILL on drop);
//! - [`redis`], [`cluster`], [`sentinel`]: a `redis-server`, a Redis Cluster, and a primary with
//!   its replica and three Sentinels, of a test's own;
//! - [`backend`]: which storage `stockd` runs on (`STOCKD_TEST_BACKEND`);
//! - [`server`]: a `stockd serve` process (restart on the same data dir and port, SIGTERM);
//! - [`commands`]: one-shot `stockd` commands a suite runs against a server (`redis accept`);
//! - [`postgres`]: a private PostgreSQL (the lab's, from stockd-bench);
//! - [`api`]: the HTTP handle and the event feed's paging;
//! - [`feed`], [`matching`]: the feed's partition rules and subset matching of answers;
//! - [`workload`]: pools, concurrent reserves and tallies for the load and fault suites.
//!
//! It must never reach into the server's crates: every suite tests the binary through its public
//! HTTP contract and command line only, so the same tests can run against any backend.

#![allow(dead_code, unused_imports)]

pub mod api;
pub mod backend;
pub mod cluster;
pub mod commands;
pub mod feed;
pub mod matching;
pub mod postgres;
pub mod process;
pub mod redis;
pub mod sentinel;
pub mod server;
pub mod workload;

use std::time::{SystemTime, UNIX_EPOCH};

pub use api::*;
pub use backend::*;
pub use cluster::*;
pub use commands::*;
pub use feed::*;
pub use matching::*;
pub use postgres::*;
pub use process::{free_port, Process, READY_TIMEOUT, START_ATTEMPTS};
pub use redis::*;
pub use sentinel::*;
pub use server::*;
pub use workload::*;

/// Wall clock in Unix epoch milliseconds, the unit of every `*_ms` field.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock before 1970")
        .as_millis() as u64
}
