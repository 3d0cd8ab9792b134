//! Tests of the client's HTTP mapping against a canned responder: a real TCP listener on a free
//! loopback port that records each request and answers with a fixed status and body. The server's
//! behaviour is tested elsewhere (against the real server); here only the client's side of the
//! wire is under test: paths, query, headers, bodies, status and error decoding.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;

use serde_json::json;

use super::*;

/// One request as the responder saw it.
#[derive(Debug)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

/// Serves one connection per canned `(status, body)` answer, in order, then stops.
fn responder(answers: Vec<(u16, &'static str)>) -> (String, mpsc::Receiver<Seen>) {
    responder_with_headers(
        answers
            .into_iter()
            .map(|(status, body)| (status, body, ""))
            .collect(),
    )
}

/// [`responder`] whose answers also carry header lines (`"name: value\r\n"` each, or "").
fn responder_with_headers(
    answers: Vec<(u16, &'static str, &'static str)>,
) -> (String, mpsc::Receiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let base_url = format!("http://{}", listener.local_addr().expect("local addr"));
    let (sender, receiver) = mpsc::channel();
    thread::spawn(move || {
        for (status, body, headers) in answers {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let seen = answer_one(stream, status, body, headers);
            if sender.send(seen).is_err() {
                return;
            }
        }
    });
    (base_url, receiver)
}

fn answer_one(stream: TcpStream, status: u16, body: &str, extra_headers: &str) -> Seen {
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut request_line = String::new();
    reader.read_line(&mut request_line).expect("request line");
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header line");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((key, value)) = line.split_once(':') {
            headers.push((key.trim().to_owned(), value.trim().to_owned()));
        }
    }
    let length = headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.parse::<usize>().ok())
        .unwrap_or(0);
    let mut request_body = vec![0; length];
    reader.read_exact(&mut request_body).expect("request body");
    let mut stream = stream;
    let content_type = if body.starts_with('{') {
        "application/json"
    } else {
        "text/plain"
    };
    let response = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
         {extra_headers}connection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(response.as_bytes())
        .expect("write response");
    Seen {
        method,
        target,
        headers,
        body: request_body,
    }
}

const POOL: &str = r#"{"pool":"sku-1","total":100,"available":100,"held":0,"sold":0,"per_user_limit":null,"starts_at_ms":null,"ends_at_ms":null,"low_stock_threshold":null,"partition":0}"#;
const HOLD: &str = r#"{"hold_id":"o-1","status":"held","user":null,"items":[{"pool":"sku-1","qty":2}],"created_at_ms":1000,"expires_at_ms":601000,"finished_at_ms":null,"partition":2}"#;

#[tokio::test]
async fn put_pool_sends_the_contract_request_and_reads_created() {
    let (base_url, seen) = responder(vec![(201, POOL), (200, POOL)]);
    let client = Client::new(&base_url, Some("secret".into()));

    let (pool, created) = client
        .put_pool("sku-1", &PoolSpecBody::with_total(100), true)
        .await
        .expect("put_pool");
    assert!(created);
    assert_eq!(pool.pool.as_str(), "sku-1");
    assert_eq!(pool.available, 100);
    assert_eq!(pool.partition, 0);
    let request = seen.recv().expect("request");
    assert_eq!(request.method, "PUT");
    assert_eq!(request.target, "/v1/pools/sku-1?if_absent=true");
    assert_eq!(request.header("authorization"), Some("Bearer secret"));
    assert_eq!(request.json(), json!({"total": 100}));

    let (_, created) = client
        .put_pool("sku-1", &PoolSpecBody::with_total(100), false)
        .await
        .expect("put_pool");
    assert!(!created, "200 means updated, not created");
    let request = seen.recv().expect("request");
    assert_eq!(request.target, "/v1/pools/sku-1");
}

