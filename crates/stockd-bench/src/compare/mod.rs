//! `stockd bench compare`: stockd embedded, stockd on Redis, and the seeds' own stack
//! ([`crate::seeds_stack`]: an app server over HTTP doing one `EVALSHA` check-and-deduct per
//! request) under one flash load, in one process, one after the other, so that a team choosing
//! between stockd and what the seeds describe reads ratios taken in the same run, HTTP against
//! HTTP.
//!
//! - [`servers`]: the HTTP servers it starts (`stockd serve`, `stockd bench seeds-stack`).
//! - [`cpu`]: CPU per request of the server, its Redis and the load generator.
//!
//! What it keeps equal, and must keep equal: the `stockd` executable (one HTTP stack, one
//! allocator), `--worker-threads` for every server, a fresh `redis-server` for each Redis stack
//! (the oversell lab's, its AOF fsync'd as [`AppendFsync`] says, automatic AOF rewrites off so
//! that none lands in one run and not another), the flash scenario's requests from `stockd bench
//! run`'s load generator over the same number of keep-alive connections, the same warm-up and
//! window, and the verdict read back from each server. What differs is what the server does with
//! a request. It never decides who sold what: each stack's verdict does.

pub mod cpu;
pub mod servers;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::http::Endpoint;
use crate::lab::servers::{LabDir, RedisServer};
use crate::load::{self, LoadConfig, Pace};
use crate::report::Report;
use crate::scenario::{Admin, Run, Scenario};
use cpu::{CpuPerRequest, Sample};
use servers::Server;

/// The stacks, in the order they run and are shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stack {
    StockdEmbedded,
    StockdRedis,
    SeedsStack,
}

impl Stack {
    pub const ALL: [Stack; 3] = [Stack::StockdEmbedded, Stack::StockdRedis, Stack::SeedsStack];

    pub fn name(self) -> &'static str {
        match self {
            Stack::StockdEmbedded => "stockd-embedded",
            Stack::StockdRedis => "stockd-redis",
            Stack::SeedsStack => "seeds-stack",
        }
    }

    /// What the server does with one flash request, for the report.
    pub fn description(self) -> &'static str {
        match self {
            Stack::StockdEmbedded => {
                "stockd serve, embedded engine: the hold kept with its id (a retry is answered, \
                 not sold again), user, expiry and events, logged and fsync'd before the answer"
            }
            Stack::StockdRedis => {
                "stockd serve --backend redis: the same hold kept in Redis by stockd's function \
                 library, requests batched into FCALLs"
            }
            Stack::SeedsStack => {
                "the seeds' app server: one EVALSHA `if stock >= n then DECRBY` per request, \
                 nothing else kept"
            }
        }
    }

    fn needs_redis(self) -> bool {
        self != Stack::StockdEmbedded
    }
}

/// The stacks `only` names (all when empty), in the comparison's order; an unknown name is an
/// error that lists the known ones.
pub fn select(only: &[String]) -> Result<Vec<Stack>, String> {
    for word in only {
        if !Stack::ALL.iter().any(|stack| stack.name() == word) {
            let names: Vec<&str> = Stack::ALL.iter().map(|stack| stack.name()).collect();
            return Err(format!(
                "unknown stack {word:?}: expected one of {}",
                names.join(", ")
            ));
        }
    }
    Ok(Stack::ALL
        .into_iter()
        .filter(|stack| only.is_empty() || only.iter().any(|word| word == stack.name()))
        .collect())
}

/// When every Redis of a comparison fsyncs its append-only file: `everysec` is the oversell
/// lab's setting and most deployments', `always` is what docs/redis.md asks of stockd's Redis
/// (an acknowledged sale survives a machine crash, as the embedded engine's does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AppendFsync {
    Everysec,
    Always,
}

impl AppendFsync {
    /// Redis's name for it.
    pub fn value(self) -> &'static str {
        match self {
            AppendFsync::Everysec => "everysec",
            AppendFsync::Always => "always",
        }
    }
}

