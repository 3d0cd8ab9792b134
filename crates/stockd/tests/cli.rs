//! The client command line (`stockd pool`, `hold`, `lock`, `batch`, `events tail`) and the
//! messages of `stockd serve` about its settings, run as a real process against a real
//! `stockd serve` process: arguments, human and `--json` output, the errors that say what to do,
//! and exit codes (0 done, 2 bad usage, 3 no usable answer, 4 refused by the server, 5 server
//! error; docs/cli.md). A canned responder stands in for the answers a healthy server never
//! gives (5xx, a body that is not stockd's); cli_partitions.rs has the feed with 4 partitions.
//!
//! Only the binary is exercised: the test starts `stockd serve` on a free loopback port with a
//! fresh data dir, waits (bounded) until `GET /healthz` answers 200, and kills it on drop.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{free_port, Process, START_ATTEMPTS};

const STOCKD: &str = env!("CARGO_BIN_EXE_stockd");
/// How often readiness is probed while waiting.
const READY_POLL_EVERY: Duration = Duration::from_millis(25);
/// Bound on one readiness probe, so a hung accept cannot stall the wait past its deadline.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A `stockd serve` child process (the harness's [`Process`]), killed when dropped.
struct Server {
    /// Held for its drop, which kills the process.
    _process: Process,
    url: String,
    _scratch: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        Server::start_with(&[])
    }

    /// A server with `extra` arguments after `serve --listen ... --data-dir ...`.
    fn start_with(extra: &[&str]) -> Server {
        let mut last_log = String::new();
        for _ in 0..START_ATTEMPTS {
            match Server::try_start(extra) {
                Ok(server) => return server,
                Err(log) => last_log = log,
            }
        }
        panic!(
            "stockd serve did not become ready in {START_ATTEMPTS} attempts; last log:\n{last_log}"
        );
    }

    /// Starts one server; on failure returns its log.
    fn try_start(extra: &[&str]) -> Result<Server, String> {
        let scratch = tempfile::tempdir().expect("create a temp dir");
        let data_dir = scratch.path().join("data");
        let process = Process::new("stockd", scratch.path().join("server.log"));
        let address = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut command = Command::new(STOCKD);
        command
            .arg("serve")
            .arg("--listen")
            .arg(address.to_string())
            .arg("--data-dir")
            .arg(&data_dir)
            .args(extra)
            // Hermetic: no settings of the caller's environment reach this server.
            .env_remove("STOCKD_TOKEN")
            .env_remove("STOCKD_TOKENS")
            .env_remove("STOCKD_CONFIG");
        process.spawn(command)?;
        while !healthz_is_ok(address) {
            process.not_ready()?;
            thread::sleep(READY_POLL_EVERY);
        }
        Ok(Server {
            _process: process,
            url: format!("http://{address}"),
            _scratch: scratch,
        })
    }

    /// Runs `stockd ARGS` against this server (the URL comes from `STOCKD_URL`).
    fn stockd(&self, args: &[&str]) -> Run {
        run(&self.url, args)
    }

    /// Runs `stockd ARGS` against this server with more environment variables.
    fn stockd_env(&self, env: &[(&str, &str)], args: &[&str]) -> Run {
        run_env(&[&[("STOCKD_URL", self.url.as_str())], env].concat(), args)
    }
}

/// One plain HTTP/1.1 `GET /healthz`; true on a 200.
fn healthz_is_ok(address: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&address, PROBE_TIMEOUT) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(PROBE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(PROBE_TIMEOUT));
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer.starts_with(b"HTTP/1.1 200")
}

/// The outcome of one command-line run.
struct Run {
    args: String,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn describe(&self) -> String {
        format!(
            "stockd {}\nexit: {:?}\nstdout:\n{}\nstderr:\n{}",
            self.args, self.code, self.stdout, self.stderr
        )
    }

    /// Asserts success and returns stdout.
    fn ok(&self) -> &str {
        assert_eq!(self.code, Some(0), "{}", self.describe());
        &self.stdout
    }

    /// Asserts success and returns stdout, owned (the run is usually a temporary).
    fn ok_owned(&self) -> String {
        self.ok().to_owned()
    }

    /// Asserts success and parses stdout as JSON.
    fn ok_json(&self) -> Value {
        let stdout = self.ok();
        serde_json::from_str(stdout)
            .unwrap_or_else(|error| panic!("stdout is not JSON: {error}\n{}", self.describe()))
    }

    /// Asserts exit code `code` and an `error: <error_code>: ...` line on stderr.
    fn fails(&self, code: i32, error_code: &str) {
        assert_eq!(self.code, Some(code), "{}", self.describe());
        assert!(
            self.stderr.contains(&format!("error: {error_code}: ")),
            "expected `error: {error_code}: ` on stderr\n{}",
            self.describe()
        );
    }
}

/// Runs `stockd ARGS` with `STOCKD_URL` set to `url` and no `STOCKD_TOKEN`.
fn run(url: &str, args: &[&str]) -> Run {
    run_env(&[("STOCKD_URL", url)], args)
}

/// Runs `stockd ARGS` with exactly these `STOCKD_*` variables of the client (none of the
/// caller's).
fn run_env(env: &[(&str, &str)], args: &[&str]) -> Run {
    run_full(env, args, None)
}

