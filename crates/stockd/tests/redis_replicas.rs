//! Redis with replicas: `--redis-replicas N` answers a change only once N replicas have it, and
//! `redis+sentinel://` follows a failover, so that a primary killed under load loses nothing
//! acknowledged and the fleet serves again by itself; with N = 0 a failover that lost changes
//! fails closed until an operator accepts the dataset.
//!
//! Real processes on loopback: a primary, a replica and three Sentinels (Debian's
//! `redis-sentinel`, which scripts/test.sh installs), and stockd servers. These tests always run
//! (they start their own Redis, whatever `STOCKD_TEST_BACKEND` says).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{
    acknowledged_holds_present, hold_body, pool_invariant_problem, put_pool, redis_accept, Api,
    RedisAt, RedisServer, SentinelGroup, Server, ServerConfig,
};

/// How long the servers may take to serve again after the primary died (Sentinel's own part is
/// DOWN_AFTER_MS plus an election).
const RECOVERY_DEADLINE: Duration = Duration::from_secs(20);

fn hold(hold_id: &str, pool: &str) -> Value {
    hold_body(hold_id, &[(pool, 1)], json!({"confirm": true}))
}

async fn readyz(api: &Api) -> u16 {
    api.try_call("GET", "/readyz", None)
        .await
        .map(|(status, _)| status)
        .unwrap_or(0)
}

