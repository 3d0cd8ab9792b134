//! Starting a server on Redis, against a real `redis-server`: the fleet settings are the
//! dataset's (a server started with other values refuses to start and names them), so is the
//! placement of segments over a Cluster's partitions (adopted, checked for agreement), and the
//! Redis is checked at start: a `maxmemory-policy` that can evict keys is refused, on every
//! primary of a Cluster; `appendfsync` other than `always` is a loud warning in the log and in
//! `/readyz`; a Redis that does not let its settings be read is a warning, not a refusal; and a
//! Redis not reachable at start is retried with back-off while `/readyz` answers 503.
//!
//! These tests always run (they start their own Redis, whatever `STOCKD_TEST_BACKEND` says).

mod support;

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{
    free_port, put_pool, Api, RedisAt, RedisBackend, RedisClusterBackend, RedisServer, Server,
    ServerConfig, TestBackend,
};

/// How long a server that refuses to start may take to exit.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `stockd serve` on `redis` with `args`; its output once it exited, or `None` (and it is
/// killed) when it is still running after [`REFUSAL_TIMEOUT`]: it started.
fn serve_until_exit(backend: &dyn TestBackend, args: &[&str]) -> Option<Output> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stockd"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(backend.extra_args())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run stockd serve");
    let deadline = Instant::now() + REFUSAL_TIMEOUT;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(child.wait_with_output().expect("stockd output"))
}

/// Asserts that `stockd serve ARGS` refused to start, and returns what it said.
fn refused(backend: &dyn TestBackend, args: &[&str]) -> String {
    let output = serve_until_exit(backend, args)
        .unwrap_or_else(|| panic!("stockd serve {args:?} started; it should have refused"));
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "exit status 0: {stderr}");
    stderr
}

async fn server_on(redis: &Arc<RedisBackend>, args: &[&str]) -> Server {
    let mut config = ServerConfig::on(redis.clone());
    for arg in args {
        config = config.arg(*arg);
    }
    Server::start_with(config).await
}

/// A server X with `--hold-retention-ms 1000` beside Y with the default would forget, 1 s after
/// its release, a hold Y keeps a day: a retry through X would then make a second hold. So the
/// retention settings are stored when the dataset is made, and a server with other values
/// refuses to start, naming each setting that differs with the dataset's value and its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_other_retention_settings_refuses_to_start_and_names_them() {
    let redis = Arc::new(RedisBackend::start());
    let first = server_on(&redis, &[]).await;
    put_pool(&first.api(), "p", json!({"total": 1})).await;

    let said = refused(
        redis.as_ref(),
        &["--hold-retention-ms", "1000", "--event-retention-max", "5"],
    );
    for named in [
        "--hold-retention-ms is 86400000 in the dataset, 1000 here",
        "--event-retention-max is 1000000 in the dataset, 5 here",
    ] {
        assert!(said.contains(named), "{named:?} not in: {said}");
    }
    assert!(
        !said.contains("--confirmed-retention-ms"),
        "names only what differs: {said}"
    );
    let said = refused(redis.as_ref(), &["--confirmed-retention-ms", "60000"]);
    assert!(
        said.contains("--confirmed-retention-ms is 604800000 in the dataset, 60000 here"),
        "{said}"
    );

    // The dataset's own values, given explicitly, are the same settings.
    let second = server_on(
        &redis,
        &[
            "--hold-retention-ms",
            "86400000",
            "--confirmed-retention-ms",
            "604800000",
            "--event-retention-max",
            "1000000",
        ],
    )
    .await;
    assert_eq!(second.api().pool("p").await["total"], json!(1));
}

