//! The HTTP servers `stockd bench compare` starts for itself: `stockd serve` (embedded, or on a
//! Redis) and the seeds' stack (`stockd bench seeds-stack`), each a child process of the
//! `stockd` executable on a free 127.0.0.1 port, with the same `--worker-threads`, its output in
//! a log under the run's temporary directory. Dropping a [`Server`] kills its process.
//!
//! Their Redis servers are the oversell lab's ([`crate::lab::servers::RedisServer`]), used as
//! they are. This module never touches a server it did not start.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::http::{Connection, Endpoint, Request};
use crate::lab::servers::free_port;

/// How long a server may take to answer after it was started.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Start attempts when the free port picked was taken before the server bound it.
const START_ATTEMPTS: usize = 5;

/// An HTTP server of the comparison's own, killed on drop.
pub struct Server {
    child: Child,
    log: PathBuf,
    pub port: u16,
}

impl Server {
    /// `stockd serve` with its data under `dir`, on `backend` (a Redis URL) or the embedded
    /// engine, with `worker_threads` HTTP workers. None of the caller's `STOCKD_*` settings.
    pub async fn stockd(
        executable: &Path,
        dir: &Path,
        backend: Option<&str>,
        worker_threads: usize,
    ) -> Result<Server, String> {
        let mut attempt = 0;
        Server::start(dir, "stockd", "/readyz", |port| {
            attempt += 1;
            let mut command = Command::new(executable);
            command
                .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
                .arg("--data-dir")
                .arg(dir.join(format!("data-{attempt}")))
                .args(["--worker-threads", &worker_threads.to_string()]);
            if let Some(backend) = backend {
                command.args(["--backend", backend]);
            }
            command
        })
        .await
    }

    /// `stockd bench seeds-stack` on the Redis at `redis_url`, with `worker_threads` workers;
    /// its `/healthz` must say it runs with that many.
    pub async fn seeds_stack(
        executable: &Path,
        dir: &Path,
        redis_url: &str,
        worker_threads: usize,
    ) -> Result<Server, String> {
        let server = Server::start(dir, "seeds-stack", "/healthz", |port| {
            let mut command = Command::new(executable);
            command.args([
                "bench",
                "seeds-stack",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--redis",
                redis_url,
                "--worker-threads",
                &worker_threads.to_string(),
            ]);
            command
        })
        .await?;
        let endpoint = Endpoint::parse(&server.url(), None)?;
        let health = Connection::new(&endpoint)?
            .send(&Request::get("/healthz"))
            .await?;
        let workers = health
            .json()
            .and_then(|body| body["worker_threads"].as_u64());
        if workers != Some(worker_threads as u64) {
            return Err(format!(
                "the seeds' stack runs {workers:?} worker threads, {worker_threads} were asked"
            ));
        }
        Ok(server)
    }

    /// Starts the process `command(port)` makes, on a fresh free port each attempt, until
    /// `ready_path` answers 200.
    async fn start(
        dir: &Path,
        name: &str,
        ready_path: &str,
        mut command: impl FnMut(u16) -> Command,
    ) -> Result<Server, String> {
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            let mut command = command(port);
            for (variable, _) in std::env::vars_os() {
                if variable.to_string_lossy().starts_with("STOCKD_") {
                    command.env_remove(variable);
                }
            }
            command.env("STOCKD_LOG", "warn");
            let log = dir.join(format!("{name}.log"));
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
                .map_err(|error| format!("cannot start {name}: {error}"))?;
            let mut server = Server { child, log, port };
            match server.wait_ready(ready_path).await {
                Ok(()) => return Ok(server),
                Err(reason) if reason.to_ascii_lowercase().contains("in use") => last = reason,
                Err(reason) => return Err(format!("{name} did not start: {reason}")),
            }
        }
        Err(format!("{name} did not start: {last}"))
    }

    async fn wait_ready(&mut self, path: &str) -> Result<(), String> {
        let endpoint = Endpoint::parse(&self.url(), None)?;
        let mut connection = Connection::new(&endpoint)?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(reason) = self.exited() {
                return Err(reason);
            }
            if let Ok(answer) = connection.send(&Request::get(path)).await {
                if answer.status == 200 {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{path} not 200 within {} s: {}",
                    READY_TIMEOUT.as_secs(),
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The process id, to read its CPU time from `/proc`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(reason)` once the process has exited.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!("exited ({status}): {}", self.log_tail())),
            Ok(None) => None,
            Err(error) => Some(format!("cannot be waited for: {error}")),
        }
    }

    /// The last lines of the process's output, for a reason.
    fn log_tail(&self) -> String {
        crate::lab::servers::log_tail(&self.log)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