/// `stockd serve`'s default worker threads: one per core but one, at least one (the embedded
/// engine's writer keeps a core). Every server of a comparison gets the same count.
pub fn default_worker_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .saturating_sub(1)
        .max(1)
}

/// One `stockd bench compare`.
#[derive(Clone, Debug)]
pub struct CompareConfig {
    pub stacks: Vec<Stack>,
    /// Units of the one hot pool (each stack gets a pool of its own with this many).
    pub stock: u64,
    /// Distinct users the requests name (the seeds' stack does not read them).
    pub buyers: u64,
    pub connections: usize,
    pub duration: Duration,
    /// Stop each stack's measurement after this many requests, if that comes before `duration`.
    pub requests: Option<u64>,
    pub warmup: Duration,
    pub seed: u64,
    /// HTTP worker threads of every server.
    pub worker_threads: usize,
    pub appendfsync: AppendFsync,
    /// The `stockd` executable that runs `serve` and `bench seeds-stack`.
    pub stockd_executable: PathBuf,
    /// A progress line per stack (drawn only when stderr is a terminal).
    pub progress: bool,
}

/// One stack's run.
#[derive(Clone, Debug, Serialize)]
pub struct StackRow {
    pub stack: Stack,
    pub description: &'static str,
    pub throughput_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Units the pool sold, read back from the server after the run.
    pub sold: u64,
    /// `None` when `/proc` could not be read (not Linux).
    pub cpu: Option<CpuPerRequest>,
    /// The whole `stockd bench run` report of the run: outcomes, latency, verdict, timeline.
    pub report: Report,
}

/// A stack that could not be measured, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Failed {
    pub stack: Stack,
    pub reason: String,
}

/// A stockd stack against the seeds' stack, measured in the same run.
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// `stockd-embedded / seeds-stack`, `stockd-redis / seeds-stack`.
    pub name: String,
    /// Requests per second: above 1, stockd answered more.
    pub throughput: f64,
    /// p99 latency: above 1, stockd's tail is longer.
    pub p99: f64,
    /// CPU per request of the stack (server and Redis): above 1, stockd spends more.
    pub cpu_per_request: Option<f64>,
}

/// Everything a comparison measured.
#[derive(Clone, Debug, Serialize)]
pub struct CompareReport {
    pub scenario: &'static str,
    /// Units of each stack's pool.
    pub stock: u64,
    pub buyers: u64,
    pub connections: usize,
    pub duration_s: f64,
    /// The request count each stack's measurement stopped at, when one was given.
    pub requests: Option<u64>,
    pub warmup_s: f64,
    pub seed: u64,
    pub worker_threads: usize,
    pub cores: usize,
    pub redis_persistence: String,
    pub rows: Vec<StackRow>,
    pub failed: Vec<Failed>,
    pub ratios: Vec<Ratio>,
}

impl CompareReport {
    /// Whether every stack ran and passed its verdict.
    pub fn ok(&self) -> bool {
        self.failed.is_empty() && self.rows.iter().all(|row| row.report.verdict.ok)
    }

    fn row(&self, stack: Stack) -> Option<&StackRow> {
        self.rows.iter().find(|row| row.stack == stack)
    }

    /// Each stockd stack over the seeds' stack, when both ran.
    fn ratios(rows: &[StackRow]) -> Vec<Ratio> {
        let Some(seeds) = rows.iter().find(|row| row.stack == Stack::SeedsStack) else {
            return Vec::new();
        };
        let over = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        rows.iter()
            .filter(|row| row.stack != Stack::SeedsStack)
            .map(|row| Ratio {
                name: format!("{} / {}", row.stack.name(), seeds.stack.name()),
                throughput: over(row.throughput_per_s, seeds.throughput_per_s),
                p99: over(row.p99_ms, seeds.p99_ms),
                cpu_per_request: row
                    .cpu
                    .zip(seeds.cpu)
                    .map(|(mine, theirs)| over(mine.stack_us, theirs.stack_us)),
            })
            .collect()
    }

