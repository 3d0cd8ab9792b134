//! The HTTP servers `stockd bench compare` starts for itself: `stockd serve` (embedded, or on a
//! Redis) and the seeds' stack (`stockd bench seeds-stack`), each a child process of the
//! `stockd` executable on a free 127.0.0.1 port, with the same `--worker-threads`, its output in
//! a log under the run's temporary directory. Dropping a [`Server`] kills its process.
//!
//! Their Redis servers are the oversell lab's ([`crate::lab::servers::RedisServer`]), used as
//! they are. This module never touches a server it did not start.

use std::path::Path;
use std::process::Command;

use crate::http::{Connection, Endpoint, Request};
use crate::lab::servers::{free_port, port_taken, wait_http_ready, Process};

/// Start attempts when the free port picked was taken before the server bound it.
const START_ATTEMPTS: usize = 5;

/// An HTTP server of the comparison's own, killed on drop.
pub struct Server {
    process: Process,
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
        Server::start(dir, "stockd", stockd_api::paths::READYZ, |port| {
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
        let server = Server::start(dir, "seeds-stack", stockd_api::paths::HEALTHZ, |port| {
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
            .send(&Request::get(stockd_api::paths::HEALTHZ))
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
            let process = Process::spawn(command, dir.join(format!("{name}.log")), None)?;
            let mut server = Server { process, port };
            match wait_http_ready(&mut server.process, port, ready_path).await {
                Ok(()) => return Ok(server),
                Err(reason) if port_taken(&reason) => last = reason,
                Err(reason) => return Err(format!("{name} did not start: {reason}")),
            }
        }
        Err(format!("{name} did not start: {last}"))
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The process id, to read its CPU time from `/proc`.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}
