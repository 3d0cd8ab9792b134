//! Auth and operations: tokens and roles on a server started with an admin and a client token,
//! and the refusal to listen beyond loopback without auth.
//!
//! The cases are data (see `case.rs`), run by `runner.rs`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::case::*;
use crate::support::{free_port, Server, ServerConfig, ADMIN_TOKEN, CLIENT_TOKEN};

const CLIENT: Auth = Auth::Bearer(CLIENT_TOKEN);
const ADMIN: Auth = Auth::Bearer(ADMIN_TOKEN);

pub(crate) fn auth_cases() -> Vec<Case> {
    let a = "{p}-a";
    let unauthorized = || err("unauthorized");
    let forbidden = || err("forbidden");
    let api_routes: [(&'static str, &str, Option<Value>); 12] = [
        ("GET", "/v1/pools/{p}-a", None),
        ("GET", "/v1/holds?pool={p}-a", None),
        ("GET", "/v1/pools", None),
        ("PUT", "/v1/pools/{p}-a", Some(json!({"total": 1}))),
        ("POST", "/v1/pools/{p}-a/restock", Some(json!({"delta": 1}))),
        ("DELETE", "/v1/pools/{p}-a", None),
        (
            "POST",
            "/v1/holds",
            Some(hold_req("{p}-h", &[(a, 1)], json!({}))),
        ),
        ("GET", "/v1/holds/{p}-h", None),
        (
            "POST",
            "/v1/batch",
            Some(json!({"ops": [{"op": "confirm", "hold_id": "{p}-h"}]})),
        ),
        ("GET", "/v1/events?after=0", None),
        ("GET", "/v1/events/partitions", None),
        (
            "POST",
            "/v1/locks/{p}-l/acquire",
            Some(json!({"owner": "o1", "ttl_ms": 1000})),
        ),
    ];
    let mut no_token =
        case("auth: no token is 401 unauthorized on every API route, and changes nothing")
            .put_pool(a, json!({"total": 5}), 201, json!({}));
    let mut bad_token = case(
        "auth: a bad token or scheme is 401 unauthorized, and changes nothing",
    )
    .put_pool(a, json!({"total": 5}), 201, json!({}));
    // A bad token, a scheme other than Bearer, and a token without its scheme.
    let bad_auths = [
        Auth::Bearer("not-a-token"),
        Auth::Header("Basic YWRtaW46c2VjcmV0"),
        Auth::Header(ADMIN_TOKEN),
    ];
    for (method, path, body) in &api_routes {
        no_token = no_token
            .req(method, path, body.clone(), 401, unauthorized())
            .by(Auth::NoToken);
        for auth in bad_auths {
            bad_token = bad_token
                .req(method, path, body.clone(), 401, unauthorized())
                .by(auth);
        }
    }
    // Nothing changed: the pool as made, no hold, the lock free.
    let nothing_changed = |case: Case| {
        case.get_pool(a, counts(5, 5, 0, 0))
            .get_hold("{p}-h", 404, err("hold_not_found"))
            .lock(
                "{p}-l",
                "acquire",
                json!({"owner": "o2", "ttl_ms": 1000}),
                200,
                json!({"token": "$int"}),
            )
    };
    no_token = nothing_changed(no_token);
    bad_token = nothing_changed(bad_token);

    vec![
        no_token,
        bad_token,
        case("auth: a client token cannot write or delete pools (403 forbidden); nothing changes")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .req("PUT", "/v1/pools/{p}-a", Some(json!({"total": 10})), 403, forbidden()).by(CLIENT)
            .req("PUT", "/v1/pools/{p}-b", Some(json!({"total": 10})), 403, forbidden()).by(CLIENT)
            .req("PUT", "/v1/pools/{p}-b?if_absent=true", Some(json!({"total": 10})), 403, forbidden()).by(CLIENT)
            .req("POST", "/v1/pools/{p}-a/restock", Some(json!({"delta": 1})), 403, forbidden()).by(CLIENT)
            .req("POST", "/v1/pools/{p}-a/restock", Some(json!({"delta": -1})), 403, forbidden()).by(CLIENT)
            .req("DELETE", "/v1/pools/{p}-a", None, 403, forbidden()).by(CLIENT)
            .req("GET", "/v1/pools/{p}-a", None, 200, counts(5, 5, 0, 0)).by(CLIENT)
            .get("/v1/pools/{p}-b", 404, err("pool_not_found"))
            .events(json!([ev("pool_upserted", json!({"pool": a}))])),
        case("auth: a client token can reserve, confirm, release, extend, refund and read holds")
            .put_pool(a, json!({"total": 5}), 201, json!({"partition": "$partition:pa"}))
            .req("POST", "/v1/holds", Some(hold_req("{p}-h1", &[(a, 1)], json!({}))), 201, status("held")).by(CLIENT)
            .req("POST", "/v1/holds/{p}-h1/extend", Some(json!({"ttl_ms": 60_000})), 200, status("held")).by(CLIENT)
            .req("POST", "/v1/holds/{p}-h1/confirm", None, 200, status("confirmed")).by(CLIENT)
            .req("POST", "/v1/holds/{p}-h1/refund", None, 200, status("refunded")).by(CLIENT)
            .req("POST", "/v1/holds", Some(hold_req("{p}-h2", &[(a, 2)], json!({}))), 201, status("held")).by(CLIENT)
            .req("POST", "/v1/holds/{p}-h2/release", None, 200, status("released")).by(CLIENT)
            .req("GET", "/v1/holds/{p}-h2", None, 200, status("released")).by(CLIENT)
            .req("GET", "/v1/holds?pool={p}-a", None, 200, json!({"holds": [status("refunded"), status("released")], "next": null})).by(CLIENT)
            .req("GET", "/v1/pools/{p}-a", None, 200, counts(5, 5, 0, 0)).by(CLIENT)
            .req("GET", "/v1/pools?prefix={p}", None, 200, json!({"pools": [{"pool": a}], "next": null})).by(CLIENT)
            .req("POST", "/v1/batch", Some(json!({"ops": [{"op": "reserve", "hold_id": "{p}-h3", "items": [{"pool": a, "qty": 1}]}]})), 200, json!({"results": [{"status": 201, "body": status("held")}]})).by(CLIENT)
            .req("GET", "/v1/events?partition={$pa}&after=0&limit=1", None, 200, json!({"events": {"$len": 1}, "next_after": "$int"})).by(CLIENT)
            .req("GET", "/v1/events?partition={P-1}&after=0&limit=1", None, 200, json!({"events": "$any", "next_after": "$int"})).by(CLIENT)
            .req("GET", "/v1/events/partitions", None, 200, json!({"partitions": "{P}"})).by(CLIENT),
        case("auth: a client token can use locks")
            .req("POST", "/v1/locks/{p}-l/acquire", Some(json!({"owner": "o1", "ttl_ms": 5000})), 200, json!({"token": "$save:t1"})).by(CLIENT)
            .req("POST", "/v1/locks/{p}-l/renew", Some(json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 5000})), 200, json!({"token": "$same:t1"})).by(CLIENT)
            .req("POST", "/v1/locks/{p}-l/release", Some(json!({"owner": "o1", "token": "{$t1}"})), 200, json!({"released": true})).by(CLIENT),
        case("auth: an admin token can do everything")
            .req("PUT", "/v1/pools/{p}-a", Some(json!({"total": 5})), 201, json!({"total": 5, "available": 5, "held": 0, "sold": 0, "partition": "$partition:pa"})).by(ADMIN)
            .req("POST", "/v1/pools/{p}-a/restock", Some(json!({"delta": 2})), 200, counts(7, 7, 0, 0)).by(ADMIN)
            .req("POST", "/v1/holds", Some(hold_req("{p}-h", &[(a, 1)], json!({"confirm": true}))), 201, status("confirmed")).by(ADMIN)
            .req("POST", "/v1/holds/{p}-h/refund", None, 200, status("refunded")).by(ADMIN)
            .req("GET", "/v1/events?partition={$pa}&after=0&limit=1", None, 200, json!({"events": {"$len": 1}})).by(ADMIN)
            .req("GET", "/v1/events/partitions", None, 200, json!({"partitions": "{P}"})).by(ADMIN)
            .req("POST", "/v1/locks/{p}-l/acquire", Some(json!({"owner": "o1", "ttl_ms": 5000})), 200, json!({"token": "$int"})).by(ADMIN)
            .req("DELETE", "/v1/pools/{p}-a", None, 204, Value::Null).by(ADMIN)
            .req("GET", "/v1/pools/{p}-a", None, 404, err("pool_not_found")).by(ADMIN),
        case("operations: healthz, readyz, metrics and openapi.json need no token")
            .req("GET", "/healthz", None, 200, json!("$any")).by(Auth::NoToken)
            .req("GET", "/readyz", None, 200, json!("$any")).by(Auth::NoToken)
            .req("GET", "/metrics", None, 200, json!("$any")).by(Auth::NoToken)
            .req("GET", "/openapi.json", None, 200, json!("$any")).by(Auth::NoToken),
        case("operations: /metrics is Prometheus text with a latency histogram")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({})), 201, json!({}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], json!({})), 409, json!({}))
            .get_pool(a, json!({}))
            .req("GET", "/metrics", None, 200, json!("$contains:_bucket{")).by(Auth::NoToken)
            .req("GET", "/metrics", None, 200, json!("$contains:# TYPE")).by(Auth::NoToken)
            .req("GET", "/metrics", None, 200, json!("$contains:le=\"+Inf\"")).by(Auth::NoToken),
        case("operations: /openapi.json is an OpenAPI 3 document of this API")
            .req("GET", "/openapi.json", None, 200, json!({
                "openapi": "$prefix:3",
                "info": "$any",
                "paths": {"/v1/holds": "$any", "/v1/batch": "$any", "/v1/events": "$any", "/v1/events/partitions": "$any"},
            }))
            .by(Auth::NoToken),
    ]
}

