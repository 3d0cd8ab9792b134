//! The verdict of a run: what the server says after it, checked against what the run was told.
//!
//! It trusts nothing the load generator believes: it reads every pool back, and every hold whose
//! outcome is unknown, then runs one named check per property. Every scenario's pools must add
//! up and none may be oversold; the units committed must match the holds acknowledged (for the
//! lifecycle: the confirms); a flash sale's users stay within their limit; each team gets
//! exactly its size in winners. The checks only read; none retries or repairs anything.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;

use super::ledger::Chunked;
use super::{Admin, PoolState, Run, Scenario, Sent};

/// One check of a verdict.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

impl Check {
    /// A check that passes when `problems` is empty, its detail then `summary`, else the
    /// problems, `; `-separated.
    fn of_problems(name: impl Into<String>, problems: Vec<String>, summary: String) -> Check {
        Check {
            name: name.into(),
            ok: problems.is_empty(),
            detail: if problems.is_empty() {
                summary
            } else {
                problems.join("; ")
            },
        }
    }
}

/// What the server says after the run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Verdict {
    pub ok: bool,
    pub checks: Vec<Check>,
    /// Units sold beyond what the pools had: 0 unless the server oversold.
    pub oversold_units: u64,
}

/// What the verdict read back: the run's own record, and the server's answers.
struct ReadBack {
    /// Holds the server acknowledged with 201.
    created: Chunked<Sent>,
    /// Holds whose answer was lost (503, no answer).
    unknown: Vec<Sent>,
    /// Of the unknown holds, those the server has, with their status.
    happened: Vec<(Sent, String)>,
    /// Each pool's state, in the order of [`Run::pools`].
    states: Vec<PoolState>,
}

impl ReadBack {
    /// Every hold the server has of the run's: the created ones, and the unknown ones that
    /// happened.
    fn committed(&self) -> impl Iterator<Item = &Sent> {
        self.created
            .iter()
            .chain(self.happened.iter().map(|(sent, _)| sent))
    }
}

impl Run {
    /// Reads every pool back, and every hold whose outcome is unknown, and checks the run's
    /// answers against them.
    pub async fn verdict(&self, admin: &mut Admin) -> Result<Verdict, String> {
        if let Scenario::Lifecycle { ttl_ms, .. } = &self.scenario {
            self.wait_for_expiry(admin, *ttl_ms).await?;
        }
        let read = self.read_back(admin).await?;
        let (adds_up, oversold_units) = self.pools_add_up(&read);
        let mut checks = vec![adds_up];
        checks.push(match &self.scenario {
            Scenario::Lifecycle { .. } => self.sold_equals_confirms(&read),
            _ => self.committed_equals_acknowledged(&read),
        });
        if let Scenario::Flash {
            per_user_limit: Some(limit),
            ..
        } = &self.scenario
        {
            checks.push(no_user_over_limit(&read, *limit));
        }
        if let Scenario::Team {
            team_size, buyers, ..
        } = &self.scenario
        {
            checks.push(self.winners_per_team(&read, (*team_size).min(*buyers)));
        }
        Ok(Verdict {
            ok: checks.iter().all(|check| check.ok),
            checks,
            oversold_units,
        })
    }