#[tokio::test]
async fn reserve_replay_is_not_created_and_sends_no_token_when_none() {
    let (base_url, seen) = responder(vec![(200, HOLD)]);
    let client = Client::new(&format!("{base_url}/"), None);
    let body = ReserveBody {
        hold_id: "o-1".into(),
        items: vec![HoldItem::new("sku-1", 2)],
        ..ReserveBody::default()
    };
    let (hold, created) = client.reserve(&body).await.expect("reserve");
    assert!(!created);
    assert_eq!(hold.status, HoldStatus::Held);
    assert_eq!(hold.items[0].qty, 2);
    assert_eq!(hold.partition, 2, "the partition is read, not assumed");
    let request = seen.recv().expect("request");
    assert_eq!(request.method, "POST");
    assert_eq!(
        request.target, "/v1/holds",
        "trailing slash of the base is dropped"
    );
    assert_eq!(request.header("authorization"), None);
    assert_eq!(
        request.json(),
        json!({"hold_id": "o-1", "items": [{"pool": "sku-1", "qty": 2}]})
    );
}

#[tokio::test]
async fn contract_error_body_becomes_api_error_with_details() {
    let (base_url, _seen) = responder(vec![(
        409,
        r#"{"error":"insufficient_stock","message":"pool sku-1 has 1 available, 2 requested","pool":"sku-1","available":1,"requested":2}"#,
    )]);
    let client = Client::new(&base_url, None);
    let error = client.confirm("o-1").await.expect_err("409");
    assert_eq!(error.status(), Some(409));
    assert_eq!(error.code(), Some("insufficient_stock"));
    assert_eq!(error.detail("available"), Some(&json!(1)));
    match error {
        ClientError::Api { message, .. } => {
            assert_eq!(message, "pool sku-1 has 1 available, 2 requested")
        }
        other => panic!("expected Api, got {other:?}"),
    }
}

#[tokio::test]
async fn non_contract_error_body_is_still_an_api_error() {
    let (base_url, _seen) = responder(vec![(502, "Bad Gateway from a proxy")]);
    let client = Client::new(&base_url, None);
    match client.get_hold("o-1").await {
        Err(ClientError::Api {
            status,
            code,
            message,
            body,
            raw_body,
        }) => {
            assert_eq!(status, 502);
            assert_eq!(code, "http_502");
            assert_eq!(message, "Bad Gateway from a proxy");
            assert_eq!(body, Value::Null);
            assert_eq!(raw_body, b"Bad Gateway from a proxy");
        }
        other => panic!("expected Api, got {other:?}"),
    }
}