/// With no tokens configured the server refuses a non-loopback address unless told
/// `--insecure-no-auth`; with tokens, or with that flag, it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_auth_refuses_a_non_loopback_address() {
    let data = tempfile::tempdir().expect("tempdir");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_stockd"))
        .arg("serve")
        .arg("--listen")
        .arg(format!("0.0.0.0:{}", free_port()))
        .arg("--data-dir")
        .arg(data.path())
        .env_remove("STOCKD_TOKENS")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn stockd");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("stockd kept serving on 0.0.0.0 without tokens and without --insecure-no-auth");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        !status.success(),
        "refusing to serve must exit non-zero, got {status}"
    );

    let mut insecure = ServerConfig::default().arg("--insecure-no-auth");
    insecure.listen_host = "0.0.0.0".to_string();
    let server = Server::start_with(insecure).await;
    let (status, _) = server.api().call("GET", "/v1/pools", None).await;
    assert_eq!(status, 200, "--insecure-no-auth serves without tokens");
    drop(server);

    let mut with_tokens = ServerConfig::default().with_auth();
    with_tokens.listen_host = "0.0.0.0".to_string();
    let server = Server::start_with(with_tokens).await;
    let (status, body) = server.api().call_as(None, "GET", "/v1/pools", None).await;
    assert_eq!(
        (status, &body["error"]),
        (401, &json!("unauthorized")),
        "{body}"
    );
}
