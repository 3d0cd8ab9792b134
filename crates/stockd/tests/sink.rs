//! `stockd sink postgres` and `stockd reconcile` against a real PostgreSQL (a private one:
//! `initdb` in a temporary directory, a free loopback port; see stockd-bench's lab servers).
//!
//! The backend is `STOCKD_TEST_BACKEND`'s, so the same tests run on the embedded engine, a Redis
//! and a 16-partition Redis Cluster (scripts/test.sh runs all three).
//!
//! - A mixed workload (reserve, confirm with and without a reserve, release, expiry, extend,
//!   refund with and without restock, restock with request ids, total changes, delete and
//!   re-create) runs while the sink follows the feed; meanwhile the sink is SIGKILLed at random
//!   moments and started again (a second sink runs beside it all along, as if started by
//!   mistake), stockd is killed and restarted, and PostgreSQL crashes and restarts. Then
//!   `stockd_events` must be exactly the feed (every partition, every seq once, every body
//!   equal), and reconcile must find nothing.
//! - Rows tampered with by hand are reported by reconcile, and `--repair` puts them right.
//! - A sink that fell behind the feed's window records the gap, says so, and reconcile reports
//!   and repairs it.
//! - After a Redis that lost its data is accepted by an operator, its seqs continue above the
//!   sink's cursor: the sink records the gap and applies the new events.
//! - A feed that went back below the sink's cursor (an engine on a wiped data dir) stops the
//!   sink instead of letting it skip the new events.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use support::{db, postgres, redis_accept, Api, Process, Server, ServerConfig, STOCKD};

/// `stockd sink postgres` as a child process (the harness's [`Process`]: SIGKILLed when dropped,
/// also when a test fails, so that no sink outlives its test), its output in `log`.
fn spawn_sink(url: &str, dsn: &str, extra: &[&str], log: &Path) -> Process {
    let sink = Process::new("stockd sink", log.to_path_buf());
    let mut command = Command::new(STOCKD);
    command
        .args(["sink", "postgres", "--url", url, "--dsn", dsn])
        .args(extra)
        .env_remove("STOCKD_TOKEN")
        .env("STOCKD_LOG", "info");
    sink.spawn(command).expect("start stockd sink");
    sink
}

/// Runs the sink with `--once` until it has caught up (within a minute), insists on exit 0, and
/// returns what it printed on stderr.
fn sink_once(url: &str, dsn: &str, extra: &[&str]) -> String {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(STOCKD)
        .args(["sink", "postgres", "--once", "--url", url, "--dsn", dsn])
        .args(extra)
        .env_remove("STOCKD_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log.reopen().unwrap()))
        .spawn()
        .expect("run stockd sink --once");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            kill(&mut child);
            panic!(
                "sink --once did not catch up within 60 s: {}",
                std::fs::read_to_string(log.path()).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(log.path()).unwrap_or_default();
    assert!(status.success(), "sink --once failed: {stderr}");
    stderr
}

fn reconcile(url: &str, dsn: &str, extra: &[&str]) -> (i32, String) {
    let output = Command::new(STOCKD)
        .args(["reconcile", "--url", url, "--dsn", dsn])
        .args(extra)
        .env_remove("STOCKD_TOKEN")
        .output()
        .expect("run stockd reconcile");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), text)
}

