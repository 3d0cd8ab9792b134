//! Starting a server on Redis, against a real `redis-server`: the fleet settings are the
//! dataset's (a server started with other values refuses to start and names them).
//!
//! These tests always run (they start their own Redis, whatever `STOCKD_TEST_BACKEND` says).

mod support;

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{put_pool, RedisBackend, Server, ServerConfig};

/// How long a server that refuses to start may take to exit.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `stockd serve` on `redis` with `args`; its output once it exited, or `None` (and it is
/// killed) when it is still running after [`REFUSAL_TIMEOUT`]: it started.
fn serve_until_exit(redis: &RedisBackend, args: &[&str]) -> Option<Output> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stockd"))
        .args(["serve", "--listen", "127.0.0.1:0", "--backend"])
        .arg(redis.redis.url())
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
fn refused(redis: &RedisBackend, args: &[&str]) -> String {
    let output = serve_until_exit(redis, args)
        .unwrap_or_else(|| panic!("stockd serve {args:?} started; it should have refused"));
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "exit status 0: {stderr}");
    stderr
}

async fn server_on(redis: &Arc<RedisBackend>, args: &[&str]) -> Server {
    let mut config = ServerConfig {
        backend: redis.clone(),
        ..ServerConfig::default()
    };
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
        &redis,
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
    let said = refused(&redis, &["--confirmed-retention-ms", "60000"]);
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
    let said = refused(&redis, &[]);
    assert!(
        said.contains("--hold-retention-ms is 1000 in the dataset, 86400000 here"),
        "{said}"
    );
}
