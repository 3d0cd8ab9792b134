//! The real Redis the simulation runs on: one `redis-server`, or a Redis Cluster of three
//! primaries (`redis-cli --cluster create`, no replicas: the simulation kills stockd servers,
//! never Redis), each a `common::RedisProcess` (a child process on free loopback ports, killed
//! on drop). Started once per test; each seed starts from `FLUSHALL` on every node.
//!
//! Also the simulation's raw view of Redis (`Raw`), to read the library's keys after a seed.

use std::process::Command as Process;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, RedisResult};
use stockd_redis::Target;

use crate::common::RedisProcess;

/// How long the simulation's own reads (and `FLUSHALL`) may wait for Redis: far above the
/// client's default of 500 ms, which a loaded machine sometimes passes.
const RAW_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
const CLUSTER_OK_TIMEOUT: Duration = Duration::from_secs(30);

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
                redis::Client::open(node.url())
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
        let urls: Vec<String> = self.nodes.iter().map(|node| node.url()).collect();
        if self.cluster {
            Target::Cluster(urls)
        } else {
            Target::Single(urls[0].clone())
        }
    }

    /// Empties every node (the function library stays loaded).
    pub async fn flush_all(&self) -> RedisResult<()> {
        for node in &self.nodes {
            let client = redis::Client::open(node.url())?;
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
            Target::Sentinel(_) => unreachable!("the simulation deploys no Sentinels"),
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