/// Asserts that `stockd_events` holds exactly the feed: every partition's every event, once,
/// with the same body.
async fn assert_events_are_the_feed(api: &Api, db: &tokio_postgres::Client) {
    let mut feed: BTreeMap<(u32, u64), Value> = BTreeMap::new();
    for event in api.all_events().await {
        let seq = event.event["seq"].as_u64().unwrap();
        feed.insert((event.partition, seq), event.event);
    }
    let rows = db
        .query(
            "SELECT partition, seq, type, body::text FROM stockd_events ORDER BY partition, seq",
            &[],
        )
        .await
        .unwrap();
    let mut table: BTreeMap<(u32, u64), Value> = BTreeMap::new();
    for row in &rows {
        let partition: i32 = row.get(0);
        let seq: i64 = row.get(1);
        let kind: String = row.get(2);
        let body: Value = serde_json::from_str(&row.get::<_, String>(3)).unwrap();
        assert_eq!(
            body["type"],
            json!(kind),
            "type column of {partition}/{seq}"
        );
        table.insert((partition as u32, seq as u64), body);
    }
    let missing: Vec<_> = feed.keys().filter(|k| !table.contains_key(k)).collect();
    let extra: Vec<_> = table.keys().filter(|k| !feed.contains_key(k)).collect();
    assert!(
        missing.is_empty(),
        "events missing from stockd_events: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "events in stockd_events the feed does not have: {extra:?}"
    );
    for (key, event) in &feed {
        assert_eq!(&table[key], event, "body of event {key:?}");
    }
    // Contiguous from 1 in every partition that has events: no gap, no duplicate.
    let mut by_partition: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for (partition, seq) in table.keys() {
        by_partition.entry(*partition).or_default().push(*seq);
    }
    for (partition, seqs) in by_partition {
        let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
        assert_eq!(seqs, expected, "seqs of partition {partition}");
    }
}