#[tokio::test]
async fn undecodable_success_is_a_decode_error() {
    let (base_url, _seen) = responder(vec![(200, r#"{"pool":"sku-1"}"#)]);
    let client = Client::new(&base_url, None);
    let error = client.get_pool("sku-1").await.expect_err("missing fields");
    assert!(matches!(error, ClientError::Decode(_)), "{error:?}");
}

#[tokio::test]
async fn unreachable_server_is_a_transport_error() {
    // A port that was free a moment ago: connecting is refused at once.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("free port")
        .port();
    let client = Client::new(&format!("http://127.0.0.1:{port}"), None);
    let error = client.healthz().await.expect_err("nothing listens");
    assert!(matches!(error, ClientError::Transport(_)), "{error:?}");
}

#[tokio::test]
async fn malformed_base_url_is_a_transport_error() {
    let client = Client::new("not a url", None);
    let error = client.healthz().await.expect_err("bad url");
    assert!(matches!(error, ClientError::Transport(_)), "{error:?}");
}

#[tokio::test]
async fn a_restock_is_applied_unless_the_server_says_it_was_replayed() {
    let (base_url, seen) = responder_with_headers(vec![
        (200, POOL, ""),
        (200, POOL, "Stockd-Replayed: true\r\n"),
        (200, POOL, "Stockd-Replayed: true\r\n"),
    ]);
    let client = Client::new(&base_url, None);
    let (pool, applied) = client
        .restock("sku-1", 4, Some("po-1"))
        .await
        .expect("restock");
    assert!(applied);
    assert_eq!(pool.total, 100);
    let request = seen.recv().expect("request");
    assert_eq!(request.target, "/v1/pools/sku-1/restock");
    assert_eq!(request.json(), json!({"delta": 4, "request_id": "po-1"}));
    let (pool, applied) = client
        .restock("sku-1", 4, Some("po-1"))
        .await
        .expect("restock");
    assert!(!applied, "the server said it was a retry");
    assert_eq!(pool.total, 100);
    seen.recv().expect("request");
    // The answer as received carries it too (what the command line reads).
    let answer = client
        .call(&Call::restock("sku-1", 4, Some("po-1")))
        .await
        .expect("200");
    assert!(answer.replayed);
    assert_eq!(answer.body, POOL.as_bytes());
}

#[tokio::test]
async fn identifiers_cannot_change_the_route() {
    let (base_url, seen) = responder(vec![(404, r#"{"error":"pool_not_found","message":"x"}"#)]);
    let client = Client::new(&base_url, None);
    let _ = client.restock("a/b c?d", -3, None).await;
    let request = seen.recv().expect("request");
    assert_eq!(request.target, "/v1/pools/a%2Fb%20c%3Fd/restock");
    assert_eq!(request.json(), json!({"delta": -3}));
}

#[tokio::test]
async fn queries_lists_deletes_and_locks_map_to_the_contract() {
    let (base_url, seen) = responder(vec![
        (200, r#"{"pools":[],"next":null}"#),
        (200, r#"{"holds":[],"next":"o-7"}"#),
        (204, ""),
        (200, r#"{"events":[],"next_after":7}"#),
        (200, r#"{"partitions":3}"#),
        (200, r#"{"events":[],"next_after":0}"#),
        (
            410,
            r#"{"error":"events_expired","message":"m","after":0,"oldest_seq":5}"#,
        ),
        (200, r#"{"token":3,"expires_at_ms":99}"#),
        (200, r#"{"released":true}"#),
        (
            200,
            r#"{"results":[{"status":404,"body":{"error":"hold_not_found","message":"m"}}]}"#,
        ),
    ]);
    let client = Client::new(&base_url, None);

    let page = client
        .list_pools(Some("sku-"), Some("sku-9"), Some(50))
        .await
        .expect("list");
    assert!(page.pools.is_empty() && page.next.is_none());
    let request = seen.recv().expect("request");
    assert_eq!(request.method, "GET");
    assert_eq!(request.target, "/v1/pools?prefix=sku-&after=sku-9&limit=50");

    let query = HoldQuery {
        pool: Some("sku-1".into()),
        user: Some("u1".into()),
        status: Some(HoldStatus::Confirmed),
        after: Some("o-1".into()),
        limit: Some(20),
    };
    let page = client.list_holds(&query).await.expect("list holds");
    assert!(page.holds.is_empty());
    assert_eq!(page.next.as_deref(), Some("o-7"));
    let request = seen.recv().expect("request");
    assert_eq!(request.method, "GET");
    assert_eq!(
        request.target,
        "/v1/holds?pool=sku-1&user=u1&status=confirmed&after=o-1&limit=20"
    );

    client.delete_pool("sku-1").await.expect("delete");
    let request = seen.recv().expect("request");
    assert_eq!(
        (request.method.as_str(), request.target.as_str()),
        ("DELETE", "/v1/pools/sku-1")
    );

    let events = client
        .events(None, 7, Some(10), Some(0))
        .await
        .expect("events");
    assert_eq!(events.next_after, 7);
    let request = seen.recv().expect("request");
    assert_eq!(request.target, "/v1/events?after=7&limit=10&wait_ms=0");

    assert_eq!(client.partitions().await.expect("partitions"), 3);
    let request = seen.recv().expect("request");
    assert_eq!(request.target, "/v1/events/partitions");
    client
        .events(Some(2), 0, None, None)
        .await
        .expect("events of one partition");
    let request = seen.recv().expect("request");
    assert_eq!(request.target, "/v1/events?partition=2&after=0");
    let expired = client
        .events(Some(0), 0, None, None)
        .await
        .expect_err("410");
    assert_eq!(
        (expired.status(), expired.code()),
        (Some(410), Some("events_expired"))
    );
    assert_eq!(expired.detail("oldest_seq"), Some(&json!(5)));
    seen.recv().expect("request");

    let lease = client
        .lock_acquire("job:nightly", "w-1", 1_000, None)
        .await
        .expect("acquire");
    assert_eq!(
        lease,
        LockLease {
            token: 3,
            expires_at_ms: 99
        }
    );
    let request = seen.recv().expect("request");
    assert_eq!(request.target, "/v1/locks/job:nightly/acquire");
    assert_eq!(request.json(), json!({"owner": "w-1", "ttl_ms": 1_000}));

    client
        .lock_release("job:nightly", "w-1", 3)
        .await
        .expect("release");
    let request = seen.recv().expect("request");
    assert_eq!(request.json(), json!({"owner": "w-1", "token": 3}));

    let results = client
        .batch(vec![json!({"op": "confirm", "hold_id": "o-9"})])
        .await
        .expect("batch");
    assert_eq!(results[0].status, 404);
    assert_eq!(results[0].body["error"], "hold_not_found");
    let request = seen.recv().expect("request");
    assert_eq!(
        request.json(),
        json!({"ops": [{"op": "confirm", "hold_id": "o-9"}]})
    );
}

#[tokio::test]
async fn call_keeps_the_answer_and_the_error_bytes_as_received() {
    // Odd spacing and key order: a re-encoding would change both.
    let pool_as_sent = r#"{ "total":100, "pool":"sku-1","available":100,"held":0,"sold":0,"per_user_limit":null,"starts_at_ms":null,"ends_at_ms":null,"low_stock_threshold":null,"partition":0}"#;
    let error_as_sent = r#"{"message":"no such pool",  "error":"pool_not_found","pool":"x"}"#;
    let (base_url, seen) = responder(vec![(200, pool_as_sent), (404, error_as_sent)]);
    let client = Client::new(&base_url, None);

    let answer = client.call(&Call::get_pool("sku-1")).await.expect("200");
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, pool_as_sent.as_bytes());
    assert!(!answer.replayed, "no Stockd-Replayed header");
    let pool: PoolView = answer.decode().expect("a pool");
    assert_eq!(pool.total, 100);
    seen.recv().expect("request");

    match client.call(&Call::get_pool("x")).await {
        Err(ClientError::Api {
            status,
            code,
            raw_body,
            ..
        }) => {
            assert_eq!((status, code.as_str()), (404, "pool_not_found"));
            assert_eq!(raw_body, error_as_sent.as_bytes());
        }
        other => panic!("expected Api, got {other:?}"),
    }
}

#[tokio::test]
async fn batch_body_goes_out_byte_for_byte() {
    // A repeated field: the server must see it (and refuse it), so nothing may re-encode it.
    let file = br#"{"ops": [{"op": "confirm", "hold_id": "a", "hold_id": "b"}]}"#.to_vec();
    let (base_url, seen) = responder(vec![(200, r#"{"results":[]}"#)]);
    let client = Client::new(&base_url, None);
    client
        .call(&Call::batch_body(file.clone()))
        .await
        .expect("200");
    let request = seen.recv().expect("request");
    assert_eq!(
        (request.method.as_str(), request.target.as_str()),
        ("POST", "/v1/batch")
    );
    assert_eq!(request.body, file);
    assert_eq!(request.header("content-type"), Some("application/json"));
}

#[test]
fn calls_that_may_wait_extend_the_timeout_by_their_wait() {
    let reserve = ReserveBody {
        hold_id: "o-1".into(),
        items: vec![HoldItem::new("a", 1)],
        wait_ms: Some(700),
        ..ReserveBody::default()
    };
    assert_eq!(Call::reserve(&reserve).wait_ms, 700);
    assert_eq!(Call::events(Some(1), 5, None, Some(30_000)).wait_ms, 30_000);
    assert_eq!(Call::lock_acquire("l", "o", 100, Some(250)).wait_ms, 250);
    let ops = br#"{"ops":[{"op":"reserve","wait_ms":100},{"op":"reserve","wait_ms":200}]}"#;
    assert_eq!(Call::batch_body(ops.to_vec()).wait_ms, 300);
    assert_eq!(Call::batch_body(b"not json".to_vec()).wait_ms, 0);
    assert_eq!(Call::get_pool("p").wait_ms, 0);
}

#[test]
fn debug_never_shows_the_token() {
    let client = Client::new("http://127.0.0.1:1", Some("secret".into()));
    let text = format!("{client:?}");
    assert!(!text.contains("secret"), "{text}");
}

#[test]
fn long_error_text_is_cut_at_a_char_boundary() {
    let text = "é".repeat(ERROR_TEXT_LEN_MAX);
    let cut = error_text(text.as_bytes());
    assert!(cut.ends_with("..."));
    assert!(cut.len() <= ERROR_TEXT_LEN_MAX + 3);
}
