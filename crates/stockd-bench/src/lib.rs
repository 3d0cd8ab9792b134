//! `stockd bench`: a load generator for a running stockd, whatever its backend, that ends every
//! run with a correctness verdict read back from the server.
//!
//! - [`http`]: one keep-alive HTTP/1.1 connection per worker, on the bare socket, answers read
//!   with `httparse`.
//! - [`load`]: the driver, closed or open loop (wrk2-style schedule, latency from the intended
//!   send time), HDR histograms per run and per second, the progress line.
//! - [`scenario`]: flash, team, cart, lifecycle and batch: set-up, requests, verdict.
//! - [`paths`]: the API's paths, made from `stockd_api`'s operations.
//! - [`race`]: the team race's order: whether the buyers who came first won.
//! - [`report`]: the table, the JSON document and the SVG plot.
//! - [`lab`]: `stockd bench lab`, the oversell experiment: naive Redis, locks, Lua, PostgreSQL
//!   and stockd side by side, on servers it starts itself.
//! - [`seeds_stack`]: the seeds' own stack, an HTTP app server doing one `EVALSHA`
//!   check-and-deduct per request (`stockd bench seeds-stack`).
//! - [`compare`]: `stockd bench compare`, the flash scenario against stockd embedded, stockd on
//!   Redis and the seeds' stack in one run, on servers it starts itself.
//! - [`memory`]: `stockd bench memory`, what retained holds cost the embedded engine in resident
//!   memory, and its restart time.
//!
//! It never decides anything about stock: it sends requests and checks what the server says.

pub mod compare;
pub mod http;
pub mod lab;
pub mod load;
pub mod memory;
pub mod paths;
pub mod race;
pub mod report;
pub mod scenario;
pub mod seeds_stack;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub use http::Endpoint;
pub use load::{LoadConfig, Pace};
pub use report::Report;
pub use scenario::{Scenario, Verdict};

/// One `stockd bench run`.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// `http://HOST:PORT` of each server. Several: a fleet on one backend, which the load is
    /// spread over; set-up and the verdict go through the first.
    pub urls: Vec<String>,
    /// An admin token when the server has tokens (the bench creates its own pools).
    pub token: Option<String>,
    pub scenario: Scenario,
    pub load: LoadConfig,
}

/// A short id that names this run's pools and holds, unique across runs on one server.
fn run_id(seed: u64) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64);
    format!(
        "bench-{:x}",
        (nanos ^ seed.rotate_left(17)) & 0xffff_ffff_ffff
    )
}

/// Checks that every server answers `/healthz` with 200 before anything is set up, so that a
/// mistyped URL of a fleet fails the run at once instead of as errors in its load.
async fn check_health(endpoints: &[Endpoint], urls: &[String]) -> Result<(), String> {
    for (endpoint, url) in endpoints.iter().zip(urls) {
        let health = scenario::Admin::new(endpoint)?
            .send(&stockd_client::Call::healthz())
            .await
            .map_err(|error| format!("{url}: not reachable: {error}"))?;
        if health.status != 200 {
            return Err(format!("{url}/healthz answered {}", health.status));
        }
    }
    Ok(())
}

/// Sets the scenario up on the server, runs the load, and reads the verdict back. With several
/// servers (they share one backend), set-up and read-back go through the first.
pub async fn run(config: RunConfig) -> Result<Report, String> {
    let endpoints = config
        .urls
        .iter()
        .map(|url| Endpoint::parse(url, config.token.clone()))
        .collect::<Result<Vec<Endpoint>, String>>()?;
    let first = endpoints
        .first()
        .ok_or("no server to run against: give --url")?;
    check_health(&endpoints, &config.urls).await?;
    let mut admin = scenario::Admin::new(first)?;
    let run_id = run_id(config.load.seed);
    let run = Arc::new(
        scenario::Run::set_up(
            &mut admin,
            config.scenario.clone(),
            &run_id,
            config.load.connections,
        )
        .await?,
    );
    let groups_before = writer_groups(&mut admin).await;
    let load = load::run(&endpoints, Arc::clone(&run), &config.load).await?;
    let groups = match (groups_before, writer_groups(&mut admin).await) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    let race_order =
        run.race_order(groups.and_then(|groups| race::group_commit(load.window, groups)));
    let verdict = run.verdict(&mut admin).await?;
    Ok(Report::new(
        &run_id,
        &config.urls,
        run.pools(),
        config.scenario,
        config.load.connections,
        config.load.pace,
        config.load.seed,
        &load,
        verdict,
        race_order,
    ))
}

/// How many groups of requests the server's writer has decided (`stockd_engine_batches_total`),
/// or `None` when it has no writer of its own (a Redis backend) or `/metrics` does not answer.
/// With a fleet, this is the first server's.
async fn writer_groups(admin: &mut scenario::Admin) -> Option<u64> {
    let answer = admin.send(&stockd_client::Call::metrics()).await.ok()?;
    if answer.status != 200 {
        return None;
    }
    race::counter(
        std::str::from_utf8(&answer.body).ok()?,
        "stockd_engine_batches_total",
    )
}
