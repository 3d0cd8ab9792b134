//! The real Redis the simulation runs on: one `redis-server`, or a Redis Cluster of three
//! primaries (`redis-cli --cluster create`, no replicas: the simulation kills stockd servers,
//! never Redis), each a child process on free loopback ports, killed on drop. Started once per
//! test; each seed starts from `FLUSHALL` on every node.
//!
//! Also the simulation's raw view of Redis (`Raw`), to read the library's keys after a seed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, RedisResult};
use stockd_redis::Target;

const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the simulation's own reads (and `FLUSHALL`) may wait for Redis: far above the
/// client's default of 500 ms, which a loaded machine sometimes passes.
const RAW_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
const CLUSTER_OK_TIMEOUT: Duration = Duration::from_secs(30);
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
    fn start(extra: &[&str]) -> RedisProcess {
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            match RedisProcess::try_start(free_port(), extra) {
                Ok(process) => return process,
                Err(error) => last_error = error,
            }
        }
        panic!("redis-server did not start: {last_error}");
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

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One Redis, or a Cluster's primaries.
pub struct Deployment {
    nodes: Vec<RedisProcess>,
    cluster: bool,
}

impl Deployment {
    pub fn single() -> Deployment {
        Deployment {
            nodes: vec![RedisProcess::start(&[])],
            cluster: false,
        }
    }

    pub fn cluster() -> Deployment {
        let nodes: Vec<RedisProcess> = (0..3)
            .map(|_| {
                RedisProcess::start(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
            })
            .collect();
        let output = Process::new("redis-cli")
            .args(["--cluster", "create"])
            .args(nodes.iter().map(RedisProcess::address))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let deployment = Deployment {
            nodes,
            cluster: true,
        };
        deployment.wait_cluster_ok();
        deployment
    }

    /// Polls every node until it sees the whole cluster ok.
    fn wait_cluster_ok(&self) {
        let deadline = Instant::now() + CLUSTER_OK_TIMEOUT;
        loop {
            let ok = self.nodes.iter().all(|node| {
                redis::Client::open(format!("redis://{}", node.address()))
                    .and_then(|client| client.get_connection())
                    .and_then(|mut connection| {
                        redis::cmd("CLUSTER")
                            .arg("INFO")
                            .query::<String>(&mut connection)
                    })
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the Redis Cluster did not become healthy"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    pub fn target(&self) -> Target {
        let urls: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("redis://{}", node.address()))
            .collect();
        if self.cluster {
            Target::Cluster(urls)
        } else {
            Target::Single(urls[0].clone())
        }
    }

    /// Empties every node (the function library stays loaded).
    pub async fn flush_all(&self) -> RedisResult<()> {
        for node in &self.nodes {
            let client = redis::Client::open(format!("redis://{}", node.address()))?;
            let mut connection = client
                .get_multiplexed_async_connection_with_config(&raw_config())
                .await?;
            redis::cmd("FLUSHALL")
                .query_async::<()>(&mut connection)
                .await?;
        }
        Ok(())
    }

    /// A plain connection for reading the library's keys directly.
    pub async fn raw(&self) -> RedisResult<Raw> {
        let target = self.target();
        Ok(match target {
            Target::Single(url) => Raw::Single(
                redis::Client::open(url)?
                    .get_multiplexed_async_connection_with_config(&raw_config())
                    .await?,
            ),
            Target::Cluster(urls) => Raw::Cluster(
                redis::cluster::ClusterClient::builder(urls)
                    .response_timeout(RAW_RESPONSE_TIMEOUT)
                    .build()?
                    .get_async_connection()
                    .await?,
            ),
        })
    }
}

fn raw_config() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new().set_response_timeout(Some(RAW_RESPONSE_TIMEOUT))
}

/// A plain Redis connection, to one node or to the Cluster.
pub enum Raw {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Raw {
    pub async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<T> {
        match self {
            Raw::Single(connection) => cmd.query_async(connection).await,
            Raw::Cluster(connection) => cmd.query_async(connection).await,
        }
    }
}