/// Runs `stockd ARGS` with `input` on its standard input (none when `None`).
fn run_full(env: &[(&str, &str)], args: &[&str], input: Option<&[u8]>) -> Run {
    let mut command = Command::new(STOCKD);
    command
        .args(args)
        .env_remove("STOCKD_URL")
        .env_remove("STOCKD_TOKEN")
        .env_remove("STOCKD_LISTEN")
        .env_remove("STOCKD_TOKENS")
        .env_remove("STOCKD_CONFIG")
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("run stockd");
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        // Written from a thread: a child that answers before reading it all must not block us.
        let input = input.to_vec();
        thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("wait for stockd");
    Run {
        args: args.join(" "),
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

#[test]
fn pool_put_segments_and_pool_segments() {
    let server = Server::start();
    // A segmented pool: its count is shown, fixed, and its segments add up to it.
    let out = server
        .stockd(&["pool", "put", "flash-1", "--total", "64", "--segments", "8"])
        .ok_owned();
    assert!(
        out.contains("pool flash-1 created: total 64, available 64, held 0, sold 0; 8 segments"),
        "{out}"
    );
    let out = server.stockd(&["pool", "segments", "flash-1"]).ok_owned();
    assert!(
        out.starts_with("pool flash-1: 1 segment\n  segment  0"),
        "{out}"
    );
    assert!(out.contains("total       64  available       64"), "{out}");
    let refused = server.stockd(&["pool", "put", "flash-1", "--total", "64", "--segments", "4"]);
    assert_eq!(refused.code, Some(4), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("segments_fixed"),
        "{}",
        refused.stderr
    );
}

#[test]
fn pool_and_hold_commands_against_a_real_server() {
    let server = Server::start();

    let out = server
        .stockd(&[
            "pool",
            "put",
            "sku-1",
            "--total",
            "10",
            "--low-stock-threshold",
            "2",
        ])
        .ok_owned();
    assert!(
        out.contains("pool sku-1 created: total 10, available 10, held 0, sold 0"),
        "{out}"
    );
    let out = server
        .stockd(&["pool", "put", "sku-1", "--total", "99", "--if-absent"])
        .ok_owned();
    assert!(
        out.contains("pool sku-1 exists, unchanged: total 10"),
        "{out}"
    );

    // Client flags may follow the subcommand.
    let pool = server.stockd(&["pool", "get", "sku-1", "--json"]).ok_json();
    assert_eq!(pool["pool"], "sku-1");
    assert_eq!(pool["total"], 10);
    assert_eq!(pool["available"], 10);
    assert_eq!(pool["held"], 0);
    assert_eq!(pool["sold"], 0);
    assert_eq!(pool["low_stock_threshold"], 2);
    assert_eq!(pool["per_user_limit"], Value::Null);
    assert_eq!(pool["segments"], 1);

    let out = server
        .stockd(&["hold", "reserve", "o-1", "--item", "sku-1=3", "--confirm"])
        .ok_owned();
    // Times are UTC and relative, not epoch milliseconds.
    assert!(out.starts_with("hold o-1: confirmed 20"), "{out}");
    assert!(
        out.contains(" UTC (now)") || out.contains("s ago)"),
        "{out}"
    );
    let out = server.stockd(&["hold", "get", "o-1"]).ok_owned();
    assert!(out.starts_with("hold o-1: confirmed 20"), "{out}");
    assert!(out.contains("items sku-1 x3"), "{out}");

    let out = server
        .stockd(&[
            "hold", "reserve", "o-2", "--item", "sku-1=2", "--user", "u-1",
        ])
        .ok_owned();
    assert!(out.starts_with("hold o-2: held, expires 20"), "{out}");
    // The default ttl_ms is 10 minutes.
    assert!(
        out.contains(" UTC (in 9m 59s)") || out.contains(" UTC (in 10m)"),
        "{out}"
    );
    assert!(out.contains("user u-1"), "{out}");
    let hold = server
        .stockd(&["hold", "release", "o-2", "--json"])
        .ok_json();
    assert_eq!(hold["status"], "released");

    // A negative delta is a value, not a flag.
    let out = server
        .stockd(&["pool", "restock", "sku-1", "--delta", "-2"])
        .ok_owned();
    assert!(
        out.contains("total 8, available 5, held 0, sold 3"),
        "{out}"
    );

    // Holds: o-1 (confirmed) and o-2 (released, user u-1), listed in id order.
    let out = server
        .stockd(&["hold", "list", "--pool", "sku-1", "--limit", "1"])
        .ok_owned();
    assert!(out.starts_with("hold o-1: confirmed 20"), "{out}");
    assert!(out.trim_end().ends_with("more: --after o-1"), "{out}");
    let out = server
        .stockd(&["hold", "list", "--pool", "sku-1", "--limit", "1", "--all"])
        .ok_owned();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[1].starts_with("hold o-2: released 20"), "{out}");
    // --json --all: each page's body as received, a line each.
    let out = server
        .stockd(&["hold", "list", "--limit", "1", "--all", "--json"])
        .ok_owned();
    let pages: Vec<Value> = out
        .lines()
        .map(|line| serde_json::from_str(line).expect("a page"))
        .collect();
    assert_eq!(pages.len(), 2, "{out}");
    assert_eq!(pages[0]["next"], "o-1");
    assert_eq!(pages[1]["holds"][0]["hold_id"], "o-2");
    assert_eq!(pages[1]["next"], Value::Null);
    let page = server
        .stockd(&[
            "hold", "list", "--user", "u-1", "--status", "released", "--json",
        ])
        .ok_json();
    assert_eq!(page["holds"][0]["hold_id"], "o-2", "{page}");
    let out = server
        .stockd(&["hold", "list", "--status", "held"])
        .ok_owned();
    assert_eq!(out.trim_end(), "no holds");
    server
        .stockd(&["hold", "list", "--limit", "0"])
        .fails(4, "invalid_request");
    // A status that is not one is refused before anything is sent (usage, exit 2).
    let bad = server.stockd(&["hold", "list", "--status", "sold"]);
    assert_eq!(bad.code, Some(2), "{}", bad.describe());
    // With --request-id, running the restock again changes nothing and says so (the server's
    // Stockd-Replayed: true); only the run that applied it says "restocked". Another delta is
    // refused.
    let restock_once = |extra: &[&'static str]| {
        let mut args = vec![
            "pool",
            "restock",
            "sku-1",
            "--delta",
            "4",
            "--request-id",
            "restock-1",
        ];
        args.extend_from_slice(extra);
        server.stockd(&args)
    };
    let out = restock_once(&[]).ok_owned();
    assert!(
        out.starts_with(
            "pool sku-1 restocked +4 for request restock-1: total 12, available 9, held 0, sold 3"
        ),
        "{out}"
    );
    for _ in 0..2 {
        let out = restock_once(&[]).ok_owned();
        assert!(
            out.starts_with(
                "pool sku-1: restock +4 for request restock-1 was already applied (nothing \
                 changed); now total 12, available 9, held 0, sold 3"
            ),
            "{out}"
        );
        // --json prints the server's body as received: the pool as it is now.
        let pool = restock_once(&["--json"]).ok_json();
        assert_eq!(
            (pool["total"].as_u64(), pool["available"].as_u64()),
            (Some(12), Some(9)),
            "{pool}"
        );
    }
    server
        .stockd(&[
            "pool",
            "restock",
            "sku-1",
            "--delta",
            "5",
            "--request-id",
            "restock-1",
        ])
        .fails(4, "request_id_conflict");
    let out = server
        .stockd(&["pool", "restock", "sku-1", "--delta", "-4"])
        .ok_owned();
    assert!(
        out.starts_with("pool sku-1 restocked -4: total 8, available 5, held 0, sold 3"),
        "{out}"
    );

    let page = server.stockd(&["pool", "list", "--json"]).ok_json();
    assert_eq!(page["pools"].as_array().map(Vec::len), Some(1), "{page}");
    let out = server.stockd(&["pool", "list"]).ok_owned();
    assert!(out.starts_with("POOL"), "{out}");
    assert!(out.contains("sku-1"), "{out}");

    // Refusals: exit 4, `error: <code>: <message>` on stderr, nothing changed.
    let refused = server.stockd(&["hold", "reserve", "o-3", "--item", "sku-1=100"]);
    refused.fails(4, "insufficient_stock");
    assert!(refused.stdout.is_empty(), "{}", refused.describe());
    // With --json the error body, details included, is on stdout too.
    let refused = server.stockd(&["hold", "reserve", "o-3", "--item", "sku-1=100", "--json"]);
    refused.fails(4, "insufficient_stock");
    let body: Value = serde_json::from_str(&refused.stdout)
        .unwrap_or_else(|error| panic!("{error}\n{}", refused.describe()));
    assert_eq!(body["error"], "insufficient_stock");
    assert_eq!(body["available"], 5);
    assert_eq!(body["requested"], 100);
    server
        .stockd(&["pool", "get", "nope"])
        .fails(4, "pool_not_found");
    server
        .stockd(&["hold", "refund", "o-404"])
        .fails(4, "hold_not_found");

    let pool = server.stockd(&["pool", "get", "sku-1", "--json"]).ok_json();
    assert_eq!(
        (pool["available"].as_u64(), pool["sold"].as_u64()),
        (Some(5), Some(3))
    );

    // A refund with --no-restock takes the units out of the pool.
    server
        .stockd(&["hold", "reserve", "o-9", "--item", "sku-1=2", "--confirm"])
        .ok();
    let refunded = server
        .stockd(&["hold", "refund", "o-9", "--no-restock", "--json"])
        .ok_json();
    assert_eq!(refunded["status"], "refunded", "{refunded}");
    let pool = server.stockd(&["pool", "get", "sku-1", "--json"]).ok_json();
    assert_eq!(
        (
            pool["total"].as_u64(),
            pool["available"].as_u64(),
            pool["sold"].as_u64()
        ),
        (Some(6), Some(3), Some(3)),
        "{pool}"
    );
}

#[test]
fn unreachable_server_exits_3() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let unreachable = run(
        "http://127.0.0.1:9",
        &["pool", "--url", &url, "get", "sku-1"],
    );
    assert_eq!(unreachable.code, Some(3), "{}", unreachable.describe());
    assert!(
        unreachable
            .stderr
            .contains("error: transport: cannot reach "),
        "{}",
        unreachable.describe()
    );
    assert!(unreachable.stdout.is_empty(), "{}", unreachable.describe());
}

