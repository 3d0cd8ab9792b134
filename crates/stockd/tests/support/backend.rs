//! Which storage a suite's `stockd` runs on: a backend is "a way to start a `stockd` process with
//! extra args and env" ([`TestBackend`]), chosen by `STOCKD_TEST_BACKEND` ([`backend_from_env`]:
//! `embedded`, `redis` or `redis-cluster`), so the same black-box tests run on every backend.
//!
//! It names backends and their partition counts; starting their processes is
//! [`super::redis`]'s and [`super::cluster`]'s.

use std::sync::Arc;

use super::cluster::RedisClusterBackend;
use super::redis::RedisBackend;

/// A way to run `stockd` against some storage backend. The embedded engine needs nothing extra; a
/// Redis backend would own a `redis-server` child (started on construction, killed on drop) and
/// answer with `--backend redis --redis-url ...` here. The harness keeps the backend alive for as
/// long as any server started with it.
pub trait TestBackend: Send + Sync {
    /// Short name, shown in failure messages.
    fn name(&self) -> &str;
    /// Arguments appended after `serve --listen ... --data-dir ...`.
    fn extra_args(&self) -> Vec<String>;
    /// Environment variables set on the child (none unless a backend needs some).
    fn extra_env(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// The default backend: the embedded engine, storing everything under `--data-dir`.
pub struct EmbeddedBackend;

impl TestBackend for EmbeddedBackend {
    fn name(&self) -> &str {
        "embedded"
    }
    fn extra_args(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The backend chosen by `STOCKD_TEST_BACKEND` (unset or `embedded`: the embedded engine;
/// `redis`: a fresh `redis-server` for each backend made; `redis-cluster`: a fresh 3-primary
/// Redis Cluster with 16 partitions).
pub fn backend_from_env() -> Arc<dyn TestBackend> {
    match std::env::var("STOCKD_TEST_BACKEND").as_deref() {
        Err(_) | Ok("") | Ok("embedded") => Arc::new(EmbeddedBackend),
        Ok("redis") => Arc::new(RedisBackend::start()),
        Ok("redis-cluster") => Arc::new(RedisClusterBackend::start(CLUSTER_PARTITIONS)),
        Ok(other) => panic!(
            "STOCKD_TEST_BACKEND={other}: unknown backend (known: embedded, redis, redis-cluster)"
        ),
    }
}

/// The event-feed partitions of the `redis-cluster` test backend.
pub const CLUSTER_PARTITIONS: u32 = 16;

/// The event-feed partitions the backend chosen by `STOCKD_TEST_BACKEND` is configured with: 1 on
/// the embedded engine and on a single Redis, [`CLUSTER_PARTITIONS`] on the Redis Cluster. Tests
/// learn P from the server ([`Api::partitions`]); this is what one check holds that answer to.
pub fn backend_partitions() -> u32 {
    match std::env::var("STOCKD_TEST_BACKEND").as_deref() {
        Ok("redis-cluster") => CLUSTER_PARTITIONS,
        _ => 1,
    }
}

/// Whether the tests run against the embedded engine (some tests look at its data dir).
pub fn embedded_backend() -> bool {
    matches!(
        std::env::var("STOCKD_TEST_BACKEND").as_deref(),
        Err(_) | Ok("") | Ok("embedded")
    )
}
