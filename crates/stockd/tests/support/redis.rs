//! A real `redis-server` of a test's own ([`RedisServer`], on a free loopback port in a temporary
//! directory, started through [`Process`]) and the backend running `stockd` on one
//! ([`RedisBackend`]).
//!
//! It must never touch a Redis it did not start: a PONG is only believed when the answering
//! server's `process_id` is our child's (another test's redis-server may hold the port).

use std::io::Read;
use std::process::Command;
use std::time::Duration;

use super::backend::TestBackend;
use super::process::{free_port, Process, START_ATTEMPTS};

/// A real `redis-server` of its own, on a free loopback port, without persistence (the stockd
/// servers started with it share it; it is killed when the last of them is dropped). Tests that
/// restart Redis itself start theirs with [`RedisServer::start_with`].
pub struct RedisBackend {
    pub redis: RedisServer,
}

impl RedisBackend {
    pub fn start() -> RedisBackend {
        RedisBackend::start_with(&["--appendonly", "no"])
    }

    /// On a `redis-server` started with `args` (its persistence, its eviction policy, ...).
    pub fn start_with(args: &[&str]) -> RedisBackend {
        RedisBackend {
            redis: RedisServer::start_with(args),
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
}

/// A Redis a server is pointed at by URL: one that may not run yet, or one database (`/DB`) of a
/// `redis-server` shared with other tests' datasets.
pub struct RedisAt(pub String);

impl TestBackend for RedisAt {
    fn name(&self) -> &str {
        "redis"
    }
    fn extra_args(&self) -> Vec<String> {
        vec!["--backend".to_string(), self.0.clone()]
    }
}

/// One `redis-server` child on a free loopback port, in a temporary directory (its log beside
/// its files). SIGKILL on drop.
pub struct RedisServer {
    pub port: u16,
    pub dir: tempfile::TempDir,
    args: Vec<String>,
    /// Arguments of the next start only, after the fixed ones (a node restarted as a replica).
    next_args: std::sync::Mutex<Vec<String>>,
    process: Process,
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
        let log_path = dir.path().join("redis-server.log");
        RedisServer {
            port,
            dir,
            args: args.iter().map(|a| a.to_string()).collect(),
            next_args: std::sync::Mutex::new(Vec::new()),
            process: Process::new("redis-server", log_path),
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

    /// Starts the process again (after [`RedisServer::kill`]) as a replica of the Redis on
    /// loopback port `primary`, as an operator brings a failed primary back after a failover,
    /// with `extra` settings.
    pub fn start_again_as_replica_of(&self, primary: u16, extra: &[&str]) {
        let mut args = vec![
            "--replicaof".to_string(),
            "127.0.0.1".to_string(),
            primary.to_string(),
        ];
        args.extend(extra.iter().map(|arg| arg.to_string()));
        *self.next_args.lock().expect("next args lock") = args;
        self.start_again();
    }

    /// Starts the process and waits until it answers PING; an error when it exits first (its
    /// port is taken) or does not answer in time.
    fn try_start(&self) -> Result<(), String> {
        let next_args = std::mem::take(&mut *self.next_args.lock().expect("next args lock"));
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--daemonize", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .args(&next_args);
        self.process
            .spawn(command)
            .map_err(|error| format!("{error} (scripts/test.sh installs it)"))?;
        while self.ping().is_err() {
            self.process
                .not_ready()
                .map_err(|error| format!("redis-server on port {}: {error}", self.port))?;
            std::thread::sleep(Duration::from_millis(20));
        }
        // The PONG may come from another test's redis-server that holds the port.
        let pid = self.process.pid();
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
        self.process.is_running()
    }

    /// SIGKILL (no shutdown save); a no-op when already stopped.
    pub fn kill(&self) {
        self.process.kill();
    }

    /// SIGSTOP: the process stays, answering nothing (a replica that stops acknowledging, a
    /// node that hangs), until [`RedisServer::resume`].
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`RedisServer::pause`].
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.process.pid().expect("a running redis-server");
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// One field of `INFO replication` (`role`, `connected_slaves`, `master_link_status`...).
    pub fn replication(&self, field: &str) -> Option<String> {
        let prefix = format!("{field}:");
        self.cli(&["INFO", "replication"])
            .lines()
            .find_map(|line| line.trim().strip_prefix(&prefix).map(str::to_string))
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
