//! The Redis backend of stockd: any number of stateless `stockd serve` processes in front of one
//! Redis behave as one server.
//!
//! Every state change is one atomic call into the function library `stockd_v5` (`lua/`), which
//! mirrors stockd-core's rules file for file; the Rust side validates commands
//! (`Command::validate`, before any lookup), frames them, batches concurrent requests into one
//! call per partition ([`dispatch`]), waits for parked requests (woken over pub/sub), reads the
//! feed and sweeps expiries. It must never decide a rule itself: every decision is the library's,
//! and every time (`now`, deadlines) is the Redis server's clock.
//!
//! Fail closed: a Redis that cannot be reached, an answer that was lost, or a Redis that came
//! back with less than this server saw (its dataset marker missing or changed, its event seq
//! lower) is `BackendError::Unavailable` (503), never a guess.
//!
//! One concern per module: `config` (settings and their defaults), `backend` (the start and
//! the `Backend` trait), `shared` (what the tasks share, and the dispatch queues every command
//! goes through), `call` (one library call and its reply), `adopt` (a dataset an operator
//! accepted), `routing` (where a command goes), `execute` (a request's commands, run),
//! `parked` (a parked command's wait), `lists` (lists merged over partitions), `feed` (the event
//! feed and its long-poll), `sweeper` (expiries on a timer), `cross` (the cross-partition
//! protocol's steps), `dispatch` (batching), `waits` (wake-ups over pub/sub), `dataset` (the
//! marker and the fleet's settings), `checks` (the Redis's own settings), `link` (the
//! connection), [`keys`] (the key layout), [`library`] (the Lua, assembled) and [`wire`] (the
//! library's framing).

mod adopt;
mod backend;
mod call;
#[cfg(feature = "call-faults")]
pub mod call_faults;
mod checks;
mod config;
mod cross;
mod dataset;
mod dispatch;
mod execute;
mod fault;
mod feed;
pub mod keys;
pub mod library;
mod link;
mod lists;
mod parked;
mod routing;
mod segments;
mod shared;
mod spread_ops;
mod starting;
mod sweeper;
mod waits;
pub mod wire;

pub use backend::{RedisBackend, StartError};
#[cfg(feature = "test-clock")]
pub use config::TestClock;
pub use config::{
    RedisConfig, CLUSTER_PARTITIONS_DEFAULT, EVENT_RETENTION_MAX_DEFAULT, PARTITIONS_MAX,
    REPLICAS_MAX, REPLICA_TIMEOUT_MS_DEFAULT, REPLICA_TIMEOUT_MS_MAX,
};
pub use dataset::{accept, Marker};
pub use link::{SentinelTarget, Target};
pub use starting::StartingBackend;
pub use sweeper::SWEEP_INTERVAL;