    /// The table people read.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let measured = match self.requests {
            Some(requests) => format!("{requests} requests or {:.1} s", self.duration_s),
            None => format!("{:.1} s", self.duration_s),
        };
        let _ = writeln!(
            out,
            "stockd bench compare: flash, {} connections, closed loop, {measured} measured after \
             {:.1} s of warm-up, seed {}",
            self.connections, self.warmup_s, self.seed
        );
        let _ = writeln!(
            out,
            "  one pool of {} units per stack, {} buyers, no per-user limit; every server {} \
             worker thread(s) on {} cores; each Redis fresh: {}",
            self.stock, self.buyers, self.worker_threads, self.cores, self.redis_persistence
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "  {:<16} {:>11} {:>8} {:>8}  {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}  verdict",
            "stack",
            "requests/s",
            "p50 ms",
            "p99 ms",
            "server",
            "redis",
            "stack",
            "load gen",
            "irq",
            "other"
        );
        let _ = writeln!(
            out,
            "  {:<16} {:>11} {:>8} {:>8}  {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}",
            "", "", "", "", "µs/req", "µs/req", "µs/req", "µs/req", "µs/req", "cores"
        );
        for row in &self.rows {
            let cpu = |value: Option<f64>| value.map_or("-".to_string(), |us| format!("{us:.1}"));
            let _ = writeln!(
                out,
                "  {:<16} {:>11.0} {:>8.2} {:>8.2}  {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}  {}, sold {}",
                row.stack.name(),
                row.throughput_per_s,
                row.p50_ms,
                row.p99_ms,
                cpu(row.cpu.map(|cpu| cpu.server_us)),
                cpu(row.cpu.and_then(|cpu| cpu.redis_us)),
                cpu(row.cpu.map(|cpu| cpu.stack_us)),
                cpu(row.cpu.map(|cpu| cpu.load_generator_us)),
                cpu(row.cpu.map(|cpu| cpu.interrupts_us)),
                row.cpu
                    .map_or("-".to_string(), |cpu| format!("{:.2}", cpu.other_cores)),
                if row.report.verdict.ok {
                    "OK"
                } else {
                    "FAILED"
                },
                row.sold
            );
        }
        for failed in &self.failed {
            let _ = writeln!(
                out,
                "  {:<16} failed: {}",
                failed.stack.name(),
                failed.reason
            );
        }
        if !self.ratios.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "  {:<32} {:>10} {:>8} {:>16}",
                "same run", "throughput", "p99", "stack CPU/req"
            );
            for ratio in &self.ratios {
                let _ = writeln!(
                    out,
                    "  {:<32} {:>9.2}x {:>7.2}x {:>15}",
                    ratio.name,
                    ratio.throughput,
                    ratio.p99,
                    ratio
                        .cpu_per_request
                        .map_or("-".to_string(), |ratio| format!("{ratio:.2}x"))
                );
            }
        }
        let _ = writeln!(out);
        for stack in Stack::ALL {
            if self.row(stack).is_some() {
                let _ = writeln!(out, "  {:<16} {}", stack.name(), stack.description());
            }
        }
        for row in self.rows.iter().filter(|row| !row.report.verdict.ok) {
            for check in row.report.verdict.checks.iter().filter(|check| !check.ok) {
                let _ = writeln!(
                    out,
                    "  {} FAILED {}: {}",
                    row.stack.name(),
                    check.name,
                    check.detail
                );
            }
        }
        out
    }
}

/// Runs every stack of `config` in turn, each on servers of its own that are stopped (and
/// their files removed) before the next starts.
pub async fn run(config: &CompareConfig) -> CompareReport {
    let scenario = Scenario::Flash {
        stock: config.stock,
        buyers: config.buyers,
        per_user_limit: None,
        segments: None,
    };
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for &stack in &config.stacks {
        let outcome = async {
            let dir = LabDir::create()?;
            run_stack(stack, config, &scenario, &dir).await
        }
        .await;
        match outcome {
            Ok(row) => rows.push(row),
            Err(reason) => failed.push(Failed { stack, reason }),
        }
    }
    let ratios = CompareReport::ratios(&rows);
    CompareReport {
        scenario: scenario.name(),
        stock: config.stock,
        buyers: config.buyers,
        connections: config.connections,
        duration_s: config.duration.as_secs_f64(),
        requests: config.requests,
        warmup_s: config.warmup.as_secs_f64(),
        seed: config.seed,
        worker_threads: config.worker_threads,
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        redis_persistence: format!(
            "appendonly yes, appendfsync {}, no RDB snapshots, no automatic AOF rewrites",
            config.appendfsync.value()
        ),
        rows,
        failed,
        ratios,
    }
}

