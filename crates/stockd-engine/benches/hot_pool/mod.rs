//! The workload the engine's benches and examples share: one hot pool holding as many units as a
//! pool may, holds of one unit on it reserved and confirmed at once (a shop's checkout), and an
//! engine that never snapshots, so that what they time is the writer and its log alone
//! (snapshots are a pause of their own kind, on another thread).
//!
//! Included by path from each bench and example; it must never hold a measurement itself, only
//! what the measurements share, so that they stay comparable with one another.

// Each bench or example uses part of it.
#![allow(dead_code)]

use std::sync::Arc;

use stockd_core::{Command, HoldId, HoldItem, PoolId, PoolSpec, ReserveRequest, UserId};
use stockd_engine::{Engine, EngineConfig, SystemClock};

/// The pool every hold is on.
pub const POOL: &str = "hot";

/// Creates the hot pool, with as many units as a pool may have.
pub fn put_pool() -> Command {
    Command::PutPool {
        pool: PoolId::parse(POOL).expect("valid id"),
        spec: PoolSpec {
            total: stockd_core::limits::TOTAL_MAX,
            ..PoolSpec::default()
        },
        segments: None,
        if_absent: false,
    }
}

/// A hold of one unit of the hot pool, confirmed at once, by `user` if any.
pub fn claim(hold_id: &str, user: Option<&str>) -> Command {
    Command::Reserve(ReserveRequest {
        hold_id: HoldId::parse(hold_id).expect("valid id"),
        user: user.map(|user| UserId::parse(user).expect("valid id")),
        items: vec![HoldItem {
            pool: PoolId::parse(POOL).expect("valid id"),
            qty: 1,
        }]
        .into(),
        ttl_ms: 600_000,
        confirm: true,
        wait_ms: 0,
    })
}

/// An engine on a fresh temporary directory (kept as long as the returned guard) that never
/// takes a snapshot.
pub fn engine_without_snapshots() -> (Engine, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut config = EngineConfig::new(dir.path());
    config.snapshot_every_records = u64::MAX;
    let engine = Engine::open(config, Arc::new(SystemClock)).expect("engine");
    (engine, dir)
}
