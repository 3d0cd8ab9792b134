//! `stockd bench memory`: what retained holds cost the embedded engine, measured as users run
//! it. It starts `stockd serve` (embedded, default settings) on a fresh data directory, loads N
//! confirmed holds through `POST /v1/batch` with order-number-like hold ids, spread over users
//! and pools, and reads the server's resident memory from `/proc`:
//!
//! - at rest after the load, once a snapshot of it is built and the server idled a while;
//! - the peak (the kernel's high-water mark, `VmHWM`), which the snapshot's build sets unless
//!   the load did;
//! - after a graceful restart, with how long the restart took to be ready and how fast
//!   recovery read the snapshot against reading its file alone (a ratio from the same run:
//!   the disk's speed is this machine's business, the ratio is stockd's).
//!
//! One setting is not the default: the snapshot interval is the number of holds, so that one
//! snapshot is built right after the load, as the default (1,000,000 records) does for a
//! million holds. It never decides anything: it sends requests and reads what the OS says.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use http::Method;

use crate::http::{Connection, Endpoint, Request};
use crate::lab::servers::{free_port, LabDir, Process};

/// Ops per `POST /v1/batch` (the contract's most).
const BATCH_OPS: u64 = 1_000;
/// How long the server idles after the snapshot before "at rest" is read.
const REST: Duration = Duration::from_secs(5);
/// How long the server may take to be ready, at start and at the restart.
const READY_TIMEOUT: Duration = Duration::from_secs(600);
/// How long the snapshot after the load may take.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a graceful stop may take: a snapshot still being built, then the final one.
const STOP_GRACE: Duration = Duration::from_secs(600);
/// Resident memory is sampled this often while the load and the snapshot run.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

#[derive(Clone, Debug)]
pub struct MemoryConfig {
    /// The `stockd` executable to run as the server.
    pub executable: PathBuf,
    pub holds: u64,
    pub users: u64,
    pub pools: u64,
    /// Concurrent connections sending batches.
    pub connections: usize,
    pub seed: u64,
    pub progress: bool,
    /// The server's data directory, kept after the run (it must not exist yet); a temporary
    /// one, removed, when `None`.
    pub data_dir: Option<PathBuf>,
}