/// A dataset made by an earlier version has no settings stored: the first server of this
/// version stores its own, and every later one is held to them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dataset_without_stored_settings_takes_the_first_servers() {
    let redis = Arc::new(RedisBackend::start());
    let maker = server_on(&redis, &[]).await;
    put_pool(&maker.api(), "p", json!({"total": 1})).await;
    drop(maker);
    let meta = "stockd:{p0.0}:meta";
    redis.redis.cli(&[
        "HDEL",
        meta,
        "hold_retention_ms",
        "confirmed_retention_ms",
        "event_retention_max",
    ]);

    let first = server_on(&redis, &["--hold-retention-ms", "1000"]).await;
    assert_eq!(first.api().pool("p").await["total"], json!(1));
    assert_eq!(
        redis.redis.cli(&["HGET", meta, "hold_retention_ms"]),
        "1000"
    );
    let said = refused(redis.as_ref(), &[]);
    assert!(
        said.contains("--hold-retention-ms is 1000 in the dataset, 86400000 here"),
        "{said}"
    );
}

fn redis_with(args: &[&str]) -> Arc<RedisBackend> {
    Arc::new(RedisBackend::start_with(args))
}

/// `/readyz`'s status and body.
async fn readyz(api: &Api) -> (u16, Value) {
    api.try_call("GET", "/readyz", None)
        .await
        .unwrap_or((0, Value::Null))
}

/// The warnings `/readyz` answers with (none: an empty list).
async fn readyz_warnings(api: &Api) -> Vec<String> {
    let (status, body) = readyz(api).await;
    assert_eq!(status, 200, "{body}");
    body.get("warnings")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|w| w.as_str().expect("a warning is text").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `/readyz` until it answers `want`, for at most `within`.
async fn readyz_becomes(api: &Api, want: u16, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let (status, body) = readyz(api).await;
        if status == want {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz is {status} ({body}), expected {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A Redis that may evict keys under memory pressure would drop holds, pool counters or the
/// dataset marker without any server noticing: a server refuses to start on it, and says what
/// to set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_may_evict_keys_is_refused() {
    let redis = redis_with(&["--appendonly", "no", "--maxmemory-policy", "allkeys-lru"]);
    let said = refused(redis.as_ref(), &[]);
    for named in ["maxmemory-policy", "allkeys-lru", "noeviction"] {
        assert!(said.contains(named), "{named:?} not in: {said}");
    }
    assert_eq!(
        redis.redis.cli(&["DBSIZE"]),
        "0",
        "a refused start writes nothing"
    );
    redis
        .redis
        .cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let server = server_on(&redis, &[]).await;
    put_pool(&server.api(), "p", json!({"total": 1})).await;
}

/// `appendfsync everysec` (or no AOF at all) loses acknowledged holds in a crash: the server
/// runs, but says so loudly, at start and in every `/readyz`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_may_lose_acknowledged_changes_is_a_loud_warning() {
    for (args, named) in [
        (
            &["--appendonly", "yes", "--appendfsync", "everysec"][..],
            "appendfsync everysec",
        ),
        (&["--appendonly", "no"][..], "appendonly no"),
    ] {
        let redis = redis_with(args);
        let server = server_on(&redis, &[]).await;
        let warnings = readyz_warnings(&server.api()).await;
        assert!(
            warnings
                .iter()
                .any(|w| w.contains(named) && w.contains("appendfsync always")),
            "{named}: {warnings:?}"
        );
        let log = server.log_tail();
        assert!(
            log.contains(named) && log.contains("WARN"),
            "{named}: {log}"
        );
    }
    let redis = redis_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let server = server_on(&redis, &[]).await;
    assert_eq!(readyz_warnings(&server.api()).await, Vec::<String>::new());
}

/// A managed Redis may rename or forbid `CONFIG`: the settings cannot be checked, which is a
/// warning, not a refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_hides_its_settings_is_a_warning() {
    let redis = redis_with(&["--appendonly", "no", "--rename-command", "CONFIG", ""]);
    let server = server_on(&redis, &[]).await;
    let warnings = readyz_warnings(&server.api()).await;
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("could not be checked") && w.contains("noeviction")),
        "{warnings:?}"
    );
    put_pool(&server.api(), "p", json!({"total": 1})).await;
}

