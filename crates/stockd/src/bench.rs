//! `stockd bench`: the load generator's command line. The work is in the `stockd-bench` crate;
//! this module turns flags into its settings and prints or writes the report.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use stockd_bench::{LoadConfig, Pace, RunConfig, Scenario};
use stockd_core::limits::SEGMENTS_MAX;

use crate::connection::{Connection, ForBench};

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Run a scenario against a running stockd (any backend), then check the server's numbers.
    Run(RunArgs),
    /// The oversell lab: naive Redis, Redis locks, Lua, PostgreSQL and stockd selling the same
    /// stock to the same buyers until it sells out, on servers it starts itself; one table of
    /// units sold per second, lost updates, units oversold, attempts, p99 and errors.
    Lab(LabArgs),
    /// The flash scenario against stockd embedded, stockd on Redis and the seeds' own stack
    /// (an HTTP app server doing one EVALSHA check-and-deduct per request), on servers it
    /// starts itself with the same worker threads; one table of throughput, p99 and CPU per
    /// request, with the ratios stockd / the seeds' stack taken in the same run.
    Compare(CompareArgs),
    /// Serve the seeds' own stack: `POST /v1/holds` (one item, confirm: true) is one EVALSHA
    /// `if stock >= n then DECRBY` on the Redis given; no holds, no idempotency, no expiry. A
    /// baseline for `stockd bench run`, not a stock service.
    SeedsStack(SeedsStackArgs),
    /// What retained holds cost the embedded engine: loads N confirmed holds into a server it
    /// starts itself, then reads its resident memory at rest, at the snapshot's peak and after
    /// a restart, per hold, and how long the restart took to be ready.
    Memory(MemoryArgs),
}

#[derive(Debug, clap::Args)]
pub struct MemoryArgs {
    /// Confirmed holds to load (also the server's snapshot interval, so that one snapshot is
    /// built right after the load).
    #[arg(long, default_value_t = 1_000_000)]
    holds: u64,
    /// Distinct users the holds name.
    #[arg(long, default_value_t = 100_000)]
    users: u64,
    /// Pools the holds take one unit of.
    #[arg(long, default_value_t = 10)]
    pools: u64,
    /// Connections sending the load, each one batch of 1,000 reserves at a time.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The server's data directory, kept after the run (it must not exist yet); default a
    /// temporary one, removed at the end.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Write the report as JSON to this file (`-` for standard output, instead of the table).
    #[arg(long)]
    json: Option<PathBuf>,
    /// No progress line, even on a terminal.
    #[arg(long)]
    quiet: bool,
}

impl MemoryArgs {
    fn config(&self) -> Result<stockd_bench::memory::MemoryConfig, String> {
        let executable = std::env::current_exe().map_err(|error| {
            format!("cannot find the stockd executable to start the server with: {error}")
        })?;
        Ok(stockd_bench::memory::MemoryConfig {
            executable,
            holds: within("--holds", self.holds, 1..=100_000_000)?,
            users: within("--users", self.users, 1..=100_000_000)?,
            pools: within("--pools", self.pools, 1..=10_000)?,
            connections: within("--connections", self.connections, 1..=256)?,
            seed: self.seed,
            progress: !self.quiet && std::io::stderr().is_terminal(),
            data_dir: self.data_dir.clone(),
        })
    }
}

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// How long each stack is measured, after the warm-up (`10s`, `500ms`, `1m`).
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    duration: Duration,
    /// How many requests each stack is measured over, after the warm-up; with --duration,
    /// whichever ends first. With a small --stock, enough requests to sell it out make every
    /// stack's sales a fixed number however fast the machine is.
    #[arg(long)]
    requests: Option<u64>,
    /// How long requests go to each stack before measuring starts (`1s`, `0s`).
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    warmup: Duration,
    /// Connections to each stack, each with one request in flight at a time.
    #[arg(long, default_value_t = 50)]
    connections: usize,
    /// Units of each stack's hot pool (the default never sells out within a run; a small stock
    /// shows each stack selling exactly it, then refusing).
    #[arg(long, default_value_t = 1_000_000_000)]
    stock: u64,
    /// Distinct users the requests name.
    #[arg(long, default_value_t = 100_000)]
    buyers: u64,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// HTTP worker threads of every server (default: `stockd serve`'s, one per core but one).
    #[arg(long)]
    worker_threads: Option<usize>,
    /// When each Redis fsyncs its AOF: everysec (most deployments') or always (what stockd asks
    /// of its Redis: as durable as the embedded engine).
    #[arg(long, value_enum, default_value = "everysec")]
    appendfsync: AppendFsyncName,
    /// Run only these stacks (stockd-embedded, stockd-redis, seeds-stack; comma-separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Write the report as JSON to this file (`-` for standard output, instead of the table).
    #[arg(long)]
    json: Option<PathBuf>,
    /// No progress line, even on a terminal.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AppendFsyncName {
    /// fsync once a second: a machine crash may lose the last second of acknowledged sales.
    Everysec,
    /// fsync before answering.
    Always,
}