/// The workload: random operations on a handful of pools for `duration`, including every
/// transition and every pool change the sink folds. Returns how many calls succeeded.
async fn workload(api: Api, seed: u64, duration: Duration) -> usize {
    let mut rng = StdRng::seed_from_u64(seed);
    let pools = ["sk-a", "sk-b", "sk-c", "sk-d", "sk-e"];
    for pool in pools {
        let (status, body) = api
            .call(
                "PUT",
                &format!("/v1/pools/{pool}"),
                Some(json!({"total": 200})),
            )
            .await;
        assert!(status == 200 || status == 201, "PUT {pool}: {body}");
    }
    let mut held: Vec<String> = Vec::new();
    let mut confirmed: Vec<String> = Vec::new();
    let mut done = 0;
    let mut n = 0u64;
    let started = Instant::now();
    while started.elapsed() < duration {
        n += 1;
        let answer = match rng.gen_range(0..100) {
            // Reserve one or two pools; some confirm at once, some expire in 1 s.
            0..=39 => {
                let hold_id = format!("sk-{seed}-{n}");
                let first = pools[rng.gen_range(0..pools.len())];
                let mut items = vec![json!({"pool": first, "qty": rng.gen_range(1..4)})];
                if rng.gen_bool(0.4) {
                    let second = pools[rng.gen_range(0..pools.len())];
                    if second != first {
                        items.push(json!({"pool": second, "qty": 1}));
                    }
                }
                let confirm = rng.gen_bool(0.2);
                let ttl_ms = if rng.gen_bool(0.2) { 1_000 } else { 60_000 };
                let mut body = json!({"hold_id": hold_id, "items": items, "ttl_ms": ttl_ms, "confirm": confirm});
                if rng.gen_bool(0.5) {
                    body["user"] = json!(format!("u{}", rng.gen_range(0..20)));
                }
                let answer = api.try_call("POST", "/v1/holds", Some(body)).await;
                if let Ok((201, _)) = answer {
                    if confirm {
                        confirmed.push(hold_id);
                    } else {
                        held.push(hold_id);
                    }
                }
                answer
            }
            40..=54 if !held.is_empty() => {
                let hold_id = held.swap_remove(rng.gen_range(0..held.len()));
                let answer = api
                    .try_call("POST", &format!("/v1/holds/{hold_id}/confirm"), None)
                    .await;
                if let Ok((200, _)) = answer {
                    confirmed.push(hold_id);
                }
                answer
            }
            55..=64 if !held.is_empty() => {
                let hold_id = held.swap_remove(rng.gen_range(0..held.len()));
                api.try_call("POST", &format!("/v1/holds/{hold_id}/release"), None)
                    .await
            }
            65..=69 if !held.is_empty() => {
                let hold_id = &held[rng.gen_range(0..held.len())];
                api.try_call(
                    "POST",
                    &format!("/v1/holds/{hold_id}/extend"),
                    Some(json!({"ttl_ms": 60_000})),
                )
                .await
            }
            70..=79 if !confirmed.is_empty() => {
                let hold_id = confirmed.swap_remove(rng.gen_range(0..confirmed.len()));
                let restock = rng.gen_bool(0.5);
                api.try_call(
                    "POST",
                    &format!("/v1/holds/{hold_id}/refund"),
                    Some(json!({"restock": restock})),
                )
                .await
            }
            80..=87 => {
                let pool = pools[rng.gen_range(0..pools.len())];
                let delta: i64 = if rng.gen_bool(0.7) { 5 } else { -2 };
                api.try_call(
                    "POST",
                    &format!("/v1/pools/{pool}/restock"),
                    Some(json!({"delta": delta, "request_id": format!("sk-r-{seed}-{n}")})),
                )
                .await
            }
            88..=93 => {
                // A new total: the sink gets it as a delta.
                let pool = pools[rng.gen_range(0..pools.len())];
                let current = api
                    .try_call("GET", &format!("/v1/pools/{pool}"), None)
                    .await;
                match current {
                    Ok((200, body)) => {
                        let committed =
                            body["held"].as_u64().unwrap() + body["sold"].as_u64().unwrap();
                        let total = committed + rng.gen_range(50..250);
                        api.try_call(
                            "PUT",
                            &format!("/v1/pools/{pool}"),
                            Some(json!({"total": total})),
                        )
                        .await
                    }
                    other => other,
                }
            }
            _ => {
                // A pool that lives briefly: sold from, deleted, created again under its id.
                let pool = format!("sk-tmp-{}", n % 3);
                let _ = api
                    .try_call(
                        "PUT",
                        &format!("/v1/pools/{pool}"),
                        Some(json!({"total": 10})),
                    )
                    .await;
                let hold_id = format!("sk-tmp-{seed}-{n}");
                let _ = api
                    .try_call(
                        "POST",
                        "/v1/holds",
                        Some(json!({"hold_id": hold_id, "items": [{"pool": pool, "qty": 2}], "confirm": true})),
                    )
                    .await;
                api.try_call("DELETE", &format!("/v1/pools/{pool}"), None)
                    .await
            }
        };
        if let Ok((status, _)) = answer {
            if status < 300 {
                done += 1;
            }
        }
        // stockd may be down for a moment (it is restarted on purpose): calls fail, the
        // workload goes on.
        if answer_failed(&answer) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    done
}

fn answer_failed(answer: &Result<(u16, Value), String>) -> bool {
    answer.is_err() || matches!(answer, Ok((status, _)) if *status >= 500)
}

/// Waits until every hold with a passed deadline has had its expiry applied (its `expired`
/// event is in the feed), so that the comparison is of a quiet stockd.
async fn quiet(api: &Api) {
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = api
            .call("GET", "/v1/holds?status=held&limit=1000", None)
            .await;
        assert_eq!(status, 200, "{body}");
        let now = support::now_ms();
        let overdue = body["holds"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["expires_at_ms"].as_u64().unwrap() <= now);
        if !overdue {
            return;
        }
        assert!(Instant::now() < deadline, "holds stay overdue: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sink_applies_every_event_once_through_kills_and_reconcile_finds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut pg = postgres(dir.path()).await;
    let dsn = pg.dsn();
    let mut server = Server::start_with(ServerConfig::default()).await;
    let api = server.api();
    let url = server.url();
    let log = dir.path().join("sink.log");
    let metrics_port = support::free_port();
    let metrics_listen = format!("127.0.0.1:{metrics_port}");
    let sink_args = [
        "--batch",
        "25",
        "--wait-ms",
        "300",
        "--backoff-max-ms",
        "500",
        "--metrics-listen",
        &metrics_listen,
    ];
    let mut sink = spawn_sink(&url, &dsn, &sink_args, &log);
    // A second sink on the same tables, as if started by mistake: it must not make any event
    // land twice (each page checks the stored cursor under a row lock).
    let twin = spawn_sink(&url, &dsn, &["--batch", "40", "--wait-ms", "200"], &log);

    let seed: u64 = rand::random::<u16>().into();
    eprintln!("workload seed {seed}");
    let load = tokio::spawn(workload(api.clone(), seed, Duration::from_secs(12)));
    let mut rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();
    let mut kills = 0;
    let (mut stockd_restarted, mut pg_restarted) = (false, false);
    let mut scraped = false;
    while started.elapsed() < Duration::from_secs(12) {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(150..700))).await;
        if !scraped && started.elapsed() > Duration::from_secs(2) {
            // The metrics, while it runs (the sink may have been started a moment ago).
            let url = format!("http://{metrics_listen}/metrics");
            let deadline = Instant::now() + Duration::from_secs(10);
            let text = loop {
                match reqwest::get(&url).await.and_then(|r| r.error_for_status()) {
                    Ok(answer) => break answer.text().await.unwrap(),
                    Err(error) => {
                        assert!(Instant::now() < deadline, "the sink's /metrics: {error}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            };
            assert!(
                text.contains("stockd_sink_events_applied_total{partition=\"0\"}"),
                "{text}"
            );
            assert!(
                text.contains("# TYPE stockd_sink_lag_seconds gauge"),
                "{text}"
            );
            scraped = true;
        }
        if !stockd_restarted && started.elapsed() > Duration::from_secs(4) {
            server.restart().await;
            stockd_restarted = true;
        } else if !pg_restarted && started.elapsed() > Duration::from_secs(7) {
            pg.crash_and_restart().await.expect("postgres restarts");
            pg_restarted = true;
        } else {
            sink.kill();
            kills += 1;
            sink = spawn_sink(&url, &dsn, &sink_args, &log);
        }
    }
    let done = load.await.unwrap();
    assert!(
        done > 100,
        "the workload did too little: {done} calls succeeded"
    );
    quiet(&api).await;
    sink.kill();
    twin.kill();
    eprintln!("{done} calls, the sink killed {kills} times, stockd and postgres restarted");
    sink_once(&url, &dsn, &[]);

    let client = db(&pg).await;
    assert_events_are_the_feed(&api, &client).await;
    let (code, text) = reconcile(&url, &dsn, &[]);
    assert_eq!(code, 0, "reconcile after the kills:\n{text}");
    assert!(text.contains(" 0 differences"), "{text}");
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    eprintln!(
        "pages a sink found taken by the other: {}",
        log_text.matches("moved under this sink").count()
    );
    assert!(
        log_text.contains("resuming after the stored cursor"),
        "the sink's log says where it resumed: {log_text}"
    );

    // Hand-made damage: a pool's number, a hold's status, a hold's row gone.
    let confirmed: String = client
        .query_one(
            "SELECT hold_id FROM stockd_holds WHERE status = 'confirmed' ORDER BY hold_id LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let gone: String = client
        .query_one(
            "SELECT hold_id FROM stockd_holds WHERE hold_id <> $1 ORDER BY hold_id DESC LIMIT 1",
            &[&confirmed],
        )
        .await
        .unwrap()
        .get(0);
    client
        .batch_execute(&format!(
            "UPDATE stockd_pools SET sold = sold + 1 WHERE pool = 'sk-a';
             UPDATE stockd_holds SET status = 'released' WHERE hold_id = '{confirmed}';
             DELETE FROM stockd_holds WHERE hold_id = '{gone}';"
        ))
        .await
        .unwrap();
    let (code, text) = reconcile(&url, &dsn, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("pool_differs sk-a: sold: stockd"), "{text}");
    assert!(
        text.contains(&format!(
            "hold_differs {confirmed}: status: stockd \"confirmed\" database \"released\""
        )),
        "{text}"
    );
    assert!(text.contains(&format!("hold_missing {gone}")), "{text}");
    assert!(text.contains(" 3 differences"), "{text}");
    let (code, json_text) = reconcile(&url, &dsn, &["--json"]);
    assert_eq!(code, 1);
    let report: Value = serde_json::from_str(json_text.trim()).expect("--json prints one object");
    assert_eq!(
        report["differences"].as_array().unwrap().len(),
        3,
        "{report}"
    );
    assert_eq!(report["clean"], json!(false));

    let (code, text) = reconcile(&url, &dsn, &["--repair"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("3 repaired"), "{text}");
    let (code, text) = reconcile(&url, &dsn, &[]);
    assert_eq!(code, 0, "after the repair:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_live_in_the_schema_asked_for_and_migrations_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let pg = postgres(dir.path()).await;
    let dsn = pg.dsn();
    let server = Server::start_with(ServerConfig::default()).await;
    let api = server.api();
    let url = server.url();
    let (status, _) = api
        .call("PUT", "/v1/pools/sc-a", Some(json!({"total": 3})))
        .await;
    assert_eq!(status, 201);
    for _ in 0..2 {
        sink_once(&url, &dsn, &["--schema", "shop"]);
    }
    let client = db(&pg).await;
    let versions: i64 = client
        .query_one("SELECT count(*) FROM shop.stockd_sink_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(versions, 1);
    let row = client
        .query_one(
            "SELECT total, available, held, sold FROM shop.stockd_pools WHERE pool = 'sc-a'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (3, 3));
    let public: bool = client
        .query_one(
            "SELECT to_regclass('public.stockd_events') IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!public, "nothing in the public schema");
    let (code, text) = reconcile(&url, &dsn, &["--schema", "shop"]);
    assert_eq!(code, 0, "{text}");
    // The default schema has no tables: reconcile says so and cannot run.
    let (code, text) = reconcile(&url, &dsn, &[]);
    assert_eq!(code, 3, "{text}");
    assert!(text.contains("has no sink tables"), "{text}");
    // A schema name that is not a plain identifier is a usage error.
    let (code, text) = reconcile(&url, &dsn, &["--schema", "Shop;drop"]);
    assert_eq!(code, 2, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_behind_the_feeds_window_records_the_gap_and_reconcile_repairs_it() {
    if !support::embedded_backend() {
        // The window is --event-retention-max, an embedded engine setting.
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pg = postgres(dir.path()).await;
    let dsn = pg.dsn();
    let server = Server::start_with(
        ServerConfig::default()
            .arg("--event-retention-max")
            .arg("10"),
    )
    .await;
    let api = server.api();
    let url = server.url();
    let (status, _) = api
        .call("PUT", "/v1/pools/gp-a", Some(json!({"total": 100})))
        .await;
    assert_eq!(status, 201);
    for n in 0..15 {
        let (status, body) = api
            .call(
                "POST",
                "/v1/holds",
                Some(json!({"hold_id": format!("gp-{n}"), "items": [{"pool": "gp-a", "qty": 1}], "confirm": n % 2 == 0})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let stderr = sink_once(&url, &dsn, &[]);
    assert!(
        stderr.contains("no longer has the events"),
        "the sink says so: {stderr}"
    );
    let client = db(&pg).await;
    let gaps: i64 = client
        .query_one(
            "SELECT count(*) FROM stockd_sink_gaps WHERE repaired_at IS NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(gaps, 1);
    let (code, text) = reconcile(&url, &dsn, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("gap partition 0"), "{text}");
    assert!(
        text.contains("pool_differs gp-a") || text.contains("pool_missing gp-a"),
        "{text}"
    );
    let (code, text) = reconcile(&url, &dsn, &["--repair"]);
    assert_eq!(code, 0, "{text}");
    let (code, text) = reconcile(&url, &dsn, &[]);
    assert_eq!(code, 0, "after the repair:\n{text}");
    // The sink goes on from the repaired rows: one more sale, and they still agree.
    let (status, _) = api
        .call(
            "POST",
            "/v1/holds",
            Some(json!({"hold_id": "gp-after", "items": [{"pool": "gp-a", "qty": 2}], "confirm": true})),
        )
        .await;
    assert_eq!(status, 201);
    sink_once(&url, &dsn, &[]);
    let (code, text) = reconcile(&url, &dsn, &[]);
    assert_eq!(code, 0, "after more events:\n{text}");
}

/// Exit code and stderr of `sink --once` (which must end within a minute).
fn sink_once_status(url: &str, dsn: &str) -> (i32, String) {
    let output = Command::new(STOCKD)
        .args(["sink", "postgres", "--once", "--url", url, "--dsn", dsn])
        .env_remove("STOCKD_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("run stockd sink --once");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A pool and three holds (four events, seqs 1-4), then one `sink --once`: the sink's cursor is 4.
async fn four_events_then_sink(api: &Api, url: &str, dsn: &str) {
    let (status, _) = api
        .call("PUT", "/v1/pools/rw-a", Some(json!({"total": 5})))
        .await;
    assert_eq!(status, 201);
    for n in 0..3 {
        let body = json!({"hold_id": format!("rw-{n}"), "items": [{"pool": "rw-a", "qty": 1}]});
        assert_eq!(api.call("POST", "/v1/holds", Some(body)).await.0, 201);
    }
    sink_once(url, dsn, &[]);
}

/// A Redis that lost data and was accepted by an operator continues its seqs above every seq it
/// handed out before (a gap is allowed): the sink records the gap, goes on, and applies the new
/// events; reconcile then repairs what it can of what the lost data took with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_accepted_loss_the_sink_records_the_gap_and_applies_the_new_events() {
    if std::env::var("STOCKD_TEST_BACKEND").as_deref() != Ok("redis") {
        // Needs a Redis that loses its data (no persistence) and an operator's accept.
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pg = postgres(dir.path()).await;
    let dsn = pg.dsn();
    let redis = std::sync::Arc::new(support::RedisBackend::start());
    let server = Server::start_with(ServerConfig::on(redis.clone())).await;
    let api = server.api();
    let url = server.url();
    four_events_then_sink(&api, &url, &dsn).await;

    // Redis loses everything; an operator accepts the empty dataset; sales go on.
    redis.redis.kill();
    redis.redis.start_again();
    redis_accept(&redis.redis.url(), &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = api
            .try_call("PUT", "/v1/pools/rw-b", Some(json!({"total": 5})))
            .await;
        if let Ok((201, _)) = answer {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "stockd did not come back: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stderr = sink_once(&url, &dsn, &[]);
    assert!(
        stderr.contains("recording the gap"),
        "the sink says so: {stderr}"
    );
    let client = db(&pg).await;
    let gap = client
        .query_one(
            "SELECT after_seq, oldest_seq FROM stockd_sink_gaps WHERE repaired_at IS NULL",
            &[],
        )
        .await
        .expect("one gap, from the cursor before the loss");
    let (after_seq, oldest_seq): (i64, i64) = (gap.get(0), gap.get(1));
    assert_eq!(after_seq, 4, "the cursor before the loss");
    assert!(oldest_seq > 5, "the new seqs are above the old ones");
    let created: i64 = client
        .query_one(
            "SELECT count(*) FROM stockd_events WHERE type = 'pool_upserted' AND seq >= $1",
            &[&oldest_seq],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(created, 1, "the new event is applied, not skipped");
    // What the loss took: the pool is marked deleted and the gap repaired; the holds it forgot
    // stay differences for a human (stockd cannot say how they ended).
    let (code, text) = reconcile(&url, &dsn, &["--repair"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("pool_not_deleted rw-a"), "{text}");
    let (code, text) = reconcile(&url, &dsn, &[]);
    assert_eq!(code, 1, "{text}");
    let differences: Vec<&str> = text
        .lines()
        .filter(|line| {
            line.starts_with("hold_") || line.starts_with("pool_") || line.starts_with("gap")
        })
        .collect();
    assert_eq!(
        differences.len(),
        3,
        "after the repair only the forgotten holds remain:\n{text}"
    );
    for n in 0..3 {
        assert!(text.contains(&format!("hold_unknown rw-{n}")), "{text}");
    }
}

/// A feed that went back below the sink's cursor (an embedded engine started on a wiped data
/// dir: its seqs start again from 1) stops the sink instead of letting it skip the new events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_that_went_back_below_the_cursor_stops_the_sink() {
    if !support::embedded_backend() {
        // A Redis accepted after a loss continues its seqs above (the test above).
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pg = postgres(dir.path()).await;
    let dsn = pg.dsn();
    let mut server = Server::start().await;
    let api = server.api();
    let url = server.url();
    four_events_then_sink(&api, &url, &dsn).await;

    // The data dir is wiped; the engine starts empty; one new event, seq 1, below the cursor (4).
    server.kill();
    for entry in std::fs::read_dir(server.data_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    server.start_again().await;
    let (status, _) = api
        .call("PUT", "/v1/pools/rw-b", Some(json!({"total": 5})))
        .await;
    assert_eq!(status, 201);
    let (code, stderr) = sink_once_status(&url, &dsn);
    assert_eq!(
        code, 1,
        "the sink must stop, not skip the new events: {stderr}"
    );
    assert!(
        stderr.contains("the feed went back below the stored cursor"),
        "{stderr}"
    );
}

/// Settings out of range are usage errors (exit 2) before anything is contacted: nothing listens
/// at this URL or this DSN.
#[test]
fn settings_out_of_range_are_refused_before_anything_runs() {
    let url = "http://127.0.0.1:9";
    let dsn = "host=127.0.0.1 port=9 user=postgres dbname=postgres";
    for (extra, says) in [
        (&["--batch", "0"][..], "--batch"),
        (&["--batch", "1001"][..], "--batch"),
        (&["--wait-ms", "30001"][..], "--wait-ms"),
        (&["--schema", "Shop"][..], "--schema"),
        (&["--schema", &"s".repeat(64)][..], "--schema"),
        (&["--dsn", "port=notanumber"][..], "--dsn"),
    ] {
        let mut command = Command::new(STOCKD);
        command.args(["sink", "postgres", "--url", url]);
        if !extra.contains(&"--dsn") {
            command.args(["--dsn", dsn]);
        }
        let output = command
            .args(extra)
            .env_remove("STOCKD_TOKEN")
            .env_remove("STOCKD_SINK_DSN")
            .output()
            .expect("run stockd sink");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?} names {says}: {stderr}");
        assert!(
            !stderr.contains("cannot be used multiple times"),
            "{stderr}"
        );
    }
    // The edges themselves are taken: 1 and 1000 events a page, 30 s polls, 63-byte schemas
    // (checked by parsing alone: `--help` after them stops before anything runs).
    // A value past the edge fails even before `--help`, so the 0s below mean "taken".
    for (extra, code) in [
        (&["--batch", "1001"][..], 2),
        (&["--batch", "1"][..], 0),
        (&["--batch", "1000"][..], 0),
        (&["--wait-ms", "30000"][..], 0),
    ] {
        let output = Command::new(STOCKD)
            .args(["sink", "postgres", "--url", url, "--dsn", dsn])
            .args(extra)
            .arg("--help")
            .output()
            .expect("run stockd sink");
        assert_eq!(output.status.code(), Some(code), "{extra:?}");
    }
    assert!(stockd_sink::schema::check_name(&"s".repeat(63)).is_ok());
}
