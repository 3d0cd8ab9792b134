//! The scenarios of `stockd bench run`: what they set up, what they send, and how their
//! verdict is read back from the server.
//!
//! Every scenario names its pools and holds after the run's id, so runs against one server never
//! mix. The verdict trusts nothing the load generator believes: it reads every pool back, and
//! every hold whose outcome is unknown, and checks the arithmetic against the answers.
//!
//! - [`Scenario`] and [`Run`] (here): the knobs, and a running scenario's state;
//! - `setup`: the pools each scenario runs on, created on the server;
//! - `workload`: the requests the driver sends, and what their answers tell;
//! - `body`: the reserve bodies and ids, written by hand for speed;
//! - `ledger`: what came of every hold sent;
//! - `admin`: set-up and read-back, as `stockd-client` calls;
//! - `verdict`: the checks read back from the server after the run.

mod admin;
mod body;
mod ledger;
mod setup;
mod verdict;
mod workload;

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

use crate::race::{race_order, Entrant, RaceOrder};

pub use admin::{Admin, PoolState};
pub use ledger::Sent;
pub use verdict::{Check, Verdict};
pub use workload::Tag;

use ledger::Ledger;
use workload::Action;

/// Which scenario, with its knobs.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "scenario", rename_all = "snake_case")]
pub enum Scenario {
    /// One hot pool of `stock` units, `buyers` distinct users, each limited to `per_user_limit`.
    /// With `segments`, the pool is created split into that many segments (on a Redis Cluster,
    /// spread over the primaries); without, the PUT leaves the count out (one segment).
    Flash {
        stock: u64,
        buyers: u64,
        per_user_limit: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        segments: Option<u32>,
    },
    /// `teams` pools of `team_size` slots, set up with `?if_absent=true`; `buyers` users race
    /// for each team, each trying once.
    Team {
        teams: u64,
        team_size: u64,
        buyers: u64,
    },
    /// Holds of `items` units, each from a different one of `pools` pools. With
    /// `spread_partitions`, every pool lives in a partition of its own, so that a hold of `items`
    /// units spans `items` partitions (on a Redis Cluster: the cross-partition protocol).
    Cart {
        pools: u64,
        items: u64,
        stock: u64,
        spread_partitions: bool,
    },
    /// Reserve with a short `ttl_ms`, then confirm, release or let expire, in these shares.
    Lifecycle {
        confirm_share: f64,
        release_share: f64,
        ttl_ms: u64,
    },
    /// The batch endpoint: `ops` reserve-and-confirm ops per request, on one pool.
    Batch { ops: u64 },
}

impl Scenario {
    pub fn name(&self) -> &'static str {
        match self {
            Scenario::Flash { .. } => "flash",
            Scenario::Team { .. } => "team",
            Scenario::Cart { .. } => "cart",
            Scenario::Lifecycle { .. } => "lifecycle",
            Scenario::Batch { .. } => "batch",
        }
    }
}

/// A running scenario: the workload the driver runs, and its verdict afterwards.
pub struct Run {
    scenario: Scenario,
    run_id: String,
    /// `{run_id}-`: what every numbered hold id of the run starts with.
    hold_prefix: String,
    pools: Vec<String>,
    /// Units each pool was set up with.
    stock: Vec<u64>,
    next_id: AtomicU64,
    ledger: Mutex<Ledger>,
    /// Lifecycle: per worker, the hold waiting for its confirm or release.
    pending: Vec<Mutex<Option<(String, Action)>>>,
    /// Lifecycle: confirms and releases the server accepted.
    confirmed: Mutex<Vec<Sent>>,
    released: AtomicU64,
    /// Team: tickets handed out (team, buyer).
    tickets: AtomicU64,
    /// Team: every buyer whose outcome is known, and when its request went.
    entrants: Mutex<Vec<Entrant>>,
}

impl Run {
    /// Creates the scenario's pools on the server.
    pub async fn set_up(
        admin: &mut Admin,
        scenario: Scenario,
        run_id: &str,
        connections: usize,
    ) -> Result<Run, String> {
        let (pools, stock) = setup::create_pools(admin, &scenario, run_id).await?;
        Ok(Run {
            scenario,
            run_id: run_id.to_string(),
            hold_prefix: format!("{run_id}-"),
            pools,
            stock,
            next_id: AtomicU64::new(0),
            ledger: Mutex::new(Ledger::default()),
            pending: (0..connections).map(|_| Mutex::new(None)).collect(),
            confirmed: Mutex::new(Vec::new()),
            released: AtomicU64::new(0),
            tickets: AtomicU64::new(0),
            entrants: Mutex::new(Vec::new()),
        })
    }

    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// The pools the scenario set up, by id.
    pub fn pools(&self) -> &[String] {
        &self.pools
    }

    /// The team race's order (`None` for other scenarios), given the server's mean time per
    /// group commit during the load when it is known.
    pub fn race_order(&self, group_commit: Option<Duration>) -> Option<RaceOrder> {
        matches!(self.scenario, Scenario::Team { .. }).then(|| {
            race_order(
                &self.entrants.lock().unwrap_or_else(|e| e.into_inner()),
                group_commit,
            )
        })
    }
}