#[test]
fn malformed_item_is_a_usage_error() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let bad = run(&url, &["hold", "reserve", "o-1", "--item", "sku-1"]);
    assert_eq!(bad.code, Some(2), "{}", bad.describe());
    assert!(
        bad.stderr.contains("expected POOL=QTY"),
        "{}",
        bad.describe()
    );
}

/// One plain HTTP/1.1 request; the status and the body exactly as the server sent them.
fn http(address: &str, method: &str, path: &str) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(address).expect("connect to the server");
    stream
        .set_read_timeout(Some(PROBE_TIMEOUT * 10))
        .expect("set a read timeout");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read the answer");
    let head_end = answer
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .expect("an answer head");
    let head = String::from_utf8_lossy(&answer[..head_end]).to_lowercase();
    assert!(
        !head.contains("transfer-encoding: chunked"),
        "this helper reads whole bodies only: {head}"
    );
    let status = head[9..12].parse().expect("a status code");
    (status, answer[head_end + 4..].to_vec())
}

#[test]
fn json_is_the_servers_body_as_received_on_success_and_refusal() {
    let server = Server::start();
    let address = server.url.trim_start_matches("http://").to_owned();
    server
        .stockd(&[
            "pool",
            "put",
            "sku-1",
            "--total",
            "3",
            "--per-user-limit",
            "1",
        ])
        .ok();

    // --json before the command, between, and after: the same bytes as a plain GET.
    let (status, body) = http(&address, "GET", "/v1/pools/sku-1");
    assert_eq!(status, 200);
    let expected = format!("{}\n", String::from_utf8_lossy(&body));
    for args in [
        &["--json", "pool", "get", "sku-1"][..],
        &["pool", "--json", "get", "sku-1"][..],
        &["pool", "get", "sku-1", "--json"][..],
    ] {
        let run = server.stockd(args);
        assert_eq!(run.ok(), expected, "{}", run.describe());
    }

    // A refusal: the error body as received on stdout, the summary on stderr, exit 4.
    let (status, body) = http(&address, "GET", "/v1/holds/nope");
    assert_eq!(status, 404);
    let refused = server.stockd(&["hold", "get", "nope", "--json"]);
    refused.fails(4, "hold_not_found");
    assert_eq!(
        refused.stdout,
        format!("{}\n", String::from_utf8_lossy(&body)),
        "{}",
        refused.describe()
    );

    // A delete answers 204 with no body: nothing on stdout.
    let deleted = server.stockd(&["pool", "delete", "sku-1", "--json"]);
    assert_eq!(deleted.ok(), "", "{}", deleted.describe());
}

#[test]
fn json_before_a_server_command_is_a_usage_error() {
    let run = run("http://127.0.0.1:9", &["--json", "serve"]);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(
        run.stderr
            .contains("--json before the command applies to the client commands"),
        "{}",
        run.describe()
    );
}

/// A stand-in for a server that answers every request with `status` and `body`, for the
/// answers a healthy stockd never gives (5xx, a body that is not stockd's). Stops on drop.
struct Canned {
    url: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Canned {
    fn start(status: u16, body: &'static str) -> Canned {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        thread::spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok((mut stream, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(PROBE_TIMEOUT));
                // Read the head (these requests have no body worth reading).
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        Canned { url, stop }
    }
}

impl Drop for Canned {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn a_server_error_exits_5_and_an_answer_that_is_not_stockds_exits_3() {
    let unavailable = Canned::start(
        503,
        r#"{"error":"backend_unavailable","message":"the backend is unavailable"}"#,
    );
    let run_503 = run(&unavailable.url, &["hold", "confirm", "o-1"]);
    run_503.fails(5, "backend_unavailable");

    let proxy = Canned::start(502, "Bad Gateway");
    let run_502 = run(&proxy.url, &["pool", "get", "sku-1"]);
    run_502.fails(5, "http_502");
    assert!(
        run_502.stderr.contains("Bad Gateway"),
        "{}",
        run_502.describe()
    );