/// Resident memory of the server at one moment, in bytes.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Resident {
    pub bytes: u64,
    /// Above the empty server's, per hold.
    pub per_hold: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct MemoryReport {
    pub holds: u64,
    pub users: u64,
    pub pools: u64,
    /// Events the feed retained at rest (the server's `stockd_events_retained`).
    pub events_retained: u64,
    pub load_seconds: f64,
    pub holds_per_second: f64,
    /// The empty server, ready.
    pub empty_bytes: u64,
    /// The largest resident set sampled while the load ran.
    pub load_peak: Resident,
    /// The largest resident set sampled from the end of the load to the end of the snapshot.
    pub snapshot_peak: Resident,
    /// The kernel's high-water mark of the first process (`VmHWM`).
    pub peak: Resident,
    /// At rest after the load, the snapshot, and [`REST`] idle.
    pub at_rest: Resident,
    /// How long the snapshot after the load took (the server's `stockd_snapshot_build_ms_last`).
    pub snapshot_build_ms: u64,
    /// The graceful stop: final snapshot and exit.
    pub stop_ms: u64,
    /// Bytes of the newest snapshot file.
    pub snapshot_file_bytes: u64,
    /// From the restarted process's start to its `/readyz` answering 200.
    pub restart_ms: u64,
    /// Reading the snapshot file alone, once the restarted server is ready (from the page
    /// cache, like recovery's own read of it, which came right after the stop wrote it).
    pub snapshot_read_ms: f64,
    /// The restarted server at rest, after [`REST`] idle.
    pub after_restart: Resident,
    /// The restarted server's high-water mark (`VmHWM`): recovery's peak.
    pub restart_peak: Resident,
    /// What each structure of the restarted server's state takes, estimated from the state
    /// rebuilt in this process from the data directory (`stockd_engine::memory_estimate`).
    pub shares: Vec<Share>,
    pub errors: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct Share {
    pub structure: String,
    pub bytes: u64,
    pub per_hold: f64,
}

impl MemoryReport {
    pub fn passed(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn table(&self) -> String {
        let mb = |bytes: u64| bytes as f64 / 1e6;
        let row = |name: &str, r: &Resident| {
            format!(
                "{name:<34} {:>10.1} MB {:>10.0} B/hold\n",
                mb(r.bytes),
                r.per_hold
            )
        };
        let mut out = format!(
            "stockd bench memory: {} confirmed holds, {} users, {} pools, {} events retained; \
             loaded in {:.1} s ({:.0} holds/s)\n\n",
            self.holds,
            self.users,
            self.pools,
            self.events_retained,
            self.load_seconds,
            self.holds_per_second
        );
        out += &format!("{:<34} {:>10.1} MB\n", "empty server", mb(self.empty_bytes));
        out += &row("peak during the load", &self.load_peak);
        out += &row("peak during the snapshot", &self.snapshot_peak);
        out += &row("high-water mark (VmHWM)", &self.peak);
        out += &row("at rest after the snapshot", &self.at_rest);
        out += &row("after a restart, at rest", &self.after_restart);
        out += &row("restart's high-water mark", &self.restart_peak);
        out += &format!(
            "\nsnapshot: {:.1} MB built in {} ms; graceful stop {} ms\n",
            mb(self.snapshot_file_bytes),
            self.snapshot_build_ms,
            self.stop_ms
        );
        let ratio = if self.snapshot_read_ms > 0.0 {
            self.restart_ms as f64 / self.snapshot_read_ms
        } else {
            f64::NAN
        };
        out += &format!(
            "restart to ready: {} ms; reading the snapshot file alone: {:.0} ms ({ratio:.1}x)\n",
            self.restart_ms, self.snapshot_read_ms
        );
        if !self.shares.is_empty() {
            let resident = self.after_restart.bytes.saturating_sub(self.empty_bytes);
            let share = |bytes: u64| 100.0 * bytes as f64 / resident.max(1) as f64;
            out += "\nafter a restart, by structure (estimated from sizes and capacities):\n";
            for part in &self.shares {
                out += &format!(
                    "  {:<48} {:>8.1} MB {:>6.0} B/hold {:>5.1}%\n",
                    part.structure,
                    mb(part.bytes),
                    part.per_hold,
                    share(part.bytes)
                );
            }
            let counted: u64 = self.shares.iter().map(|part| part.bytes).sum();
            let rest = resident.saturating_sub(counted);
            out += &format!(
                "  {:<48} {:>8.1} MB {:>6.0} B/hold {:>5.1}%\n",
                "the rest (allocator rounding and free memory)",
                mb(rest),
                rest as f64 / self.holds.max(1) as f64,
                share(rest)
            );
        }
        out
    }
}

/// The server under measurement: `stockd serve` on `data_dir`, stopped by SIGTERM on drop.
struct Server {
    process: Process,
    endpoint: Endpoint,
}

impl Server {
    /// Starts it and waits until `/readyz` answers 200; also answers how long that took.
    async fn start(
        config: &MemoryConfig,
        dir: &Path,
        data_dir: &Path,
        name: &str,
    ) -> Result<(Server, Duration), String> {
        let port = free_port()?;
        let mut command = Command::new(&config.executable);
        command
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--snapshot-every-records", &config.holds.to_string()]);
        for (variable, _) in std::env::vars_os() {
            if variable.to_string_lossy().starts_with("STOCKD_") {
                command.env_remove(variable);
            }
        }
        command.env("STOCKD_LOG", "warn");
        let started = Instant::now();
        let mut process = Process::spawn(command, dir.join(format!("{name}.log")), Some("TERM"))?;
        let endpoint = Endpoint::parse(&format!("http://127.0.0.1:{port}"), None)?;
        let mut connection = Connection::new(&endpoint)?;
        loop {
            if let Some(reason) = process.exited() {
                return Err(format!("{name}: {reason}"));
            }
            if let Ok(answer) = connection
                .send(&Request::get(stockd_api::paths::READYZ))
                .await
            {
                if answer.status == 200 {
                    break;
                }
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(format!("{name}: not ready within {READY_TIMEOUT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let ready = started.elapsed();
        Ok((Server { process, endpoint }, ready))
    }

    fn status(&self) -> Result<ProcStatus, String> {
        ProcStatus::read(self.process.pid())
    }

    /// A counter or gauge of `/metrics`.
    async fn metric(&self, name: &str) -> Result<u64, String> {
        let mut connection = Connection::new(&self.endpoint)?;
        let answer = connection.send(&Request::get("/metrics")).await?;
        let text = String::from_utf8_lossy(&answer.body).into_owned();
        text.lines()
            .find_map(|line| {
                let (key, value) = line.split_once(' ')?;
                (key == name).then(|| value.trim().parse::<f64>().ok())?
            })
            .map(|value| value as u64)
            .ok_or_else(|| format!("/metrics has no {name}"))
    }

    /// SIGTERM, then waits for the exit (the final snapshot); how long it took.
    /// A graceful stop (the final snapshot written), however long it takes up to
    /// [`STOP_GRACE`]; how long it took.
    fn stop(mut self) -> Result<Duration, String> {
        let started = Instant::now();
        if !self.process.stop_within(STOP_GRACE) {
            return Err(format!(
                "the server did not stop within {} s of SIGTERM",
                STOP_GRACE.as_secs()
            ));
        }
        Ok(started.elapsed())
    }
}

/// `/proc/PID/status`: resident now and at most.
struct ProcStatus {
    rss: u64,
    hwm: u64,
}

impl ProcStatus {
    fn read(pid: u32) -> Result<ProcStatus, String> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|error| format!("cannot read /proc/{pid}/status: {error}"))?;
        let kib = |field: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(field))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .map(|kib| kib * 1024)
                .ok_or_else(|| format!("/proc/{pid}/status has no {field}"))
        };
        Ok(ProcStatus {
            rss: kib("VmRSS:")?,
            hwm: kib("VmHWM:")?,
        })
    }
}

/// A small, fixed generator: the same seed gives the same users and pools.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The batch of holds `first..first + n`: order-number-like ids (`ORD-20261207-00001234`), a
/// user of `users`, one unit of a pool of `pools`, confirmed.
fn batch_body(config: &MemoryConfig, first: u64, n: u64) -> Value {
    let ops: Vec<Value> = (first..first + n)
        .map(|i| {
            let r = mix(config.seed ^ i);
            json!({
                "op": "reserve",
                "hold_id": format!("ORD-20261207-{i:08}"),
                "user": format!("user-{:06}", r % config.users),
                "items": [{"pool": pool_name((r >> 32) % config.pools), "qty": 1}],
                "confirm": true,
            })
        })
        .collect();
    json!({ "ops": ops })
}

fn pool_name(i: u64) -> String {
    format!("SKU-{i:04}")
}

pub async fn run(config: &MemoryConfig) -> MemoryReport {
    let mut report = MemoryReport {
        holds: config.holds,
        users: config.users,
        pools: config.pools,
        ..MemoryReport::default()
    };
    if let Err(error) = measure(config, &mut report).await {
        report.errors.push(error);
    }
    report
}

fn resident(bytes: u64, empty: u64, holds: u64) -> Resident {
    Resident {
        bytes,
        per_hold: bytes.saturating_sub(empty) as f64 / holds.max(1) as f64,
    }
}

async fn measure(config: &MemoryConfig, report: &mut MemoryReport) -> Result<(), String> {
    let dir = LabDir::create()?;
    let data_dir = match &config.data_dir {
        Some(path) if path.exists() => {
            return Err(format!("--data-dir {} exists already", path.display()))
        }
        Some(path) => path.clone(),
        None => dir.subdir("data")?,
    };
    let (server, _) = Server::start(config, dir.path(), &data_dir, "stockd").await?;
    let empty = server.status()?.rss;
    report.empty_bytes = empty;
    let at = |bytes: u64| resident(bytes, empty, config.holds);

    let mut connection = Connection::new(&server.endpoint)?;
    for pool in 0..config.pools {
        let body = json!({ "total": config.holds });
        let path = format!("/v1/pools/{}", pool_name(pool));
        let answer = connection
            .send(&Request::json(Method::PUT, path, &body))
            .await?;
        if !matches!(answer.status, 200 | 201) {
            return Err(format!("PUT pool answered {}", answer.status));
        }
    }

    // The load, with resident memory sampled until it ends.
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut senders = Vec::new();
    for _ in 0..config.connections.max(1) {
        let (next, config, endpoint) = (next.clone(), config.clone(), server.endpoint.clone());
        senders.push(tokio::spawn(async move {
            let mut connection = Connection::new(&endpoint)?;
            loop {
                let first = next.fetch_add(BATCH_OPS, Ordering::Relaxed);
                if first >= config.holds {
                    return Ok::<(), String>(());
                }
                let n = BATCH_OPS.min(config.holds - first);
                let body = batch_body(&config, first, n);
                let answer = connection
                    .send(&Request::json(Method::POST, "/v1/batch", &body))
                    .await?;
                let results = answer
                    .json()
                    .and_then(|body| body["results"].as_array().cloned())
                    .ok_or_else(|| format!("POST /v1/batch answered {}", answer.status))?;
                if let Some(bad) = results.iter().find(|r| r["status"] != json!(201)) {
                    return Err(format!("a reserve of the load answered {bad}"));
                }
            }
        }));
    }
    let sampler = {
        let (done, pid, next) = (done.clone(), server.process.pid(), next.clone());
        let (holds, progress) = (config.holds, config.progress);
        tokio::spawn(async move {
            let mut peak = 0;
            let mut shown = Instant::now();
            while !done.load(Ordering::Relaxed) {
                if let Ok(status) = ProcStatus::read(pid) {
                    peak = peak.max(status.rss);
                    if progress && shown.elapsed() > Duration::from_secs(1) {
                        shown = Instant::now();
                        let sent = next.load(Ordering::Relaxed).min(holds);
                        eprint!(
                            "\r{sent} holds sent, {:.0} MB resident   ",
                            status.rss as f64 / 1e6
                        );
                    }
                }
                tokio::time::sleep(SAMPLE_EVERY).await;
            }
            if progress {
                eprintln!();
            }
            peak
        })
    };
    let mut failure = None;
    for sender in senders {
        match sender.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => failure = Some(error),
            Err(error) => failure = Some(format!("a load task failed: {error}")),
        }
    }
    done.store(true, Ordering::Relaxed);
    let load_peak = sampler.await.unwrap_or(0);
    if let Some(error) = failure {
        return Err(error);
    }
    let load = started.elapsed();
    report.load_seconds = load.as_secs_f64();
    report.holds_per_second = config.holds as f64 / load.as_secs_f64();
    report.load_peak = at(load_peak);

    // The snapshots the load made due, sampled until they are written: the writer starts one
    // before it takes the next batch, so once the load is answered none is left to start.
    let snapshot_started = Instant::now();
    let mut snapshot_peak = 0;
    while server.metric("stockd_snapshots_total").await? < 1
        || server.metric("stockd_snapshot_in_progress").await? == 1
    {
        snapshot_peak = snapshot_peak.max(server.status()?.rss);
        if snapshot_started.elapsed() > SNAPSHOT_TIMEOUT {
            return Err(format!(
                "no snapshot within {SNAPSHOT_TIMEOUT:?} of the load"
            ));
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    report.snapshot_peak = at(snapshot_peak.max(server.status()?.rss));
    report.snapshot_build_ms = server.metric("stockd_snapshot_build_ms_last").await?;
    tokio::time::sleep(REST).await;
    let status = server.status()?;
    report.at_rest = at(status.rss);
    report.peak = at(status.hwm);
    report.events_retained = server.metric("stockd_events_retained").await?;

    // A graceful restart.
    report.stop_ms = server.stop()?.as_millis() as u64;
    let snapshot = newest_snapshot(&data_dir)?;
    report.snapshot_file_bytes = std::fs::metadata(&snapshot).map_or(0, |m| m.len());
    let (server, ready) = Server::start(config, dir.path(), &data_dir, "stockd-restarted").await?;
    report.restart_ms = ready.as_millis() as u64;
    let read = Instant::now();
    let bytes = std::fs::read(&snapshot)
        .map_err(|error| format!("cannot read {}: {error}", snapshot.display()))?;
    report.snapshot_read_ms = read.elapsed().as_secs_f64() * 1e3;
    drop(bytes);
    tokio::time::sleep(REST).await;
    let status = server.status()?;
    report.after_restart = at(status.rss);
    report.restart_peak = at(status.hwm);
    let holds = server.metric("stockd_holds").await?;
    if holds != config.holds {
        report.errors.push(format!(
            "the restarted server has {holds} holds, {} were loaded",
            config.holds
        ));
    }
    server.stop()?;
    // The structures, from the state the final snapshot rebuilds, here (the server is gone).
    let holds = config.holds.max(1) as f64;
    let rebuilt_from = data_dir.clone();
    let estimated = tokio::task::spawn_blocking(move || {
        stockd_engine::memory_estimate(
            &rebuilt_from,
            stockd_core::StateConfig::default(),
            stockd_core::limits::EVENT_RETENTION_MAX_DEFAULT,
        )
    })
    .await
    .map_err(|error| format!("the estimate panicked: {error}"))?
    .map_err(|error| format!("cannot estimate the structures: {error}"))?;
    report.shares = (estimated.into_iter())
        .map(|(structure, bytes)| Share {
            structure: structure.to_string(),
            bytes: bytes as u64,
            per_hold: bytes as f64 / holds,
        })
        .collect();
    Ok(())
}

/// The newest snapshot in the data directory: the greatest `snapshot-<lsn>.snap` (the lsn is
/// zero-padded, so names order as lsns). A `*.obsolete` file being deleted is not one.
fn newest_snapshot(data_dir: &Path) -> Result<PathBuf, String> {
    let entries = std::fs::read_dir(data_dir)
        .map_err(|error| format!("cannot list {}: {error}", data_dir.display()))?;
    entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("snapshot-") && name.ends_with(".snap"))
        })
        .max()
        .ok_or_else(|| format!("no snapshot in {}", data_dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_snapshot_is_the_greatest_lsn_and_never_an_obsolete_file() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "snapshot-00000000000000000402.snap",
            "snapshot-00000000000000000759.snap",
            "snapshot-00000000000000000900.snap.obsolete",
            "wal-00000000000000000001.log",
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let newest = newest_snapshot(dir.path()).unwrap();
        assert!(
            newest.ends_with("snapshot-00000000000000000759.snap"),
            "{newest:?}"
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(newest_snapshot(empty.path()).is_err());
    }

    #[test]
    fn a_batch_names_distinct_order_ids_and_users_and_pools_within_bounds() {
        let config = MemoryConfig {
            executable: PathBuf::new(),
            holds: 10,
            users: 3,
            pools: 2,
            connections: 1,
            seed: 7,
            progress: false,
            data_dir: None,
        };
        let body = batch_body(&config, 4, 3);
        let ops = body["ops"].as_array().expect("ops");
        assert_eq!(ops.len(), 3);
        assert_eq!(ops[0]["hold_id"], "ORD-20261207-00000004");
        assert_eq!(ops[2]["hold_id"], "ORD-20261207-00000006");
        for op in ops {
            let user = op["user"].as_str().expect("user");
            assert!(["user-000000", "user-000001", "user-000002"].contains(&user));
            let pool = op["items"][0]["pool"].as_str().expect("pool");
            assert!(["SKU-0000", "SKU-0001"].contains(&pool), "{pool}");
        }
    }
}
