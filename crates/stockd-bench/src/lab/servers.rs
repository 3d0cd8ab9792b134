//! The servers the lab starts for itself, each on a free 127.0.0.1 port under one temporary
//! directory: `redis-server`, a PostgreSQL cluster made by `initdb`, and `stockd serve`.
//!
//! Every server is a child process owned by a guard: dropping the guard stops the process (also
//! when the lab is interrupted), and dropping the [`LabDir`] removes everything on disk. A
//! server that cannot be started is not an error of the lab: the caller gets the reason, says
//! it, and skips the variants that needed it. This module must never touch a server it did not
//! start (no default ports, no packaged services).

use std::ffi::OsStr;
use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::http::{Connection, Endpoint, Request};

/// How long a server may take to answer after it was started.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Start attempts when the free port we picked was taken before the server bound it.
const START_ATTEMPTS: usize = 5;

/// A temporary directory for the lab's servers; removed, with everything in it, on drop.
pub struct LabDir {
    path: PathBuf,
}

impl LabDir {
    pub fn create() -> Result<LabDir, String> {
        // Unique per process (the pid), per lab in it (a counter), and across pid reuse (time).
        static LABS: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "stockd-lab-{}-{}-{nanos:08x}",
            std::process::id(),
            LABS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&path)
            .map_err(|error| format!("cannot create {}: {error}", path.display()))?;
        // Traversable by the `postgres` user when we run PostgreSQL as it (see `Postgres`).
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o711));
        Ok(LabDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A fresh subdirectory.
    pub fn subdir(&self, name: &str) -> Result<PathBuf, String> {
        let path = self.path.join(name);
        std::fs::create_dir_all(&path)
            .map_err(|error| format!("cannot create {}: {error}", path.display()))?;
        Ok(path)
    }
}

impl Drop for LabDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A port nobody listens on right now (the server may still lose it to another process before
/// it binds: callers retry on a new port).
pub fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|error| format!("no free loopback port: {error}"))?;
    listener
        .local_addr()
        .map(|address| address.port())
        .map_err(|error| format!("no free loopback port: {error}"))
}