    /// Holds left to expire: waits for the sweeper (the contract: within a second of the
    /// deadline), then some slack, until the pool holds nothing.
    async fn wait_for_expiry(&self, admin: &mut Admin, ttl_ms: u64) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(ttl_ms + 5_000);
        loop {
            let pool = admin.pool(&self.pools[0]).await?;
            if pool.held == 0 || tokio::time::Instant::now() >= deadline {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The ledger, which unknown outcomes did happen (asked of the server), and every pool.
    async fn read_back(&self, admin: &mut Admin) -> Result<ReadBack, String> {
        let (created, unknown) = {
            let ledger = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
            (ledger.created.clone(), ledger.unknown.clone())
        };
        let mut happened = Vec::new();
        for sent in &unknown {
            if let Some((status, _user)) = admin.hold(&sent.hold_id).await? {
                happened.push((sent.clone(), status));
            }
        }
        let mut states = Vec::with_capacity(self.pools.len());
        for pool in &self.pools {
            states.push(admin.pool(pool).await?);
        }
        Ok(ReadBack {
            created,
            unknown,
            happened,
            states,
        })
    }

    /// Every pool adds up (total = available + held + sold) and none committed more than it
    /// was set up with; also returns the units oversold.
    fn pools_add_up(&self, read: &ReadBack) -> (Check, u64) {
        let mut broken = Vec::new();
        let mut oversold = 0u64;
        for ((pool, state), &stock) in self.pools.iter().zip(&read.states).zip(&self.stock) {
            if !state.adds_up() {
                broken.push(format!(
                    "{pool}: total {} != available {} + held {} + sold {}",
                    state.total, state.available, state.held, state.sold
                ));
            }
            let committed = state.held.saturating_add(state.sold);
            if committed > stock || state.total != stock {
                oversold += committed.saturating_sub(stock);
                broken.push(format!(
                    "{pool}: set up with {stock}, now total {} with held + sold = {committed}",
                    state.total
                ));
            }
        }
        let check = Check::of_problems(
            "every pool adds up and none is oversold",
            broken,
            format!(
                "{} pools: total = available + held + sold, held + sold <= the stock set up",
                self.pools.len()
            ),
        );
        (check, oversold)
    }

    /// Lifecycle: only confirmed holds stay committed; everything else was released or expired.
    fn sold_equals_confirms(&self, read: &ReadBack) -> Check {
        let confirmed = self
            .confirmed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len() as u64;
        let confirmed_unknown = read
            .happened
            .iter()
            .filter(|(_, status)| status == "confirmed")
            .count() as u64;
        let state = read.states[0];
        let low = confirmed;
        // A confirm whose answer was lost can still have been applied.
        let high = read.created.len() as u64 + read.happened.len() as u64;
        Check {
            name: "sold equals the confirms acknowledged".to_string(),
            ok: state.sold >= low && state.sold <= high && state.held == 0,
            detail: format!(
                "sold {} (confirms acknowledged {confirmed}, unknown that happened {confirmed_unknown}), held {} after expiry, released {}",
                state.sold,
                state.held,
                self.released.load(Ordering::Relaxed)
            ),
        }
    }

    /// Units each pool committed (held + sold) equal the created holds plus the unknown ones
    /// the server has.
    fn committed_equals_acknowledged(&self, read: &ReadBack) -> Check {
        let mut expected = vec![0u64; self.pools.len()];
        for sent in read.committed() {
            for &(pool, qty) in &sent.units {
                expected[pool] += qty;
            }
        }
        let mut mismatched = Vec::new();
        for ((pool, state), want) in self.pools.iter().zip(&read.states).zip(&expected) {
            let committed = state.held + state.sold;
            if committed != *want {
                mismatched.push(format!(
                    "{pool}: held + sold {committed}, holds created {want}"
                ));
            }
        }
        Check::of_problems(
            "units committed equal the holds acknowledged",
            mismatched,
            format!(
                "{} holds acknowledged, {} unknown outcomes of which {} happened",
                read.created.len(),
                read.unknown.len(),
                read.happened.len()
            ),
        )
    }

    /// Team: each team sold exactly `want` slots, to exactly `want` winners.
    fn winners_per_team(&self, read: &ReadBack, want: u64) -> Check {
        let mut winners: BTreeMap<usize, u64> = BTreeMap::new();
        for sent in read.committed() {
            *winners.entry(sent.units[0].0).or_insert(0) += 1;
        }
        let wrong: Vec<String> = (0..self.pools.len())
            .filter_map(|team| {
                let got = winners.get(&team).copied().unwrap_or(0);
                let sold = read.states[team].sold;
                (got != want || sold != want)
                    .then(|| format!("{}: {got} winners, sold {sold}", self.pools[team]))
            })
            .collect();
        Check::of_problems(
            format!("exactly {want} winners per team"),
            wrong,
            format!("{} teams, {want} winners each", self.pools.len()),
        )
    }
}

/// Flash: no user holds more units than the pool's per-user limit.
fn no_user_over_limit(read: &ReadBack, limit: u64) -> Check {
    let mut per_user: HashMap<&str, u64> = HashMap::new();
    for sent in read.committed() {
        if let Some(user) = &sent.user {
            *per_user.entry(user).or_insert(0) += sent.units[0].1;
        }
    }
    let over: Vec<String> = per_user
        .iter()
        .filter(|(_, &units)| units > limit)
        .map(|(user, units)| format!("{user}: {units}"))
        .collect();
    let most = per_user.values().copied().max().unwrap_or(0);
    Check {
        name: "no user over the per-user limit".to_string(),
        ok: over.is_empty(),
        detail: if over.is_empty() {
            format!(
                "{} users bought, at most {most} each (limit {limit})",
                per_user.len()
            )
        } else {
            format!("over the limit of {limit}: {}", over.join(", "))
        },
    }
}
