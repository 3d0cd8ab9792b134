//! A Redis primary, its replica and three Redis Sentinels watching them ([`SentinelGroup`]),
//! each a real process of a test's own on free loopback ports, and the backend running `stockd`
//! on them through `redis+sentinel://` with `--redis-replicas N`.
//!
//! The Sentinels judge a primary down after [`DOWN_AFTER_MS`] without an answer, and two of the
//! three must agree before one of them promotes the replica. A test kills the primary
//! ([`SentinelGroup::kill_primary`]), waits for the promotion, and brings the killed node back as
//! a replica of the new primary, as an operator would.

use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::backend::TestBackend;
use super::process::{free_port, Process, START_ATTEMPTS};
use super::redis::RedisServer;

/// The name the Sentinels monitor the primary under.
pub const MASTER_NAME: &str = "stockd";
/// How long a primary may be silent before a Sentinel judges it down.
pub const DOWN_AFTER_MS: u64 = 1_000;
/// How long a failover may take before it counts as failed (a test's deadline).
const FAILOVER_DEADLINE: Duration = Duration::from_secs(30);

/// One `redis-sentinel` process with its own configuration file (Sentinel rewrites it).
struct Sentinel {
    port: u16,
    _dir: tempfile::TempDir,
    process: Process,
}

impl Sentinel {
    fn start(primary: u16) -> Sentinel {
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            let dir = tempfile::Builder::new()
                .prefix("stockd-sentinel-")
                .tempdir()
                .expect("tempdir");
            let config = dir.path().join("sentinel.conf");
            std::fs::write(
                &config,
                format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\nprotected-mode no\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
                     sentinel failover-timeout {MASTER_NAME} 5000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n"
                ),
            )
            .expect("write sentinel.conf");
            let process = Process::new("redis-sentinel", dir.path().join("sentinel.log"));
            let mut command = Command::new("redis-sentinel");
            command.arg(&config);
            if let Err(error) = process.spawn(command) {
                panic!("{error} (scripts/test.sh installs redis-sentinel)");
            }
            let sentinel = Sentinel {
                port,
                _dir: dir,
                process,
            };
            match sentinel.wait_answering() {
                Ok(()) => {
                    // The replicas' INFO every second rather than every 10: what a replica's
                    // priority and link are is known before a test's next failover.
                    assert_eq!(
                        sentinel.cli(&["SENTINEL", "DEBUG", "info-period", "1000"]),
                        "OK"
                    );
                    return sentinel;
                }
                Err(error) => last_error = error,
            }
        }
        panic!("redis-sentinel did not start after {START_ATTEMPTS} attempts: {last_error}");
    }

    fn wait_answering(&self) -> Result<(), String> {
        while self.cli(&["PING"]) != "PONG" {
            self.process
                .not_ready()
                .map_err(|error| format!("redis-sentinel on port {}: {error}", self.port))?;
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn cli(&self, args: &[&str]) -> String {
        let output = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// The port of the primary this Sentinel names now.
    fn primary_port(&self) -> Option<u16> {
        let answer = self.cli(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME]);
        answer
            .lines()
            .nth(1)
            .and_then(|port| port.trim().parse().ok())
    }

    /// The priority this Sentinel knows the replica on `port` by (`slave-priority`).
    fn replica_priority(&self, port: u16) -> Option<String> {
        let answer = self.cli(&["SENTINEL", "replicas", MASTER_NAME]);
        let mut fields = answer.lines().map(str::trim);
        let mut this_one = false;
        while let Some(field) = fields.next() {
            let value = fields.next()?;
            match field {
                "name" => this_one = value == format!("127.0.0.1:{port}"),
                "slave-priority" if this_one => return Some(value.to_string()),
                _ => {}
            }
        }
        None
    }

    /// A field of `SENTINEL master NAME` (`num-slaves`, `num-other-sentinels`, `flags`...).
    fn master_field(&self, field: &str) -> Option<String> {
        let answer = self.cli(&["SENTINEL", "master", MASTER_NAME]);
        let mut lines = answer.lines().map(str::trim);
        while let Some(line) = lines.next() {
            if line == field {
                return lines.next().map(str::to_string);
            }
        }
        None
    }
}

/// A primary, its replica and three Sentinels; `stockd` servers on it wait for `replicas`
/// replicas (`--redis-replicas`).
pub struct SentinelGroup {
    /// The two Redis nodes: the first starts as the primary.
    pub nodes: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
    replicas: u32,
    /// The servers' extra settings (`--redis-replica-timeout-ms`, ...).
    extra: Mutex<Vec<String>>,
}

impl SentinelGroup {
    /// Starts the nodes (no persistence: the replica is the copy) and the Sentinels, and waits
    /// until the replica is in sync and every Sentinel knows it and the other Sentinels.
    pub fn start(replicas: u32) -> SentinelGroup {
        let primary = RedisServer::start_with(&["--appendonly", "no"]);
        let port = primary.port.to_string();
        let replica =
            RedisServer::start_with(&["--appendonly", "no", "--replicaof", "127.0.0.1", &port]);
        let sentinels = (0..3).map(|_| Sentinel::start(primary.port)).collect();
        let group = SentinelGroup {
            nodes: vec![primary, replica],
            sentinels,
            replicas,
            extra: Mutex::new(Vec::new()),
        };
        group.wait_settled();
        group
    }

    /// Adds a setting to every server started on the group from now on.
    pub fn server_arg(&self, arg: &str) {
        self.extra.lock().expect("extra lock").push(arg.to_string());
    }

    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|sentinel| format!("127.0.0.1:{}", sentinel.port))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", sentinels.join(","))
    }

    /// The node the Sentinels name as the primary now (the first Sentinel's word).
    pub fn primary(&self) -> &RedisServer {
        let port = self.sentinels[0]
            .primary_port()
            .expect("the Sentinel names a primary");
        self.node_on(port)
    }

    /// The other node: the replica.
    pub fn replica(&self) -> &RedisServer {
        let primary = self.primary().port;
        self.nodes
            .iter()
            .find(|node| node.port != primary)
            .expect("two nodes")
    }

    fn node_on(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|node| node.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// Waits until every Sentinel names the same primary, which says it is one, has its
    /// replica online and in sync, and the Sentinels know the replica and each other.
    pub fn wait_settled(&self) {
        let deadline = Instant::now() + FAILOVER_DEADLINE;
        loop {
            if let Some(why) = self.unsettled() {
                assert!(
                    Instant::now() < deadline,
                    "the Sentinel group did not settle: {why}"
                );
                std::thread::sleep(Duration::from_millis(50));
            } else {
                return;
            }
        }
    }

    fn unsettled(&self) -> Option<String> {
        let ports: Vec<Option<u16>> = self.sentinels.iter().map(Sentinel::primary_port).collect();
        let Some(port) = ports[0] else {
            return Some("no primary named".into());
        };
        if ports.iter().any(|other| *other != Some(port)) {
            return Some(format!("the Sentinels name different primaries: {ports:?}"));
        }
        let primary = self.node_on(port);
        let replica = self.nodes.iter().find(|node| node.port != port)?;
        if !replica.is_running() {
            return Some("the replica is down".into());
        }
        if primary.replication("role").as_deref() != Some("master") {
            return Some("the named primary is not a primary yet".into());
        }
        if replica.replication("master_link_status").as_deref() != Some("up")
            || replica.replication("master_port").as_deref() != Some(&port.to_string())
        {
            return Some("the replica is not in sync with the primary".into());
        }
        if primary.replication("connected_slaves").as_deref() != Some("1") {
            return Some("the primary has no replica connected".into());
        }
        for sentinel in &self.sentinels {
            if sentinel.master_field("num-slaves").as_deref() != Some("1")
                || sentinel.master_field("num-other-sentinels").as_deref() != Some("2")
                || sentinel
                    .master_field("flags")
                    .is_none_or(|flags| flags != "master")
            {
                return Some("a Sentinel does not know the replica or the others yet".into());
            }
        }
        None
    }

    /// What each node and Sentinel says now, for a failing test's message: each node's role,
    /// primary, link, replication offset and key count, and the primary each Sentinel names.
    pub fn describe(&self) -> String {
        let mut lines = Vec::new();
        for node in &self.nodes {
            if !node.is_running() {
                lines.push(format!("node {}: down", node.port));
                continue;
            }
            let field = |name: &str| node.replication(name).unwrap_or_else(|| "?".into());
            lines.push(format!(
                "node {}: role {} primary {} link {} offset {} keys {}",
                node.port,
                field("role"),
                field("master_port"),
                field("master_link_status"),
                field("master_repl_offset"),
                node.cli(&["DBSIZE"]),
            ));
        }
        for sentinel in &self.sentinels {
            lines.push(format!(
                "sentinel {}: names {:?}, flags {:?}",
                sentinel.port,
                sentinel.primary_port(),
                sentinel.master_field("flags"),
            ));
        }
        lines.push(self.sentinels[0].process.log_tail(4_000));
        lines.join("\n")
    }

    /// SIGKILL to the primary; returns its port.
    pub fn kill_primary(&self) -> u16 {
        let primary = self.primary();
        primary.kill();
        primary.port
    }

    /// Asks a Sentinel for a failover while the primary runs (as for maintenance): the replica
    /// is promoted and the old primary, still running, made its replica. Returns the old
    /// primary's port.
    pub fn failover_now(&self) -> u16 {
        let old = self.primary().port;
        assert_eq!(
            self.sentinels[0].cli(&["SENTINEL", "FAILOVER", MASTER_NAME]),
            "OK"
        );
        old
    }

    /// Waits until every Sentinel names another primary than `old` and it says it is one;
    /// returns how long that took.
    pub fn wait_promoted(&self, old: u16) -> Duration {
        let started = Instant::now();
        loop {
            let ports: Vec<Option<u16>> =
                self.sentinels.iter().map(Sentinel::primary_port).collect();
            if let Some(Some(port)) = ports.first() {
                if *port != old
                    && ports.iter().all(|other| *other == Some(*port))
                    && self.node_on(*port).replication("role").as_deref() == Some("master")
                {
                    return started.elapsed();
                }
            }
            assert!(
                started.elapsed() < FAILOVER_DEADLINE,
                "no replica promoted after the primary on {old} died: the Sentinels name {ports:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the node on `port` (killed) again as a replica of the primary, and waits until
    /// the group has settled.
    ///
    /// The node comes back empty (no persistence) and stays empty until its first sync is done,
    /// which Redis delays by `repl-diskless-sync-delay` (5 s). Were the primary judged down in
    /// that time (a Sentinel stalled on a loaded machine for over [`DOWN_AFTER_MS`] is enough),
    /// the Sentinels would promote the empty node and the dataset would be gone. So it comes back
    /// with `replica-priority 0`, which Sentinel never promotes, and gets the default priority
    /// once in sync and every Sentinel has seen that it has: what an operator does too.
    pub fn bring_back(&self, port: u16) {
        let primary = self.primary().port;
        let node = self.node_on(port);
        node.start_again_as_replica_of(primary, &["--replica-priority", "0"]);
        self.wait_settled();
        assert_eq!(
            node.cli(&["CONFIG", "SET", "replica-priority", "100"]),
            "OK"
        );
        let deadline = Instant::now() + FAILOVER_DEADLINE;
        while !self
            .sentinels
            .iter()
            .all(|sentinel| sentinel.replica_priority(port).as_deref() == Some("100"))
        {
            assert!(
                Instant::now() < deadline,
                "the Sentinels did not see the replica's priority restored"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl TestBackend for SentinelGroup {
    fn name(&self) -> &str {
        "redis-sentinel"
    }
    fn extra_args(&self) -> Vec<String> {
        let mut args = vec![
            "--backend".to_string(),
            self.url(),
            "--redis-replicas".to_string(),
            self.replicas.to_string(),
        ];
        args.extend(self.extra.lock().expect("extra lock").iter().cloned());
        args
    }
}
