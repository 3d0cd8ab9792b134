//! One `stockd serve` child of a test's own ([`Server`]): a temporary data dir, a free loopback
//! port, started through [`Process`] and ready once `GET /healthz` answers 200; killed, restarted
//! on the same data dir and port, or stopped gracefully with SIGTERM.
//!
//! It never reaches into the server's crates: the suites test the binary through its public HTTP
//! contract only, through the [`Api`] handle it hands out.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::api::Api;
use super::backend::{backend_from_env, TestBackend};
use super::process::{free_port, listens_on, Process, START_ATTEMPTS};

/// How long a process may take to exit after SIGTERM.
pub const GRACEFUL_EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Admin and client secrets used by [`ServerConfig::with_auth`].
pub const ADMIN_TOKEN: &str = "admin-secret-0123";
pub const CLIENT_TOKEN: &str = "client-secret-4567";

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
        ServerConfig::on(backend_from_env())
    }
}

impl ServerConfig {
    /// No auth, on `backend` (not the one `STOCKD_TEST_BACKEND` names: no process is started
    /// for it).
    pub fn on(backend: Arc<dyn TestBackend>) -> Self {
        ServerConfig {
            backend,
            tokens: None,
            default_token: None,
            extra_args: Vec::new(),
            listen_host: "127.0.0.1".to_string(),
            env: Vec::new(),
        }
    }

    /// With `STOCKD_FAULT=fault` when given: the server dies at that fault point (test builds
    /// with the `fault-injection` feature only).
    pub fn fault(mut self, fault: Option<&str>) -> Self {
        if let Some(fault) = fault {
            self.env
                .push(("STOCKD_FAULT".to_string(), fault.to_string()));
        }
        self
    }

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
    port: u16,
    process: Process,
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
        let process = Process::new("stockd", root.path().join("stockd.log"));
        let api = Api::new(0, config.default_token.clone());
        let mut server = Server {
            config,
            root,
            data_dir,
            port: 0,
            process,
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

    /// `count` servers sharing `backend` (a fleet), started one after the other.
    pub async fn fleet(backend: Arc<dyn TestBackend>, count: usize) -> Vec<Server> {
        let mut servers = Vec::with_capacity(count);
        for _ in 0..count {
            servers.push(Server::start_with(ServerConfig::on(backend.clone())).await);
        }
        servers
    }

    /// A cheap, cloneable handle for requests, usable from spawned tasks.
    pub fn api(&self) -> Api {
        self.api.clone()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`, for the command-line clients (`--url`, `STOCKD_URL`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn backend_name(&self) -> String {
        self.config.backend.name().to_string()
    }

    /// The process id of the running child (panics when stopped).
    pub fn pid(&self) -> u32 {
        self.process.pid().expect("server is not running")
    }

    /// SIGKILL and reap the child; a no-op when already stopped.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// SIGKILL, then start again on the same data dir and port.
    pub async fn restart(&mut self) {
        self.kill();
        self.start_again().await;
    }

    /// SIGTERM, wait for the exit (bounded) and insist on exit status 0. The server stays stopped;
    /// [`Server::start_again`] brings it back.
    pub async fn stop_graceful(&mut self) -> ExitStatus {
        let mut child = self.process.take().expect("server is not running");
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
        assert!(
            self.process.pid().is_none(),
            "start_again on a running server"
        );
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
        self.process.is_running()
    }

    /// Sends a request this server is set to die on ([`ServerConfig::fault`]): insists that no
    /// answer comes and that the process exits. `label` names the case in failure messages.
    pub async fn call_and_die(&mut self, method: &str, path: &str, body: Value, label: &str) {
        let answer = self.api().try_call(method, path, Some(body)).await;
        assert!(
            answer.is_err(),
            "{label}: the server should have died, got {answer:?}"
        );
        assert!(self.exited().await, "{label}: still running");
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
        self.process.log_tail(16 * 1024)
    }

    /// The last `max_bytes` of the server's log.
    pub fn log_tail_bytes(&self, max_bytes: u64) -> String {
        self.process.log_tail(max_bytes)
    }

    /// Spawn the child and wait until `/healthz` answers 200. On failure the child is reaped and
    /// the error carries its log.
    async fn spawn_and_wait_ready(&mut self) -> Result<(), String> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_stockd"));
        command
            .arg("serve")
            .arg("--listen")
            .arg(format!("{}:{}", self.config.listen_host, self.port))
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(self.config.backend.extra_args())
            .args(&self.config.extra_args)
            .env_remove("STOCKD_TOKENS");
        for (key, value) in self.config.backend.extra_env() {
            command.env(key, value);
        }
        for (key, value) in &self.config.env {
            command.env(key, value);
        }
        if let Some(tokens) = &self.config.tokens {
            command.env("STOCKD_TOKENS", tokens);
        }
        self.process.spawn(command)?;
        // A fresh client per process: pooled connections to a killed process are dead. The
        // partition count is the dataset's, so a restart keeps what was learned.
        let partitions = self.api.partitions.clone();
        self.api = Api::new(self.port, self.config.default_token.clone());
        self.api.partitions = partitions;

        loop {
            if let Ok((200, _)) = self.api.try_call_as(None, "GET", "/healthz", None).await {
                // The answer may be another test's server on the same port (see `listens_on`).
                if self
                    .process
                    .pid()
                    .is_some_and(|pid| listens_on(pid, self.port))
                {
                    return Ok(());
                }
            }
            self.process.not_ready()?;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}