    let not_stockd = Canned::start(200, "<html>hello</html>");
    let unreadable = run(&not_stockd.url, &["pool", "get", "sku-1"]);
    assert_eq!(unreadable.code, Some(3), "{}", unreadable.describe());
    assert!(
        unreadable
            .stderr
            .contains("error: decode: unreadable answer from "),
        "{}",
        unreadable.describe()
    );
}

#[test]
fn a_url_without_a_scheme_says_what_to_write_and_where_it_came_from() {
    let flag = run_env(&[], &["pool", "get", "sku-1", "--url", "127.0.0.1:7070"]);
    assert_eq!(flag.code, Some(2), "{}", flag.describe());
    assert!(
        flag.stderr.contains(
            "error: --url is \"127.0.0.1:7070\": it has no scheme; write --url http://127.0.0.1:7070"
        ),
        "{}",
        flag.describe()
    );

    let env = run_env(&[("STOCKD_URL", "localhost:7070")], &["hold", "get", "o-1"]);
    assert_eq!(env.code, Some(2), "{}", env.describe());
    assert!(
        env.stderr.contains(
            "error: STOCKD_URL is \"localhost:7070\": it has no scheme; write STOCKD_URL=http://localhost:7070"
        ),
        "{}",
        env.describe()
    );

    let other = run_env(&[], &["pool", "list", "--url", "ftp://stock.example:21"]);
    assert_eq!(other.code, Some(2), "{}", other.describe());
    assert!(
        other.stderr.contains("only http and https")
            && other.stderr.contains("write --url http://stock.example:21"),
        "{}",
        other.describe()
    );

    // https is spoken (scripts/tls-proxy.sh goes through a TLS proxy): a server that does not
    // speak TLS fails the handshake, a transport error (exit 3), not a usage error.
    let plain = Server::start();
    let https = plain.url.replace("http://", "https://");
    let tls = run_env(&[], &["pool", "list", "--url", &https]);
    assert_eq!(tls.code, Some(3), "{}", tls.describe());
    assert!(
        tls.stderr
            .contains(&format!("error: transport: cannot reach {https}")),
        "{}",
        tls.describe()
    );
}

const ADMIN_SECRET: &str = "admin-secret-0123";
const CLIENT_SECRET: &str = "client-secret-4567";

#[test]
fn token_errors_name_the_flag_the_variable_and_the_role_needed() {
    let tokens = format!("admin:{ADMIN_SECRET},client:{CLIENT_SECRET}");
    let server = Server::start_with(&["--tokens", &tokens]);

    let missing = server.stockd(&["pool", "get", "sku-1"]);
    missing.fails(4, "unauthorized");
    assert!(
        missing.stderr.contains(
            "hint: this server needs a bearer token: pass --token TOKEN or set STOCKD_TOKEN"
        ),
        "{}",
        missing.describe()
    );

    let wrong_flag = server.stockd(&["pool", "get", "sku-1", "--token", "not-a-known-secret"]);
    wrong_flag.fails(4, "unauthorized");
    assert!(
        wrong_flag
            .stderr
            .contains("hint: the server does not know the token from --token"),
        "{}",
        wrong_flag.describe()
    );
    let wrong_env = server.stockd_env(&[("STOCKD_TOKEN", "not-a-known-secret")], &["pool", "list"]);
    wrong_env.fails(4, "unauthorized");
    assert!(
        wrong_env
            .stderr
            .contains("hint: the server does not know the token from STOCKD_TOKEN"),
        "{}",
        wrong_env.describe()
    );

    let client = server.stockd_env(
        &[("STOCKD_TOKEN", CLIENT_SECRET)],
        &["pool", "put", "sku-1", "--total", "5"],
    );
    client.fails(4, "forbidden");
    assert!(
        client.stderr.contains("hint: this needs an admin token")
            && client
                .stderr
                .contains("the token from STOCKD_TOKEN has the client role"),
        "{}",
        client.describe()
    );

    let admin = server.stockd(&[
        "pool",
        "put",
        "sku-1",
        "--total",
        "5",
        "--token",
        ADMIN_SECRET,
    ]);
    assert!(
        admin.ok().contains("pool sku-1 created"),
        "{}",
        admin.describe()
    );
    // The client token may read.
    server
        .stockd(&["pool", "get", "sku-1", "--token", CLIENT_SECRET])
        .ok();

    for run in [&missing, &wrong_flag, &wrong_env, &client, &admin] {
        for secret in [ADMIN_SECRET, CLIENT_SECRET, "not-a-known-secret"] {
            assert!(
                !run.stderr.contains(secret) && !run.stdout.contains(secret),
                "a token is never printed\n{}",
                run.describe()
            );
        }
    }
}

#[test]
fn lock_acquire_renew_release_against_a_real_server() {
    let server = Server::start();

    let acquired = server
        .stockd(&[
            "lock", "acquire", "nightly", "--owner", "worker-a", "--ttl-ms", "30000",
        ])
        .ok_owned();
    assert!(
        acquired.starts_with("lock nightly acquired by worker-a: fence "),
        "{acquired}"
    );
    assert!(
        acquired.contains(" UTC (in 30s)") || acquired.contains(" UTC (in 29s)"),
        "{acquired}"
    );

    // Taken: exit 4, the deadline as a time, and what to do.
    let held = server.stockd(&[
        "lock",
        "acquire",
        "nightly",
        "--owner",
        "worker-b",
        "--ttl-ms",
        "1000",
        "--wait-ms",
        "100",
    ]);
    held.fails(4, "lock_held");
    assert!(
        held.stderr.contains("note: expires_at_ms ") && held.stderr.contains(" UTC (in "),
        "{}",
        held.describe()
    );
    assert!(
        held.stderr
            .contains("hint: wait for the lock with --wait-ms"),
        "{}",
        held.describe()
    );

    // Another lock, through --json: the fence is the server's `token`.
    let lease = server
        .stockd(&[
            "lock", "acquire", "export", "--owner", "worker-a", "--ttl-ms", "5000", "--json",
        ])
        .ok_json();
    let fence = lease["token"].as_u64().expect("a fencing token");
    assert!(lease["expires_at_ms"].as_u64().is_some(), "{lease}");
    let fence_text = fence.to_string();

    let renewed = server
        .stockd(&[
            "lock",
            "renew",
            "export",
            "--owner",
            "worker-a",
            "--fence",
            &fence_text,
            "--ttl-ms",
            "60000",
        ])
        .ok_owned();
    assert!(
        renewed.starts_with(&format!(
            "lock export renewed by worker-a: fence {fence}, expires "
        )),
        "{renewed}"
    );
    assert!(
        renewed.contains("(in 1m)") || renewed.contains("(in 59s)"),
        "{renewed}"
    );

    let wrong = (fence + 1000).to_string();
    let not_owner = server.stockd(&[
        "lock", "release", "export", "--owner", "worker-a", "--fence", &wrong,
    ]);
    not_owner.fails(4, "not_lock_owner");
    assert!(
        not_owner
            .stderr
            .contains("hint: renew and release need the --owner and --fence that acquire answered"),
        "{}",
        not_owner.describe()
    );

    let released = server
        .stockd(&[
            "lock",
            "release",
            "export",
            "--owner",
            "worker-a",
            "--fence",
            &fence_text,
        ])
        .ok_owned();
    assert_eq!(
        released,
        format!("lock export released by worker-a (fence {fence})\n")
    );
    let reacquired = server
        .stockd(&[
            "lock", "acquire", "export", "--owner", "worker-b", "--ttl-ms", "5000",
        ])
        .ok_owned();
    assert!(
        reacquired.starts_with("lock export acquired by worker-b"),
        "the lock is free again: {reacquired}"
    );

    // A missing required flag is a usage error.
    let usage = server.stockd(&["lock", "renew", "export", "--owner", "worker-a"]);
    assert_eq!(usage.code, Some(2), "{}", usage.describe());
    assert!(
        usage.stderr.contains("--fence <FENCE>"),
        "{}",
        usage.describe()
    );
}

#[test]
fn batch_from_a_file_and_from_stdin() {
    let server = Server::start();
    server
        .stockd(&["pool", "put", "sku-1", "--total", "5"])
        .ok();
    let scratch = tempfile::tempdir().expect("a temp dir");

    // Two ops that succeed and one refused: every op shown, exit 4.
    let ops = scratch.path().join("ops.json");
    std::fs::write(
        &ops,
        r#"{"ops": [
            {"op": "reserve", "hold_id": "o-1", "items": [{"pool": "sku-1", "qty": 2}]},
            {"op": "confirm", "hold_id": "o-1"},
            {"op": "confirm", "hold_id": "o-9"}
        ]}"#,
    )
    .expect("write the ops");
    let path = ops.to_str().expect("a UTF-8 path");
    let mixed = server.stockd(&["batch", path]);
    assert_eq!(mixed.code, Some(4), "{}", mixed.describe());
    let lines: Vec<&str> = mixed.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", mixed.describe());
    assert!(
        lines[0].starts_with("1. reserve (201) hold o-1: held, expires 20"),
        "{}",
        mixed.describe()
    );
    assert!(
        lines[1].starts_with("2. confirm (200) hold o-1: confirmed 20"),
        "{}",
        mixed.describe()
    );
    assert!(
        lines[2].starts_with("3. confirm (404) error: hold_not_found: "),
        "{}",
        mixed.describe()
    );
    assert_eq!(lines[3], "3 ops: 2 done, 1 refused, 0 failed on the server");
    assert!(
        mixed
            .stderr
            .contains("error: batch: not every op succeeded: 3 ops: 2 done, 1 refused"),
        "{}",
        mixed.describe()
    );

