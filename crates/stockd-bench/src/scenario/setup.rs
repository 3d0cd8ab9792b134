//! The pools each scenario runs on, created on the server and named after the run: one hot
//! pool (split into segments on request), a pool per team, the cart's pools (on request each in
//! a partition of its own), or one pool too big to run out. It creates pools and nothing else.

use std::collections::HashSet;

use stockd_client::PoolSpecBody;

use super::{Admin, Scenario};

/// Creates the pools `scenario` runs on, named after the run; returns their names and the units
/// each was set up with.
pub(super) async fn create_pools(
    admin: &mut Admin,
    scenario: &Scenario,
    run_id: &str,
) -> Result<(Vec<String>, Vec<u64>), String> {
    if let Scenario::Cart {
        pools,
        stock,
        spread_partitions: true,
        ..
    } = scenario
    {
        let names = pools_in_distinct_partitions(admin, run_id, *pools, *stock).await?;
        return Ok((names, vec![*stock; *pools as usize]));
    }
    let (pools, stock): (Vec<String>, Vec<u64>) = match scenario {
        Scenario::Flash { stock, .. } => (vec![format!("{run_id}-hot")], vec![*stock]),
        Scenario::Team {
            teams, team_size, ..
        } => (
            (0..*teams).map(|t| format!("{run_id}-team-{t}")).collect(),
            vec![*team_size; *teams as usize],
        ),
        Scenario::Cart { pools, stock, .. } => (
            (0..*pools).map(|p| format!("{run_id}-cart-{p}")).collect(),
            vec![*stock; *pools as usize],
        ),
        Scenario::Lifecycle { .. } => (vec![format!("{run_id}-life")], vec![BIG_STOCK]),
        Scenario::Batch { .. } => (vec![format!("{run_id}-batch")], vec![BIG_STOCK]),
    };
    for (pool, &units) in pools.iter().zip(&stock) {
        let spec = match scenario {
            Scenario::Flash {
                per_user_limit,
                segments,
                ..
            } => PoolSpecBody {
                per_user_limit: *per_user_limit,
                segments: *segments,
                ..PoolSpecBody::with_total(units)
            },
            _ => PoolSpecBody::with_total(units),
        };
        // Teams are set up as many services would: create if absent, never overwrite.
        let if_absent = matches!(scenario, Scenario::Team { .. });
        admin.put_pool(pool, &spec, if_absent).await?;
    }
    Ok((pools, stock))
}

/// Pools that must not run out during the run: big enough for any run on one machine.
const BIG_STOCK: u64 = 1_000_000_000_000;

/// Pools a spread cart may create per pool it keeps before it gives up: a pool's partition is a
/// hash of its name, so covering P of P partitions takes about P ln P tries (54 for 16), and this
/// many tries per pool fails only for a server whose partitions are not what it says.
const SPREAD_TRIES_PER_POOL: u64 = 64;

/// Creates pools `{run_id}-cart-N` until `count` of them sit in pairwise different partitions
/// (the pool view names its partition), deleting each one that lands in a partition already
/// covered. Errors before creating anything when the server has fewer than `count` partitions.
async fn pools_in_distinct_partitions(
    admin: &mut Admin,
    run_id: &str,
    count: u64,
    stock: u64,
) -> Result<Vec<String>, String> {
    let partitions = admin.partitions().await?;
    if partitions < count {
        return Err(format!(
            "--spread-partitions puts each of the --pools {count} pools in a partition of its \
             own, but the server has {partitions} partition(s): give at most --pools {partitions} \
             (a Redis Cluster backend has as many as its --redis-partitions)"
        ));
    }
    let mut covered = HashSet::new();
    let mut chosen = Vec::new();
    for candidate in 0..count.saturating_mul(SPREAD_TRIES_PER_POOL) {
        let pool = format!("{run_id}-cart-{candidate}");
        let view = admin
            .put_pool(&pool, &PoolSpecBody::with_total(stock), false)
            .await?;
        let partition = view["partition"].as_u64().ok_or_else(|| {
            format!("setting up pool {pool}: the pool view has no partition: {view}")
        })?;
        if covered.insert(partition) {
            chosen.push(pool);
            if chosen.len() as u64 == count {
                return Ok(chosen);
            }
        } else {
            admin.delete_pool(&pool).await?;
        }
    }
    Err(format!(
        "--spread-partitions: {} pools created cover only {} of the {count} partitions asked, \
         though the server says it has {partitions}",
        count.saturating_mul(SPREAD_TRIES_PER_POOL),
        chosen.len()
    ))
}
