//! A real Redis Cluster of a test's own ([`RedisClusterBackend`]): six [`RedisServer`] nodes on
//! free loopback ports whose bus ports are free too ([`cluster_port`]), joined by
//! `redis-cli --cluster create`, and waited for until healthy.
//!
//! It only starts, inspects and stops its own nodes; what a failover means for stockd is the
//! suites' to check.

use std::process::Command;
use std::time::{Duration, Instant};

use super::backend::TestBackend;
use super::redis::RedisServer;

/// free loopback ports below 55536 (a node's bus port is 10000 higher), no persistence. stockd
/// servers started with it run `--backend redis+cluster://...` with `partitions` partitions.
pub struct RedisClusterBackend {
    pub nodes: Vec<RedisServer>,
    pub partitions: u32,
    /// More settings for the stockd servers started on it (`--redis-replicas 1`, ...).
    pub server_args: Vec<String>,
}

/// Cluster node timeout: how long a primary may be silent before its replica takes over.
pub const CLUSTER_NODE_TIMEOUT_MS: u64 = 1_000;

impl RedisClusterBackend {
    pub fn start(partitions: u32) -> RedisClusterBackend {
        let timeout = CLUSTER_NODE_TIMEOUT_MS.to_string();
        let nodes: Vec<RedisServer> = (0..6)
            .map(|_| start_node(&["--appendonly", "no", "--cluster-node-timeout", &timeout]))
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
        let cluster = RedisClusterBackend {
            nodes,
            partitions,
            server_args: Vec::new(),
        };
        cluster.wait_healthy();
        cluster
    }

    /// A Cluster of `primaries` nodes started with `args` (their persistence), each a primary of
    /// an equal share of the slots, no replicas, waited for until every node sees it ok.
    pub fn of_primaries(primaries: u16, partitions: u32, args: &[&str]) -> RedisClusterBackend {
        let nodes: Vec<RedisServer> = (0..primaries).map(|_| start_node(args)).collect();
        let share = 16384 / primaries;
        for (k, node) in (0..primaries).zip(&nodes) {
            let low = (k * share).to_string();
            let high = if k + 1 == primaries {
                16383
            } else {
                (k + 1) * share - 1
            };
            let high = high.to_string();
            assert_eq!(node.cli(&["CLUSTER", "ADDSLOTSRANGE", &low, &high]), "OK");
            if k > 0 {
                let port = nodes[0].port.to_string();
                assert_eq!(node.cli(&["CLUSTER", "MEET", "127.0.0.1", &port]), "OK");
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while !nodes.iter().all(|node| {
            let info = node.cli(&["CLUSTER", "INFO"]);
            info.contains("cluster_state:ok")
                && info.contains(&format!("cluster_known_nodes:{primaries}"))
        }) {
            assert!(Instant::now() < deadline, "the cluster is not ok");
            std::thread::sleep(Duration::from_millis(20));
        }
        RedisClusterBackend {
            nodes,
            partitions,
            server_args: Vec::new(),
        }
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

    /// The node that replicates the primary on `port`, if one does.
    pub fn replica_of(&self, port: u16) -> Option<&RedisServer> {
        self.nodes.iter().find(|node| {
            node.is_running()
                && node.replication("master_port").as_deref() == Some(&port.to_string())
        })
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
        let mut args = vec![
            "--backend".to_string(),
            self.url(),
            "--redis-partitions".to_string(),
            self.partitions.to_string(),
        ];
        args.extend(self.server_args.iter().cloned());
        args
    }
}

/// A cluster-enabled `redis-server` (its bus port free too), with `args` after the cluster's.
pub fn start_node(args: &[&str]) -> RedisServer {
    let mut all = vec![
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
    ];
    all.extend_from_slice(args);
    RedisServer::start_on_some_port(cluster_port, &all)
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