    // From stdin, with --json: the server's answer; every op succeeded, exit 0.
    let input = br#"{"ops":[{"op":"release","hold_id":"o-2"},{"op":"reserve","hold_id":"o-2","items":[{"pool":"sku-1","qty":1}]},{"op":"release","hold_id":"o-2"}]}"#;
    let from_stdin = run_full(
        &[("STOCKD_URL", &server.url)],
        &["batch", "-", "--json"],
        Some(&input[..]),
    );
    // The first release is refused (no such hold yet): exit 4 even with --json.
    assert_eq!(from_stdin.code, Some(4), "{}", from_stdin.describe());
    let answer: Value = serde_json::from_str(&from_stdin.stdout)
        .unwrap_or_else(|error| panic!("{error}\n{}", from_stdin.describe()));
    let statuses: Vec<u64> = answer["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|result| result["status"].as_u64().expect("a status"))
        .collect();
    assert_eq!(statuses, [404, 201, 200], "{answer}");
    let all_ok = run_full(
        &[("STOCKD_URL", &server.url)],
        &["batch", "-"],
        Some(br#"{"ops":[{"op":"refund","hold_id":"o-1"}]}"#),
    );
    assert_eq!(all_ok.code, Some(0), "{}", all_ok.describe());
    assert!(
        all_ok
            .stdout
            .starts_with("1. refund (200) hold o-1: refunded 20"),
        "{}",
        all_ok.describe()
    );

    // The file goes out byte for byte: the server sees (and refuses) a repeated field.
    let repeated = run_full(
        &[("STOCKD_URL", &server.url)],
        &["batch", "-", "--json"],
        Some(br#"{"ops":[{"op":"confirm","hold_id":"o-1","hold_id":"o-2"}]}"#),
    );
    assert_eq!(repeated.code, Some(4), "{}", repeated.describe());
    assert!(
        repeated.stdout.contains("invalid_request"),
        "{}",
        repeated.describe()
    );

    // Nothing sent: not JSON, no such file, too big.
    let not_json = scratch.path().join("ops.txt");
    std::fs::write(&not_json, "reserve o-1 sku-1=1").expect("write");
    let bad = server.stockd(&["batch", not_json.to_str().expect("UTF-8")]);
    assert_eq!(bad.code, Some(2), "{}", bad.describe());
    assert!(
        bad.stderr.contains("ops.txt is not JSON (")
            && bad
                .stderr
                .contains(r#"a batch is the batch endpoint's body: {"ops": "#),
        "{}",
        bad.describe()
    );
    let missing = server.stockd(&["batch", "/nonexistent/ops.json"]);
    assert_eq!(missing.code, Some(2), "{}", missing.describe());
    assert!(
        missing
            .stderr
            .contains("error: batch: cannot read /nonexistent/ops.json: "),
        "{}",
        missing.describe()
    );
    let big = scratch.path().join("big.json");
    std::fs::write(&big, vec![b' '; 1024 * 1024 + 1]).expect("write");
    let too_big = server.stockd(&["batch", big.to_str().expect("UTF-8")]);
    assert_eq!(too_big.code, Some(2), "{}", too_big.describe());
    assert!(
        too_big.stderr.contains("is over 1048576 bytes (1 MiB)"),
        "{}",
        too_big.describe()
    );
}

/// `stockd ARGS` against `url` as a child with piped stdout and stderr, for the commands that
/// run until stopped.
fn spawn(url: &str, args: &[&str]) -> Child {
    Command::new(STOCKD)
        .args(args)
        .env("STOCKD_URL", url)
        .env_remove("STOCKD_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn stockd")
}

/// How long a child may take to end once it has every reason to.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Waits (bounded) for `child` to exit; kills it and fails when it does not.
fn exit_code_within(child: &mut Child, within: Duration) -> Option<i32> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status.code();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("stockd did not exit within {within:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// The lines of `pipe` as they come, read on a thread so that a test can wait for one with a
/// deadline.
fn lines_of(pipe: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (sender, receiver) = std::sync::mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    receiver
}

fn read_all(pipe: Option<impl Read>) -> String {
    let mut text = String::new();
    if let Some(mut pipe) = pipe {
        let _ = pipe.read_to_string(&mut text);
    }
    text
}

/// Sends `signal` (`INT`, `TERM`) to `child`, through kill(1).
fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} failed");
}

#[test]
fn events_tail_prints_the_last_events_and_json_lines_as_received() {
    let server = Server::start();
    let address = server.url.trim_start_matches("http://").to_owned();
    for pool in 1..=6 {
        server
            .stockd(&["pool", "put", &format!("p-{pool}"), "--total", "10"])
            .ok();
    }
    server
        .stockd(&["hold", "reserve", "o-1", "--item", "p-1=2", "--user", "ann"])
        .ok();

    // Human: partition:seq, UTC time with ms, type, fields; the cursor on stderr.
    let tail = server.stockd(&["events", "tail", "--no-follow", "-n", "2"]);
    let lines: Vec<&str> = tail.ok().lines().collect();
    assert_eq!(lines.len(), 2, "{}", tail.describe());
    assert!(
        lines[0].starts_with("0:6 20")
            && lines[0].contains(" UTC pool_upserted pool p-6, delta +10, total 10, available 10"),
        "{}",
        tail.describe()
    );
    assert!(
        lines[1].starts_with("0:7 20")
            && lines[1].contains(" UTC held hold o-1, user ann, items p-1 x2, expires 20")
            && lines[1].contains(" UTC (in "),
        "{}",
        tail.describe()
    );
    assert!(
        tail.stderr.contains("to go on from here: --after 7"),
        "{}",
        tail.describe()
    );

    // The default is the last 10: all 7 here. --after starts after a seq.
    let all = server.stockd(&["events", "tail", "--no-follow"]);
    assert_eq!(all.ok().lines().count(), 7, "{}", all.describe());
    let after = server.stockd(&["events", "tail", "--no-follow", "--after", "5"]);
    let seqs: Vec<&str> = after
        .ok()
        .lines()
        .map(|line| line.split(' ').next().unwrap_or_default())
        .collect();
    assert_eq!(seqs, ["0:6", "0:7"], "{}", after.describe());

    // --json: one event a line, each the server's bytes with its partition in front.
    let (status, body) = http(&address, "GET", "/v1/events?after=0");
    assert_eq!(status, 200);
    let body = String::from_utf8(body).expect("UTF-8");
    let json = server.stockd(&["--json", "events", "tail", "--no-follow", "--after", "0"]);
    let lines: Vec<&str> = json.ok().lines().collect();
    assert_eq!(lines.len(), 7, "{}", json.describe());
    for (index, line) in lines.iter().enumerate() {
        let own = line
            .strip_prefix(r#"{"partition":0,"#)
            .unwrap_or_else(|| panic!("no partition in front: {line}"));
        assert!(
            body.contains(&format!("{{{own}")),
            "not as received: {line}\n{body}"
        );
        let event: Value = serde_json::from_str(line).expect("a JSON line");
        assert_eq!(event["seq"], index as u64 + 1, "{line}");
    }

    // A cursor that is not one, and --after with --lines: usage errors.
    let bad = server.stockd(&["events", "tail", "--after", "zero"]);
    assert_eq!(bad.code, Some(2), "{}", bad.describe());
    assert!(bad.stderr.contains("K:SEQ,K:SEQ"), "{}", bad.describe());
    let both = server.stockd(&["events", "tail", "--after", "1", "-n", "3"]);
    assert_eq!(both.code, Some(2), "{}", both.describe());
    let no_such = server.stockd(&["events", "tail", "--after", "0:1,1:1"]);
    assert_eq!(no_such.code, Some(2), "{}", no_such.describe());
    assert!(
        no_such
            .stderr
            .contains("--after names partition 1, but this feed has 1 partition (0 to 0)"),
        "{}",
        no_such.describe()
    );
}

#[test]
fn events_tail_follows_and_stops_cleanly_on_a_signal_and_a_closed_pipe() {
    let server = Server::start();
    server.stockd(&["pool", "put", "p-1", "--total", "10"]).ok();

    // Follow from the newest event; a new one shows up; SIGTERM (and Ctrl-C's SIGINT) end it
    // with 0 and the cursor to resume from.
    let mut newest = 1;
    for stop in ["TERM", "INT"] {
        let after = newest.to_string();
        let mut tail = spawn(
            &server.url,
            &["events", "tail", "--after", &after, "--json"],
        );
        let lines = lines_of(tail.stdout.take().expect("stdout"));
        let created = format!("p-{stop}");
        server
            .stockd(&["pool", "put", &created, "--total", "3"])
            .ok();
        let line = lines.recv_timeout(EXIT_TIMEOUT).unwrap_or_else(|_| {
            let _ = tail.kill();
            panic!("SIG{stop}: the new event did not show within {EXIT_TIMEOUT:?}")
        });
        let event: Value = serde_json::from_str(&line).expect("a JSON line");
        assert_eq!(
            (&event["type"], &event["pool"], &event["partition"]),
            (
                &Value::from("pool_upserted"),
                &Value::from(created.as_str()),
                &Value::from(0)
            ),
            "{line}"
        );
        newest = event["seq"].as_u64().expect("a seq");
        // Waiting in its long poll now: the signal must end it at once, not after the poll.
        signal(&tail, stop);
        assert_eq!(
            exit_code_within(&mut tail, Duration::from_secs(5)),
            Some(0),
            "SIG{stop}"
        );
        let stderr = read_all(tail.stderr.take());
        assert!(
            stderr.contains(&format!("stopped; to resume from here: --after {newest}")),
            "SIG{stop}: {stderr}"
        );
    }

    // `| head -1` with no event coming after: the tail sees the reader go and exits 0, quietly.
    let mut tail = spawn(&server.url, &["events", "tail", "-n", "1"]);
    {
        let mut stdout = BufReader::new(tail.stdout.take().expect("stdout"));
        let mut first = String::new();
        stdout.read_line(&mut first).expect("a line");
        assert!(first.starts_with("0:"), "{first}");
        // The reader closes the pipe here.
    }
    assert_eq!(exit_code_within(&mut tail, EXIT_TIMEOUT), Some(0));
    let stderr = read_all(tail.stderr.take());
    assert_eq!(stderr, "", "nothing to say to a reader that left");
}

#[test]
fn events_tail_reports_expired_events_never_a_silent_gap() {
    let server = Server::start_with(&["--event-retention-max", "3"]);
    for pool in 1..=6 {
        server
            .stockd(&["pool", "put", &format!("p-{pool}"), "--total", "1"])
            .ok();
    }
    // Asked for everything: events 1 to 3 are gone, and it says so: exit 4.
    let expired = server.stockd(&["events", "tail", "--after", "0"]);
    expired.fails(4, "events_expired");
    assert!(
        expired.stderr.contains(
            "hint: partition 0: events 1 to 3 are no longer kept, so this tail cannot show them"
        ) && expired.stderr.contains("then resume with --after 3"),
        "{}",
        expired.describe()
    );
    assert!(expired.stdout.is_empty(), "{}", expired.describe());
    // --json: the server's error body on stdout too.
    let json = server.stockd(&["events", "tail", "--after", "1", "--json"]);
    json.fails(4, "events_expired");
    let body: Value = serde_json::from_str(&json.stdout).expect("the error body");
    assert_eq!(body["oldest_seq"], 4, "{}", json.describe());

    // "The last 10" when only 3 are kept: the 3 there are, no error.
    let last = server.stockd(&["events", "tail", "--no-follow"]);
    let seqs: Vec<&str> = last
        .ok()
        .lines()
        .map(|line| line.split(' ').next().unwrap_or_default())
        .collect();
    assert_eq!(seqs, ["0:4", "0:5", "0:6"], "{}", last.describe());
}

#[test]
fn serve_listen_with_a_host_name_says_what_to_write_instead() {
    for (env, args) in [
        (&[][..], &["serve", "--listen", "localhost:7070"][..]),
        (&[("STOCKD_LISTEN", "localhost:7070")][..], &["serve"][..]),
    ] {
        let refused = run_env(env, args);
        assert_eq!(refused.code, Some(2), "{}", refused.describe());
        assert!(
            refused.stderr.contains("'--listen <IP:PORT>'")
                && refused.stderr.contains(
                    "\"localhost\" is not an IP address, and host names are not resolved"
                )
                && refused.stderr.contains(
                    "write 127.0.0.1:7070 (this machine only), 0.0.0.0:7070 (every interface; \
                     needs --tokens) or [::1]:7070"
                ),
            "{}",
            refused.describe()
        );
    }
}

#[test]
fn serve_help_shows_every_variable_and_default() {
    let help = run_env(&[], &["serve", "--help"]);
    let text = help.ok();
    // Every variable of the README's configuration table, and those without a flag.
    let readme = include_str!("../../../README.md");
    let table = readme
        .split("## Configuration")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the README's configuration section");
    let mut variables: Vec<&str> = table
        .split('`')
        .filter(|word| word.starts_with("STOCKD_"))
        .collect();
    variables.extend([
        "STOCKD_WORKER_THREADS",
        "STOCKD_LOG",
        "STOCKD_LOG_FORMAT",
        "STOCKD_CONFIG",
    ]);
    for variable in variables {
        assert!(
            text.contains(variable),
            "{variable} is not in serve --help:\n{text}"
        );
    }
    // Every option but --help says its default (its help may wrap onto the lines after it).
    let options = options_of(text);
    for option in options.iter().filter(|option| option.starts_with("--")) {
        assert!(option.contains("(default "), "no default: {option}");
    }
    let joined = options.join("\n");
    assert!(
        joined.contains("(default 127.0.0.1:7070;") && joined.contains("(default ./stockd-data)"),
        "{text}"
    );
}

/// The options of a `--help` text, each with its help joined from the lines it wraps onto:
/// an option starts at a line whose first word is a flag (`--x`, `-x,`).
fn options_of(help: &str) -> Vec<String> {
    let mut options: Vec<String> = Vec::new();
    let mut in_options = false;
    for line in help.lines().filter(|line| !line.trim().is_empty()) {
        let trimmed = line.trim_start();
        if !line.starts_with(' ') {
            in_options = line == "Options:";
            continue;
        }
        if !in_options {
            continue;
        }
        if trimmed.starts_with('-') && line.len() - trimmed.len() <= 6 {
            options.push(trimmed.to_owned());
        } else if let Some(option) = options.last_mut() {
            option.push(' ');
            option.push_str(trimmed);
        }
    }
    options
}

/// Every command's `--help`: `stockd`, then each subcommand, at any depth.
fn every_help(env: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut helps = Vec::new();
    let mut pending: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = pending.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = run_env(env, &args);
        let text = help.ok_owned();
        // "Commands:" lists the subcommands, one a line, the name first.
        let mut in_commands = false;
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            if !line.starts_with(' ') {
                in_commands = line == "Commands:";
                continue;
            }
            let indent = line.len() - line.trim_start().len();
            if in_commands && indent == 2 {
                let name = line.split_whitespace().next().unwrap_or_default();
                if name != "help" {
                    pending.push([path.clone(), vec![name.to_owned()]].concat());
                }
            }
        }
        helps.push((format!("stockd {}", path.join(" ")), text));
    }
    helps
}

#[test]
fn help_wraps_to_the_terminal_and_shows_no_empty_variables() {
    let helps = every_help(&[("COLUMNS", "100")]);
    assert!(helps.len() > 20, "too few commands found: {}", helps.len());
    for (command, text) in &helps {
        for line in text.lines() {
            assert!(
                line.chars().count() <= 100,
                "{command} --help has a line over 100 columns:\n{line}"
            );
        }
        assert!(
            !text.contains("=]"),
            "{command} --help shows an unset variable:\n{text}"
        );
    }
    // A narrower terminal wraps narrower; a variable that is set shows its value.
    let narrow = run_env(
        &[("COLUMNS", "60"), ("STOCKD_URL", "http://10.1.2.3:7070")],
        &["pool", "--help"],
    );
    let text = narrow.ok();
    assert!(
        text.lines().all(|line| line.chars().count() <= 60),
        "{}",
        narrow.describe()
    );
    assert!(
        text.replace(char::is_whitespace, "")
            .contains("[env:STOCKD_URL=http://10.1.2.3:7070]"),
        "{}",
        narrow.describe()
    );
    let serve = run_env(&[("COLUMNS", "100")], &["serve", "--help"]);
    assert!(
        serve.ok().contains("[env: STOCKD_BACKEND]"),
        "{}",
        serve.describe()
    );
    // --warmup takes a duration, and says so.
    let bench = run_env(&[("COLUMNS", "100")], &["bench", "run", "--help"]);
    let warmup = options_of(bench.ok())
        .into_iter()
        .find(|option| option.starts_with("--warmup"))
        .expect("bench run has --warmup");
    assert!(
        warmup.contains("How long to send requests") && warmup.contains("a duration"),
        "{warmup}"
    );
}

#[test]
fn a_mistyped_subcommand_gets_the_one_it_looks_like() {
    for (args, typed, meant) in [
        (&["hold", "gte", "o-1"][..], "gte", "get"),
        (&["pool", "lsit"][..], "lsit", "list"),
        (&["hold", "relase", "o-1"][..], "relase", "release"),
        (&["hodl", "get", "o-1"][..], "hodl", "hold"),
        (
            &["pool", "--url", "http://127.0.0.1:1", "rsetock"][..],
            "rsetock",
            "restock",
        ),
    ] {
        let mistyped = run_env(&[], args);
        assert_eq!(mistyped.code, Some(2), "{}", mistyped.describe());
        assert!(
            mistyped
                .stderr
                .contains(&format!("unrecognized subcommand '{typed}'"))
                && mistyped.stderr.contains("  tip: ")
                && mistyped.stderr.contains(&format!("'{meant}'")),
            "{}",
            mistyped.describe()
        );
    }
    // Nothing alike: no tip.
    let unlike = run_env(&[], &["hold", "frobnicate"]);
    assert_eq!(unlike.code, Some(2), "{}", unlike.describe());
    assert!(!unlike.stderr.contains("similar"), "{}", unlike.describe());
}

/// The head of the answer to `GET path` with these extra header lines.
fn answer_head(address: &str, path: &str, headers: &str) -> String {
    let mut stream = TcpStream::connect(address).expect("connect to the server");
    stream
        .set_read_timeout(Some(PROBE_TIMEOUT * 10))
        .expect("set a read timeout");
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n{headers}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read the answer");
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    answer
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_token_sent_to_a_server_without_tokens_is_warned_about_once() {
    const WARNING: &str = "has no tokens configured, so the token from";
    let server = Server::start();
    let address = server.url.trim_start_matches("http://").to_owned();
    // The server says so in a header, only when a token came.
    assert!(
        answer_head(&address, "/v1/pools", "Authorization: Bearer t-1\r\n")
            .contains("\r\nstockd-auth: none"),
        "no Stockd-Auth: none"
    );
    assert!(!answer_head(&address, "/v1/pools", "").contains("stockd-auth"));

    let put = server.stockd(&[
        "pool",
        "put",
        "p-1",
        "--total",
        "5",
        "--token",
        "some-token",
    ]);
    assert!(
        put.ok().starts_with("pool p-1 created"),
        "{}",
        put.describe()
    );
    assert_eq!(put.stderr.matches(WARNING).count(), 1, "{}", put.describe());
    assert!(
        put.stderr.contains(&format!(
            "warning: {} has no tokens configured, so the token from --token was not checked",
            server.url
        )),
        "{}",
        put.describe()
    );
    // Many requests (the feed's partitions, the newest event, pages): still one warning, naming
    // where the token came from.
    server
        .stockd(&["hold", "reserve", "o-1", "--item", "p-1=1"])
        .ok();
    let tail = server.stockd_env(
        &[("STOCKD_TOKEN", "some-token")],
        &["events", "tail", "--no-follow"],
    );
    assert_eq!(tail.ok().lines().count(), 2, "{}", tail.describe());
    assert_eq!(
        tail.stderr.matches(WARNING).count(),
        1,
        "{}",
        tail.describe()
    );
    assert!(
        tail.stderr.contains("the token from STOCKD_TOKEN"),
        "{}",
        tail.describe()
    );
    // No token, or an empty one: nothing to warn about.
    for run in [
        server.stockd(&["pool", "get", "p-1"]),
        server.stockd_env(&[("STOCKD_TOKEN", "")], &["pool", "get", "p-1"]),
    ] {
        run.ok();
        assert!(!run.stderr.contains("warning"), "{}", run.describe());
    }
    // A server with tokens checks them, and says nothing of the kind.
    let tokens = format!("admin:{ADMIN_SECRET}");
    let guarded = Server::start_with(&["--tokens", &tokens]);
    let checked = guarded.stockd(&["pool", "list", "--token", ADMIN_SECRET]);
    checked.ok();
    assert!(
        !checked.stderr.contains("warning"),
        "{}",
        checked.describe()
    );
    let guarded_address = guarded.url.trim_start_matches("http://").to_owned();
    let bearer = format!("Authorization: Bearer {ADMIN_SECRET}\r\n");
    assert!(!answer_head(&guarded_address, "/v1/pools", &bearer).contains("stockd-auth"));
}

#[test]
fn events_tail_shows_a_deadline_only_where_one_is_still_to_come() {
    let server = Server::start();
    server.stockd(&["pool", "put", "p-1", "--total", "5"]).ok();
    server
        .stockd(&["hold", "reserve", "o-1", "--item", "p-1=1", "--confirm"])
        .ok();
    server
        .stockd(&["hold", "reserve", "o-2", "--item", "p-1=1"])
        .ok();
    server.stockd(&["hold", "release", "o-2"]).ok();
    let tail = server.stockd(&["events", "tail", "--no-follow"]);
    let lines: Vec<&str> = tail.ok().lines().collect();
    let of = |kind: &str, hold: &str| {
        lines
            .iter()
            .find(|line| line.contains(&format!(" UTC {kind} hold {hold},")))
            .unwrap_or_else(|| panic!("no {kind} event of {hold}\n{}", tail.describe()))
            .to_string()
    };
    assert!(
        of("held", "o-1").contains(", expires 20"),
        "{}",
        tail.describe()
    );
    for (kind, hold) in [("confirmed", "o-1"), ("released", "o-2")] {
        let line = of(kind, hold);
        assert!(!line.contains("expires"), "{line}");
        assert!(line.ends_with("items p-1 x1"), "{line}");
    }
}

/// What the README's shell sessions need from this test: README lines it does not run, each
/// with the reason; each must match a line of the README, so that the list stays true.
const README_NOT_RUN: [(&str, &str); 7] = [
    (
        "cargo install ",
        "installs a binary: the test runs the one cargo built for it",
    ),
    (
        "cargo build ",
        "builds: the test runs the binary cargo built for it",
    ),
    ("stockd serve", "starts a server: the test started one"),
    ("scripts/test.sh", "the test command itself"),
    (
        "stockd sink postgres ",
        "needs PostgreSQL: tests/sink.rs runs the sink",
    ),
    (
        "stockd reconcile ",
        "needs PostgreSQL: tests/sink.rs runs reconcile",
    ),
    (
        "stockd redis accept ",
        "needs a Redis that lost data: tests/redis_datasets.rs",
    ),
];

/// The address the README's sessions talk to, the default of `stockd serve` and `--url`.
const README_ADDRESS: &str = "127.0.0.1:7070";

/// One command of a README session: its lines, and the output its `#>` lines promise.
#[derive(Debug)]
struct Step {
    command: String,
    promised: Vec<String>,
}

/// The commands of the README's ```sh blocks, in order, with what each promises. A command is
/// a line, or a `for ...; do` line through its `done`; `#>` lines after a command are what it
/// prints; other comments are prose.
fn readme_steps(readme: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut in_block = false;
    let mut open_loop: Option<String> = None;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_block = line == "```sh";
            continue;
        }
        if !in_block {
            continue;
        }
        let trimmed = line.trim();
        if let Some(promise) = trimmed.strip_prefix("#>") {
            let step = steps.last_mut().expect("a #> line follows a command");
            step.promised.push(promise.trim_start().to_owned());
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(body) = &mut open_loop {
            body.push('\n');
            body.push_str(line);
            if trimmed == "done" {
                steps.push(Step {
                    command: open_loop.take().unwrap_or_default(),
                    promised: Vec::new(),
                });
            }
            continue;
        }
        if trimmed.starts_with("for ") {
            open_loop = Some(line.to_owned());
            continue;
        }
        steps.push(Step {
            command: line.to_owned(),
            promised: Vec::new(),
        });
    }
    assert!(open_loop.is_none(), "a README loop never ends");
    steps
}

/// `text` with its times for people made alike: `2026-11-26 07:37:32 UTC` (with or without
/// `.mmm`) becomes `<time>`, and the `(in 59s)`, `(3s ago)` or `(now)` after one `(<when>)`.
fn without_times(text: &str) -> String {
    let bytes = text.as_bytes();
    let shape = b"dddd-dd-dd dd:dd:dd";
    let mut out = String::new();
    let mut index = 0;
    while index < text.len() {
        let is_time = bytes.len() >= index + shape.len()
            && shape
                .iter()
                .zip(&bytes[index..])
                .all(|(want, got)| match want {
                    b'd' => got.is_ascii_digit(),
                    other => other == got,
                });
        if !is_time {
            let next = text[index..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[index..index + next]);
            index += next;
            continue;
        }
        index += shape.len();
        if bytes.get(index) == Some(&b'.') {
            index += 4;
        }
        if text[index..].starts_with(" UTC") {
            index += 4;
        }
        out.push_str("<time>");
        let rest = &text[index..];
        if let (true, Some(end)) = (rest.starts_with(" ("), rest.find(')')) {
            let inside = &rest[2..end];
            if inside == "now" || inside.starts_with("in ") || inside.ends_with(" ago") {
                out.push_str(" (<when>)");
                index += end + 1;
            }
        }
    }
    out
}

/// Whether `line` fits `pattern`, where each `...` stands for any text.
fn line_fits(pattern: &str, line: &str) -> bool {
    let pieces: Vec<&str> = pattern.split("...").collect();
    let (first, rest) = pieces
        .split_first()
        .expect("split gives one piece at least");
    let Some(mut remaining) = line.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return remaining.is_empty();
    };
    for piece in middle {
        match remaining.find(piece) {
            Some(at) => remaining = &remaining[at + piece.len()..],
            None => return false,
        }
    }
    remaining.ends_with(last)
}

/// Whether `lines` fit `promised` line by line; a promised line that is only `...` stands for
/// any number of lines.
fn lines_fit(promised: &[String], lines: &[String]) -> bool {
    match promised.split_first() {
        None => lines.is_empty(),
        Some((any, rest)) if any == "..." => {
            (0..=lines.len()).any(|skip| lines_fit(rest, &lines[skip..]))
        }
        Some((pattern, rest)) => lines.split_first().is_some_and(|(line, more)| {
            line_fits(&without_times(pattern), &without_times(line)) && lines_fit(rest, more)
        }),
    }
}

/// The README's shell sessions, run as written against a live server, one command at a time
/// through `bash`, from the repository's root, with this build's `stockd` first on PATH: every
/// command must succeed (exit 0) and print what its `#>` lines promise (stdout, then stderr).
/// Two things differ from a reader's shell, both explicit: `127.0.0.1:7070`, the address the
/// sessions use, becomes the test server's; and the variables a session sets (`B=...`,
/// `export ...`) are set again before each later command, as one shell would keep them. The
/// lines of [`README_NOT_RUN`] are skipped (each must still be in the README).
#[test]
fn the_readmes_sessions_run_as_written() {
    let readme = include_str!("../../../README.md");
    let steps = readme_steps(readme);
    let server = Server::start();
    let address = server.url.trim_start_matches("http://").to_owned();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository's root");
    let bin = std::path::Path::new(STOCKD)
        .parent()
        .expect("the binary's directory")
        .to_owned();
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("a PATH");

    let mut skip_used = [false; README_NOT_RUN.len()];
    let mut assignments = String::new();
    let mut ran = 0;
    let mut promises_checked = 0;
    for step in &steps {
        let first_line = step.command.trim_start();
        if let Some(rule) = README_NOT_RUN
            .iter()
            .position(|(prefix, _)| first_line.starts_with(prefix))
        {
            skip_used[rule] = true;
            assert!(
                step.promised.is_empty(),
                "a skipped README line promises output: {}",
                step.command
            );
            continue;
        }
        let command = step.command.replace(README_ADDRESS, &address);
        let script = format!("set -eo pipefail\n{assignments}{command}\n");
        let output = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(&root)
            .env("PATH", &path)
            .env_remove("STOCKD_URL")
            .env_remove("STOCKD_TOKEN")
            .env_remove("SSL_CERT_FILE")
            .stdin(Stdio::null())
            .output()
            .expect("run bash");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let described = format!(
            "README: {}\nexit: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            step.command,
            output.status.code()
        );
        assert_eq!(output.status.code(), Some(0), "{described}");
        let lines: Vec<String> = stdout
            .lines()
            .chain(stderr.lines())
            .map(str::to_owned)
            .collect();
        if !step.promised.is_empty() {
            assert!(
                lines_fit(&step.promised, &lines),
                "the output is not what the README's #> lines promise:\n{}\n{described}",
                step.promised.join("\n")
            );
            promises_checked += 1;
        }
        let is_assignment = first_line
            .strip_prefix("export ")
            .unwrap_or(first_line)
            .split_once('=')
            .is_some_and(|(name, _)| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
            });
        if is_assignment {
            assignments.push_str(&command);
            assignments.push('\n');
        }
        ran += 1;
    }
    for ((prefix, why), used) in README_NOT_RUN.iter().zip(skip_used) {
        assert!(
            used,
            "no README line starts with {prefix:?} ({why}): update README_NOT_RUN"
        );
    }
    // The curl session and the command line, whole: a block the parser lost would pass.
    assert!(
        ran >= 20 && promises_checked >= 17,
        "ran {ran}, checked {promises_checked}"
    );
}

