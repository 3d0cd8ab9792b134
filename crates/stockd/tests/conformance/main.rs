//! The contract conformance suite: every rule of the HTTP API's contract (docs/api.md), as a table
//! of cases run against a real `stockd` process.
//!
//! A case is data: a list of steps, each a request (method, path, JSON body) with the expected
//! status and an expected *subset* of the answer (see `support::match_subset`: generated fields
//! can be left out, `$any`/`$now`/`$save:NAME`/`$same:NAME` markers cover the rest), and whether
//! the answer carries `Stockd-Replayed: true` (only a restock's retry may). Every case
//! gets a fresh five-byte id prefix, substituted for `{p}` in paths and bodies, so all cases of a
//! group share one server and run concurrently without touching each other's pools or holds. A
//! group runs all its cases and reports every failing one, not only the first.
//!
//! The suite must only speak HTTP to the binary: it never links the server's crates, so the same
//! table can run against any backend (`STOCKD_TEST_BACKEND`).

//!
//! Layout: `case.rs` is the case model and its builders, `runner.rs` runs a group; each subject's
//! cases (and the properties that need a server of their own) are in a file of their own:
//! `pools.rs`, `segments.rs`, `holds.rs`, `hold_list.rs`, `batch.rs`, `events.rs`, `locks.rs`, `errors.rs`,
//! `auth.rs`. This file says which tables run together on one server.

#[path = "../support/mod.rs"]
mod support;

mod auth;
mod batch;
mod case;
mod errors;
mod events;
mod hold_list;
mod holds;
mod locks;
mod pools;
mod runner;
mod segments;

use case::Case;
use runner::run_table;
use support::ServerConfig;

/// One test per group, each on a server of its own: `test: "group", config, [tables]`.
macro_rules! groups {
    ($($test:ident: $group:literal, $config:expr, [$($table:expr),+];)+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let mut cases: Vec<Case> = Vec::new();
                $(cases.extend($table());)+
                run_table($group, $config, cases).await;
            }
        )+
    };
}

groups! {
    conformance_pools: "pools", ServerConfig::default(), [pools::pool_cases];
    conformance_segments: "segments", ServerConfig::default(), [segments::segment_cases];
    conformance_holds: "holds", ServerConfig::default(), [holds::hold_cases];
    conformance_hold_list: "hold list", ServerConfig::default(), [hold_list::hold_list_cases];
    // Holds forgotten after retention leave the list (a short retention, on its own server).
    conformance_hold_list_retention: "hold list retention",
        ServerConfig::default().arg("--hold-retention-ms").arg("1500"),
        [hold_list::hold_list_retention_cases];
    conformance_batch_and_events: "batch and events", ServerConfig::default(),
        [batch::batch_cases, events::event_cases];
    conformance_locks: "locks", ServerConfig::default(), [locks::lock_cases];
    conformance_errors_and_limits: "errors and limits", ServerConfig::default(),
        [errors::error_cases];
    conformance_auth_and_operations: "auth and operations", ServerConfig::default().with_auth(),
        [auth::auth_cases];
}

/// A subject's table of cases.
type Table = fn() -> Vec<Case>;

/// The case tables, by subject (the groups above run them).
const TABLES: [(&str, Table); 9] = [
    ("pools", pools::pool_cases),
    ("segments", segments::segment_cases),
    ("holds", holds::hold_cases),
    ("hold list", hold_list::hold_list_cases),
    ("batch", batch::batch_cases),
    ("events", events::event_cases),
    ("locks", locks::lock_cases),
    ("errors", errors::error_cases),
    ("auth", auth::auth_cases),
];

/// The table must stay complete: a guard against cases silently dropped from a group.
#[test]
fn table_size() {
    let tables: Vec<(&str, Vec<Case>)> = TABLES
        .iter()
        .map(|(name, cases)| (*name, cases()))
        .collect();
    let sizes: Vec<(&str, usize)> = tables
        .iter()
        .map(|(name, cases)| (*name, cases.len()))
        .collect();
    let total: usize = sizes.iter().map(|(_, n)| n).sum();
    let steps: usize = tables
        .iter()
        .flat_map(|(_, cases)| cases)
        .map(|case| case.steps.len())
        .sum();
    eprintln!("conformance table: {sizes:?}, {total} cases, {steps} steps in all");
    for (group, size) in sizes {
        assert!(size >= 5, "group {group} has only {size} cases");
    }
    assert!(total >= 200, "the table shrank to {total} cases");
}
