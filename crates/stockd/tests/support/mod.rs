//! Test harness shared by the black-box suites: starts a real `stockd` process, talks JSON over
//! HTTP to it, and compares answers against expected shapes.
//!
//! It owns the process lifecycle (free port, readiness, SIGKILL on drop, restart on the same data
//! dir and port, graceful SIGTERM) and must never reach into the server's crates: every suite
//! here tests the binary through its public HTTP contract only, so the same tests can run against
//! any backend. A backend is "a way to start a `stockd` process with extra args and env"
//! ([`TestBackend`]); pick one with `STOCKD_TEST_BACKEND` (default `embedded`).

#![allow(dead_code)]

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::task::JoinHandle;

/// How long a fresh process may take to answer `GET /healthz` with 200.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a process may take to exit after SIGTERM.
pub const GRACEFUL_EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Per-request timeout; above the largest `wait_ms` (30 s) any test uses, so a long-poll is never
/// cut short by the client.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(45);
/// Start attempts when the chosen port turns out to be taken (another test grabbed it between our
/// probe and the server's bind).
const START_ATTEMPTS: usize = 5;

/// Admin and client secrets used by [`ServerConfig::with_auth`].
pub const ADMIN_TOKEN: &str = "admin-secret-0123";
pub const CLIENT_TOKEN: &str = "client-secret-4567";

/// Wall clock in Unix epoch milliseconds, the unit of every `*_ms` field.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock before 1970")
        .as_millis() as u64
}

// ---------------------------------------------------------------------------------------------
// Backends
// ---------------------------------------------------------------------------------------------