#[test]
fn readme_output_matching_holds_what_it_promises() {
    let lines = |text: &str| text.lines().map(str::to_owned).collect::<Vec<_>>();
    let promise = lines("{\"a\":1,...}\n...\n201");
    assert!(lines_fit(&promise, &lines("{\"a\":1,\"b\":2}\n201")));
    assert!(lines_fit(&promise, &lines("{\"a\":1,\"c\":3}\nx\ny\n201")));
    assert!(!lines_fit(&promise, &lines("{\"a\":2}\n201")));
    assert!(!lines_fit(&promise, &lines("{\"a\":1}\n200")));
    assert!(!lines_fit(&promise, &lines("{\"a\":1}\n201\nmore")));
    assert_eq!(
        without_times("hold o: held, expires 2026-11-26 07:37:32 UTC (in 59s), x"),
        "hold o: held, expires <time> (<when>), x"
    );
    assert_eq!(
        without_times("0:17 2026-11-26 07:36:33.161 UTC confirmed (2s ago)"),
        "0:17 <time> confirmed (2s ago)"
    );
    assert!(line_fits(
        &without_times("hold t: confirmed 2026-11-26 07:36:32 UTC (now), items p x1"),
        &without_times("hold t: confirmed 2025-01-02 03:04:05 UTC (1s ago), items p x1")
    ));
    let steps =
        readme_steps("```sh\nB=x\n# prose\nfor u in a b; do\n  echo $u\ndone\n#> a\n#> b\n```\n");
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_eq!(steps[1].command, "for u in a b; do\n  echo $u\ndone");
    assert_eq!(steps[1].promised, ["a", "b"]);
}