/// Starts the stack's servers under `dir`, measures it, and stops them.
async fn run_stack(
    stack: Stack,
    config: &CompareConfig,
    scenario: &Scenario,
    dir: &LabDir,
) -> Result<StackRow, String> {
    let redis = match stack.needs_redis() {
        true => Some(RedisServer::start(&dir.subdir("redis")?).await?),
        false => None,
    };
    let mut redis_connection = match &redis {
        Some(redis) => {
            let mut connection = redis.connect().await?;
            let settings = [
                ("auto-aof-rewrite-percentage", "0"),
                ("appendfsync", config.appendfsync.value()),
            ];
            for (name, value) in settings {
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg(name)
                    .arg(value)
                    .query_async::<()>(&mut connection)
                    .await
                    .map_err(|error| format!("CONFIG SET {name} {value}: {error}"))?;
            }
            Some(connection)
        }
        None => None,
    };
    let executable = &config.stockd_executable;
    let path = dir.subdir(stack.name())?;
    let workers = config.worker_threads;
    let redis_url = redis.as_ref().map(RedisServer::url);
    let server = match stack {
        Stack::SeedsStack => {
            let redis_url = redis_url.ok_or("the seeds' stack runs on a Redis")?;
            Server::seeds_stack(executable, &path, &redis_url, workers).await?
        }
        _ => Server::stockd(executable, &path, redis_url.as_deref(), workers).await?,
    };
    let url = server.url();
    let endpoint = Endpoint::parse(&url, None)?;
    let mut admin = Admin::new(&endpoint)?;
    let run_id = format!("{}-{}", crate::run_id(config.seed), stack.name());
    let run =
        Arc::new(Run::set_up(&mut admin, scenario.clone(), &run_id, config.connections).await?);
    let load_config = LoadConfig {
        connections: config.connections,
        pace: Pace::Closed,
        duration: Some(config.duration),
        requests: config.requests,
        warmup: config.warmup,
        seed: config.seed,
        progress: config.progress,
    };
    let before = Sample::take(server.pid(), redis_connection.as_mut()).await;
    let load = load::run(&[endpoint], Arc::clone(&run), &load_config).await?;
    let after = Sample::take(server.pid(), redis_connection.as_mut()).await;
    let cpu = match (before, after) {
        (Ok(before), Ok(after)) => Some(before.per_request(&after, load.sent)),
        _ => None,
    };
    let verdict = run.verdict(&mut admin).await?;
    let pool = admin.pool(&run.pools()[0]).await?;
    let report = Report::new(
        &run_id,
        &[url],
        run.pools(),
        scenario.clone(),
        config.connections,
        Pace::Closed,
        config.seed,
        &load,
        verdict,
        None,
    );
    Ok(StackRow {
        stack,
        description: stack.description(),
        throughput_per_s: report.throughput_per_s,
        p50_ms: report.latency.p50_ms,
        p99_ms: report.latency.p99_ms,
        sold: pool.sold,
        cpu,
        report,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_are_selected_by_name_in_the_comparisons_order() {
        assert_eq!(select(&[]).unwrap(), Stack::ALL);
        let only = ["seeds-stack".to_string(), "stockd-embedded".to_string()];
        assert_eq!(
            select(&only).unwrap(),
            [Stack::StockdEmbedded, Stack::SeedsStack]
        );
        let why = select(&["redis-lua".to_string()]).unwrap_err();
        assert!(
            why.contains("stockd-embedded, stockd-redis, seeds-stack"),
            "{why}"
        );
    }
}
