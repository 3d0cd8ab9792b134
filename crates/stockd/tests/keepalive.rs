//! Early answers to requests with large bodies (a bad path id, an unknown route, a missing
//! token) must still be whole answers on a connection that stays usable: the server reads the
//! body before it answers, so a client that is still writing never sees a broken pipe.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use support::{Server, ServerConfig};

/// Sends one HTTP/1.1 request on `stream` and reads one answer: (status, body).
fn exchange(
    stream: &mut BufReader<TcpStream>,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, String) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let writer = stream.get_mut();
    writer.write_all(head.as_bytes()).expect("write head");
    writer
        .write_all(body)
        .expect("write body: the server must read it");
    let mut status_line = String::new();
    stream.read_line(&mut status_line).expect("status line");
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).expect("header line");
        if line == "\r\n" {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().expect("content-length");
        }
    }
    let mut answer = vec![0; length];
    stream.read_exact(&mut answer).expect("body");
    (status, String::from_utf8_lossy(&answer).into_owned())
}

/// Runs `steps` (method, path, body, expected status) on one connection to `port`.
async fn on_one_connection(port: u16, steps: Vec<(&'static str, &'static str, Vec<u8>, u16)>) {
    tokio::task::spawn_blocking(move || {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut stream = BufReader::new(stream);
        for (method, path, body, expected) in steps {
            let (status, answer) = exchange(&mut stream, method, path, &body);
            assert_eq!(status, expected, "{method} {path}: {answer}");
        }
    })
    .await
    .unwrap();
}

/// 600 KB: far more than a socket buffer, well under the 1 MiB limit.
fn big_body() -> Vec<u8> {
    format!("{{\"ttl_ms\": {}}}", "1".repeat(600_000)).into_bytes()
}

#[tokio::test]
async fn early_errors_read_the_body_and_keep_the_connection() {
    let server = Server::start().await;
    on_one_connection(
        server.port(),
        vec![
            // A bad hold id in the path is refused before any body extractor runs.
            ("POST", "/v1/holds/bad%20id/extend", big_body(), 422),
            ("POST", "/v1/no-such-route", big_body(), 404),
            ("DELETE", "/v1/holds", big_body(), 405),
            ("GET", "/healthz", Vec::new(), 200),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_refused_token_reads_the_body_too() {
    let server = Server::start_with(ServerConfig::default().with_auth()).await;
    on_one_connection(
        server.port(),
        vec![
            ("POST", "/v1/holds/h/extend", big_body(), 401),
            ("GET", "/healthz", Vec::new(), 200),
        ],
    )
    .await;
}
