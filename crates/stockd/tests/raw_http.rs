//! Errors the HTTP layer answers before any route sees the request, over a raw socket: each has
//! the contract's JSON body `{"error", "message"}` with its content type, and the connection is
//! closed after it. A pipelined good request before a bad one is answered as usual.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `request` and reads until the server closes the connection.
async fn exchange(port: u16, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection after its error answer")
        .unwrap();
    String::from_utf8(answer).unwrap()
}

/// The status, the head and the JSON body of the last answer in `answers`.
fn last_answer(answers: &str) -> (u16, String, Value) {
    let start = answers.rfind("HTTP/1.1 ").expect("an answer");
    let (head, body) = answers[start..].split_once("\r\n\r\n").unwrap();
    let status = head[9..12].parse().unwrap();
    let body = serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body:?}"));
    (status, head.to_ascii_lowercase(), body)
}

fn assert_json_error(answers: &str, status: u16, code: &str) -> Value {
    let (got, head, body) = last_answer(answers);
    assert_eq!(got, status, "{answers}");
    assert!(
        head.contains("\r\ncontent-type: application/json"),
        "{head}"
    );
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert_eq!(body["error"], code, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    body
}

#[tokio::test]
async fn the_http_layers_own_errors_have_json_bodies() {
    let server = Server::start_with(ServerConfig::default()).await;
    let port = server.port();

    let big_header = [
        &b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "[..],
        &vec![b'a'; 20_000],
        b"\r\n\r\n",
    ]
    .concat();
    let body = assert_json_error(&exchange(port, &big_header).await, 431, "headers_too_large");
    assert_eq!(body["limit_bytes"], 16 * 1024);

    let bad_length = b"POST /v1/holds HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n";
    assert_json_error(&exchange(port, bad_length).await, 400, "bad_request");

    assert_json_error(
        &exchange(port, b"GARBAGE\r\n\r\n").await,
        400,
        "bad_request",
    );

    let bad_header = b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n";
    assert_json_error(&exchange(port, bad_header).await, 400, "bad_request");

    // A good request, then a bad one on the same connection: the first is answered as usual.
    let pipelined = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\
                      GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n";
    let answers = exchange(port, pipelined).await;
    assert!(
        answers.starts_with("HTTP/1.1 200 OK\r\n") && answers.contains("{\"status\":\"ok\"}"),
        "{answers}"
    );
    assert_json_error(&answers, 400, "bad_request");
}

/// hyper's own path limit (65,534 bytes) is only reached when the head limit is above it.
#[tokio::test]
async fn a_path_past_the_http_layers_limit_is_414_with_a_json_body() {
    let server = Server::start_with(
        ServerConfig::default()
            .arg("--max-header-bytes")
            .arg("262144"),
    )
    .await;
    let long = [
        &b"GET /"[..],
        &vec![b'a'; 70_000],
        b" HTTP/1.1\r\nHost: x\r\n\r\n",
    ]
    .concat();
    assert_json_error(&exchange(server.port(), &long).await, 414, "uri_too_long");
}