/// Started before its Redis, a server listens at once, answers `/readyz` 503 and writes 503,
/// and serves as soon as Redis is there; a Redis that comes up with settings it must refuse
/// then stops it, non-zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_not_reachable_at_start_is_retried_while_readyz_answers_503() {
    let port = free_port();
    let server = Server::start_with(ServerConfig::on(Arc::new(RedisAt(format!(
        "redis://127.0.0.1:{port}"
    )))))
    .await;
    let api = server.api();
    let (status, body) = readyz(&api).await;
    assert_eq!(
        (status, &body["error"]),
        (503, &json!("backend_unavailable")),
        "{body}"
    );
    let (status, body) = api
        .call("PUT", "/v1/pools/p", Some(json!({"total": 1})))
        .await;
    assert_eq!(status, 503, "{body}");
    let (status, body) = api.call("GET", "/v1/events/partitions", None).await;
    assert_eq!((status, &body["partitions"]), (200, &json!(1)), "{body}");

    let redis = RedisServer::start_on(port, &["--appendonly", "yes", "--appendfsync", "always"]);
    readyz_becomes(&api, 200, Duration::from_secs(15)).await;
    put_pool(&api, "p", json!({"total": 1})).await;
    drop(redis);

    let port = free_port();
    let mut server = Server::start_with(ServerConfig::on(Arc::new(RedisAt(format!(
        "redis://127.0.0.1:{port}"
    )))))
    .await;
    let _redis = RedisServer::start_on(
        port,
        &["--appendonly", "no", "--maxmemory-policy", "volatile-ttl"],
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while server.is_running() {
        assert!(Instant::now() < deadline, "still serving an evicting Redis");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = server.log_tail();
    assert!(
        log.contains("volatile-ttl") && log.contains("noeviction"),
        "{log}"
    );
}

/// On a Cluster every primary is checked: one that may evict keys is refused, by address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primary_of_a_cluster_is_checked() {
    let cluster = Arc::new(RedisClusterBackend::of_primaries(
        2,
        2,
        &["--appendonly", "yes", "--appendfsync", "always"],
    ));
    let second = &cluster.nodes[1];
    second.cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-random"]);
    let said = refused(cluster.as_ref(), &[]);
    assert!(
        said.contains("allkeys-random") && said.contains(&format!("127.0.0.1:{}", second.port)),
        "{said}"
    );

    second.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let server = Server::start_with(ServerConfig::on(cluster.clone())).await;
    assert_eq!(readyz_warnings(&server.api()).await, Vec::<String>::new());
}

/// Where a segmented pool's segments live is the dataset's: the first server stores the
/// partitions grouped by the primary serving each, every later server adopts what is stored
/// (whatever the Cluster looks like to it), and partitions that disagree stop a server, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_dataset_keeps_where_segments_live() {
    use stockd_redis::keys::{PartitionKeys, Placement};
    let cluster = Arc::new(RedisClusterBackend::of_primaries(
        2,
        4,
        &["--appendonly", "yes", "--appendfsync", "always"],
    ));
    let node = &cluster.nodes[0];
    let meta = |k: u32| PartitionKeys::new(k, 4).meta();
    let first = Server::start_with(ServerConfig::on(cluster.clone())).await;
    for k in 0..4 {
        // Two primaries with half the slots each: partitions 0 and 1 on one, 2 and 3 on the other.
        assert_eq!(node.cli(&["-c", "HGET", &meta(k), "placement"]), "0,1;2,3");
    }
    drop(first);

    for k in 0..4 {
        node.cli(&["-c", "HSET", &meta(k), "placement", "0,2;1,3"]);
    }
    let second = Server::start_with(ServerConfig::on(cluster.clone())).await;
    put_pool(&second.api(), "p", json!({"total": 10, "segments": 2})).await;
    let (status, list) = second.api().call("GET", "/v1/pools/p/segments", None).await;
    assert_eq!(status, 200, "{list}");
    let stored = Placement::parse("0,2;1,3", 4).unwrap();
    let partitions: Vec<u64> = list["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|segment| segment["partition"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (0..2)
        .map(|j| u64::from(stored.segment_partition("p", j)))
        .collect();
    assert_eq!(partitions, expected, "{list}");
    drop(second);

    node.cli(&["-c", "HSET", &meta(3), "placement", "0,1;2,3"]);
    let said = refused(cluster.as_ref(), &[]);
    assert!(
        said.contains("partitions disagree on the dataset's placement of segments"),
        "{said}"
    );
}