#[derive(Debug, clap::Args)]
pub struct SeedsStackArgs {
    /// Address to listen on (`IP:PORT`).
    #[arg(long, default_value = "127.0.0.1:7171")]
    listen: std::net::SocketAddr,
    /// The Redis its stock counters live in.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Worker threads of its runtime (default: `stockd serve`'s, one per core but one).
    #[arg(long)]
    worker_threads: Option<usize>,
}

#[derive(Debug, clap::Args)]
pub struct LabArgs {
    /// The time cap of each variant (`10s`, `500ms`, `1m`): it runs until it sells out, or
    /// this long at most; the report says when the cap came first.
    #[arg(long, visible_alias = "duration", value_parser = parse_duration, default_value = "10s")]
    max_duration: Duration,
    /// Concurrent buyers, each with its own connection to the variant's server.
    #[arg(long, visible_alias = "connections", default_value_t = 50)]
    buyers: usize,
    /// Units every variant starts with.
    #[arg(long, default_value_t = 1_000)]
    stock: u64,
    /// Seed of the random choices (lock tokens, the stockd buyers' user ids).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the report as JSON to this file (`-` for standard output, instead of the table).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run only these variants (names or families: redis, postgres, stockd; comma-separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Leave these variants out (names or families; comma-separated).
    #[arg(long, value_delimiter = ',')]
    skip: Vec<String>,
    /// No progress line, even on a terminal.
    #[arg(long)]
    quiet: bool,
    /// A fault for the first buyer to take a lock, to see what each lock does about it; only
    /// the variants that hold a lock run (the Redis locks and pg-for-update).
    #[arg(long, value_enum, default_value = "none")]
    fault: FaultName,
    /// The lease of the expiring lock and the lease lock (Redisson's default is 30s; a short
    /// one shows a lease running out within the run). 10ms to 3s.
    #[arg(long, value_parser = parse_duration, default_value = "500ms")]
    lease: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FaultName {
    /// No fault.
    None,
    /// The holder pauses for three leases between its read and its write.
    SlowHolder,
    /// The holder dies right after taking the lock, without releasing it.
    CrashedHolder,
}

impl From<FaultName> for stockd_bench::lab::Fault {
    fn from(name: FaultName) -> Self {
        match name {
            FaultName::None => Self::None,
            FaultName::SlowHolder => Self::SlowHolder,
            FaultName::CrashedHolder => Self::CrashedHolder,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScenarioName {
    /// One hot pool, many buyers, limited stock, a per-user limit.
    Flash,
    /// Many 5-slot team pools, 1,000 buyers racing per team, each trying once.
    Team,
    /// Holds over several pools.
    Cart,
    /// Reserve, then confirm, release or let expire, in given shares.
    Lifecycle,
    /// The batch endpoint, many ops per request.
    Batch,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Which scenario.
    #[arg(long, value_enum)]
    scenario: ScenarioName,
    #[command(flatten)]
    connection: Connection<ForBench>,
    /// Connections, each with one request in flight at a time.
    #[arg(long, default_value_t = 50)]
    connections: usize,
    /// Open loop: requests per second in all (latency counted from each request's intended
    /// send time). Without it, closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// How long to measure after the warm-up (`10s`, `500ms`, `2m`; default 10s unless
    /// --requests is given; `team` runs until every buyer has tried, unless this is given).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// How many requests to measure after the warm-up.
    #[arg(long)]
    requests: Option<u64>,
    /// How long to send requests before measuring starts, a duration (`1s`, `500ms`; default
    /// 1s; 0 for `team`, whose every request counts).
    #[arg(long, value_parser = parse_duration)]
    warmup: Option<Duration>,
    /// Seed of every random choice (users, pools, shares).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the report as JSON to this file (`-` for standard output, instead of the table).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw throughput and latency over time to this SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// No progress line, even on a terminal.
    #[arg(long)]
    quiet: bool,
    /// flash, cart: units in each pool.
    #[arg(long)]
    stock: Option<u64>,
    /// flash: distinct buyers; team: buyers racing per team.
    #[arg(long)]
    buyers: Option<u64>,
    /// flash: units one buyer may hold or buy (0: no limit).
    #[arg(long, default_value_t = 20)]
    per_user_limit: u64,
    /// flash: create the hot pool split into this many segments (1..=64; on a Redis Cluster
    /// they spread it over the primaries). Left out, the pool has one.
    #[arg(long)]
    segments: Option<u32>,
    /// team: team pools.
    #[arg(long, default_value_t = 20)]
    teams: u64,
    /// team: slots per team.
    #[arg(long, default_value_t = 5)]
    team_size: u64,
    /// cart: pools to pick from.
    #[arg(long, default_value_t = 100)]
    pools: u64,
    /// cart: pools per hold.
    #[arg(long, default_value_t = 3)]
    items: u64,
    /// cart: every pool in a partition of its own (pools are created until --pools distinct
    /// partitions are covered), so that a hold spans --items partitions; needs a backend with at
    /// least --pools partitions (a Redis Cluster).
    #[arg(long)]
    spread_partitions: bool,
    /// batch: ops per request (1..=1000).
    #[arg(long, default_value_t = 100)]
    ops: u64,
    /// lifecycle: share of holds confirmed.
    #[arg(long, default_value_t = 0.6)]
    confirm_share: f64,
    /// lifecycle: share of holds released (the rest expire).
    #[arg(long, default_value_t = 0.2)]
    release_share: f64,
    /// lifecycle: the holds' ttl_ms (1000..=86400000).
    #[arg(long, default_value_t = 1000)]
    ttl_ms: u64,
}

/// `value` of `flag` when it is within `range`, else why not (`--ops must be 1..=1000, got 0`).
fn within<T: PartialOrd + std::fmt::Display>(
    flag: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, String> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "{flag} must be {}..={}, got {value}",
            range.start(),
            range.end()
        ))
    }
}

/// Refuses a duration of 0 for `flag` (`--duration must be above 0`).
fn above_zero(flag: &str, duration: Duration) -> Result<(), String> {
    if duration.is_zero() {
        Err(format!("{flag} must be above 0"))
    } else {
        Ok(())
    }
}

/// `10s`, `500ms`, `2m`, or a plain number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(index) => text.split_at(index),
        None => (text, "s"),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a duration such as 10s, 500ms or 2m"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("{text:?}: the unit must be ms, s, m or h")),
    };
    if !(0.0..=7.0 * 86_400.0).contains(&seconds) {
        return Err(format!("{text:?}: out of range"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

impl RunArgs {
    fn config(&self) -> Result<RunConfig, String> {
        let scenario_name = || {
            clap::ValueEnum::to_possible_value(&self.scenario)
                .map_or_else(String::new, |value| value.get_name().to_string())
        };
        if self.spread_partitions && self.scenario != ScenarioName::Cart {
            return Err(format!(
                "--spread-partitions applies to --scenario cart only, got --scenario {}",
                scenario_name()
            ));
        }
        if self.segments.is_some() && self.scenario != ScenarioName::Flash {
            return Err(format!(
                "--segments applies to --scenario flash only, got --scenario {}",
                scenario_name()
            ));
        }
        if let Some(segments) = self.segments {
            within("--segments", u64::from(segments), 1..=SEGMENTS_MAX)?;
        }
        let scenario = match self.scenario {
            ScenarioName::Flash => Scenario::Flash {
                stock: self.stock.unwrap_or(1_000_000),
                buyers: self.buyers.unwrap_or(100_000).max(1),
                per_user_limit: (self.per_user_limit > 0).then_some(self.per_user_limit),
                segments: self.segments,
            },
            ScenarioName::Team => Scenario::Team {
                teams: self.teams.max(1),
                team_size: self.team_size.max(1),
                buyers: self.buyers.unwrap_or(1_000).max(1),
            },
            ScenarioName::Cart => {
                if self.items == 0 || self.items > 64 || self.items > self.pools {
                    return Err(format!(
                        "--items must be 1..=64 and at most --pools ({}), got {}",
                        self.pools, self.items
                    ));
                }
                Scenario::Cart {
                    pools: self.pools,
                    items: self.items,
                    stock: self.stock.unwrap_or(1_000_000_000),
                    spread_partitions: self.spread_partitions,
                }
            }
            ScenarioName::Lifecycle => {
                let shares = [self.confirm_share, self.release_share];
                if shares.iter().any(|share| !(0.0..=1.0).contains(share))
                    || self.confirm_share + self.release_share > 1.0
                {
                    return Err(
                        "--confirm-share and --release-share must be 0..=1 and add up to at most 1"
                            .into(),
                    );
                }
                within("--ttl-ms", self.ttl_ms, 1_000..=86_400_000)?;
                Scenario::Lifecycle {
                    confirm_share: self.confirm_share,
                    release_share: self.release_share,
                    ttl_ms: self.ttl_ms,
                }
            }
            ScenarioName::Batch => {
                within("--ops", self.ops, 1..=1_000)?;
                Scenario::Batch { ops: self.ops }
            }
        };
        let pace = match self.rate {
            None => Pace::Closed,
            Some(rate) if rate.is_finite() && rate > 0.0 => Pace::Open { rate_per_s: rate },
            Some(rate) => return Err(format!("--rate must be above 0, got {rate}")),
        };
        within("--connections", self.connections, 1..=100_000)?;
        let urls = &self.connection.urls;
        if self.connections < urls.len() {
            return Err(format!(
                "--connections {} is fewer than the {} servers given with --url: each server \
                 needs at least one connection",
                self.connections,
                urls.len()
            ));
        }
        // A team run is finite: every buyer tries once.
        let finite = matches!(scenario, Scenario::Team { .. });
        let duration = match (self.duration, self.requests) {
            (None, None) if !finite => Some(Duration::from_secs(10)),
            (duration, _) => duration,
        };
        let warmup = self.warmup.unwrap_or(if finite {
            Duration::ZERO
        } else {
            Duration::from_secs(1)
        });
        Ok(RunConfig {
            urls: urls.clone(),
            token: self.connection.bearer_token(),
            scenario,
            load: LoadConfig {
                connections: self.connections,
                pace,
                duration,
                requests: self.requests,
                warmup,
                seed: self.seed,
                progress: !self.quiet && std::io::stderr().is_terminal(),
            },
        })
    }
}

pub async fn run(command: BenchCommand) -> ExitCode {
    match command {
        BenchCommand::Run(args) => run_scenario(args).await,
        // Exit 1 when a variant that must never lose updates, oversell or get stuck did, or a
        // variant failed.
        BenchCommand::Lab(args) => {
            let stopped = "the lab's servers are stopped and its files removed";
            let json = args.json.as_deref();
            run_stoppable(args.config(), stockd_bench::lab::run, stopped, json).await
        }
        // Exit 1 when a stack could not be measured or its verdict failed.
        BenchCommand::Compare(args) => {
            let stopped = "the comparison's servers are stopped and their files removed";
            let json = args.json.as_deref();
            run_stoppable(args.config(), stockd_bench::compare::run, stopped, json).await
        }
        BenchCommand::SeedsStack(args) => run_seeds_stack(args).await,
        // Exit 1 when the server could not be measured or lost holds over its restart.
        BenchCommand::Memory(args) => {
            let stopped = "the server is stopped and its files removed";
            let json = args.json.as_deref();
            run_stoppable(args.config(), stockd_bench::memory::run, stopped, json).await
        }
    }
}

/// `--worker-threads` of `compare` and `seeds-stack`: `stockd serve`'s default when not given.
fn worker_threads(given: Option<usize>) -> Result<usize, String> {
    match given {
        None => Ok(stockd_bench::compare::default_worker_threads()),
        Some(threads) => within("--worker-threads", threads, 1..=1024),
    }
}

impl CompareArgs {
    fn config(&self) -> Result<stockd_bench::compare::CompareConfig, String> {
        within("--connections", self.connections, 1..=10_000)?;
        within("--stock", self.stock, 1..=1_000_000_000_000)?;
        above_zero("--duration", self.duration)?;
        if let Some(requests) = self.requests {
            within("--requests", requests, 1..=u64::MAX)?;
        }
        let stockd_executable = std::env::current_exe().map_err(|error| {
            format!("cannot find the stockd executable to start the servers with: {error}")
        })?;
        Ok(stockd_bench::compare::CompareConfig {
            stacks: stockd_bench::compare::select(&self.only)?,
            stock: self.stock,
            buyers: self.buyers.max(1),
            connections: self.connections,
            duration: self.duration,
            requests: self.requests,
            warmup: self.warmup,
            seed: self.seed,
            worker_threads: worker_threads(self.worker_threads)?,
            appendfsync: match self.appendfsync {
                AppendFsyncName::Everysec => stockd_bench::compare::AppendFsync::Everysec,
                AppendFsyncName::Always => stockd_bench::compare::AppendFsync::Always,
            },
            stockd_executable,
            progress: !self.quiet && std::io::stderr().is_terminal(),
        })
    }
}

/// Serves the seeds' stack on a runtime of its own (as many worker threads as asked, which the
/// command's runtime would not give), on a thread of its own, until the process is stopped.
async fn run_seeds_stack(args: SeedsStackArgs) -> ExitCode {
    let worker_threads = match worker_threads(args.worker_threads) {
        Ok(threads) => threads,
        Err(why) => return usage(&why),
    };
    let settings = stockd_bench::seeds_stack::Settings {
        listen: args.listen,
        redis_url: args.redis,
        worker_threads,
    };
    let server = match std::thread::Builder::new()
        .name("seeds-stack".into())
        .spawn(move || stockd_bench::seeds_stack::serve_blocking(settings))
    {
        Ok(server) => server,
        Err(error) => {
            eprintln!("error: cannot start the seeds' stack: {error}");
            return ExitCode::from(1);
        }
    };
    match tokio::task::spawn_blocking(move || server.join()).await {
        Ok(Ok(Ok(()))) => ExitCode::SUCCESS,
        Ok(Ok(Err(why))) => {
            eprintln!("error: {why}");
            ExitCode::from(1)
        }
        Ok(Err(_)) | Err(_) => {
            eprintln!("error: the seeds' stack stopped on a panic");
            ExitCode::from(1)
        }
    }
}

impl LabArgs {
    fn config(&self) -> Result<stockd_bench::lab::LabConfig, String> {
        within("--buyers", self.buyers, 1..=10_000)?;
        within("--stock", self.stock, 1..=1_000_000_000)?;
        above_zero("--max-duration", self.max_duration)?;
        let lease_ms = self.lease.as_millis();
        if !(10..=3_000).contains(&lease_ms) {
            return Err(format!("--lease must be 10ms..=3s, got {lease_ms}ms"));
        }
        let fault = stockd_bench::lab::Fault::from(self.fault);
        let pause = stockd_bench::lab::Fault::pause(self.lease);
        if fault != stockd_bench::lab::Fault::None && self.max_duration < pause * 2 {
            return Err(format!(
                "--max-duration must be at least twice the slow holder's pause (three leases, \
                 {} ms) to show what follows it, got {} ms",
                pause.as_millis(),
                self.max_duration.as_millis()
            ));
        }
        Ok(stockd_bench::lab::LabConfig {
            stock: self.stock,
            buyers: self.buyers,
            max_duration: self.max_duration,
            seed: self.seed,
            variants: stockd_bench::lab::select(&self.only, &self.skip, fault)?,
            progress: !self.quiet && std::io::stderr().is_terminal(),
            stockd_executable: std::env::current_exe().ok(),
            fault,
            lease: self.lease,
        })
    }
}

/// Bad flags: said on stderr, exit 2 (nothing ran).
fn usage(why: &str) -> ExitCode {
    eprintln!("error: {why}");
    ExitCode::from(2)
}

/// A bench command's report, as every bench command shows it ([`show`]).
trait Shown: serde::Serialize {
    /// The table people read, on stdout unless the JSON goes there.
    fn table(&self) -> String;
    /// What the table says beyond its rows, for stderr when the table is not printed.
    fn aside(&self) -> Vec<String> {
        Vec::new()
    }
    /// What went wrong, each printed as an `error:` line.
    fn errors(&self) -> Vec<String>;
    /// Whether the command exits 0.
    fn passed(&self) -> bool;
    /// The run drawn over time, for `--plot`; only `bench run` has one.
    fn svg(&self) -> Option<String> {
        None
    }
}

impl Shown for stockd_bench::lab::LabReport {
    fn table(&self) -> String {
        self.table()
    }

    fn aside(&self) -> Vec<String> {
        // What did not run, and why.
        self.skipped
            .iter()
            .map(|skipped| {
                let what = if skipped.failed { "failed" } else { "skipped" };
                format!("{}: {what}, {}", skipped.variant, skipped.reason)
            })
            .collect()
    }

    fn errors(&self) -> Vec<String> {
        self.problems()
    }

    fn passed(&self) -> bool {
        self.problems().is_empty() && !self.any_failed()
    }
}

impl Shown for stockd_bench::memory::MemoryReport {
    fn table(&self) -> String {
        self.table()
    }

    fn errors(&self) -> Vec<String> {
        self.errors.clone()
    }

    fn passed(&self) -> bool {
        self.passed()
    }
}

impl Shown for stockd_bench::compare::CompareReport {
    fn table(&self) -> String {
        self.table()
    }

    fn errors(&self) -> Vec<String> {
        let failed = self
            .failed
            .iter()
            .map(|failed| format!("{}: {}", failed.stack.name(), failed.reason));
        let verdicts = (self.rows.iter())
            .filter(|row| !row.report.verdict.ok)
            .map(|row| format!("{}: its verdict failed", row.stack.name()));
        failed.chain(verdicts).collect()
    }

    fn passed(&self) -> bool {
        self.ok()
    }
}

impl Shown for stockd_bench::Report {
    fn table(&self) -> String {
        self.table()
    }

    fn errors(&self) -> Vec<String> {
        Vec::new()
    }

    fn passed(&self) -> bool {
        self.verdict.ok
    }

    fn svg(&self) -> Option<String> {
        Some(self.svg())
    }
}

/// Runs a measurement that starts servers of its own (`lab`, `compare`) with `config`, and
/// shows its report; bad flags exit 2. Ctrl-C or SIGTERM stops it, and dropping it stops its
/// servers and removes their files (`stopped` says so), exit 130.
async fn run_stoppable<C, R: Shown>(
    config: Result<C, String>,
    measure: impl AsyncFnOnce(&C) -> R,
    stopped: &str,
    json: Option<&std::path::Path>,
) -> ExitCode {
    let config = match config {
        Ok(config) => config,
        Err(why) => return usage(&why),
    };
    tokio::select! {
        report = measure(&config) => show(&report, json, None),
        () = crate::signals::stop_requested() => {
            eprintln!("interrupted: {stopped}");
            ExitCode::from(130)
        }
    }
}

/// Shows a report: the table on stdout (or, with `--json -`, the JSON there and the table's
/// asides on stderr), the JSON to its file, the plot to its file, then the errors; exit 0 when
/// it passed, 1 when not or when a file cannot be written.
fn show(
    report: &impl Shown,
    json: Option<&std::path::Path>,
    plot: Option<&std::path::Path>,
) -> ExitCode {
    if json == Some(std::path::Path::new("-")) {
        for aside in report.aside() {
            eprintln!("{aside}");
        }
    } else {
        print!("{}", report.table());
    }
    if let Some(path) = json {
        if let Err(why) = write_json(report, path) {
            eprintln!("error: {why}");
            return ExitCode::from(1);
        }
    }
    if let (Some(path), Some(svg)) = (plot, report.svg()) {
        if let Err(error) = std::fs::write(path, svg) {
            eprintln!("error: cannot write {}: {error}", path.display());
            return ExitCode::from(1);
        }
    }
    for error in report.errors() {
        eprintln!("error: {error}");
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Writes `report` as JSON to `path`, or to standard output when `path` is `-`.
fn write_json(report: &impl serde::Serialize, path: &std::path::Path) -> Result<(), String> {
    let text = serde_json::to_string_pretty(report)
        .map_err(|error| format!("the report failed to serialise: {error}"))?;
    if path == std::path::Path::new("-") {
        println!("{text}");
        Ok(())
    } else {
        std::fs::write(path, text + "\n")
            .map_err(|error| format!("cannot write {}: {error}", path.display()))
    }
}

async fn run_scenario(args: RunArgs) -> ExitCode {
    let config = match args.config() {
        Ok(config) => config,
        Err(why) => return usage(&why),
    };
    match stockd_bench::run(config).await {
        Ok(report) => show(&report, args.json.as_deref(), args.plot.as_deref()),
        Err(why) => {
            eprintln!("error: {why}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `stockd bench run ARGS` as clap parses it.
    fn run_args(args: &[&str]) -> Result<RunArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Command {
            #[command(flatten)]
            run: RunArgs,
        }
        <Command as clap::Parser>::try_parse_from(
            std::iter::once("run").chain(args.iter().copied()),
        )
        .map(|command| command.run)
    }

    #[test]
    fn a_fleet_is_given_by_repeating_url_or_by_commas() {
        let args = run_args(&[
            "--scenario",
            "flash",
            "--url",
            "http://a:1,http://b:2",
            "--url",
            "http://c:3",
        ])
        .unwrap();
        let config = args.config().unwrap();
        assert_eq!(config.urls, ["http://a:1", "http://b:2", "http://c:3"]);

        let args = run_args(&[
            "--scenario",
            "flash",
            "--url",
            "http://a:1,http://b:2",
            "--connections",
            "1",
        ])
        .unwrap();
        let why = args.config().unwrap_err();
        assert!(
            why.contains("--connections 1") && why.contains("2 servers given with --url"),
            "{why}"
        );
    }

    #[test]
    fn spread_partitions_is_a_cart_flag() {
        let config = run_args(&["--scenario", "cart", "--pools", "8", "--spread-partitions"])
            .unwrap()
            .config()
            .unwrap();
        assert!(matches!(
            config.scenario,
            Scenario::Cart {
                pools: 8,
                spread_partitions: true,
                ..
            }
        ));
        let why = run_args(&["--scenario", "flash", "--spread-partitions"])
            .unwrap()
            .config()
            .unwrap_err();
        assert!(
            why.contains("--spread-partitions") && why.contains("--scenario flash"),
            "{why}"
        );
    }

    #[test]
    fn segments_is_a_flash_flag_within_the_contracts_range() {
        let config = run_args(&["--scenario", "flash", "--segments", "4"])
            .unwrap()
            .config()
            .unwrap();
        assert!(matches!(
            config.scenario,
            Scenario::Flash {
                segments: Some(4),
                ..
            }
        ));
        let config = run_args(&["--scenario", "flash"])
            .unwrap()
            .config()
            .unwrap();
        assert!(matches!(
            config.scenario,
            Scenario::Flash { segments: None, .. }
        ));
        for (count, why) in [
            ("0", "--segments must be 1..=64, got 0"),
            ("65", "--segments must be 1..=64, got 65"),
        ] {
            let refused = run_args(&["--scenario", "flash", "--segments", count])
                .unwrap()
                .config()
                .unwrap_err();
            assert_eq!(refused, why);
        }
        let why = run_args(&["--scenario", "batch", "--segments", "4"])
            .unwrap()
            .config()
            .unwrap_err();
        assert_eq!(
            why,
            "--segments applies to --scenario flash only, got --scenario batch"
        );
    }

    #[test]
    fn out_of_range_flags_say_their_range() {
        assert_eq!(within("--ops", 1_000_u64, 1..=1_000), Ok(1_000));
        assert_eq!(
            within("--stock", 0_u64, 1..=1_000_000_000_000),
            Err("--stock must be 1..=1000000000000, got 0".to_owned())
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("").is_err());
    }
}