/// A way to run `stockd` against some storage backend. The embedded engine needs nothing extra; a
/// Redis backend would own a `redis-server` child (started on construction, killed on drop) and
/// answer with `--backend redis --redis-url ...` here. The harness keeps the backend alive for as
/// long as any server started with it.
pub trait TestBackend: Send + Sync {
    /// Short name, shown in failure messages.
    fn name(&self) -> &str;
    /// Arguments appended after `serve --listen ... --data-dir ...`.
    fn extra_args(&self) -> Vec<String>;
    /// Environment variables set on the child.
    fn extra_env(&self) -> Vec<(String, String)>;
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
    fn extra_env(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// A real `redis-server` of its own, on a free loopback port, without persistence (the stockd
/// servers started with it share it; it is killed when the last of them is dropped). Tests that
/// restart Redis itself start theirs with [`RedisServer::start_with`].
pub struct RedisBackend {
    pub redis: RedisServer,
}

impl RedisBackend {
    pub fn start() -> RedisBackend {
        RedisBackend {
            redis: RedisServer::start_with(&["--appendonly", "no"]),
        }
    }
}

impl TestBackend for RedisBackend {
    fn name(&self) -> &str {
        "redis"
    }
    fn extra_args(&self) -> Vec<String> {
        vec!["--backend".to_string(), self.redis.url()]
    }
    fn extra_env(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// A real Redis Cluster of its own: 3 primaries and 3 replicas (`redis-cli --cluster create`) on
/// free loopback ports below 55536 (a node's bus port is 10000 higher), no persistence. stockd
/// servers started with it run `--backend redis+cluster://...` with `partitions` partitions.
pub struct RedisClusterBackend {
    pub nodes: Vec<RedisServer>,
    pub partitions: u32,
}

/// Cluster node timeout: how long a primary may be silent before its replica takes over.
pub const CLUSTER_NODE_TIMEOUT_MS: u64 = 1_000;

impl RedisClusterBackend {
    pub fn start(partitions: u32) -> RedisClusterBackend {
        let timeout = CLUSTER_NODE_TIMEOUT_MS.to_string();
        let nodes: Vec<RedisServer> = (0..6)
            .map(|_| {
                RedisServer::start_on_some_port(
                    cluster_port,
                    &[
                        "--appendonly",
                        "no",
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        &timeout,
                    ],
                )
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisClusterBackend { nodes, partitions };
        cluster.wait_healthy();
        cluster
    }

    /// Waits until every running node sees the cluster ok and every replica is in sync.
    pub fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self.nodes.iter().filter(|n| n.is_running()).all(|node| {
                node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok")
                    && !node
                        .cli(&["INFO", "replication"])
                        .contains("master_link_status:down")
            });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the Redis Cluster did not become healthy"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The `redis+cluster://` URL naming every node.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// The nodes that are primaries now.
    pub fn primaries(&self) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|n| n.is_running() && n.cli(&["ROLE"]).starts_with("master"))
            .collect()
    }
}

impl TestBackend for RedisClusterBackend {
    fn name(&self) -> &str {
        "redis-cluster"
    }
    fn extra_args(&self) -> Vec<String> {
        vec![
            "--backend".to_string(),
            self.url(),
            "--redis-partitions".to_string(),
            self.partitions.to_string(),
        ]
    }
    fn extra_env(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// A free loopback port in 20000..=55535, so that its cluster bus port (+10000) is valid.
pub fn cluster_port() -> u16 {
    use rand::Rng;
    loop {
        let port = rand::thread_rng().gen_range(20_000..=55_535u16);
        let free = std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
            && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok();
        if free {
            return port;
        }
    }
}

/// One `redis-server` child on a free loopback port, in a temporary directory. SIGKILL on drop.
pub struct RedisServer {
    pub port: u16,
    pub dir: tempfile::TempDir,
    args: Vec<String>,
    child: std::sync::Mutex<Option<Child>>,
}

impl RedisServer {
    /// Starts `redis-server` with extra config arguments (`--appendonly yes`, ...).
    pub fn start_with(args: &[&str]) -> RedisServer {
        RedisServer::start_on_some_port(free_port, args)
    }

    /// Starts `redis-server` on a port `pick` chooses, choosing again when the port turns out to
    /// be taken (another test bound it between the probe and redis-server's bind).
    pub fn start_on_some_port(pick: fn() -> u16, args: &[&str]) -> RedisServer {
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            let server = RedisServer::unstarted(pick(), args);
            match server.try_start() {
                Ok(()) => return server,
                Err(error) => last_error = error,
            }
        }
        panic!("redis-server did not start after {START_ATTEMPTS} attempts: {last_error}");
    }

    /// Starts `redis-server` on `port` with extra config arguments.
    pub fn start_on(port: u16, args: &[&str]) -> RedisServer {
        let server = RedisServer::unstarted(port, args);
        server.start_again();
        server
    }

    fn unstarted(port: u16, args: &[&str]) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("stockd-redis-")
            .tempdir()
            .expect("tempdir");
        RedisServer {
            port,
            dir,
            args: args.iter().map(|a| a.to_string()).collect(),
            child: std::sync::Mutex::new(None),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the process again on the same port and directory (after [`RedisServer::kill`]).
    pub fn start_again(&self) {
        if let Err(error) = self.try_start() {
            panic!("{error}");
        }
    }

    /// Starts the process and waits until it answers PING; an error when it exits first (its
    /// port is taken) or does not answer in time.
    fn try_start(&self) -> Result<(), String> {
        let mut child = self.child.lock().expect("redis child lock");
        assert!(child.is_none(), "redis-server already running");
        let spawned = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--daemonize", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server (scripts/test.sh installs it)");
        *child = Some(spawned);
        drop(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        while self.ping().is_err() {
            if !self.is_running() {
                self.kill();
                return Err(format!(
                    "redis-server on port {} exited at start (port taken?)",
                    self.port
                ));
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(format!("redis-server on port {} did not start", self.port));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The PONG may come from another test's redis-server that holds the port.
        let pid = self
            .child
            .lock()
            .expect("redis child lock")
            .as_ref()
            .map(Child::id);
        let info = self.cli(&["INFO", "server"]);
        let answered_by = info
            .lines()
            .find_map(|line| line.trim().strip_prefix("process_id:"))
            .and_then(|id| id.parse::<u32>().ok());
        if pid.is_none() || answered_by != pid {
            self.kill();
            return Err(format!(
                "port {} answered by another redis-server (pid {answered_by:?})",
                self.port
            ));
        }
        Ok(())
    }

    /// Whether the process is running (not killed, not exited).
    pub fn is_running(&self) -> bool {
        match self.child.lock().expect("redis child lock").as_mut() {
            Some(child) => child.try_wait().map(|s| s.is_none()).unwrap_or(false),
            None => false,
        }
    }

    /// SIGKILL (no shutdown save); a no-op when already stopped.
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().expect("redis child lock").take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Runs one command with `redis-cli` and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let output = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    fn ping(&self) -> std::io::Result<()> {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        stream.write_all(b"PING\r\n")?;
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply)?;
        if &reply == b"+PONG\r\n" {
            Ok(())
        } else {
            Err(std::io::Error::other(
                "unexpected PING reply (still loading?)",
            ))
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
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

// ---------------------------------------------------------------------------------------------
// Server process
// ---------------------------------------------------------------------------------------------

/// How to start one server.
#[derive(Clone)]
pub struct ServerConfig {
    pub backend: Arc<dyn TestBackend>,
    /// `STOCKD_TOKENS` value; `None` runs without auth.
    pub tokens: Option<String>,
    /// Token the plain `call` helpers send (`None`: no Authorization header).
    pub default_token: Option<String>,
    pub extra_args: Vec<String>,
    /// Host part of `--listen`; requests always go to 127.0.0.1, so `0.0.0.0` also works.
    pub listen_host: String,
    /// Environment variables for this server only (e.g. `STOCKD_FAULT`).
    pub env: Vec<(String, String)>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            backend: backend_from_env(),
            tokens: None,
            default_token: None,
            extra_args: Vec::new(),
            listen_host: "127.0.0.1".to_string(),
            env: Vec::new(),
        }
    }
}

impl ServerConfig {
    /// Auth on, with one admin and one client token; plain calls go out as admin.
    pub fn with_auth(mut self) -> Self {
        self.tokens = Some(format!("admin:{ADMIN_TOKEN},client:{CLIENT_TOKEN}"));
        self.default_token = Some(ADMIN_TOKEN.to_string());
        self
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }
}

/// One `stockd serve` child process with its own temporary data dir. Killed (SIGKILL) on drop.
pub struct Server {
    config: ServerConfig,
    root: tempfile::TempDir,
    data_dir: PathBuf,
    log_path: PathBuf,
    port: u16,
    child: Option<Child>,
    api: Api,
}

impl Server {
    /// Starts a server with the default config (no auth, backend from the environment).
    pub async fn start() -> Server {
        Server::start_with(ServerConfig::default()).await
    }

    pub async fn start_with(config: ServerConfig) -> Server {
        let root = tempfile::Builder::new()
            .prefix("stockd-test-")
            .tempdir()
            .expect("tempdir");
        let data_dir = root.path().join("data");
        std::fs::create_dir_all(&data_dir).expect("create data dir");
        let log_path = root.path().join("stockd.log");
        let api = Api::new(0, config.default_token.clone());
        let mut server = Server {
            config,
            root,
            data_dir,
            log_path,
            port: 0,
            child: None,
            api,
        };
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            server.port = free_port();
            match server.spawn_and_wait_ready().await {
                Ok(()) => return server,
                Err(error) => last_error = error,
            }
        }
        panic!("stockd did not start after {START_ATTEMPTS} attempts: {last_error}");
    }

    /// A cheap, cloneable handle for requests, usable from spawned tasks.
    pub fn api(&self) -> Api {
        self.api.clone()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn backend_name(&self) -> String {
        self.config.backend.name().to_string()
    }

    /// The process id of the running child (panics when stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is not running").id()
    }

    /// SIGKILL and reap the child; a no-op when already stopped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL, then start again on the same data dir and port.
    pub async fn restart(&mut self) {
        self.kill();
        self.start_again().await;
    }

    /// SIGTERM, wait for the exit (bounded) and insist on exit status 0. The server stays stopped;
    /// [`Server::start_again`] brings it back.
    pub async fn stop_graceful(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("server is not running");
        let signal = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .expect("run kill -TERM");
        assert!(signal.success(), "kill -TERM failed: {signal}");
        let deadline = Instant::now() + GRACEFUL_EXIT_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                assert!(
                    status.success(),
                    "stockd exited with {status} after SIGTERM, expected 0\n{}",
                    self.log_tail()
                );
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "stockd did not exit within {GRACEFUL_EXIT_TIMEOUT:?} of SIGTERM\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Start a stopped server again on the same data dir and port. The port can be briefly
    /// unavailable right after a kill, so a failed bind is retried a few times.
    pub async fn start_again(&mut self) {
        assert!(self.child.is_none(), "start_again on a running server");
        let mut last_error = String::new();
        for attempt in 0..START_ATTEMPTS {
            match self.spawn_and_wait_ready().await {
                Ok(()) => return,
                Err(error) => last_error = error,
            }
            tokio::time::sleep(Duration::from_millis(100 * (attempt as u64 + 1))).await;
        }
        panic!(
            "stockd did not start again on port {}: {last_error}",
            self.port
        );
    }

    /// Whether the child is still running (it has not crashed).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => child.try_wait().expect("try_wait").is_none(),
            None => false,
        }
    }

    /// Waits up to 2 s for the process to exit (a fault point killed it); whether it did.
    pub async fn exited(&mut self) -> bool {
        for _ in 0..100 {
            if !self.is_running() {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        !self.is_running()
    }

    /// The last 16 KiB of the server's stderr/stdout, for failure messages.
    pub fn log_tail(&self) -> String {
        read_tail(&self.log_path, 16 * 1024)
    }

    /// The last `max_bytes` of the server's log.
    pub fn log_tail_bytes(&self, max_bytes: u64) -> String {
        read_tail(&self.log_path, max_bytes)
    }

    /// Spawn the child and wait until `/healthz` answers 200. On failure the child is reaped and
    /// the error carries its log.
    async fn spawn_and_wait_ready(&mut self) -> Result<(), String> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .expect("open server log");
        let log_start = log.metadata().map(|meta| meta.len()).unwrap_or(0);
        let mut command = Command::new(env!("CARGO_BIN_EXE_stockd"));
        command
            .arg("serve")
            .arg("--listen")
            .arg(format!("{}:{}", self.config.listen_host, self.port))
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(self.config.backend.extra_args())
            .args(&self.config.extra_args)
            .env_remove("STOCKD_TOKENS")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("clone log handle")))
            .stderr(Stdio::from(log));
        for (key, value) in self.config.backend.extra_env() {
            command.env(key, value);
        }
        for (key, value) in &self.config.env {
            command.env(key, value);
        }
        if let Some(tokens) = &self.config.tokens {
            command.env("STOCKD_TOKENS", tokens);
        }
        let child = command
            .spawn()
            .map_err(|error| format!("spawn stockd: {error}"))?;
        self.child = Some(child);
        // A fresh client per process: pooled connections to a killed process are dead. The
        // partition count is the dataset's, so a restart keeps what was learned.
        let partitions = self.api.partitions.clone();
        self.api = Api::new(self.port, self.config.default_token.clone());
        self.api.partitions = partitions;

        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().expect("try_wait") {
                self.child = None;
                return Err(format!(
                    "stockd exited before ready ({status}):\n{}",
                    read_from(&self.log_path, log_start)
                ));
            }
            if let Ok((200, _)) = self.api.try_call_as(None, "GET", "/healthz", None).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(format!(
                    "stockd not ready within {READY_TIMEOUT:?}:\n{}",
                    read_from(&self.log_path, log_start)
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port that was free a moment ago: bind port 0, read it, drop the listener.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

fn read_from(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let _ = file.seek(SeekFrom::Start(offset));
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    if text.len() > 16 * 1024 {
        let cut = text.len() - 16 * 1024;
        let cut = (cut..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text = format!("...{}", &text[cut..]);
    }
    format!("---- stockd log ----\n{text}\n---- end of log ----")
}

fn read_tail(path: &Path, max_bytes: u64) -> String {
    let len = std::fs::metadata(path).map(|meta| meta.len()).unwrap_or(0);
    read_from(path, len.saturating_sub(max_bytes))
}

// ---------------------------------------------------------------------------------------------
// HTTP helpers
// ---------------------------------------------------------------------------------------------

/// JSON-over-HTTP handle on one server. Cloning is cheap (the connection pool is shared).
#[derive(Clone)]
pub struct Api {
    client: reqwest::Client,
    base_url: String,
    default_token: Option<String>,
    /// The server's event-feed partition count, learned on first use (see [`Api::partitions`]),
    /// shared by clones and kept across restarts of the same [`Server`].
    partitions: Arc<OnceLock<u32>>,
}

/// A response: status code and body (JSON when it parses, the text as a JSON string otherwise,
/// `null` when empty).
pub type Reply = (u16, Value);

impl Api {
    pub fn new(port: u16, default_token: Option<String>) -> Api {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .expect("build reqwest client");
        Api {
            client,
            base_url: format!("http://127.0.0.1:{port}"),
            default_token,
            partitions: Arc::new(OnceLock::new()),
        }
    }

    /// The same server, through a client that opens a new connection for every request. Garbage
    /// can leave a connection in a state the server closes; with a fresh connection each time a
    /// transport error belongs to the request that got it, not to whatever came before it.
    pub fn without_connection_reuse(&self) -> Api {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .pool_max_idle_per_host(0)
            .build()
            .expect("build reqwest client");
        Api {
            client,
            base_url: self.base_url.clone(),
            default_token: self.default_token.clone(),
            partitions: self.partitions.clone(),
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub fn default_token(&self) -> Option<&str> {
        self.default_token.as_deref()
    }

    /// Send JSON (or no body) with the default token; panics on a transport error.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Reply {
        let token = self.default_token.clone();
        self.call_as(token.as_deref(), method, path, body).await
    }

    /// Like [`Api::call`] with an explicit bearer token (`None`: no Authorization header).
    pub async fn call_as(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Reply {
        match self.try_call_as(token, method, path, body).await {
            Ok(reply) => reply,
            Err(error) => panic!("{method} {path}: {error}"),
        }
    }

    /// Like [`Api::call`], returning transport errors instead of panicking.
    pub async fn try_call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Reply, String> {
        let token = self.default_token.clone();
        self.try_call_as(token.as_deref(), method, path, body).await
    }

    pub async fn try_call_as(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Reply, String> {
        let bytes = body.map(|value| serde_json::to_vec(&value).expect("serialise body"));
        self.send(token, method, path, bytes, Some("application/json"))
            .await
    }

    /// Send raw bytes as the body (for malformed JSON and garbage), with the default token and a
    /// JSON content type.
    pub async fn send_raw(&self, method: &str, path: &str, body: Vec<u8>) -> Result<Reply, String> {
        let token = self.default_token.clone();
        self.send(
            token.as_deref(),
            method,
            path,
            Some(body),
            Some("application/json"),
        )
        .await
    }

    /// The general form: any token, any body bytes, any content type (`None`: no header).
    pub async fn send(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: Option<&str>,
    ) -> Result<Reply, String> {
        let authorization = token.map(|token| format!("Bearer {token}"));
        self.send_with_authorization(authorization.as_deref(), method, path, body, content_type)
            .await
    }

    /// Like [`Api::send`] with a raw `Authorization` header value (for malformed schemes).
    pub async fn send_with_authorization(
        &self,
        authorization: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: Option<&str>,
    ) -> Result<Reply, String> {
        let (status, _, body) = self
            .send_with_headers(authorization, method, path, body, content_type)
            .await?;
        Ok((status, body))
    }

    /// Like [`Api::send_with_authorization`], with the answer's headers.
    pub async fn send_with_headers(
        &self,
        authorization: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: Option<&str>,
    ) -> Result<(u16, reqwest::header::HeaderMap, Value), String> {
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|error| format!("bad method {method:?}: {error}"))?;
        let mut request = self
            .client
            .request(method, format!("{}{}", self.base_url, path));
        if let Some(authorization) = authorization {
            request = request.header("authorization", authorization);
        }
        if let Some(bytes) = body {
            if let Some(content_type) = content_type {
                request = request.header("content-type", content_type);
            }
            request = request.body(bytes);
        }
        let response = request
            .send()
            .await
            .map_err(|error| format!("transport error: {error:?}"))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response
            .bytes()
            .await
            .map_err(|error| format!("reading body: {error:?}"))?;
        Ok((status, headers, parse_body(&bytes)))
    }

    /// GET a pool and return its object, panicking unless the answer is 200.
    pub async fn pool(&self, pool: &str) -> Value {
        let (status, body) = self.call("GET", &format!("/v1/pools/{pool}"), None).await;
        assert_eq!(status, 200, "GET pool {pool}: {body}");
        body
    }

    /// The server's event-feed partition count P (`GET /v1/events/partitions`), asked once per
    /// server and cached. Panics unless the answer is 200 `{"partitions": P}` with P >= 1.
    pub async fn partitions(&self) -> u32 {
        if let Some(partitions) = self.partitions.get() {
            return *partitions;
        }
        let (status, body) = self.call("GET", "/v1/events/partitions", None).await;
        assert_eq!(status, 200, "GET /v1/events/partitions: {body}");
        let partitions = body["partitions"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p >= 1)
            .unwrap_or_else(|| panic!("GET /v1/events/partitions: no integer P >= 1: {body}"));
        *self.partitions.get_or_init(|| partitions)
    }

    /// The path reading partition `partition` of the feed with the query `query` (`after=...`,
    /// `limit=...`, ...). With one partition the `partition` parameter is left out, as a consumer
    /// of a one-partition feed may (it defaults to 0); with P > 1 it is always named.
    pub async fn events_path(&self, partition: u32, query: &str) -> String {
        let partitions = self.partitions().await;
        assert!(
            partition < partitions,
            "partition {partition} of a feed with {partitions}"
        );
        match (partitions, query) {
            (1, "") => "/v1/events".to_string(),
            (1, _) => format!("/v1/events?{query}"),
            (_, "") => format!("/v1/events?partition={partition}"),
            _ => format!("/v1/events?partition={partition}&{query}"),
        }
    }

    /// Every event of one partition after `after`, paging with the largest page. Checks on every
    /// page that `next_after` is the last seq returned, or the given `after` when none is.
    pub async fn events_in(&self, partition: u32, after: u64) -> Vec<Value> {
        let mut events = Vec::new();
        let mut cursor = after;
        loop {
            let path = self
                .events_path(partition, &format!("after={cursor}&limit=1000"))
                .await;
            let (status, body) = self.call("GET", &path, None).await;
            assert_eq!(status, 200, "GET {path}: {body}");
            let page = body["events"]
                .as_array()
                .cloned()
                .unwrap_or_else(|| panic!("no events array: {body}"));
            let next = body["next_after"]
                .as_u64()
                .unwrap_or_else(|| panic!("no next_after: {body}"));
            let Some(last) = page.last() else {
                assert_eq!(
                    next, cursor,
                    "GET {path}: next_after of an empty page must be the given after"
                );
                return events;
            };
            assert_eq!(
                Some(next),
                last["seq"].as_u64(),
                "GET {path}: next_after must be the seq of the last event returned: {}",
                short(&body)
            );
            cursor = next;
            events.extend(page);
        }
    }

    /// Every event of every partition K after `cursors[K]` (one cursor per partition: seqs are
    /// per partition), each with the partition it came from; partition 0's first, each partition's
    /// in feed order. Order between partitions means nothing.
    pub async fn events_since(&self, cursors: &[u64]) -> Vec<FeedEvent> {
        let partitions = self.partitions().await;
        assert_eq!(
            cursors.len(),
            partitions as usize,
            "one cursor per partition of the feed"
        );
        let mut events = Vec::new();
        for (partition, after) in (0..partitions).zip(cursors) {
            events.extend(
                self.events_in(partition, *after)
                    .await
                    .into_iter()
                    .map(|event| FeedEvent { partition, event }),
            );
        }
        events
    }

    /// Every event of every partition, each with its partition.
    pub async fn all_events(&self) -> Vec<FeedEvent> {
        let partitions = self.partitions().await;
        self.events_since(&vec![0; partitions as usize]).await
    }

    /// Every event after `after`, without the partition it came from: with one partition, the
    /// feed after `after`; with P > 1 only `after = 0` means something (every event of every
    /// partition, partition by partition), since seqs are per partition. New code should use
    /// [`Api::events_since`] / [`Api::all_events`], which keep the partition.
    pub async fn events_after(&self, after: u64) -> Vec<Value> {
        let partitions = self.partitions().await;
        assert!(
            partitions == 1 || after == 0,
            "events_after({after}) on a feed with {partitions} partitions: seqs are per \
             partition, so one cursor cannot say where every partition stands; use events_since"
        );
        self.events_since(&vec![after; partitions as usize])
            .await
            .into_iter()
            .map(|read| read.event)
            .collect()
    }
}

pub fn parse_body(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// Checks the contract's error shape: `{"error": CODE, "message": TEXT, ...}`.
pub fn error_shape_problem(status: u16, body: &Value) -> Option<String> {
    if status < 400 {
        return None;
    }
    let ok = body.get("error").is_some_and(Value::is_string)
        && body.get("message").is_some_and(Value::is_string);
    (!ok).then(|| {
        format!(
            "error body of a {status} must have string \"error\" and \"message\": {}",
            short(body)
        )
    })
}

/// A compact rendering of a JSON value for messages, cut at 600 characters.
pub fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.len() <= 600 {
        return text;
    }
    let cut = (0..=600)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}...({} bytes)", &text[..cut], text.len())
}

// ---------------------------------------------------------------------------------------------
// The event feed and its partitions
// ---------------------------------------------------------------------------------------------

/// One event as read from the feed, with the partition it was read from.
#[derive(Clone, Debug, PartialEq)]
pub struct FeedEvent {
    pub partition: u32,
    pub event: Value,
}

impl FeedEvent {
    /// The event with its partition as a `"partition"` field (the feed's events carry none), so
    /// that an expectation can say which partition an event is in.
    pub fn with_partition(&self) -> Value {
        let mut event = self.event.clone();
        if let Some(map) = event.as_object_mut() {
            map.insert("partition".to_string(), json!(self.partition));
        }
        event
    }
}

/// Types of events about one pool, and about one hold: the contract puts all events of one pool in
/// one partition, and all events of one hold in one partition.
pub const POOL_EVENT_TYPES: [&str; 4] = ["pool_upserted", "restocked", "pool_deleted", "low_stock"];
pub const HOLD_EVENT_TYPES: [&str; 6] = [
    "held",
    "confirmed",
    "released",
    "expired",
    "refunded",
    "extended",
];

/// Where `events` (any set read from the feed) break the partition rules: seq must strictly
/// increase within each partition (in the order read), the events of one pool must all be in one
/// partition, and the events of one hold must all be in one partition.
pub fn partition_rules_problem(events: &[FeedEvent]) -> Option<String> {
    let mut last_seq: HashMap<u32, u64> = HashMap::new();
    let mut home: HashMap<(&str, String), (u32, &Value)> = HashMap::new();
    for read in events {
        let Some(seq) = read.event["seq"].as_u64() else {
            return Some(format!("event without integer seq: {}", short(&read.event)));
        };
        if let Some(last) = last_seq.insert(read.partition, seq) {
            if seq <= last {
                return Some(format!(
                    "partition {}: seq not strictly increasing: {seq} after {last}",
                    read.partition
                ));
            }
        }
        let kind = read.event["type"].as_str().unwrap_or("");
        let owner = if POOL_EVENT_TYPES.contains(&kind) {
            read.event["pool"]
                .as_str()
                .map(|pool| ("pool", pool.to_string()))
        } else if HOLD_EVENT_TYPES.contains(&kind) {
            read.event["hold_id"]
                .as_str()
                .map(|hold| ("hold", hold.to_string()))
        } else {
            None
        };
        let Some(owner) = owner else { continue };
        let (partition, first) = *home
            .entry(owner.clone())
            .or_insert((read.partition, &read.event));
        if partition != read.partition {
            return Some(format!(
                "the events of {} {} are in two partitions: {} in {partition}, {} in {}",
                owner.0,
                owner.1,
                short(first),
                short(&read.event),
                read.partition
            ));
        }
    }
    None
}

/// Matches `actual` (events read from every partition) against `expected`, an array of event
/// expectations (see [`match_subset`]) in the order the changes were made. Order is only compared
/// within a partition: the expected list must be an interleaving of the partitions' sequences,
/// every event matched exactly once. With one partition this is an element-wise match. Each actual
/// event is matched with its `"partition"` field added ([`FeedEvent::with_partition`]).
pub fn match_events(
    expected: &Value,
    actual: &[FeedEvent],
    vars: &mut Vars,
    window: TimeWindow,
) -> Result<(), String> {
    let wanted = expected
        .as_array()
        .expect("expected events are an array of event expectations");
    let mut queues: Vec<(u32, Vec<Value>)> = Vec::new();
    for read in actual {
        match queues.iter_mut().find(|(k, _)| *k == read.partition) {
            Some((_, queue)) => queue.push(read.with_partition()),
            None => queues.push((read.partition, vec![read.with_partition()])),
        }
    }
    if wanted.len() != actual.len() {
        return Err(format!(
            "expected {} events, got {}",
            wanted.len(),
            actual.len()
        ));
    }
    let mut search = Interleaving {
        wanted,
        queues: &queues,
        window,
        deepest: (0, Vec::new()),
        steps: 0,
    };
    let mut positions = vec![0; queues.len()];
    if search.extend(0, &mut positions, vars) {
        return Ok(());
    }
    let (index, why) = search.deepest;
    Err(format!(
        "no order within partitions matches: the first {index} expected events match, then \
         expected[{index}] ({}) matches no partition's next event: {}",
        short(&wanted[index]),
        why.join("; ")
    ))
}

/// The backtracking search of [`match_events`]: `positions[q]` is how many events of queue `q`
/// are matched so far.
struct Interleaving<'a> {
    wanted: &'a [Value],
    queues: &'a [(u32, Vec<Value>)],
    window: TimeWindow,
    /// The furthest expected index reached, with why each partition's next event failed there.
    deepest: (usize, Vec<String>),
    steps: usize,
}

impl Interleaving<'_> {
    /// Bounds the search; lists in the suites are short and rarely ambiguous.
    const MAX_STEPS: usize = 1_000_000;

    fn extend(&mut self, index: usize, positions: &mut [usize], vars: &mut Vars) -> bool {
        if index == self.wanted.len() {
            return true;
        }
        self.steps += 1;
        assert!(
            self.steps < Self::MAX_STEPS,
            "match_events: the expected events are too ambiguous to match"
        );
        let mut why = Vec::new();
        for queue in 0..self.queues.len() {
            let (partition, events) = &self.queues[queue];
            let Some(next) = events.get(positions[queue]) else {
                continue;
            };
            let mut trial = vars.clone();
            match match_at(
                &format!("partition {partition}"),
                &self.wanted[index],
                next,
                &mut trial,
                self.window,
            ) {
                Ok(()) => {
                    positions[queue] += 1;
                    if self.extend(index + 1, positions, &mut trial) {
                        *vars = trial;
                        return true;
                    }
                    positions[queue] -= 1;
                }
                Err(error) => why.push(error),
            }
        }
        if index >= self.deepest.0 {
            self.deepest = (index, why);
        }
        false
    }
}

// ---------------------------------------------------------------------------------------------
// Subset matching
// ---------------------------------------------------------------------------------------------

/// Values captured by `$save:NAME` markers, referred to by `$same:NAME`, `$gt:NAME` and `{$NAME}`.
/// [`PARTITIONS_VAR`] holds the server's partition count for the `$partition` markers.
pub type Vars = HashMap<String, Value>;

/// The name under which [`Vars`] carry the server's partition count P, for `$partition` markers.
pub const PARTITIONS_VAR: &str = "$partitions";

/// Fresh [`Vars`] knowing the server's partition count.
pub fn vars_with_partitions(partitions: u32) -> Vars {
    let mut vars = Vars::new();
    vars.insert(PARTITIONS_VAR.to_string(), json!(partitions));
    vars
}

/// The wall-clock window around the request that produced a value, for `$now` markers.
#[derive(Clone, Copy, Debug)]
pub struct TimeWindow {
    pub before_ms: u64,
    pub after_ms: u64,
}

impl TimeWindow {
    /// Slack for clock granularity; the server reads the same clock as the test.
    pub const SLACK_MS: u64 = 50;
}

/// Checks that `actual` contains `expected`:
/// - objects: every expected key present in actual and matching (extra actual keys are fine);
/// - arrays: same length, element-wise; `{"$unordered": [...]}` matches in any order;
///   `{"$len": N}` matches any array of length N;
/// - strings starting with `$` are markers: `$any` (present, anything), `$int` (an integer),
///   `$now` / `$now+N` (an integer within the request's time window, plus N), `$save:NAME`
///   (anything, captured), `$same:NAME` (equal to the captured value), `$gt:NAME` (an integer
///   greater than the captured one), `$contains:TEXT` and `$prefix:TEXT` (strings),
///   `$partition` (an integer in 0..P, P from [`PARTITIONS_VAR`]: exactly 0 with one partition)
///   and `$partition:NAME` (the same, and equal to the value captured as NAME, captured when
///   none is yet: every answer about one pool or hold names one partition);
/// - anything else: equality.
///
/// Returns the first mismatch as `path: explanation`.
pub fn match_subset(
    expected: &Value,
    actual: &Value,
    vars: &mut Vars,
    window: TimeWindow,
) -> Result<(), String> {
    match_at("$", expected, actual, vars, window)
}

fn match_at(
    path: &str,
    expected: &Value,
    actual: &Value,
    vars: &mut Vars,
    window: TimeWindow,
) -> Result<(), String> {
    match expected {
        Value::String(text) if text.starts_with('$') => {
            match_marker(path, text, actual, vars, window)
        }
        Value::Object(map) if map.len() == 1 && map.contains_key("$unordered") => {
            let wanted = map["$unordered"]
                .as_array()
                .expect("$unordered takes an array");
            let got = actual
                .as_array()
                .ok_or_else(|| format!("{path}: expected an array, got {}", short(actual)))?;
            if wanted.len() != got.len() {
                return Err(format!(
                    "{path}: expected {} elements (any order), got {}",
                    wanted.len(),
                    short(actual)
                ));
            }
            let mut used = vec![false; got.len()];
            if match_unordered(path, wanted, got, &mut used, vars, window) {
                Ok(())
            } else {
                Err(format!(
                    "{path}: no ordering of {} matches {}",
                    short(actual),
                    short(&map["$unordered"])
                ))
            }
        }
        Value::Object(map) if map.len() == 1 && map.contains_key("$len") => {
            let want = map["$len"].as_u64().expect("$len takes an integer") as usize;
            match actual.as_array() {
                Some(items) if items.len() == want => Ok(()),
                _ => Err(format!(
                    "{path}: expected an array of {want} elements, got {}",
                    short(actual)
                )),
            }
        }
        Value::Object(map) => {
            let object = actual
                .as_object()
                .ok_or_else(|| format!("{path}: expected an object, got {}", short(actual)))?;
            for (key, want) in map {
                let got = object
                    .get(key)
                    .ok_or_else(|| format!("{path}.{key}: missing in {}", short(actual)))?;
                match_at(&format!("{path}.{key}"), want, got, vars, window)?;
            }
            Ok(())
        }
        Value::Array(wanted) => {
            let got = actual
                .as_array()
                .ok_or_else(|| format!("{path}: expected an array, got {}", short(actual)))?;
            if wanted.len() != got.len() {
                return Err(format!(
                    "{path}: expected {} elements, got {}: {}",
                    wanted.len(),
                    got.len(),
                    short(actual)
                ));
            }
            for (index, (want, have)) in wanted.iter().zip(got).enumerate() {
                match_at(&format!("{path}[{index}]"), want, have, vars, window)?;
            }
            Ok(())
        }
        _ if expected == actual => Ok(()),
        _ => Err(format!(
            "{path}: expected {}, got {}",
            short(expected),
            short(actual)
        )),
    }
}

fn match_unordered(
    path: &str,
    wanted: &[Value],
    got: &[Value],
    used: &mut [bool],
    vars: &mut Vars,
    window: TimeWindow,
) -> bool {
    let Some((first, rest)) = wanted.split_first() else {
        return true;
    };
    for index in 0..got.len() {
        if used[index] {
            continue;
        }
        let mut trial = vars.clone();
        if match_at(path, first, &got[index], &mut trial, window).is_ok() {
            used[index] = true;
            if match_unordered(path, rest, got, used, &mut trial, window) {
                *vars = trial;
                return true;
            }
            used[index] = false;
        }
    }
    false
}

fn match_marker(
    path: &str,
    marker: &str,
    actual: &Value,
    vars: &mut Vars,
    window: TimeWindow,
) -> Result<(), String> {
    let fail = |why: String| Err(format!("{path}: {why}, got {}", short(actual)));
    let (name, arg) = marker.split_once(':').unwrap_or((marker, ""));
    match name {
        "$any" => Ok(()),
        "$int" if actual.is_u64() || actual.is_i64() => Ok(()),
        "$int" => fail("expected an integer".into()),
        "$save" => {
            vars.insert(arg.to_string(), actual.clone());
            Ok(())
        }
        "$same" => match vars.get(arg) {
            Some(saved) if saved == actual => Ok(()),
            Some(saved) => fail(format!(
                "expected the value saved as {arg} ({})",
                short(saved)
            )),
            None => fail(format!("nothing saved as {arg}")),
        },
        "$gt" => match (vars.get(arg).and_then(Value::as_u64), actual.as_u64()) {
            (Some(saved), Some(now)) if now > saved => Ok(()),
            (Some(saved), _) => fail(format!("expected an integer greater than {arg} = {saved}")),
            (None, _) => fail(format!("no integer saved as {arg}")),
        },
        "$partition" => {
            let partitions = vars
                .get(PARTITIONS_VAR)
                .and_then(Value::as_u64)
                .unwrap_or_else(|| {
                    panic!("{path}: $partition needs the partition count in vars (vars_with_partitions)")
                });
            match actual.as_u64() {
                Some(k) if k < partitions => {}
                _ => {
                    return fail(format!(
                        "expected a partition, an integer in 0..{partitions}"
                    ))
                }
            }
            if arg.is_empty() {
                return Ok(());
            }
            match vars.get(arg) {
                Some(saved) if saved == actual => Ok(()),
                Some(saved) => fail(format!(
                    "expected the partition saved as {arg} ({})",
                    short(saved)
                )),
                None => {
                    vars.insert(arg.to_string(), actual.clone());
                    Ok(())
                }
            }
        }
        "$contains" => match actual.as_str() {
            Some(text) if text.contains(arg) => Ok(()),
            _ => fail(format!("expected a string containing {arg:?}")),
        },
        "$prefix" => match actual.as_str() {
            Some(text) if text.starts_with(arg) => Ok(()),
            _ => fail(format!("expected a string starting with {arg:?}")),
        },
        _ if marker == "$now" || marker.starts_with("$now+") => {
            let offset: u64 = marker
                .strip_prefix("$now+")
                .map_or(0, |n| n.parse().expect("$now+N"));
            let low = window.before_ms + offset - TimeWindow::SLACK_MS;
            let high = window.after_ms + offset + TimeWindow::SLACK_MS;
            match actual.as_u64() {
                Some(at) if (low..=high).contains(&at) => Ok(()),
                _ => fail(format!(
                    "expected now+{offset}, i.e. within [{low}, {high}]"
                )),
            }
        }
        _ => panic!("unknown marker {marker:?} at {path}"),
    }
}

/// Replace `{$NAME}` in a string with the captured value (a string's text, or any other JSON).
pub fn substitute_vars(text: &str, vars: &Vars) -> String {
    let mut out = text.to_string();
    while let Some(start) = out.find("{$") {
        let end = out[start..]
            .find('}')
            .map(|i| start + i)
            .expect("unterminated {$");
        let name = &out[start + 2..end];
        let value = vars
            .get(name)
            .unwrap_or_else(|| panic!("nothing saved as {name}"));
        let text = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.replace_range(start..=end, &text);
    }
    out
}

/// Percent-encodes everything but unreserved characters, for ids and cursors in paths and queries.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `total = available + held + sold`, every term an integer >= 0.
pub fn pool_invariant_problem(pool: &Value) -> Option<String> {
    let term = |key: &str| pool.get(key).and_then(Value::as_u64);
    match (term("total"), term("available"), term("held"), term("sold")) {
        (Some(total), Some(available), Some(held), Some(sold))
            if total == available + held + sold =>
        {
            None
        }
        _ => Some(format!(
            "pool breaks total = available + held + sold (all >= 0): {}",
            short(pool)
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers shared by the load and fleet suites
// ---------------------------------------------------------------------------------------------

/// Creates a pool (201 expected).
pub async fn put_pool(api: &Api, pool: &str, body: Value) {
    let (status, reply) = api
        .call("PUT", &format!("/v1/pools/{pool}"), Some(body))
        .await;
    assert_eq!(status, 201, "create pool {pool}: {reply}");
}

pub async fn join_all<T: Send + 'static>(handles: Vec<JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.expect("task panicked"));
    }
    out
}

pub fn tally(replies: &[(u16, Value)]) -> HashMap<(u16, String), usize> {
    let mut counts = HashMap::new();
    for (status, body) in replies {
        let code = body
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        *counts.entry((*status, code)).or_insert(0) += 1;
    }
    counts
}

pub fn assert_pool(pool: &Value, total: u64, available: u64, held: u64, sold: u64) {
    let got = (
        &pool["total"],
        &pool["available"],
        &pool["held"],
        &pool["sold"],
    );
    assert_eq!(
        got,
        (&json!(total), &json!(available), &json!(held), &json!(sold)),
        "pool (total, available, held, sold): {pool}"
    );
}

/// Starts a reserve that waits up to `wait_ms`; resolves to its reply and how long it took.
pub fn spawn_waiter(
    api: &Api,
    hold_id: &str,
    pool: &str,
    qty: u64,
    wait_ms: u64,
) -> JoinHandle<((u16, Value), Duration)> {
    let api = api.clone();
    let body =
        json!({"hold_id": hold_id, "items": [{"pool": pool, "qty": qty}], "wait_ms": wait_ms});
    tokio::spawn(async move {
        let started = Instant::now();
        let reply = api.call("POST", "/v1/holds", Some(body)).await;
        (reply, started.elapsed())
    })
}

/// Creates pools named `{prefix}-N` until `count` of them sit in pairwise different partitions;
/// returns their names (the others are deleted).
pub async fn pools_in_distinct_partitions(
    api: &Api,
    prefix: &str,
    count: usize,
    total: u64,
) -> Vec<String> {
    let mut chosen: HashMap<u64, String> = HashMap::new();
    for n in 0.. {
        let name = format!("{prefix}-{n}");
        let (status, pool) = api
            .call(
                "PUT",
                &format!("/v1/pools/{name}"),
                Some(json!({"total": total})),
            )
            .await;
        assert_eq!(status, 201, "{pool}");
        let partition = pool["partition"].as_u64().expect("partition");

        if let std::collections::hash_map::Entry::Vacant(slot) = chosen.entry(partition) {
            slot.insert(name);
        } else {
            let (status, _) = api.call("DELETE", &format!("/v1/pools/{name}"), None).await;
            assert_eq!(status, 204);
        }
        if chosen.len() == count {
            break;
        }
    }
    let mut names: Vec<(u64, String)> = chosen.into_iter().collect();
    names.sort();
    names.into_iter().map(|(_, name)| name).collect()
}

pub fn hold_body(hold_id: &str, items: &[(&str, u64)], extra: Value) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|(p, q)| json!({"pool": p, "qty": q}))
        .collect();
    let mut body = json!({"hold_id": hold_id, "items": items});
    for (key, value) in extra.as_object().expect("object") {
        body[key] = value.clone();
    }
    body
}

/// Sends each body to `POST /v1/holds` of server `i % apis.len()`, all at once: every task waits
/// on a barrier, then fires.
pub async fn reserve_all_at_once_over(apis: &[Api], bodies: Vec<Value>) -> Vec<(u16, Value)> {
    let barrier = Arc::new(tokio::sync::Barrier::new(bodies.len()));
    let handles = bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            let (api, barrier) = (apis[i % apis.len()].clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                api.call("POST", "/v1/holds", Some(body)).await
            })
        })
        .collect();
    join_all(handles).await
}

/// After a fault: every hold answered 201 (reserve + confirm) is there, confirmed. Returns how
/// many of the tried hold ids exist, acknowledged or not (a request that failed may have landed).
pub async fn acknowledged_holds_present(api: &Api, tried: &[(String, u16)]) -> u64 {
    let mut present = 0;
    for (hold_id, status) in tried {
        let (got, hold) = api.call("GET", &format!("/v1/holds/{hold_id}"), None).await;
        if *status == 201 {
            assert_eq!(
                (got, &hold["status"]),
                (200, &json!("confirmed")),
                "acknowledged {hold_id} lost: {hold}"
            );
        }
        if got == 200 {
            present += 1;
        }
    }
    present
}