/// The first `name` in the directories of `path` (a `PATH` value) that is a file.
pub fn find_in_path(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path?)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A child process, stopped on drop: by `stop_signal` first when it has one (then killed if it
/// has not exited within 5 s), else killed. `stockd bench compare`'s servers are these too.
pub(crate) struct Process {
    child: Child,
    log: PathBuf,
    stop_signal: Option<&'static str>,
}

impl Process {
    pub(crate) fn spawn(
        mut command: Command,
        log: PathBuf,
        stop_signal: Option<&'static str>,
    ) -> Result<Process, String> {
        let out = File::create(&log)
            .map_err(|error| format!("cannot create {}: {error}", log.display()))?;
        let err = out
            .try_clone()
            .map_err(|error| format!("cannot open {}: {error}", log.display()))?;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        let child = command
            .spawn()
            .map_err(|error| format!("cannot start {:?}: {error}", command.get_program()))?;
        Ok(Process {
            child,
            log,
            stop_signal,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(reason)` once the process has exited.
    pub(crate) fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!("exited ({status}): {}", self.log_tail())),
            Ok(None) => None,
            Err(error) => Some(format!("cannot be waited for: {error}")),
        }
    }

    /// The last three non-empty lines of the process's output, joined, for a reason.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .collect();
        lines[lines.len().saturating_sub(3)..].join(" | ")
    }
}

impl Process {
    /// Sends the stop signal and waits up to `grace` for the process to exit by itself;
    /// whether it did (else it is killed when dropped).
    pub(crate) fn stop_within(&mut self, grace: Duration) -> bool {
        if let Ok(Some(_)) = self.child.try_wait() {
            return true;
        }
        if let Some(signal) = self.stop_signal {
            // `kill(1)`: std only sends SIGKILL. The child may run as another user, which root
            // may signal. If `kill` cannot be run, SIGKILL it is.
            let sent = Command::new("kill")
                .args(["-s", signal, &self.child.id().to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            let deadline = std::time::Instant::now() + grace;
            while sent && std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        false
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if !self.stop_within(Duration::from_secs(5)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether a start failed because the port was taken (then a new port is worth a try).
pub(crate) fn port_taken(reason: &str) -> bool {
    let reason = reason.to_ascii_lowercase();
    reason.contains("address already in use") || reason.contains("could not bind")
}

// ---------------------------------------------------------------------------------------------
// Redis
// ---------------------------------------------------------------------------------------------

/// A `redis-server` of the lab's own.
pub struct RedisServer {
    process: Process,
    pub port: u16,
}

impl RedisServer {
    /// How the lab's Redis persists, shown in the report: an append-only file fsync'd every
    /// second, the setting Redis recommends and most deployments behind a sale run (a crash may
    /// lose the last second of acknowledged writes; the embedded stockd and PostgreSQL fsync
    /// before they answer).
    pub const PERSISTENCE: &'static str = "appendonly yes, appendfsync everysec, no RDB snapshots";

    /// Starts `redis-server` (found in `PATH`) with its files under `dir`.
    pub async fn start(dir: &Path) -> Result<RedisServer, String> {
        let binary = find_in_path("redis-server", std::env::var_os("PATH").as_deref())
            .ok_or("redis-server not found in PATH (install Debian's redis-server)")?;
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            let mut command = Command::new(&binary);
            command.args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--dir",
                &dir.to_string_lossy(),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--daemonize",
                "no",
                "--logfile",
                "",
            ]);
            let mut process = Process::spawn(command, dir.join("redis.log"), None)?;
            match wait_redis(&mut process, port).await {
                Ok(()) => return Ok(RedisServer { process, port }),
                Err(reason) if port_taken(&reason) => last = reason,
                Err(reason) => return Err(format!("redis-server did not start: {reason}")),
            }
        }
        Err(format!("redis-server did not start: {last}"))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A new connection of its own (one per buyer), with a response timeout far above any
    /// answer the lab expects.
    pub async fn connect(&self) -> Result<redis::aio::MultiplexedConnection, String> {
        redis_connect(self.port).await
    }

    /// Whether the process still runs (for tests).
    pub fn is_running(&mut self) -> bool {
        self.process.exited().is_none()
    }
}

async fn redis_connect(port: u16) -> Result<redis::aio::MultiplexedConnection, String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .map_err(|error| error.to_string())?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|error| format!("connect to redis on port {port}: {error}"))
}

async fn wait_redis(process: &mut Process, port: u16) -> Result<(), String> {
    let mut starting = Starting::new(process);
    loop {
        starting.exited()?;
        if let Ok(mut connection) = redis_connect(port).await {
            let pong: Result<String, _> = redis::cmd("PING").query_async(&mut connection).await;
            if pong.is_ok() {
                return Ok(());
            }
        }
        starting.not_yet("no PONG", false).await?;
    }
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------------------------

/// Where `initdb` and `postgres` are: next to an `initdb` found in `path` (symlinks followed, as
/// Debian's wrappers may be), else in the newest `<root>/<version>/bin` of `roots`
/// (`/usr/lib/postgresql`).
pub fn find_postgres_bin(path: Option<&OsStr>, roots: &[&Path]) -> Result<PathBuf, String> {
    let beside = |initdb: &Path| {
        let dir = initdb.parent()?.to_path_buf();
        dir.join("postgres").is_file().then_some(dir)
    };
    if let Some(initdb) = find_in_path("initdb", path) {
        if let Some(dir) = std::fs::canonicalize(&initdb)
            .ok()
            .and_then(|real| beside(&real))
            .or_else(|| beside(&initdb))
        {
            return Ok(dir);
        }
    }
    let mut found: Vec<(Vec<u64>, PathBuf)> = Vec::new();
    for root in roots {
        let Ok(entries) = std::fs::read_dir(root) else {
            continue;
        };
        for entry in entries.flatten() {
            let bin = entry.path().join("bin");
            if bin.join("initdb").is_file() && bin.join("postgres").is_file() {
                let version = entry
                    .file_name()
                    .to_string_lossy()
                    .split('.')
                    .map(|part| part.parse().unwrap_or(0))
                    .collect();
                found.push((version, bin));
            }
        }
    }
    found.sort();
    found.pop().map(|(_, bin)| bin).ok_or_else(|| {
        let roots: Vec<String> = roots
            .iter()
            .map(|root| format!("{}/*/bin", root.display()))
            .collect();
        format!(
            "initdb not found in PATH or {} (install Debian's postgresql)",
            roots.join(", ")
        )
    })
}

/// The uid and gid of `user`, from the system's user database (`getent`, which also asks
/// NSS), else from `/etc/passwd`.
fn system_user(user: &str) -> Option<(u32, u32)> {
    let entry = |text: &str| -> Option<(u32, u32)> {
        text.lines().find_map(|line| {
            let fields: Vec<&str> = line.trim().split(':').collect();
            if fields.first() != Some(&user) {
                return None;
            }
            Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?))
        })
    };
    Command::new("getent")
        .args(["passwd", user])
        .output()
        .ok()
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .and_then(|text| entry(&text))
        .or_else(|| entry(&std::fs::read_to_string("/etc/passwd").ok()?))
}

/// `/proc/self` belongs to the process's effective user.
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

/// A PostgreSQL cluster of the lab's own: `initdb` in a temporary directory, then `postgres`
/// on a free loopback port, trust authentication on loopback only, durability settings left at
/// their defaults (`fsync`, `synchronous_commit` on: a commit is on disk before it is answered).
pub struct Postgres {
    process: Process,
    pub port: u16,
    bin: PathBuf,
    dir: PathBuf,
    user: Option<(u32, u32)>,
    max_connections: usize,
}

impl Postgres {
    pub const PERSISTENCE: &'static str = "defaults: fsync on, synchronous_commit on";

    /// `initdb` and `postgres` refuse to run as root: as root they run as the `postgres` system
    /// user (which Debian's package creates), in a directory it owns. `max_connections` must
    /// cover the buyers and the lab's own connection.
    pub async fn start(dir: &Path, max_connections: usize) -> Result<Postgres, String> {
        let bin = find_postgres_bin(
            std::env::var_os("PATH").as_deref(),
            &[Path::new("/usr/lib/postgresql")],
        )?;
        let user = if running_as_root() {
            let (uid, gid) = system_user("postgres").ok_or(
                "running as root, and initdb refuses root: no `postgres` system user to run it as \
                 (install Debian's postgresql, or run the lab as another user)",
            )?;
            std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                .map_err(|error| format!("cannot give {} to postgres: {error}", dir.display()))?;
            Some((uid, gid))
        } else {
            None
        };
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-U", "postgres", "--auth=trust", "--locale=C", "-E", "UTF8"])
            // Only initdb's own files are not fsync'd: the cluster is thrown away at the end.
            // The server itself runs with fsync on.
            .arg("--no-sync");
        as_user(&mut initdb, user);
        let output = initdb
            .output()
            .map_err(|error| format!("cannot run {}: {error}", bin.join("initdb").display()))?;
        if !output.status.success() {
            let text = String::from_utf8_lossy(&output.stderr);
            let lines: Vec<&str> = text.lines().collect();
            return Err(format!(
                "initdb failed ({}): {}",
                output.status,
                lines[lines.len().saturating_sub(3)..].join(" | ")
            ));
        }
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            let mut process = spawn_postgres(&bin, dir, user, port, max_connections)?;
            match wait_postgres(&mut process, port).await {
                Ok(()) => {
                    return Ok(Postgres {
                        process,
                        port,
                        bin,
                        dir: dir.to_owned(),
                        user,
                        max_connections,
                    })
                }
                Err(reason) if port_taken(&reason) => last = reason,
                Err(reason) => return Err(format!("postgres did not start: {reason}")),
            }
        }
        Err(format!("postgres did not start: {last}"))
    }

    /// Stops the server the way a crash would (SIGQUIT: no checkpoint, backends cut off), then
    /// starts it again on the same port and data: it recovers from its write-ahead log.
    pub async fn crash_and_restart(&mut self) -> Result<(), String> {
        let pid = self.process.child.id().to_string();
        let _ = Command::new("kill").args(["-s", "QUIT", &pid]).status();
        let _ = self.process.child.wait();
        let mut process = spawn_postgres(
            &self.bin,
            &self.dir,
            self.user,
            self.port,
            self.max_connections,
        )?;
        wait_postgres(&mut process, self.port)
            .await
            .map_err(|reason| format!("postgres did not start again: {reason}"))?;
        self.process = process;
        Ok(())
    }

    /// A connection string for this server (`tokio_postgres::connect` takes it).
    pub fn dsn(&self) -> String {
        postgres_dsn(self.port)
    }

    /// A new connection of its own (one per buyer).
    pub async fn connect(&self) -> Result<tokio_postgres::Client, String> {
        postgres_connect(self.port).await
    }

    /// Whether the process still runs (for tests).
    pub fn is_running(&mut self) -> bool {
        self.process.exited().is_none()
    }
}

/// Runs `postgres` as `user` (when root) on `dir/data`, listening on loopback `port`.
fn spawn_postgres(
    bin: &Path,
    dir: &Path,
    user: Option<(u32, u32)>,
    port: u16,
    max_connections: usize,
) -> Result<Process, String> {
    let data = dir.join("data");
    let mut command = Command::new(bin.join("postgres"));
    command
        .arg("-D")
        .arg(&data)
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-k"])
        .arg(&data)
        .args(["-c", &format!("max_connections={max_connections}")]);
    as_user(&mut command, user);
    // SIGQUIT: immediate shutdown; the cluster is thrown away, so no checkpoint is worth
    // waiting for, and the postmaster takes its backends down with it.
    Process::spawn(command, dir.join("postgres.log"), Some("QUIT"))
}

/// As `user` (uid, gid) when given, in the C locale, without the caller's PGDATA.
fn as_user(command: &mut Command, user: Option<(u32, u32)>) {
    if let Some((uid, gid)) = user {
        // std drops root's supplementary groups when it changes the uid.
        command.uid(uid).gid(gid);
    }
    command.env("LC_ALL", "C").env_remove("PGDATA");
}

fn postgres_dsn(port: u16) -> String {
    format!("host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=5")
}

async fn postgres_connect(port: u16) -> Result<tokio_postgres::Client, String> {
    let config = postgres_dsn(port);
    let (client, mut connection) = tokio_postgres::connect(&config, tokio_postgres::NoTls)
        .await
        .map_err(|error| format!("connect to postgres on port {port}: {error}"))?;
    // Drives the connection, taking its notices (which `.await` would log) and dropping them:
    // the lab reports through its table, and the server's own log is in the lab's directory.
    tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if message.is_err() {
                break;
            }
        }
    });
    Ok(client)
}

async fn wait_postgres(process: &mut Process, port: u16) -> Result<(), String> {
    let mut starting = Starting::new(process);
    loop {
        starting.exited()?;
        if let Ok(client) = postgres_connect(port).await {
            if client.simple_query("SELECT 1").await.is_ok() {
                return Ok(());
            }
        }
        starting.not_yet("no connection", true).await?;
    }
}

// ---------------------------------------------------------------------------------------------
// stockd
// ---------------------------------------------------------------------------------------------

/// A `stockd serve` of the lab's own: the embedded engine with its data under `dir`, or
/// `--backend URL`. No tokens (loopback only); none of the caller's `STOCKD_*` settings.
pub struct StockdServer {
    /// Held for its drop, which stops the server.
    _process: Process,
    pub port: u16,
}

impl StockdServer {
    pub async fn start(
        executable: &Path,
        dir: &Path,
        backend: Option<&str>,
    ) -> Result<StockdServer, String> {
        let mut last = String::new();
        for attempt in 0..START_ATTEMPTS {
            let port = free_port()?;
            let mut command = Command::new(executable);
            for (name, _) in std::env::vars_os() {
                if name.to_string_lossy().starts_with("STOCKD_") {
                    command.env_remove(name);
                }
            }
            command
                .env("STOCKD_LOG", "warn")
                .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
                .arg("--data-dir")
                .arg(dir.join(format!("data-{attempt}")));
            if let Some(backend) = backend {
                command.args(["--backend", backend]);
            }
            let mut process = Process::spawn(command, dir.join("stockd.log"), None)?;
            match wait_http_ready(&mut process, port, stockd_api::paths::READYZ).await {
                Ok(()) => {
                    return Ok(StockdServer {
                        _process: process,
                        port,
                    })
                }
                Err(reason) if port_taken(&reason) => last = reason,
                Err(reason) => return Err(format!("stockd did not start: {reason}")),
            }
        }
        Err(format!("stockd did not start: {last}"))
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Waits until the HTTP server `process` started on `port` answers `path` with 200; its log's
/// last lines when it exits first or the time runs out.
pub(crate) async fn wait_http_ready(
    process: &mut Process,
    port: u16,
    path: &str,
) -> Result<(), String> {
    let endpoint = Endpoint::parse(&format!("http://127.0.0.1:{port}"), None)?;
    let mut connection = Connection::new(&endpoint)?;
    let mut starting = Starting::new(process);
    loop {
        starting.exited()?;
        if let Ok(answer) = connection.send(&Request::get(path)).await {
            if answer.status == 200 {
                return Ok(());
            }
        }
        starting.not_yet(&format!("{path} not 200"), true).await?;
    }
}

/// A server process on its way up, probed until it is ready: between probes, whether it has
/// exited, and whether the time to be ready ([`READY_TIMEOUT`]) has run out.
struct Starting<'a> {
    process: &'a mut Process,
    deadline: Instant,
}

impl<'a> Starting<'a> {
    fn new(process: &'a mut Process) -> Starting<'a> {
        Starting {
            process,
            deadline: Instant::now() + READY_TIMEOUT,
        }
    }

    /// The reason the process exited, as an error, if it has.
    fn exited(&mut self) -> Result<(), String> {
        match self.process.exited() {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }

    /// After a probe that failed: once the time has run out, an error saying `not_ready`
    /// (with the log's last lines when `with_log`); before, a moment's pause until the next
    /// probe.
    async fn not_yet(&mut self, not_ready: &str, with_log: bool) -> Result<(), String> {
        if Instant::now() >= self.deadline {
            let seconds = READY_TIMEOUT.as_secs();
            return Err(if with_log {
                format!(
                    "{not_ready} within {seconds} s: {}",
                    self.process.log_tail()
                )
            } else {
                format!("{not_ready} within {seconds} s")
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_initdb_is_a_reason_that_says_what_to_install() {
        let empty = std::env::temp_dir().join(format!("stockd-lab-empty-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let reason = find_postgres_bin(Some(empty.as_os_str()), &[&empty]).unwrap_err();
        assert!(reason.contains("initdb not found"), "{reason}");
        assert!(reason.contains("install Debian's postgresql"), "{reason}");
        std::fs::remove_dir_all(&empty).unwrap();
    }

    #[test]
    fn the_newest_version_directory_wins() {
        let root = std::env::temp_dir().join(format!("stockd-lab-pgroot-{}", std::process::id()));
        for version in ["9.6", "15", "13"] {
            let bin = root.join(version).join("bin");
            std::fs::create_dir_all(&bin).unwrap();
            std::fs::write(bin.join("initdb"), "").unwrap();
            std::fs::write(bin.join("postgres"), "").unwrap();
        }
        let nothing = root.join("no-such-dir");
        let found = find_postgres_bin(Some(nothing.as_os_str()), &[&root]).unwrap();
        assert_eq!(found, root.join("15").join("bin"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[tokio::test]
    async fn servers_start_on_free_ports_and_are_gone_after_drop() {
        let dir = LabDir::create().unwrap();
        let path = dir.path().to_path_buf();
        let mut redis = RedisServer::start(&dir.subdir("redis").unwrap())
            .await
            .unwrap();
        assert!(redis.is_running());
        let port = redis.port;
        let mut postgres = Postgres::start(&dir.subdir("postgres").unwrap(), 10)
            .await
            .unwrap();
        assert!(postgres.is_running());
        let client = postgres.connect().await.unwrap();
        let fsync = client.query_one("SHOW fsync", &[]).await.unwrap();
        assert_eq!(fsync.get::<_, String>(0), "on");
        let pg_port = postgres.port;
        drop(client);
        drop(redis);
        drop(postgres);
        drop(dir);
        assert!(!path.exists(), "{} left behind", path.display());
        assert!(redis_connect(port).await.is_err());
        assert!(postgres_connect(pg_port).await.is_err());
    }
}
