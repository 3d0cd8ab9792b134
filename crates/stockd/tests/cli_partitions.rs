//! `stockd events tail` on a feed with several partitions: a real Redis Cluster behind a real
//! `stockd serve` with 4 partitions, the command line run as a real process. Every partition is
//! read and followed, each line says its partition, the cursor has a seq per partition and
//! resumes exactly where the tail stopped.
//!
//! This test always runs (it starts its own cluster, whatever `STOCKD_TEST_BACKEND` says).

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{pools_in_distinct_partitions, RedisClusterBackend, Server, ServerConfig};

const STOCKD: &str = env!("CARGO_BIN_EXE_stockd");
const PARTITIONS: u32 = 4;
/// How long a line or an exit may take once it is due.
const DUE_WITHIN: Duration = Duration::from_secs(10);

/// The outcome of one command-line run.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn run(url: &str, args: &[&str]) -> Run {
    let mut command = Command::new(STOCKD);
    command
        .args(args)
        .env("STOCKD_URL", url)
        .env_remove("STOCKD_TOKEN")
        .stdin(Stdio::null());
    let output = tokio::task::spawn_blocking(move || command.output().expect("run stockd"))
        .await
        .expect("the runner");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The cursor in `to go on from here: --after CURSOR` (or `to resume from here`).
fn printed_cursor(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|line| line.split_once("from here: --after ").map(|(_, c)| c))
        .unwrap_or_else(|| panic!("no cursor in {stderr:?}"))
        .trim()
        .to_owned()
}

fn cursor_map(cursor: &str) -> BTreeMap<u64, u64> {
    cursor
        .split(',')
        .map(|entry| {
            let (partition, seq) = entry.split_once(':').expect("K:SEQ");
            (
                partition.parse().expect("a partition"),
                seq.parse().expect("a seq"),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_tail_reads_and_follows_every_partition() {
    let cluster = Arc::new(RedisClusterBackend::start(PARTITIONS));
    let server = Server::start_with(ServerConfig::on(cluster.clone())).await;
    let url = server.url();
    let api = server.api();
    // pools[k] is in partition k.
    let pools = pools_in_distinct_partitions(&api, "x", PARTITIONS as usize, 10).await;

    // Everything kept, one JSON line per event: every partition, seqs 1, 2, ... in order.
    let all = run(
        &url,
        &["events", "tail", "--no-follow", "--after", "0:0", "--json"],
    )
    .await;
    assert_eq!(all.code, Some(0), "{}", all.stderr);
    let mut seqs: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut upserted_in: BTreeMap<String, u64> = BTreeMap::new();
    for line in all.stdout.lines() {
        let event: Value = serde_json::from_str(line).expect("a JSON line");
        let partition = event["partition"]
            .as_u64()
            .expect("a partition on each line");
        seqs.entry(partition)
            .or_default()
            .push(event["seq"].as_u64().expect("a seq"));
        if event["type"] == "pool_upserted" {
            upserted_in.insert(event["pool"].as_str().expect("pool").to_owned(), partition);
        }
    }
    assert_eq!(
        seqs.keys().copied().collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "{}",
        all.stdout
    );
    for (partition, seqs) in &seqs {
        let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
        assert_eq!(seqs, &expected, "partition {partition}");
    }
    for (partition, pool) in pools.iter().enumerate() {
        assert_eq!(upserted_in.get(pool), Some(&(partition as u64)), "{pool}");
    }
    let cursor = printed_cursor(&all.stderr);
    let reached = cursor_map(&cursor);
    for (partition, seqs) in &seqs {
        assert_eq!(reached.get(partition), seqs.last(), "{cursor}");
    }

    // Human lines say their partition too.
    let human = run(&url, &["events", "tail", "--no-follow"]).await;
    assert_eq!(human.code, Some(0), "{}", human.stderr);
    for partition in 0..PARTITIONS {
        assert!(
            human
                .stdout
                .lines()
                .any(|line| line.starts_with(&format!("{partition}:"))),
            "partition {partition}:\n{}",
            human.stdout
        );
    }

    // One seq for several partitions, or a partition the feed does not have: usage errors.
    let ambiguous = run(&url, &["events", "tail", "--after", "5"]).await;
    assert_eq!(ambiguous.code, Some(2), "{}", ambiguous.stderr);
    assert!(
        ambiguous
            .stderr
            .contains("--after 5 is one seq, but this feed has 4 partitions"),
        "{}",
        ambiguous.stderr
    );
    let no_such = run(&url, &["events", "tail", "--after", "7:0"]).await;
    assert_eq!(no_such.code, Some(2), "{}", no_such.stderr);
    assert!(
        no_such
            .stderr
            .contains("--after names partition 7, but this feed has 4 partitions (0 to 3)"),
        "{}",
        no_such.stderr
    );

    // Follow from the cursor: new events of partitions 1 and 3 both show, then Ctrl-C prints
    // a cursor that moved exactly there.
    let mut tail: Child = Command::new(STOCKD)
        .args(["events", "tail", "--json", "--after", &cursor])
        .env("STOCKD_URL", &url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the tail");
    let (sender, lines) = std::sync::mpsc::channel();
    let stdout = tail.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    for pool in [&pools[1], &pools[3]] {
        let (status, body) = api
            .call(
                "POST",
                &format!("/v1/pools/{pool}/restock"),
                Some(json!({"delta": 1})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let mut restocked: BTreeMap<u64, String> = BTreeMap::new();
    while restocked.len() < 2 {
        let line = lines.recv_timeout(DUE_WITHIN).unwrap_or_else(|_| {
            let _ = tail.kill();
            panic!("the new events did not show within {DUE_WITHIN:?}: {restocked:?}")
        });
        let event: Value = serde_json::from_str(&line).expect("a JSON line");
        assert_eq!(event["type"], "restocked", "{line}");
        restocked.insert(
            event["partition"].as_u64().expect("a partition"),
            event["pool"].as_str().expect("a pool").to_owned(),
        );
    }
    assert_eq!(
        restocked,
        BTreeMap::from([(1, pools[1].clone()), (3, pools[3].clone())])
    );
    let status = Command::new("kill")
        .args(["-INT", &tail.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    let deadline = Instant::now() + DUE_WITHIN;
    let code = loop {
        if let Some(status) = tail.try_wait().expect("try_wait") {
            break status.code();
        }
        assert!(Instant::now() < deadline, "the tail ignored Ctrl-C");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(code, Some(0));
    let mut stderr = String::new();
    let _ = tail
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr);
    let stopped_at = cursor_map(&printed_cursor(&stderr));
    let mut expected = reached.clone();
    *expected.get_mut(&1).expect("partition 1") += 1;
    *expected.get_mut(&3).expect("partition 3") += 1;
    assert_eq!(stopped_at, expected, "{stderr}");

    // Resuming there shows nothing already seen.
    let resumed = run(
        &url,
        &[
            "events",
            "tail",
            "--no-follow",
            "--after",
            &printed_cursor(&stderr),
        ],
    )
    .await;
    assert_eq!(resumed.code, Some(0), "{}", resumed.stderr);
    assert_eq!(resumed.stdout, "", "{}", resumed.stderr);
}