fn wait_in_sync(replica: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while replica.replication("master_link_status").as_deref() != Some("up") {
        assert!(Instant::now() < deadline, "the replica did not sync");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `replica` is linked and has everything `primary` had written when called.
fn wait_caught_up(primary: &RedisServer, replica: &RedisServer) {
    let offset = |node: &RedisServer| {
        node.replication("master_repl_offset")
            .and_then(|offset| offset.parse::<u64>().ok())
    };
    let written = offset(primary).expect("the primary's replication offset");
    wait_in_sync(replica);
    let deadline = Instant::now() + Duration::from_secs(20);
    while offset(replica).is_none_or(|offset| offset < written) {
        assert!(Instant::now() < deadline, "the replica did not catch up");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_is_answered_once_its_replica_has_it_and_503_when_it_cannot_be() {
    let primary = RedisServer::start_with(&["--appendonly", "no"]);
    let port = primary.port.to_string();
    let replica =
        RedisServer::start_with(&["--appendonly", "no", "--replicaof", "127.0.0.1", &port]);
    tokio::task::block_in_place(|| wait_in_sync(&replica));
    let config = ServerConfig::on(Arc::new(RedisAt(primary.url())))
        .arg("--redis-replicas")
        .arg("1")
        .arg("--redis-replica-timeout-ms")
        .arg("1000");
    let server = Server::start_with(config.clone()).await;
    let other = Server::start_with(config).await;
    let api = server.api();
    put_pool(&api, "p", json!({"total": 10})).await;
    let (status, reply) = api.call("POST", "/v1/holds", Some(hold("h1", "p"))).await;
    assert_eq!(status, 201, "{reply}");

    // The replica stops acknowledging: a change is not answered as done.
    replica.pause();
    let started = Instant::now();
    let (status, reply) = api.call("POST", "/v1/holds", Some(hold("h2", "p"))).await;
    assert_eq!(status, 503, "{reply}");
    assert_eq!(reply["error"], "backend_unavailable", "{reply}");
    let message = reply["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("--redis-replicas") && message.contains("same id"),
        "{message}"
    );
    assert!(started.elapsed() >= Duration::from_millis(1000));
    // Nor is what another server would read of it (the primary has h2; the replica may never):
    // that server wrote nothing since, and since Redis 7.2 a connection's WAIT covers only up to
    // its last write (7.0 moves it after reads too), so its read is followed by a write of its
    // own for its WAIT to cover what it read.
    for path in ["/v1/holds/h2", "/v1/pools/p", "/v1/events?after=0"] {
        let (status, reply) = other.api().call("GET", path, None).await;
        assert_eq!(status, 503, "GET {path} on the other server: {reply}");
    }
    let (status, metrics) = api.call("GET", "/metrics", None).await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert_eq!(status, 200, "{metrics}");
    let sample = |name: &str| {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|value| value.parse::<f64>().ok())
    };
    assert_eq!(sample("stockd_redis_replicas"), Some(1.0), "{metrics}");
    assert!(
        sample("stockd_redis_replica_timeouts_total") >= Some(2.0),
        "{metrics}"
    );

    // Back: the same id retried is the one hold, whether the first attempt landed or not.
    replica.resume();
    let (status, reply) = api.call("POST", "/v1/holds", Some(hold("h2", "p"))).await;
    assert!(matches!(status, 200 | 201), "{status} {reply}");
    let (status, pool) = api.call("GET", "/v1/pools/p", None).await;
    assert_eq!(status, 200, "{pool}");
    assert_eq!(
        (pool["sold"].as_u64(), pool["available"].as_u64()),
        (Some(2), Some(8)),
        "{pool}"
    );
    assert_eq!(readyz(&api).await, 200);
}

/// Two servers with `--redis-replicas 1` on a Sentinel group, a hot pool, and 8 closed-loop
/// clients sending it one-unit holds with `confirm: true`, client `c` to server `c % 2`.
struct HotLoad {
    group: Arc<SentinelGroup>,
    _servers: Vec<Server>,
    apis: Vec<Api>,
    stop: Arc<AtomicBool>,
    /// Each hold id tried with its answer's status (0: no answer) and when it came.
    tried: Arc<Mutex<Vec<(String, u16, Instant)>>>,
    clients: Vec<tokio::task::JoinHandle<()>>,
}

impl HotLoad {
    async fn start() -> HotLoad {
        let group = Arc::new(tokio::task::block_in_place(|| SentinelGroup::start(1)));
        let servers = Server::fleet(group.clone(), 2).await;
        let apis: Vec<Api> = servers.iter().map(Server::api).collect();
        put_pool(&apis[0], "hot", json!({"total": 1_000_000})).await;
        let stop = Arc::new(AtomicBool::new(false));
        let tried: Arc<Mutex<Vec<(String, u16, Instant)>>> = Arc::default();
        let clients = (0..8)
            .map(|client| {
                let api = apis[client % apis.len()].clone();
                let (stop, tried) = (stop.clone(), tried.clone());
                tokio::spawn(async move {
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let hold_id = format!("c{client}-{n}");
                        let status = api
                            .try_call("POST", "/v1/holds", Some(hold(&hold_id, "hot")))
                            .await
                            .map(|(status, _)| status)
                            .unwrap_or(0);
                        let at = Instant::now();
                        tried.lock().unwrap().push((hold_id, status, at));
                        if status != 201 {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                })
            })
            .collect();
        HotLoad {
            group,
            _servers: servers,
            apis,
            stop,
            tried,
            clients,
        }
    }

    /// Whether server `server` answered 201 to a hold its clients sent after `since`.
    fn served_since(&self, server: usize, since: Instant) -> bool {
        self.tried.lock().unwrap().iter().any(|(id, status, at)| {
            let client: usize = id[1..id.find('-').unwrap()].parse().unwrap();
            *status == 201 && *at > since && client % 2 == server
        })
    }

    /// Stops the clients, then: only 201 and 503 (or no answer) were seen, every acknowledged
    /// hold is there, the pool sold exactly the holds that exist, and both servers are ready.
    async fn stop_and_check(self) {
        self.stop.store(true, Ordering::Relaxed);
        for client in self.clients {
            client.await.expect("client");
        }
        let tried: Vec<(String, u16)> = self
            .tried
            .lock()
            .unwrap()
            .iter()
            .map(|(id, status, _)| (id.clone(), *status))
            .collect();
        let acknowledged = tried.iter().filter(|(_, status)| *status == 201).count();
        assert!(acknowledged > 100, "too little load: {acknowledged} holds");
        let odd = tried
            .iter()
            .find(|(_, status)| !matches!(status, 201 | 503 | 0));
        assert_eq!(odd, None, "an answer other than 201 or 503");
        let present = acknowledged_holds_present(&self.apis[1], &tried).await;
        let (status, pool) = self.apis[0].call("GET", "/v1/pools/hot", None).await;
        assert_eq!(status, 200, "{pool}");
        assert_eq!(pool_invariant_problem(&pool), None);
        assert_eq!(pool["sold"].as_u64(), Some(present), "{pool}");
        for api in &self.apis {
            assert_eq!(readyz(api).await, 200);
        }
    }

    /// Waits until both servers serve again after `since`, at most RECOVERY_DEADLINE after
    /// `started`; how long after `started` that was.
    async fn wait_served_again(&self, since: Instant, started: Instant) -> Duration {
        while !(self.served_since(0, since) && self.served_since(1, since)) {
            assert!(
                started.elapsed() < RECOVERY_DEADLINE,
                "the servers do not serve again {:?} after the failover began",
                started.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        started.elapsed()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_killed_under_load_loses_no_acknowledged_hold_and_the_fleet_heals_by_itself() {
    let load = HotLoad::start().await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let killed_at = Instant::now();
    let old = load.group.kill_primary();
    let promoted = tokio::task::block_in_place(|| load.group.wait_promoted(old));
    // The promoted replica has no replica of its own until the dead node is back: a supervisor
    // (systemd) restarts it, as a replica of the new primary. Until then changes wait (503).
    tokio::task::block_in_place(|| load.group.bring_back(old));
    // Every server serves again by itself: a hold sent to it after that is answered 201.
    let healed = load.wait_served_again(Instant::now(), killed_at).await;
    eprintln!(
        "failover: promoted {promoted:?} after the kill, every server 201 again {healed:?} after it"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    load.stop_and_check().await;
}

/// A failover asked of Sentinel while the primary runs (maintenance): Sentinel makes the old
/// primary a replica and closes its clients' connections (a write that still reached it would be
/// answered `READONLY`); either way the servers ask the Sentinels again and follow. Nothing
/// acknowledged is lost, and no restart is needed (the old primary is the new one's replica).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_asked_of_sentinel_is_followed_with_nothing_acknowledged_lost() {
    let load = HotLoad::start().await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let old = load.group.failover_now();
    let asked_at = Instant::now();
    tokio::task::block_in_place(|| {
        load.group.wait_promoted(old);
        load.group.wait_settled();
    });
    assert_ne!(load.group.primary().port, old);
    load.wait_served_again(Instant::now(), asked_at).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    load.stop_and_check().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_that_lost_changes_without_replicas_to_wait_for_fails_closed_until_accepted() {
    let group = Arc::new(tokio::task::block_in_place(|| SentinelGroup::start(0)));
    let server = Server::start_with(ServerConfig::on(group.clone())).await;
    let api = server.api();
    put_pool(&api, "p", json!({"total": 10})).await;
    let (status, reply) = api.call("POST", "/v1/holds", Some(hold("h1", "p"))).await;
    assert_eq!(status, 201, "{reply}");

    // The replica has all of it so far (the pool and h1), so that what the failover loses is
    // exactly what comes next.
    let replica = group.replica();
    let primary = group.primary();
    tokio::task::block_in_place(|| wait_caught_up(primary, replica));

    // The replica falls behind (the primary drops it and, with a password set now, keeps it
    // out); the primary acknowledges holds it never sends on, and dies.
    assert_eq!(
        primary.cli(&["CONFIG", "SET", "requirepass", "keep-the-replica-out"]),
        "OK"
    );
    let with_password = ["-a", "keep-the-replica-out", "--no-auth-warning"];
    primary.cli(&[&with_password[..], &["CLIENT", "KILL", "TYPE", "replica"]].concat());
    tokio::task::block_in_place(|| {
        while replica.replication("master_link_status").as_deref() == Some("up") {
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    for n in 2..=4 {
        let (status, reply) = api
            .call("POST", "/v1/holds", Some(hold(&format!("h{n}"), "p")))
            .await;
        assert_eq!(status, 201, "{reply}");
    }
    let old = group.kill_primary();
    tokio::task::block_in_place(|| group.wait_promoted(old));

    // The new primary lacks acknowledged holds: refused, never served, until an operator accepts.
    let deadline = Instant::now() + RECOVERY_DEADLINE;
    loop {
        let (status, reply) = api
            .try_call("GET", "/v1/pools/p", None)
            .await
            .unwrap_or((0, Value::Null));
        assert_ne!(
            status, 200,
            "a Redis that lost acknowledged holds was served: {reply}"
        );
        let message = reply["message"].as_str().unwrap_or_default();
        if status == 503 && message.contains("stockd redis accept") {
            break;
        }
        assert!(Instant::now() < deadline, "not refused: {status} {reply}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, reply) = api.call("POST", "/v1/holds", Some(hold("h5", "p"))).await;
    assert_eq!(status, 503, "{reply}");
    assert_eq!(readyz(&api).await, 503);

    // The dead node back as a replica, the operator accepts, waiting for it to have the accept.
    tokio::task::block_in_place(|| group.bring_back(old));
    redis_accept(&group.url(), &["--redis-replicas", "1"]);
    let deadline = Instant::now() + RECOVERY_DEADLINE;
    loop {
        let (status, reply) = api.call("POST", "/v1/holds", Some(hold("h5", "p"))).await;
        if status == 201 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not serving after accept: {status} {reply}\n{}",
            group.describe()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, pool) = api.call("GET", "/v1/pools/p", None).await;
    assert_eq!(pool_invariant_problem(&pool), None);
    assert_eq!(
        pool["sold"].as_u64(),
        Some(2),
        "h1 and h5; h2..h4 were lost: {pool}"
    );
}
