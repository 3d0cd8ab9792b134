//! What this crate's test targets share: the one launcher of a real `redis-server`, a child
//! process on free loopback ports, in a directory of its own, without persistence, killed on
//! drop. The model test, the feed test and the simulation start their Redis through it; it must
//! never reach a Redis it did not start.

// Each test target uses a part of this module (the simulation makes its own Cluster of three).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Tries to start a server at most this many times (a free port can be taken meanwhile).
const START_ATTEMPTS: usize = 5;

/// A `redis-server` child on a loopback port, in a directory of its own; killed on drop.
pub struct RedisProcess {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

/// A free loopback port whose +10000 (a Cluster node's bus port) is free too, so at most 55535.
fn free_port() -> u16 {
    loop {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = probe.local_addr().expect("its address").port();
        drop(probe);
        if port <= 55_535 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

impl RedisProcess {
    /// A server with the `extra` arguments, answering PING.
    pub fn start(extra: &[&str]) -> RedisProcess {
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            match RedisProcess::try_start(free_port(), extra) {
                Ok(process) => return process,
                Err(error) => last_error = error,
            }
        }
        panic!("redis-server did not start: {last_error}");
    }

    /// A Redis Cluster of this one node, which owns every slot.
    pub fn start_one_node_cluster() -> RedisProcess {
        let server = RedisProcess::start(&["--cluster-enabled", "yes"]);
        let port = server.port.to_string();
        let cli = |args: &[&str]| {
            let output = Process::new("redis-cli")
                .args(["-p", &port])
                .args(args)
                .output()
                .expect("redis-cli (scripts/test.sh installs it)");
            String::from_utf8_lossy(&output.stdout).into_owned()
        };
        assert!(cli(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]).contains("OK"));
        let deadline = Instant::now() + READY_TIMEOUT;
        while !cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
            assert!(
                Instant::now() < deadline,
                "the one-node cluster did not come up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn try_start(port: u16, extra: &[&str]) -> Result<RedisProcess, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let child = Process::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(extra)
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn redis-server (scripts/test.sh installs it): {e}"))?;
        let mut process = RedisProcess {
            child,
            port,
            _dir: dir,
        };
        // Polls until it answers: the process is up, not guessed with a sleep.
        let deadline = Instant::now() + READY_TIMEOUT;
        while !process.answers_ping() {
            if let Ok(Some(status)) = process.child.try_wait() {
                return Err(format!("redis-server on port {port} exited: {status}"));
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server on port {port} did not answer"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(process)
    }

    fn answers_ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }

    /// `127.0.0.1:PORT`, as `redis-cli --cluster create` takes it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.address())
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
