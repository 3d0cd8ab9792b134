//! The HTTP contract, end to end through the router over the real core state: statuses, bodies,
//! classification of bad input, limits, auth, batch, events, OpenAPI and metrics.

mod support;

use axum::http::{header, Method, StatusCode};
use serde_json::{json, Value};
use stockd_core::{BackendStats, HistogramStats};
use stockd_server::ServerConfig;
use support::*;

async fn make_pool(router: &stockd_server::Api, pool: &str, body: Value) {
    let answer = put(router, &format!("/v1/pools/{pool}"), body).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text());
}

async fn reserve(router: &stockd_server::Api, body: Value) -> Answer {
    post(router, "/v1/holds", body).await
}

fn hold(hold_id: &str, pool: &str, qty: u64) -> Value {
    json!({"hold_id": hold_id, "items": [{"pool": pool, "qty": qty}]})
}

#[tokio::test]
async fn pool_lifecycle_statuses_and_bodies() {
    let (_, router) = open_server();
    let created = put(&router, "/v1/pools/sku-1", json!({"total": 10})).await;
    assert_eq!(created.status, StatusCode::CREATED);
    assert_eq!(created.content_type(), "application/json");
    assert_eq!(
        created.json(),
        json!({"pool": "sku-1", "total": 10, "available": 10, "held": 0, "sold": 0,
               "per_user_limit": null, "starts_at_ms": null, "ends_at_ms": null,
               "low_stock_threshold": null, "partition": 0, "segments": 1})
    );

    let replaced = put(
        &router,
        "/v1/pools/sku-1",
        json!({"total": 12, "per_user_limit": 2}),
    )
    .await;
    assert_eq!(replaced.status, StatusCode::OK);
    assert_eq!(replaced.json()["available"], 12);
    assert_eq!(replaced.json()["per_user_limit"], 2);

    let untouched = put(
        &router,
        "/v1/pools/sku-1?if_absent=true",
        json!({"total": 99}),
    )
    .await;
    assert_eq!(untouched.status, StatusCode::OK);
    assert_eq!(untouched.json()["total"], 12);
    let absent = put(
        &router,
        "/v1/pools/sku-2?if_absent=true",
        json!({"total": 1}),
    )
    .await;
    assert_eq!(absent.status, StatusCode::CREATED);

    let restocked = post(&router, "/v1/pools/sku-1/restock", json!({"delta": -2})).await;
    assert_eq!(restocked.status, StatusCode::OK);
    assert_eq!(restocked.json()["total"], 10);

    assert_eq!(get(&router, "/v1/pools/sku-1").await.json()["total"], 10);
    let list = get(&router, "/v1/pools?prefix=sku&limit=1").await;
    assert_eq!(list.status, StatusCode::OK);
    assert_eq!(list.json()["pools"].as_array().unwrap().len(), 1);
    assert_eq!(list.json()["next"], "sku-1");
    let rest = get(&router, "/v1/pools?after=sku-1").await;
    assert_eq!(rest.json()["pools"][0]["pool"], "sku-2");
    assert_eq!(rest.json()["next"], Value::Null);

    let deleted = delete(&router, "/v1/pools/sku-1").await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert!(deleted.bytes.is_empty());
    let gone = get(&router, "/v1/pools/sku-1").await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(
        gone.json(),
        json!({"error": "pool_not_found", "pool": "sku-1",
               "message": "pool sku-1 does not exist"})
    );
}

#[tokio::test]
async fn hold_lifecycle_and_defaults() {
    let (backend, router) = open_server();
    make_pool(&router, "p", json!({"total": 5})).await;
    let now = backend.now_ms();
    let created = reserve(&router, hold("o-1", "p", 2)).await;
    assert_eq!(created.status, StatusCode::CREATED);
    assert_eq!(
        created.json(),
        json!({"hold_id": "o-1", "status": "held", "user": null,
               "items": [{"pool": "p", "qty": 2}], "created_at_ms": now,
               "expires_at_ms": now + 600_000, "finished_at_ms": null, "partition": 0})
    );
    let replay = reserve(&router, hold("o-1", "p", 2)).await;
    assert_eq!(replay.status, StatusCode::OK);

    let extended = post(&router, "/v1/holds/o-1/extend", json!({"ttl_ms": 5_000})).await;
    assert_eq!(extended.status, StatusCode::OK);
    assert_eq!(extended.json()["expires_at_ms"], now + 5_000);

    let confirmed = send(&router, Method::POST, "/v1/holds/o-1/confirm", None, "").await;
    assert_eq!(confirmed.status, StatusCode::OK);
    assert_eq!(confirmed.json()["status"], "confirmed");
    let again = send(&router, Method::POST, "/v1/holds/o-1/confirm", None, "{}").await;
    assert_eq!(again.status, StatusCode::OK);

    let refunded = send(&router, Method::POST, "/v1/holds/o-1/refund", None, " {} ").await;
    assert_eq!(refunded.status, StatusCode::OK);
    assert_eq!(refunded.json()["status"], "refunded");
    assert_eq!(
        get(&router, "/v1/holds/o-1").await.json()["status"],
        "refunded"
    );
    assert_eq!(get(&router, "/v1/pools/p").await.json()["available"], 5);

    let direct = reserve(
        &router,
        json!({"hold_id": "o-2", "user": "u1", "items": [{"pool": "p", "qty": 1}],
               "confirm": true}),
    )
    .await;
    assert_eq!(direct.status, StatusCode::CREATED);
    assert_eq!(direct.json()["status"], "confirmed");
    assert_eq!(direct.json()["user"], "u1");
}

#[tokio::test]
async fn every_core_error_code_gets_its_status() {
    let (backend, router) = open_server();
    let now = backend.now_ms();
    make_pool(&router, "stock", json!({"total": 3})).await;
    make_pool(
        &router,
        "limited",
        json!({"total": 100, "per_user_limit": 1}),
    )
    .await;
    make_pool(
        &router,
        "later",
        json!({"total": 5, "starts_at_ms": now + 60_000}),
    )
    .await;
    make_pool(&router, "over", json!({"total": 5, "ends_at_ms": now - 1})).await;
    make_pool(&router, "doomed", json!({"total": 5})).await;
    let mut expectations: Vec<(&str, Answer, u16)> = Vec::new();

    expectations.push((
        "invalid_request",
        reserve(
            &router,
            json!({"hold_id": "h", "items": [{"pool": "stock", "qty": 1}],
                                "ttl_ms": 5}),
        )
        .await,
        422,
    ));
    expectations.push((
        "pool_not_found",
        reserve(&router, hold("h", "nope", 1)).await,
        404,
    ));
    expectations.push((
        "user_required",
        reserve(&router, hold("h", "limited", 1)).await,
        422,
    ));
    expectations.push((
        "sale_not_started",
        reserve(&router, hold("h", "later", 1)).await,
        409,
    ));
    expectations.push((
        "sale_ended",
        reserve(&router, hold("h", "over", 1)).await,
        409,
    ));
    expectations.push((
        "insufficient_stock",
        reserve(&router, hold("h", "stock", 4)).await,
        409,
    ));
    expectations.push((
        "user_limit_exceeded",
        reserve(
            &router,
            json!({"hold_id": "h", "user": "u", "items": [{"pool": "limited",
                                "qty": 2}]}),
        )
        .await,
        409,
    ));
    assert_eq!(
        reserve(&router, hold("held", "stock", 2)).await.status,
        StatusCode::CREATED
    );
    expectations.push((
        "total_below_committed",
        put(&router, "/v1/pools/stock", json!({"total": 1})).await,
        409,
    ));
    expectations.push((
        "pool_has_active_holds",
        delete(&router, "/v1/pools/stock").await,
        409,
    ));
    expectations.push((
        "hold_id_conflict",
        reserve(&router, hold("held", "stock", 1)).await,
        409,
    ));
    expectations.push((
        "hold_not_found",
        post(&router, "/v1/holds/ghost/confirm", json!({})).await,
        404,
    ));
    expectations.push((
        "hold_not_confirmed",
        post(&router, "/v1/holds/held/refund", json!({})).await,
        409,
    ));

    assert_eq!(
        reserve(
            &router,
            json!({"hold_id": "sold", "items": [{"pool": "doomed", "qty": 1}],
                                "confirm": true})
        )
        .await
        .status,
        StatusCode::CREATED
    );
    expectations.push((
        "hold_confirmed",
        post(&router, "/v1/holds/sold/release", json!({})).await,
        409,
    ));
    assert_eq!(
        delete(&router, "/v1/pools/doomed").await.status,
        StatusCode::NO_CONTENT
    );
    expectations.push((
        "pool_deleted",
        post(&router, "/v1/holds/sold/refund", json!({})).await,
        409,
    ));

    assert_eq!(
        reserve(&router, hold("gone", "stock", 1)).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        post(&router, "/v1/holds/gone/release", json!({}))
            .await
            .status,
        StatusCode::OK
    );
    expectations.push((
        "hold_released",
        post(&router, "/v1/holds/gone/confirm", json!({})).await,
        409,
    ));

    make_pool(&router, "refundable", json!({"total": 1})).await;
    reserve(
        &router,
        json!({"hold_id": "back", "items": [{"pool": "refundable", "qty": 1}],
                            "confirm": true}),
    )
    .await;
    assert_eq!(
        post(&router, "/v1/holds/back/refund", json!({}))
            .await
            .status,
        StatusCode::OK
    );
    expectations.push((
        "hold_refunded",
        post(&router, "/v1/holds/back/confirm", json!({})).await,
        409,
    ));

    let acquired = post(
        &router,
        "/v1/locks/job/acquire",
        json!({"owner": "w1", "ttl_ms": 1000}),
    )
    .await;
    assert_eq!(acquired.status, StatusCode::OK);
    expectations.push((
        "lock_held",
        post(
            &router,
            "/v1/locks/job/acquire",
            json!({"owner": "w2", "ttl_ms": 1000}),
        )
        .await,
        409,
    ));
    expectations.push((
        "not_lock_owner",
        post(
            &router,
            "/v1/locks/job/renew",
            json!({"owner": "w2", "token": 1, "ttl_ms": 1000}),
        )
        .await,
        409,
    ));

    reserve(
        &router,
        json!({"hold_id": "late", "items": [{"pool": "stock", "qty": 1}],
                            "ttl_ms": 1000}),
    )
    .await;
    backend.advance_ms(1_001);
    expectations.push((
        "hold_expired",
        post(&router, "/v1/holds/late/confirm", json!({})).await,
        409,
    ));

    for (code, answer, status) in &expectations {
        assert_eq!(answer.code(), *code, "{}", answer.text());
        assert_eq!(answer.status.as_u16(), *status, "{code}");
        assert_eq!(answer.content_type(), "application/json");
        let body = answer.json();
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{code}"
        );
    }
    let insufficient = &expectations
        .iter()
        .find(|(c, ..)| *c == "insufficient_stock")
        .unwrap()
        .1;
    assert_eq!(
        insufficient.json(),
        json!({"error": "insufficient_stock", "pool": "stock", "available": 3, "requested": 4,
               "message": "pool stock has 3 available, 4 requested"})
    );
    let lock_held = &expectations
        .iter()
        .find(|(c, ..)| *c == "lock_held")
        .unwrap()
        .1;
    assert_eq!(
        lock_held.json()["expires_at_ms"],
        acquired.json()["expires_at_ms"]
    );
}

#[tokio::test]
async fn malformed_json_is_400_and_bad_shape_is_422() {
    let (_, router) = open_server();
    let cases: [(&str, u16, &str); 12] = [
        ("", 400, "invalid_json"),
        ("{", 400, "invalid_json"),
        ("{\"total\": 1,}", 400, "invalid_json"),
        ("total=1", 400, "invalid_json"),
        ("{\"total\": 1} trailing", 400, "invalid_json"),
        ("{}", 422, "invalid_request"),
        ("[]", 422, "invalid_request"),
        ("null", 422, "invalid_request"),
        ("{\"total\": -1}", 422, "invalid_request"),
        ("{\"total\": \"1\"}", 422, "invalid_request"),
        ("{\"total\": 1.5}", 422, "invalid_request"),
        ("{\"total\": 1, \"totl\": 2}", 422, "invalid_request"),
    ];
    for (body, status, code) in cases {
        let answer = send(&router, Method::PUT, "/v1/pools/p", None, body).await;
        assert_eq!(
            answer.status.as_u16(),
            status,
            "{body:?}: {}",
            answer.text()
        );
        assert_eq!(answer.code(), code, "{body:?}");
    }
    // Objects only: serde would otherwise read an array's values by position.
    let positional = send(&router, Method::PUT, "/v1/pools/p", None, "[10]").await;
    assert_eq!(
        positional.code(),
        "invalid_request",
        "{}",
        positional.text()
    );
    let positional_item = reserve(&router, json!({"hold_id": "h", "items": [["p", 1]]})).await;
    assert_eq!(positional_item.code(), "invalid_request");
    let not_utf8 = send(&router, Method::PUT, "/v1/pools/p", None, vec![0xff, 0xfe]).await;
    assert_eq!(not_utf8.status, StatusCode::BAD_REQUEST);

    // A typo is caught, not ignored.
    let typo = reserve(
        &router,
        json!({"hold_id": "h", "items": [{"pool": "p", "qty": 1}],
                                       "ttl": 5000}),
    )
    .await;
    assert_eq!(typo.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(typo.json()["message"].as_str().unwrap().contains("ttl"));
    let item_typo = reserve(
        &router,
        json!({"hold_id": "h", "items": [{"pool": "p", "qty": 1,
                                            "extra": 1}]}),
    )
    .await;
    assert_eq!(item_typo.code(), "invalid_request");
    let bad_id = reserve(&router, hold("-bad", "p", 1)).await;
    assert_eq!(bad_id.code(), "invalid_request");
    assert_eq!(
        bad_id.json()["message"],
        "hold_id: \"-bad\": must start with an ASCII letter or digit"
    );
}

/// The messages are part of the interface: each names the field (its path in the body, or the
/// query parameter, or the path segment), what was sent and what is allowed, in the contract's
/// words; no Rust type names, no parser positions.
#[tokio::test]
async fn error_messages_name_the_field_what_was_sent_and_what_is_allowed() {
    let (_backend, router) = open_server();
    make_pool(&router, "p", json!({"total": 5})).await;
    let cases: Vec<(Method, &str, &str, &str)> = vec![
        (Method::PUT, "/v1/pools/q", r#"{"total": 1e23}"#,
         "total: must be an integer from 0 to 1000000000000, got 1e+23"),
        (Method::PUT, "/v1/pools/q", r#"{"total": "5"}"#,
         "total: must be an integer from 0 to 1000000000000, got the string \"5\""),
        (Method::PUT, "/v1/pools/q", r#"{"total": 2000000000000}"#,
         "total must be from 0 to 1000000000000, got 2000000000000"),
        (Method::PUT, "/v1/pools/q", r#"{"total": 5, "per_user_limit": 1.5}"#,
         "per_user_limit: must be an integer from 1 to 1000000000, or null, got 1.5"),
        (Method::PUT, "/v1/pools/q", "[5]", "must be an object, got a list"),
        (Method::PUT, "/v1/pools/a%20b", r#"{"total": 1}"#,
         "pool: \"a b\": may only contain ASCII letters, digits, '.', '_', ':' and '-'"),
        (Method::PUT, "/v1/pools/q?if_absent=yes", r#"{"total": 1}"#,
         "if_absent: must be true or false, got \"yes\""),
        (Method::PUT, "/v1/pools/q?ifabsent=true", r#"{"total": 1}"#,
         "unknown query parameter \"ifabsent\": the parameters are if_absent"),
        (Method::GET, "/v1/pools?limit=-1", "",
         "limit: must be an integer from 1 to 1000, got \"-1\""),
        (Method::GET, "/v1/events?after=abc", "",
         "after: must be an event sequence number (a non-negative integer), got \"abc\""),
        (Method::GET, "/v1/holds?status=sold", "",
         "status: must be one of held, confirmed, released, expired, refunded, got \"sold\""),
        (Method::GET, "/v1/holds?limit=x", "",
         "limit: must be an integer from 1 to 1000, got \"x\""),
        (Method::GET, "/v1/holds?pool=a%20b", "",
         "pool: \"a b\": may only contain ASCII letters, digits, '.', '_', ':' and '-'"),
        (Method::GET, "/v1/holds?state=held", "",
         "unknown query parameter \"state\": the parameters are pool, user, status, after, limit"),
        (Method::POST, "/v1/holds", r#"{"hold_id": "h"}"#, "items is required"),
        (Method::POST, "/v1/holds", r#"{"hold_id": "h", "items": [{"pool": "p"}]}"#,
         "items[0]: qty is required"),
        (Method::POST, "/v1/holds", r#"{"hold_id": "h", "items": [{"pool": "p", "qty": 1, "n": 1}]}"#,
         "items[0]: unknown field \"n\": the fields are pool, qty"),
        (Method::POST, "/v1/holds", r#"{"hold_id": "h", "items": [{"pool": "p", "qty": 1}], "ttl": 5}"#,
         "unknown field \"ttl\": the fields are hold_id, user, items, ttl_ms, confirm, wait_ms"),
        (Method::POST, "/v1/holds", r#"{"hold_id": "h", "hold_id": "i", "items": []}"#,
         "\"hold_id\" appears more than once: a field may appear once"),
        (Method::POST, "/v1/holds", r#"{"hold_id": "h", "items": [{"pool": "p", "qty": 0}]}"#,
         "qty must be from 1 to 1000000000, got 0"),
        (Method::POST, "/v1/holds", r#"{"hold_id": "h", "items": [{"pool": "p", "qty": 1}], "user": 5}"#,
         "user: must be an identifier: 1 to 128 bytes of ASCII letters, digits, '.', '_', ':' or '-', \
          starting with an ASCII letter or digit, got 5"),
        (Method::POST, "/v1/locks/l/acquire", r#"{"owner": "o", "ttl_ms": "x"}"#,
         "ttl_ms: must be an integer from 100 to 3600000 (milliseconds), got the string \"x\""),
        (Method::POST, "/v1/holds/h/confirm", r#"{"a": 1}"#,
         "unknown field \"a\": this object takes no fields"),
    ];
    for (uri, expected) in [
        (
            "/v1/pools/",
            "no route GET /v1/pools/; did you mean /v1/pools?",
        ),
        (
            "/v1/pool/p",
            "no route GET /v1/pool/p; did you mean /v1/pools/p?",
        ),
        (
            "/nowhere",
            "no route GET /nowhere; the routes are listed at /openapi.json",
        ),
    ] {
        let answer = get(&router, uri).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{uri}");
        assert_eq!(answer.json()["message"], expected, "{uri}");
    }
    for (method, uri, body, expected) in cases {
        let answer = send(&router, method.clone(), uri, None, body).await;
        assert_eq!(
            answer.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{method} {uri} {body}"
        );
        assert_eq!(answer.code(), "invalid_request", "{method} {uri} {body}");
        assert_eq!(answer.json()["message"], expected, "{method} {uri} {body}");
    }
}

#[tokio::test]
async fn null_is_the_same_as_absent() {
    let (backend, router) = open_server();
    let created = put(
        &router,
        "/v1/pools/p",
        json!({"total": 5, "per_user_limit": null, "starts_at_ms": null, "ends_at_ms": null,
               "low_stock_threshold": null}),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    assert_eq!(created.json()["per_user_limit"], Value::Null);
    let reserved = reserve(
        &router,
        json!({"hold_id": "h", "user": null, "items": [{"pool": "p", "qty": 1}],
               "ttl_ms": null, "confirm": null, "wait_ms": null}),
    )
    .await;
    assert_eq!(reserved.status, StatusCode::CREATED, "{}", reserved.text());
    assert_eq!(reserved.json()["expires_at_ms"], backend.now_ms() + 600_000);
    assert_eq!(reserved.json()["status"], "held");
    let lock = post(
        &router,
        "/v1/locks/l/acquire",
        json!({"owner": "o", "ttl_ms": 500,
                                                          "wait_ms": null}),
    )
    .await;
    assert_eq!(lock.status, StatusCode::OK);
    assert_eq!(lock.json()["token"].as_u64().map(|t| t > 0), Some(true));
}

#[tokio::test]
async fn action_bodies_must_be_empty_null_or_an_empty_object() {
    let (_, router) = open_server();
    make_pool(&router, "p", json!({"total": 5})).await;
    reserve(&router, hold("h", "p", 1)).await;
    for (body, status) in [
        ("{\"x\": 1}", 422),
        ("[]", 422),
        ("1", 422),
        ("\"\"", 422),
        ("nope", 400),
        ("{", 400),
        ("", 200),
        ("  \n", 200),
        ("{}", 200),
        // `null` is the same as absent, for a body as for a field.
        ("null", 200),
        (" null\n", 200),
    ] {
        let answer = send(&router, Method::POST, "/v1/holds/h/release", None, body).await;
        assert_eq!(
            answer.status.as_u16(),
            status,
            "{body:?}: {}",
            answer.text()
        );
    }
    let missing_ttl = post(&router, "/v1/holds/h/extend", json!({})).await;
    assert_eq!(missing_ttl.code(), "invalid_request");
}

#[tokio::test]
async fn path_and_query_errors_are_422() {
    let (_, router) = open_server();
    for uri in [
        "/v1/pools/-leading-dash",
        "/v1/pools/a%20b",
        "/v1/pools/a%2Fb",
        "/v1/pools/%FF",
        "/v1/holds/.x",
    ] {
        let answer = get(&router, uri).await;
        assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY, "{uri}");
        assert_eq!(answer.code(), "invalid_request", "{uri}");
    }
    let long = format!("/v1/pools/{}", "a".repeat(129));
    assert_eq!(get(&router, &long).await.code(), "invalid_request");
    for uri in [
        "/v1/pools?limit=abc",
        "/v1/pools?limit=0",
        "/v1/pools?limit=1001",
        "/v1/pools?limit=-1",
        "/v1/pools?prefix=a%20b",
        "/v1/pools?after=-x",
        "/v1/holds?limit=0",
        "/v1/holds?limit=1001",
        "/v1/holds?status=Held",
        "/v1/holds?user=-u",
        "/v1/holds?after=a%20b",
        "/v1/holds?pool=p&page=2",
        "/v1/events?limit=0",
        "/v1/events?limit=1001",
        "/v1/events?wait_ms=30001",
        "/v1/events?after=-1",
        "/v1/events?after=x",
        "/v1/events?partition=1",
        "/v1/events?partition=abc",
        "/v1/events?partition=-1",
        "/v1/events?partition=4294967296",
        "/v1/events?partition=",
        // Unknown parameters are refused like unknown body fields.
        "/v1/pools?limit=10&page=2",
        "/v1/events?afer=5",
    ] {
        let answer = get(&router, uri).await;
        assert_eq!(
            answer.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{uri}: {}",
            answer.text()
        );
        assert_eq!(answer.code(), "invalid_request", "{uri}");
    }
    let bad_flag = send(
        &router,
        Method::PUT,
        "/v1/pools/p?if_absent=maybe",
        None,
        "{\"total\":1}",
    )
    .await;
    assert_eq!(bad_flag.code(), "invalid_request");
    // A typo of if_absent must not turn a create-only PUT into a replace.
    let typo = send(
        &router,
        Method::PUT,
        "/v1/pools/p?ifabsent=true",
        None,
        "{\"total\":1}",
    )
    .await;
    assert_eq!(typo.code(), "invalid_request");
    assert_eq!(
        get(&router, "/v1/pools/p").await.status,
        StatusCode::NOT_FOUND,
        "the refused PUT changed nothing"
    );
    assert_eq!(
        get(&router, "/v1/events?limit=1000&wait_ms=0&after=0")
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let (_, router) = open_server();
    let mut big = b"{\"total\": 1, \"per_user_limit\": null".to_vec();
    big.resize(stockd_server::BODY_LIMIT_BYTES_DEFAULT + 1, b' ');
    big.push(b'}');
    let answer = send(&router, Method::PUT, "/v1/pools/p", None, big).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.code(), "payload_too_large");

    let backend = TestBackend::new();
    let small = stockd_server::router(
        backend,
        ServerConfig {
            body_limit_bytes: 64,
            ..ServerConfig::default()
        },
    );
    let fits = format!("{{\"total\": 1{}}}", " ".repeat(50));
    assert_eq!(
        send(&small, Method::PUT, "/v1/pools/p", None, fits)
            .await
            .status,
        StatusCode::CREATED
    );
    let over = format!("{{\"total\": 1{}}}", " ".repeat(60));
    let answer = send(&small, Method::PUT, "/v1/pools/p", None, over).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.json()["limit_bytes"], 64);
    let batch = format!("{{\"ops\": [{}]}}", "{}, ".repeat(40));
    assert_eq!(
        send(&small, Method::POST, "/v1/batch", None, batch)
            .await
            .status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_json() {
    let (_, router) = open_server();
    for uri in [
        "/",
        "/v1",
        "/v1/pools/",
        "/v2/pools/p",
        "/v1/holds/h/frobnicate",
    ] {
        let answer = get(&router, uri).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{uri}");
        assert_eq!(answer.content_type(), "application/json");
        assert_eq!(answer.code(), "not_found");
    }
    let answer = send(&router, Method::PATCH, "/v1/pools/p", None, "{}").await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer.code(), "method_not_allowed");
    let allow = answer.headers.get(header::ALLOW).unwrap().to_str().unwrap();
    assert!(allow.contains("PUT") && allow.contains("DELETE"), "{allow}");
    for (method, uri) in [
        (Method::PATCH, "/v1/holds"),
        (Method::DELETE, "/v1/holds/h"),
        (Method::GET, "/v1/batch"),
        (Method::POST, "/v1/events"),
        (Method::POST, "/healthz"),
        (Method::GET, "/v1/locks/l/acquire"),
    ] {
        let answer = send(&router, method.clone(), uri, None, "").await;
        assert_eq!(
            answer.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {uri}"
        );
        assert_eq!(answer.code(), "method_not_allowed");
    }
}

/// Every (method, path) of the contract, with a body that parses.
fn every_operation() -> Vec<(Method, &'static str, &'static str)> {
    vec![
        (Method::GET, "/healthz", ""),
        (Method::GET, "/readyz", ""),
        (Method::GET, "/metrics", ""),
        (Method::GET, "/openapi.json", ""),
        (Method::GET, "/v1/pools", ""),
        (Method::PUT, "/v1/pools/p", "{\"total\": 5}"),
        (Method::GET, "/v1/pools/p", ""),
        (Method::DELETE, "/v1/pools/p", ""),
        (Method::POST, "/v1/pools/p/restock", "{\"delta\": 1}"),
        (Method::GET, "/v1/pools/p/segments", ""),
        (
            Method::POST,
            "/v1/holds",
            "{\"hold_id\": \"h\", \"items\": [{\"pool\": \"p\", \"qty\": 1}]}",
        ),
        (Method::GET, "/v1/holds", ""),
        (Method::GET, "/v1/holds/h", ""),
        (Method::POST, "/v1/holds/h/confirm", ""),
        (Method::POST, "/v1/holds/h/release", ""),
        (Method::POST, "/v1/holds/h/extend", "{\"ttl_ms\": 5000}"),
        (Method::POST, "/v1/holds/h/refund", ""),
        (
            Method::POST,
            "/v1/batch",
            "{\"ops\": [{\"op\": \"confirm\", \"hold_id\": \"h\"}]}",
        ),
        (Method::GET, "/v1/events", ""),
        (Method::GET, "/v1/events/partitions", ""),
        (
            Method::POST,
            "/v1/locks/l/acquire",
            "{\"owner\": \"o\", \"ttl_ms\": 1000}",
        ),
        (
            Method::POST,
            "/v1/locks/l/renew",
            "{\"owner\": \"o\", \"token\": 1, \"ttl_ms\": 1000}",
        ),
        (
            Method::POST,
            "/v1/locks/l/release",
            "{\"owner\": \"o\", \"token\": 1}",
        ),
    ]
}

/// Every (method, path) of the web console (not API: not in the contract, nor in the OpenAPI
/// document), with the answer it gets without a token, tokens or not.
fn console_operations() -> Vec<(Method, &'static str, StatusCode)> {
    vec![
        (Method::GET, "/ui", StatusCode::PERMANENT_REDIRECT),
        (Method::GET, "/ui/", StatusCode::OK),
        (Method::GET, "/ui/assets/main.js", StatusCode::OK),
    ]
}

fn is_open(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics" | "/openapi.json")
}

fn is_admin_only(method: &Method, path: &str) -> bool {
    (path == "/v1/pools/p" && (method == Method::PUT || method == Method::DELETE))
        || path == "/v1/pools/p/restock"
}

#[tokio::test]
async fn auth_matrix() {
    let (_, router) = secured_server();
    for (method, path, body) in every_operation() {
        let anonymous = send(&router, method.clone(), path, None, body).await;
        let wrong = send(&router, method.clone(), path, Some("not-a-token"), body).await;
        let client = send(&router, method.clone(), path, Some(CLIENT_TOKEN), body).await;
        let admin = send(&router, method.clone(), path, Some(ADMIN_TOKEN), body).await;
        if is_open(path) {
            for answer in [&anonymous, &wrong, &client, &admin] {
                assert_eq!(answer.status, StatusCode::OK, "{method} {path}");
            }
            continue;
        }
        for answer in [&anonymous, &wrong] {
            assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{method} {path}");
            assert_eq!(answer.code(), "unauthorized");
            assert_eq!(
                answer.headers.get(header::WWW_AUTHENTICATE).unwrap(),
                "Bearer"
            );
        }
        if is_admin_only(&method, path) {
            assert_eq!(client.status, StatusCode::FORBIDDEN, "{method} {path}");
            assert_eq!(client.code(), "forbidden");
        } else {
            assert!(
                ![401, 403].contains(&client.status.as_u16()),
                "{method} {path}: client got {}",
                client.status
            );
        }
        assert!(
            ![401, 403].contains(&admin.status.as_u16()),
            "{method} {path}: admin got {}",
            admin.status
        );
    }
    // Scheme is case-insensitive; other schemes are refused.
    let lower = send(&router, Method::GET, "/v1/pools", None, "").await;
    assert_eq!(lower.status, StatusCode::UNAUTHORIZED);
    let mut request = axum::http::Request::builder()
        .uri("/v1/pools")
        .header(header::AUTHORIZATION, format!("bearer {CLIENT_TOKEN}"))
        .body(axum::body::Body::empty())
        .unwrap();
    let response = tower::ServiceExt::oneshot(router.clone(), request)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    request = axum::http::Request::builder()
        .uri("/v1/pools")
        .header(header::AUTHORIZATION, format!("Basic {CLIENT_TOKEN}"))
        .body(axum::body::Body::empty())
        .unwrap();
    let response = tower::ServiceExt::oneshot(router.clone(), request)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    // Unknown paths are 404 with or without a token.
    assert_eq!(
        get(&router, "/v1/nothing").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn batch_runs_valid_ops_in_one_call_and_reports_bad_ops_alone() {
    let (backend, router) = open_server();
    make_pool(&router, "p", json!({"total": 3})).await;
    let calls_before = backend.execute_calls().len();
    let answer = post(
        &router,
        "/v1/batch",
        json!({"ops": [
            {"op": "reserve", "hold_id": "a", "items": [{"pool": "p", "qty": 2}]},
            {"op": "frobnicate", "hold_id": "a"},
            {"op": "reserve", "hold_id": "b", "items": [{"pool": "p", "qty": 2}]},
            {"hold_id": "a"},
            {"op": "confirm", "hold_id": "a"},
            {"op": "confirm", "hold_id": "a", "extra": true},
            {"op": "extend", "hold_id": "a", "ttl_ms": 5},
            {"op": "release", "hold_id": "nobody"},
            ["confirm", "a"],
            {"op": "reserve", "hold_id": "a", "items": [{"pool": "p", "qty": 2}]},
            {"op": "refund", "hold_id": "a"},
            {"op": "reserve", "hold_id": "c", "items": [{"pool": "p", "qty": 3}], "ttl": 1},
        ]}),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    let results = answer.json()["results"].as_array().unwrap().clone();
    let statuses: Vec<u64> = results
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [201, 422, 409, 422, 200, 422, 422, 404, 422, 200, 200, 422]
    );
    let codes: Vec<&str> = results
        .iter()
        .map(|r| r["body"]["error"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(
        codes,
        [
            "-",
            "invalid_request",
            "insufficient_stock",
            "invalid_request",
            "-",
            "invalid_request",
            "invalid_request",
            "hold_not_found",
            "invalid_request",
            "-",
            "-",
            "invalid_request"
        ]
    );
    assert_eq!(results[0]["body"]["hold_id"], "a");
    assert_eq!(results[4]["body"]["status"], "confirmed");
    // The replay of "a" answers its state at that point of the batch: confirmed.
    assert_eq!(results[9]["body"]["status"], "confirmed");
    assert_eq!(results[10]["body"]["status"], "refunded");
    assert_eq!(results[2]["body"]["available"], 1);
    assert!(results[1]["body"]["message"]
        .as_str()
        .unwrap()
        .contains("ops[1]"));
    // Valid ops went to the backend together.
    assert_eq!(backend.execute_calls()[calls_before..], [7]);

    // A batch must have 1..=1000 ops.
    for body in [
        json!({"ops": []}),
        json!({}),
        json!({"ops": {}}),
        json!({"ops": [], "x": 1}),
    ] {
        let answer = post(&router, "/v1/batch", body.clone()).await;
        assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    }
    let too_many: Vec<Value> = (0..1001)
        .map(|i| json!({"op": "confirm", "hold_id": format!("h{i}")}))
        .collect();
    let answer = post(&router, "/v1/batch", json!({"ops": too_many})).await;
    assert_eq!(answer.code(), "invalid_request");
    let max: Vec<Value> = (0..1000)
        .map(|i| json!({"op": "confirm", "hold_id": format!("h{i}")}))
        .collect();
    let answer = post(&router, "/v1/batch", json!({"ops": max})).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json()["results"].as_array().unwrap().len(), 1000);

    // All ops invalid: no backend call at all.
    let calls_before = backend.execute_calls().len();
    let answer = post(&router, "/v1/batch", json!({"ops": [{"op": "nope"}]})).await;
    assert_eq!(answer.json()["results"][0]["status"], 422);
    assert_eq!(backend.execute_calls().len(), calls_before);
}

/// Found by the decode_request fuzz target: a batch op naming a field twice ran with the last
/// value, where its single endpoint refuses such a body (422).
#[tokio::test]
async fn a_batch_op_that_repeats_a_field_is_refused_like_its_single_endpoint() {
    let (backend, router) = open_server();
    make_pool(&router, "p", json!({"total": 3})).await;
    let twice = r#"{"hold_id": "a", "hold_id": "b", "items": [{"pool": "p", "qty": 1}]}"#;
    let single = send(&router, Method::POST, "/v1/holds", None, twice.to_string()).await;
    assert_eq!(single.code(), "invalid_request", "{}", single.text());
    let calls_before = backend.execute_calls().len();
    let ops = [
        r#"{"op": "reserve", "hold_id": "a", "hold_id": "b", "items": [{"pool": "p", "qty": 1}]}"#,
        r#"{"op": "confirm", "hold_id": "x", "hold_id": "y"}"#,
        r#"{"op": "release", "op": "confirm", "hold_id": "x"}"#,
    ];
    let body = format!("{{\"ops\": [{}]}}", ops.join(", "));
    let answer = send(&router, Method::POST, "/v1/batch", None, body).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    let results = answer.json()["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 3);
    for result in &results {
        assert_eq!(result["status"], 422, "{result}");
        assert_eq!(result["body"]["error"], "invalid_request", "{result}");
    }
    assert_eq!(backend.execute_calls().len(), calls_before, "no op may run");
}

/// A bad op in the middle of a full batch is refused alone, its message naming its index and
/// the field at fault in the single endpoint's words, while the ops around it run, in order; an
/// op whose `op` is not its first field is read all the same.
#[tokio::test]
async fn a_bad_op_in_a_large_batch_is_named_by_index_and_field() {
    let (backend, router) = open_server();
    make_pool(&router, "p", json!({"total": 10_000})).await;
    let mut ops: Vec<String> = (0..1000)
        .map(|i| {
            format!(
                r#"{{"op": "reserve", "hold_id": "h-{i}", "items": [{{"pool": "p", "qty": 1}}], "confirm": true}}"#
            )
        })
        .collect();
    ops[517] =
        r#"{"op": "reserve", "hold_id": "h-517", "items": [{"pool": "p", "qty": "1"}]}"#.into();
    ops[600] =
        r#"{"op": "reserve", "hold_id": "h-600", "items": [{"pool": "p", "qty": 1}], "ttl": 5}"#
            .into();
    ops[700] =
        r#"{"hold_id": "h-700", "items": [{"pool": "p", "qty": 1}], "op": "reserve"}"#.into();
    ops[999] = r#"{"op": "confirm", "hold_id": "h 1"}"#.into();
    let calls_before = backend.execute_calls().len();
    let body = format!(r#"{{"ops": [{}]}}"#, ops.join(",\n"));
    let answer = send(&router, Method::POST, "/v1/batch", None, body).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    let results = answer.json()["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 1000);
    let refused = [
        (
            517,
            "ops[517]: items[0].qty: must be an integer from 1 to 1000000000, got the string \"1\"",
        ),
        (
            600,
            "ops[600]: unknown field \"ttl\": the fields are hold_id, user, items, ttl_ms, \
             confirm, wait_ms",
        ),
        (
            999,
            "ops[999]: hold_id: \"h 1\": may only contain ASCII letters, digits, '.', '_', ':' \
             and '-'",
        ),
    ];
    for (index, message) in refused {
        let result = &results[index];
        assert_eq!(result["status"], 422, "{result}");
        assert_eq!(result["body"]["error"], "invalid_request", "{result}");
        assert_eq!(result["body"]["message"], message, "{result}");
    }
    for (index, result) in results.iter().enumerate() {
        if refused.iter().any(|(at, _)| *at == index) {
            continue;
        }
        assert_eq!(result["status"], 201, "ops[{index}]: {result}");
        assert_eq!(result["body"]["hold_id"], format!("h-{index}"), "{result}");
    }
    assert_eq!(results[700]["body"]["status"], "held");
    assert_eq!(results[701]["body"]["status"], "confirmed");
    // The ops that decoded went to the backend together.
    assert_eq!(backend.execute_calls()[calls_before..], [997]);
}

#[tokio::test]
async fn events_omit_fields_that_do_not_apply() {
    let (backend, router) = open_server();
    make_pool(&router, "p", json!({"total": 3, "low_stock_threshold": 1})).await;
    reserve(
        &router,
        json!({"hold_id": "h", "items": [{"pool": "p", "qty": 2}],
                            "confirm": true}),
    )
    .await;
    let page = get(&router, "/v1/events").await;
    assert_eq!(page.status, StatusCode::OK);
    let body = page.json();
    let events = body["events"].as_array().unwrap();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    // The core emits `low_stock` right after the record that crossed the threshold.
    assert_eq!(types, ["pool_upserted", "held", "low_stock", "confirmed"]);
    assert_eq!(body["next_after"], events.last().unwrap()["seq"]);
    for event in events {
        for (key, value) in event.as_object().unwrap() {
            assert!(!value.is_null(), "{key} is null in {event}");
        }
        assert!(event["seq"].is_u64() && event["at_ms"] == backend.now_ms());
    }
    assert_eq!(
        events[0],
        json!({"seq": 1, "at_ms": backend.now_ms(), "type": "pool_upserted", "pool": "p",
               "delta": 3, "total": 3, "available": 3})
    );
    let held = events[1].as_object().unwrap();
    assert!(held.contains_key("hold_id") && held.contains_key("items"));
    assert!(
        !held.contains_key("user") && !held.contains_key("pool") && !held.contains_key("available")
    );
    // The hold's created_at_ms, on `held` only.
    let hold = get(&router, "/v1/holds/h").await.json();
    assert_eq!(held["created_at_ms"], hold["created_at_ms"]);
    for event in events.iter().filter(|e| e["type"] != "held") {
        assert!(event.get("created_at_ms").is_none(), "{event}");
    }

    let rest = get(&router, "/v1/events?after=2&limit=1").await.json();
    assert_eq!(rest["events"].as_array().unwrap().len(), 1);
    assert_eq!(rest["events"][0]["seq"], 3);
    assert_eq!(rest["next_after"], 3);
    let none = get(&router, "/v1/events?after=99&wait_ms=10").await.json();
    assert_eq!(none, json!({"events": [], "next_after": 99}));
}

#[tokio::test]
async fn one_partition_is_the_default_and_others_are_refused_with_the_range() {
    let (_, router) = open_server();
    make_pool(&router, "p", json!({"total": 1})).await;
    let count = get(&router, "/v1/events/partitions").await;
    assert_eq!(count.status, StatusCode::OK);
    assert_eq!(count.json(), json!({"partitions": 1}));
    let named = get(&router, "/v1/events?partition=0").await;
    assert_eq!(named.status, StatusCode::OK);
    assert_eq!(named.json(), get(&router, "/v1/events").await.json());
    for (uri, sent) in [
        ("/v1/events?partition=1", "\"1\""),
        ("/v1/events?partition=abc", "\"abc\""),
        ("/v1/events?partition=-1", "\"-1\""),
    ] {
        let refused = get(&router, uri).await;
        assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY, "{uri}");
        assert_eq!(refused.code(), "invalid_request", "{uri}");
        let message = refused.json()["message"].as_str().unwrap().to_string();
        for part in ["partition", "from 0 to 0", sent] {
            assert!(message.contains(part), "{uri}: {part} not in {message}");
        }
    }
    let long = format!("/v1/events?partition={}", "9".repeat(200));
    let message = get(&router, &long).await.json()["message"].to_string();
    assert!(
        message.len() < 200,
        "a refused value is echoed short: {message}"
    );
}

#[tokio::test]
async fn several_partitions_must_be_named() {
    let (backend, router) = open_server();
    make_pool(&router, "p", json!({"total": 1})).await;
    backend.set_partitions(3);
    assert_eq!(
        get(&router, "/v1/events/partitions").await.json(),
        json!({"partitions": 3})
    );
    let unnamed = get(&router, "/v1/events?after=0").await;
    assert_eq!(unnamed.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(unnamed.code(), "partition_required");
    let body = unnamed.json();
    assert_eq!(body["partitions"], 3);
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("3 partitions") && message.contains("0 to 2"),
        "{message}"
    );
    assert_eq!(
        get(&router, "/v1/events?partition=0").await.json()["events"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        get(&router, "/v1/events?partition=2&after=5").await.json(),
        json!({"events": [], "next_after": 5})
    );
    let outside = get(&router, "/v1/events?partition=3").await;
    assert_eq!(outside.code(), "invalid_request");
    assert!(outside.json()["message"]
        .as_str()
        .unwrap()
        .contains("from 0 to 2"));
    // Bad paging is still reported as such, before the partition.
    let bad_limit = get(&router, "/v1/events?limit=0").await;
    assert_eq!(bad_limit.code(), "invalid_request");
}

#[tokio::test]
async fn a_consumer_behind_the_window_gets_410_with_the_oldest_kept() {
    let (backend, router) = open_server();
    make_pool(&router, "p", json!({"total": 10})).await;
    for _ in 0..4 {
        post(&router, "/v1/pools/p/restock", json!({"delta": 1})).await;
    }
    backend.drop_events_before(3);
    for after in [0, 1] {
        let gone = get(&router, &format!("/v1/events?after={after}")).await;
        assert_eq!(gone.status, StatusCode::GONE, "after={after}");
        let body = gone.json();
        assert_eq!(body["error"], "events_expired");
        assert_eq!(body["oldest_seq"], 3);
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("after=2"), "{message}");
    }
    let resumed = get(&router, "/v1/events?after=2").await.json();
    let seqs: Vec<u64> = resumed["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [3, 4, 5]);
}

#[tokio::test]
async fn locks_answer_tokens_and_release() {
    let (_, router) = open_server();
    let acquired = post(
        &router,
        "/v1/locks/job/acquire",
        json!({"owner": "w", "ttl_ms": 1000}),
    )
    .await;
    assert_eq!(acquired.status, StatusCode::OK);
    let grant = acquired.json();
    assert_eq!(grant.as_object().unwrap().len(), 2);
    let token = grant["token"].as_u64().unwrap();
    let renewed = post(
        &router,
        "/v1/locks/job/renew",
        json!({"owner": "w", "token": token, "ttl_ms": 2000}),
    )
    .await;
    assert_eq!(renewed.status, StatusCode::OK);
    assert_eq!(renewed.json()["token"], token);
    let released = post(
        &router,
        "/v1/locks/job/release",
        json!({"owner": "w", "token": token}),
    )
    .await;
    assert_eq!(released.status, StatusCode::OK);
    assert_eq!(released.json(), json!({"released": true}));
    let bad_ttl = post(
        &router,
        "/v1/locks/job/acquire",
        json!({"owner": "w", "ttl_ms": 99}),
    )
    .await;
    assert_eq!(bad_ttl.code(), "invalid_request");
    let missing = post(&router, "/v1/locks/job/release", json!({"owner": "w"})).await;
    assert_eq!(missing.code(), "invalid_request");
}

#[tokio::test]
async fn an_unavailable_backend_is_503_and_never_a_success() {
    let (backend, router) = open_server();
    make_pool(&router, "p", json!({"total": 3})).await;
    backend.set_unavailable(true);
    for (method, path, body) in every_operation() {
        // The partition count is the backend's configuration, known without reaching it.
        if matches!(
            path,
            "/healthz" | "/metrics" | "/openapi.json" | "/v1/events/partitions"
        ) {
            continue;
        }
        let answer = send(&router, method.clone(), path, None, body).await;
        assert_eq!(
            answer.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{method} {path}"
        );
        assert_eq!(answer.code(), "backend_unavailable");
    }
    assert_eq!(
        get(&router, "/healthz").await.json(),
        json!({"status": "ok"})
    );
    backend.set_unavailable(false);
    assert_eq!(
        get(&router, "/readyz").await.json(),
        json!({"status": "ready", "warnings": []})
    );
    assert_eq!(get(&router, "/v1/pools/p").await.json()["available"], 3);
}

#[tokio::test]
async fn no_input_gives_a_server_error() {
    let (_, router) = open_server();
    make_pool(&router, "p", json!({"total": 3})).await;
    let bodies: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"null".to_vec(),
        b"[]".to_vec(),
        b"{}".to_vec(),
        b"{\"a\":1}".to_vec(),
        b"\"string\"".to_vec(),
        b"18446744073709551616".to_vec(),
        b"{\"total\": 18446744073709551615, \"delta\": -9223372036854775808}".to_vec(),
        b"{\"hold_id\": \"h\", \"items\": [], \"ttl_ms\": 18446744073709551615}".to_vec(),
        b"{\"ops\": [null, 1, [], {\"op\": null}]}".to_vec(),
        b"{\"owner\": \"o\", \"token\": 18446744073709551615, \"ttl_ms\": 0}".to_vec(),
        vec![0, 159, 146, 150],
        b"{\"total\": 1e400}".to_vec(),
        "{\"hold_id\": \"\u{e9}\", \"items\": [{\"pool\": \"p\", \"qty\": 1}]}"
            .as_bytes()
            .to_vec(),
    ];
    for (method, path, _) in every_operation() {
        for body in &bodies {
            let answer = send(&router, method.clone(), path, None, body.clone()).await;
            assert!(
                answer.status.is_success() || answer.status.is_client_error(),
                "{method} {path} {:?}: {}",
                String::from_utf8_lossy(body),
                answer.status
            );
            if !answer.status.is_success() {
                answer.code();
            }
        }
    }
}

#[tokio::test]
async fn openapi_lists_every_route_and_matches_the_wire() {
    let (_, router) = open_server();
    let served = get(&router, "/openapi.json").await;
    assert_eq!(served.status, StatusCode::OK);
    assert_eq!(served.content_type(), "application/json");
    let document = served.json();
    assert_eq!(
        document,
        serde_json::to_value(stockd_server::openapi()).unwrap()
    );
    assert!(document["openapi"].as_str().unwrap().starts_with("3."));
    let expected: Vec<(String, String)> = every_operation()
        .into_iter()
        .map(|(method, path, _)| {
            let template = path
                .replace("/v1/pools/p", "/v1/pools/{pool}")
                .replace("/v1/holds/h", "/v1/holds/{hold_id}")
                .replace("/v1/locks/l", "/v1/locks/{name}");
            (method.as_str().to_lowercase(), template)
        })
        .collect();
    let paths = document["paths"].as_object().unwrap();
    let mut documented = 0;
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            assert!(
                expected.contains(&(method.clone(), path.clone())),
                "documented but not a route: {method} {path}"
            );
            documented += 1;
        }
    }
    for (method, path) in &expected {
        assert!(
            paths[path].get(method).is_some(),
            "{method} {path} is not documented"
        );
    }
    assert_eq!(documented, expected.len());
    assert!(document["components"]["securitySchemes"]["bearer"].is_object());
    assert_eq!(paths["/healthz"]["get"]["security"], json!([{}]));
    assert!(paths["/healthz"]["get"]["responses"].get("401").is_none());
    assert!(paths["/v1/holds"]["post"]["responses"]["401"].is_object());
    assert!(paths["/v1/holds"]["post"]["responses"].get("403").is_none());
    assert!(paths["/v1/pools/{pool}"]["put"]["responses"]["403"].is_object());
    assert!(paths["/v1/pools/{pool}/restock"]["post"]["responses"]["403"].is_object());
    assert!(paths["/v1/pools/{pool}"]["get"]["responses"]
        .get("403")
        .is_none());
    // `required` absent means false.
    assert_ne!(
        paths["/v1/holds/{hold_id}/confirm"]["post"]["requestBody"]["required"],
        json!(true)
    );

    // Response schemas name exactly the fields real responses carry.
    let schemas = &document["components"]["schemas"];
    let keys = |value: &Value| {
        let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    let pool = put(&router, "/v1/pools/p", json!({"total": 1}))
        .await
        .json();
    assert_eq!(keys(&schemas["PoolObject"]["properties"]), keys(&pool));
    let hold = reserve(&router, hold("h", "p", 1)).await.json();
    assert_eq!(keys(&schemas["HoldObject"]["properties"]), keys(&hold));
    let partitions = get(&router, "/v1/events/partitions").await.json();
    assert_eq!(
        keys(&schemas["EventPartitions"]["properties"]),
        keys(&partitions)
    );
    let events_get = &paths["/v1/events"]["get"];
    assert!(
        events_get["responses"]["410"].is_object(),
        "410 events_expired"
    );
    let parameters: Vec<&str> = events_get["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|parameter| parameter["name"].as_str().unwrap())
        .collect();
    assert_eq!(parameters, ["partition", "after", "limit", "wait_ms"]);
    assert_eq!(
        events_get["parameters"][0]["schema"]["type"],
        json!("integer"),
        "partition is documented as the integer it is"
    );
    let mut property_names = keys(&schemas["EventObject"]["properties"]);
    property_names.sort();
    let events = get(&router, "/v1/events").await.json();
    for event in events["events"].as_array().unwrap() {
        for key in keys(event) {
            assert!(
                property_names.contains(&key),
                "event field {key} is not documented"
            );
        }
    }
}

#[tokio::test]
async fn metrics_count_requests_and_render_backend_stats() {
    let (backend, router) = open_server();
    backend.set_stats(BackendStats {
        hold_transitions: vec![("held", 4), ("expired", 1)],
        histograms: vec![
            HistogramStats {
                name: "expiry_lag_ms",
                buckets: vec![(10.0, 1), (100.0, 1)],
                sum: 3.0,
                count: 1,
            },
            HistogramStats {
                name: "wal_fsync_duration_seconds",
                buckets: vec![(0.001, 5), (0.002, 6)],
                sum: 0.0125,
                count: 7,
            },
        ],
        gauges: vec![("pools", 2.0), ("bad name", 1.0)],
        counters: vec![("wal_syncs_total", 7)],
    });
    make_pool(&router, "p", json!({"total": 1})).await;
    get(&router, "/v1/pools/p").await;
    get(&router, "/v1/pools/p").await;
    get(&router, "/nowhere").await;
    let refused = reserve(&router, hold("h-big", "p", 2)).await;
    assert_eq!(refused.code(), "insufficient_stock");
    let scrape = get(&router, "/metrics").await;
    assert_eq!(scrape.status, StatusCode::OK);
    assert!(
        scrape.content_type().starts_with("text/plain"),
        "{}",
        scrape.content_type()
    );
    let text = scrape.text();
    for line in [
        r#"stockd_http_requests_total{route="/v1/pools/{pool}",method="PUT",status="201"} 1"#,
        r#"stockd_http_requests_total{route="/v1/pools/{pool}",method="GET",status="200"} 2"#,
        r#"stockd_http_requests_total{route="unmatched",method="GET",status="404"} 1"#,
        r#"stockd_hold_transitions_total{outcome="held"} 4"#,
        r#"stockd_hold_transitions_total{outcome="expired"} 1"#,
        r#"stockd_expiry_lag_ms_bucket{le="10.0"} 1"#,
        r#"stockd_expiry_lag_ms_bucket{le="+Inf"} 1"#,
        "stockd_expiry_lag_ms_count 1",
        "# TYPE stockd_wal_fsync_duration_seconds histogram",
        r#"stockd_wal_fsync_duration_seconds_bucket{le="0.001"} 5"#,
        r#"stockd_wal_fsync_duration_seconds_bucket{le="0.002"} 6"#,
        r#"stockd_wal_fsync_duration_seconds_bucket{le="+Inf"} 7"#,
        "stockd_wal_fsync_duration_seconds_sum 0.0125",
        "stockd_wal_fsync_duration_seconds_count 7",
        "stockd_pools 2.0",
        "stockd_wal_syncs_total 7",
        r#"stockd_http_errors_total{route="/v1/holds",code="insufficient_stock"} 1"#,
        r#"stockd_http_errors_total{route="unmatched",code="not_found"} 1"#,
        "stockd_ready 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(text.contains(
        "stockd_http_request_duration_seconds_bucket{le=\"0.0001\",route=\"/v1/pools/{pool}\"}"
    ));
    assert!(!text.contains("bad name"));
    assert!(!text.contains("_total_total"));
    let pool_count = text
        .lines()
        .find(|line| {
            line.starts_with(
                "stockd_http_request_duration_seconds_count{route=\"/v1/pools/{pool}\"}",
            )
        })
        .unwrap();
    assert!(pool_count.ends_with(" 3"), "{pool_count}");
}

/// A Prometheus 0.0.4 scraper (no `Accept`) gets the classic text, where a counter's `# TYPE`
/// line names its samples; a scraper that prefers OpenMetrics gets OpenMetrics. The parsers of
/// both formats read them in `scripts/metrics-formats.sh`.
#[tokio::test]
async fn metrics_speak_the_classic_text_unless_openmetrics_is_asked_for() {
    use tower::ServiceExt as _;
    let (backend, router) = open_server();
    backend.set_stats(BackendStats {
        counters: vec![("wal_syncs_total", 7)],
        ..BackendStats::default()
    });
    let scrape = |accept: Option<&'static str>| {
        let router = router.clone();
        async move {
            let mut request = axum::http::Request::builder().uri("/metrics");
            if let Some(accept) = accept {
                request = request.header(header::ACCEPT, accept);
            }
            let response = router
                .oneshot(request.body(axum::body::Body::empty()).unwrap())
                .await
                .unwrap();
            let content_type = response.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .to_string();
            assert_eq!(response.headers()[header::VARY], "accept");
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            (content_type, String::from_utf8(body.to_vec()).unwrap())
        }
    };
    let (content_type, classic) = scrape(None).await;
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    for line in [
        "# TYPE stockd_wal_syncs_total counter",
        "stockd_wal_syncs_total 7",
        "# TYPE stockd_http_requests_total counter",
        "# HELP stockd_wal_syncs_total fsyncs of the write-ahead log.",
    ] {
        assert!(classic.contains(line), "missing {line:?} in\n{classic}");
    }
    assert!(!classic.contains("# EOF"), "{classic}");
    assert!(
        !classic.contains("# TYPE stockd_wal_syncs counter"),
        "{classic}"
    );
    // A backend that measures no histogram (Redis has no fsync) shows none, not zeros.
    assert!(
        !classic.contains("stockd_wal_fsync_duration_seconds"),
        "{classic}"
    );
    assert!(!classic.contains("stockd_expiry_lag_ms"), "{classic}");

    let (content_type, openmetrics) = scrape(Some(
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    ))
    .await;
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(openmetrics.contains("# TYPE stockd_wal_syncs counter"));
    assert!(openmetrics.contains("stockd_wal_syncs_total 7"));
    assert!(openmetrics.ends_with("# EOF\n"));
}

/// Every route refuses a query parameter it does not take, before it does anything: a wait
/// that would be silently dropped, a delete with a flag it does not know.
#[tokio::test]
async fn every_route_refuses_unknown_query_parameters_and_changes_nothing() {
    let (_, router) = open_server();
    let created = send(&router, Method::PUT, "/v1/pools/p", None, "{\"total\": 5}").await;
    assert_eq!(created.status, StatusCode::CREATED);
    for (method, path, body) in every_operation() {
        // `wait_ms` is a parameter of the feed only; `if_absent` of PUT /v1/pools/p only.
        for query in [
            "wait_ms=3000",
            "x=1&y",
            "if_absent=true&bogus",
            "limit=1&bogus=2",
        ] {
            if query == "wait_ms=3000" && path == "/v1/events" {
                continue;
            }
            let uri = format!("{path}?{query}");
            let answer = send(&router, method.clone(), &uri, None, body).await;
            assert_eq!(
                answer.status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{method} {uri}: {}",
                answer.text()
            );
            assert_eq!(answer.code(), "invalid_request", "{method} {uri}");
        }
    }
    for (method, path, _) in console_operations() {
        let uri = format!("{path}?v=2");
        let answer = send(&router, method.clone(), &uri, None, "").await;
        assert_eq!(
            answer.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{method} {uri}: {}",
            answer.text()
        );
    }
    let pool = get(&router, "/v1/pools/p").await.json();
    assert_eq!(
        (&pool["total"], &pool["available"]),
        (&json!(5), &json!(5)),
        "{pool}"
    );
    assert_eq!(
        get(&router, "/v1/holds/h").await.status,
        StatusCode::NOT_FOUND
    );
    // An empty query string is no parameter at all.
    assert_eq!(get(&router, "/healthz?").await.status, StatusCode::OK);
    assert_eq!(get(&router, "/v1/pools/p?").await.status, StatusCode::OK);
}

/// `null` is the same as absent, for the body of confirm, release and refund as for a field.
#[tokio::test]
async fn a_null_body_is_no_body() {
    let (_, router) = open_server();
    send(&router, Method::PUT, "/v1/pools/p", None, "{\"total\": 5}").await;
    for (hold, action, status) in [("a", "confirm", "confirmed"), ("b", "release", "released")] {
        let reserve =
            format!("{{\"hold_id\": \"{hold}\", \"items\": [{{\"pool\": \"p\", \"qty\": 1}}]}}");
        let held = send(&router, Method::POST, "/v1/holds", None, reserve).await;
        assert_eq!(held.status, StatusCode::CREATED, "{}", held.text());
        let uri = format!("/v1/holds/{hold}/{action}");
        let answer = send(&router, Method::POST, &uri, None, " null ").await;
        assert_eq!(answer.status, StatusCode::OK, "{uri}: {}", answer.text());
        assert_eq!(answer.json()["status"], status);
    }
    let answer = send(&router, Method::POST, "/v1/holds/a/refund", None, "null").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    assert_eq!(answer.json()["status"], "refunded");
}

/// Walks the server's own route table with every method: each route the router serves asks for
/// a token unless it is open, refuses a client token where it is admin only, and is one of the
/// operations the other tests here (auth matrix, query rules, OpenAPI) walk, and the reverse.
#[tokio::test]
async fn every_route_of_the_table_checks_its_token() {
    let (_, router) = secured_server();
    let mut served = Vec::new();
    for route in stockd_server::route_table() {
        let path = route
            .path
            .replace("{pool}", "p")
            .replace("{hold_id}", "h")
            .replace("{name}", "l")
            .replace("{file}", "main.js");
        for method in [
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::DELETE,
            Method::PATCH,
        ] {
            let body = every_operation()
                .into_iter()
                .find(|(m, p, _)| *m == method && *p == path)
                .map_or("", |(_, _, body)| body);
            let admin = send(&router, method.clone(), &path, Some(ADMIN_TOKEN), body).await;
            if admin.status == StatusCode::METHOD_NOT_ALLOWED {
                continue;
            }
            served.push((method.clone(), path.clone()));
            let anonymous = send(&router, method.clone(), &path, None, body).await;
            let client = send(&router, method.clone(), &path, Some(CLIENT_TOKEN), body).await;
            if route.open {
                assert_ne!(
                    anonymous.status,
                    StatusCode::UNAUTHORIZED,
                    "{method} {path}"
                );
                continue;
            }
            assert_eq!(
                anonymous.status,
                StatusCode::UNAUTHORIZED,
                "{method} {path}"
            );
            if route.admin_only.contains(&method) {
                assert_eq!(client.status, StatusCode::FORBIDDEN, "{method} {path}");
            } else {
                assert!(
                    ![401, 403].contains(&client.status.as_u16()),
                    "{method} {path}: client got {}",
                    client.status
                );
            }
        }
    }
    let mut listed: Vec<(Method, String)> = every_operation()
        .into_iter()
        .map(|(method, path, _)| (method, path.to_string()))
        .chain(
            console_operations()
                .into_iter()
                .map(|(method, path, _)| (method, path.to_string())),
        )
        .collect();
    let key = |(method, path): &(Method, String)| format!("{method} {path}");
    served.sort_by_key(key);
    listed.sort_by_key(key);
    assert_eq!(
        served, listed,
        "the route table and every_operation() differ"
    );
}

/// Found by the decode_request fuzz target: bytes that are not JSON (a lone surrogate, nesting
/// deeper than 127 levels) inside an op pass the batch body's own reading, which skips over the
/// ops' text; the whole batch is 400 all the same, as the single endpoint answers the same bytes,
/// and no op runs.
#[tokio::test]
async fn an_op_that_is_not_json_refuses_the_whole_batch() {
    let (_, router) = open_server();
    make_pool(&router, "p", json!({"total": 5})).await;
    let deep = format!("{}{}", "[".repeat(126), "]".repeat(126));
    for op in [
        r#"{"op": "confirm", "hold_id": "h\ud800"}"#.to_string(),
        r#"{"op": "confirm", "hold_id": "h", "x": "\udc00"}"#.to_string(),
        format!(r#"{{"op": "confirm", "hold_id": "h", "x": {deep}}}"#),
    ] {
        let body = format!(
            r#"{{"ops": [{{"op": "reserve", "hold_id": "first", "items": [{{"pool": "p", "qty": 1}}]}}, {op}]}}"#
        );
        let answer = send(&router, Method::POST, "/v1/batch", None, body).await;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{op}: {}",
            answer.text()
        );
        assert_eq!(answer.code(), "invalid_json", "{op}");
    }
    let pool = send(&router, Method::GET, "/v1/pools/p", None, Vec::new()).await;
    assert_eq!(pool.json()["available"], 5, "no op of a refused batch ran");
}

/// A number too large for a 64-bit float is JSON, only too large for any field: a 422 in the
/// field's words, at a single endpoint and for that op alone in a batch, where the other ops run.
#[tokio::test]
async fn a_number_beyond_a_float_is_a_wrong_value_for_its_field() {
    let (_, router) = open_server();
    make_pool(&router, "p", json!({"total": 5})).await;
    let answer = send(
        &router,
        Method::PUT,
        "/v1/pools/q",
        None,
        br#"{"total": 1e400}"#.to_vec(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        answer.json()["message"],
        "total: must be an integer from 0 to 1000000000000, got 1e400"
    );
    let answer = send(
        &router,
        Method::POST,
        "/v1/pools/p/restock",
        None,
        br#"{"delta": -1e999}"#.to_vec(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        answer.json()["message"],
        "delta: must be a non-zero integer from -1000000000000 to 1000000000000, got -1e999"
    );
    let body = r#"{"ops": [
        {"op": "reserve", "hold_id": "a", "items": [{"pool": "p", "qty": 1e400}]},
        {"op": "reserve", "hold_id": "b", "items": [{"pool": "p", "qty": 1}]},
        1e400]}"#;
    let answer = send(&router, Method::POST, "/v1/batch", None, body).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    let results = answer.json()["results"].clone();
    assert_eq!(results[0]["status"], 422);
    assert_eq!(
        results[0]["body"]["message"],
        "ops[0]: items[0].qty: must be an integer from 1 to 1000000000, got 1e400"
    );
    assert_eq!(results[1]["status"], 201);
    assert_eq!(results[2]["status"], 422);
    assert_eq!(
        results[2]["body"]["message"],
        "ops[2]: must be an object, got 1e400"
    );
}

/// The same fields, sent to a single endpoint and as a batch op, get the same answer: status and
/// body, the batch adding only `ops[0]: ` to a decoding refusal's message. Each side runs on a fresh
/// server with the same pool, so that a created hold is created on both.
#[tokio::test]
async fn a_batch_op_is_answered_as_its_single_endpoint() {
    // (op, the hold id in the single endpoint's path, the fields as JSON text)
    let cases: Vec<(&str, Option<&str>, &str)> = vec![
        (
            "reserve",
            None,
            r#""hold_id": "h", "items": [{"pool": "p", "qty": 1}]"#,
        ),
        (
            "reserve",
            None,
            r#""hold_id": "h", "hold_id": "i", "items": [{"pool": "p", "qty": 1}]"#,
        ),
        (
            "reserve",
            None,
            r#""hold_id": "h", "items": [{"pool": "p", "qty": 1, "qty": 2}]"#,
        ),
        (
            "reserve",
            None,
            r#""hold_id": "h", "items": [{"pool": "p", "qty": 1.5}]"#,
        ),
        (
            "reserve",
            None,
            r#""hold_id": "h", "items": [{"pool": "p", "qty": 1}], "ttl": 5"#,
        ),
        (
            "reserve",
            None,
            r#""hold_id": "h", "items": [{"pool": "p", "qty": 1}], "user": null"#,
        ),
        (
            "reserve",
            None,
            r#""hold_id": "h", "items": [{"pool": "p", "qty": 1}], "ttl_ms": 10"#,
        ),
        (
            "reserve",
            None,
            r#""hold_id": "h", "items": [{"pool": "nope", "qty": 1}]"#,
        ),
        (
            "reserve",
            None,
            r#""hold_id": "-h", "items": [{"pool": "p", "qty": 1}]"#,
        ),
        ("reserve", None, r#""hold_id": "h", "items": [["p", 1]]"#),
        ("reserve", None, r#""items": [{"pool": "p", "qty": 1}]"#),
        ("reserve", None, r#""hold_id": "h", "items": {"pool": "p"}"#),
        (
            "reserve",
            None,
            r#""hold_id": "h", "items": [{"pool": "p", "qty": 99999999999999999999}]"#,
        ),
        ("extend", Some("h"), r#""ttl_ms": 60000"#),
        ("extend", Some("h"), r#""ttl_ms": "60000""#),
        ("extend", Some("h"), r#""ttl_ms": 60000, "ttl_ms": 1"#),
        ("extend", Some("h"), r#""ttl_ms": 60000, "x": 1"#),
        ("confirm", Some("h"), ""),
        ("confirm", Some("-h"), ""),
    ];
    for (op, path_hold, fields) in cases {
        let (_, single) = open_server();
        let (_, batch) = open_server();
        for router in [&single, &batch] {
            make_pool(router, "p", json!({"total": 5})).await;
        }
        let (uri, body) = match (op, path_hold) {
            ("reserve", _) => ("/v1/holds".to_string(), format!("{{{fields}}}")),
            (op, Some(hold)) => (format!("/v1/holds/{hold}/{op}"), format!("{{{fields}}}")),
            _ => unreachable!(),
        };
        let op_fields = match path_hold {
            Some(hold) if fields.is_empty() => format!(r#""hold_id": "{hold}""#),
            Some(hold) => format!(r#""hold_id": "{hold}", {fields}"#),
            None => fields.to_string(),
        };
        // The hold the path names exists on both sides for extend and confirm.
        if path_hold == Some("h") {
            for router in [&single, &batch] {
                reserve(router, hold("h", "p", 1)).await;
            }
        }
        let alone = send(&single, Method::POST, &uri, None, body.clone()).await;
        // As text: repeated keys cannot go through serde_json::Value.
        let text = format!(r#"{{"ops": [{{"op": "{op}", {op_fields}}}]}}"#);
        let batched = send(&batch, Method::POST, "/v1/batch", None, text).await;
        assert_eq!(
            batched.status,
            StatusCode::OK,
            "{op} {fields}: {}",
            batched.text()
        );
        let result = &batched.json()["results"][0];
        assert_eq!(
            result["status"],
            alone.status.as_u16(),
            "{op} {fields}: alone {} / batched {result}",
            alone.text()
        );
        // A refusal while decoding names the op (`ops[0]: `); the backend's answer is the
        // single endpoint's as it is.
        let mut expected = alone.json();
        if let (Some(message), Some(got)) = (
            expected["message"].as_str(),
            result["body"]["message"].as_str(),
        ) {
            if got.starts_with("ops[0]: ") {
                expected["message"] = format!("ops[0]: {message}").into();
            }
        }
        if fields.contains("\"x\"") && op != "reserve" {
            // The op's own fields include the hold the single endpoint takes from its path:
            // the lists of known fields differ, and only them.
            assert_eq!(result["body"]["error"], expected["error"], "{op} {fields}");
            continue;
        }
        assert_eq!(result["body"], expected, "{op} {fields}");
    }
}

/// The web console's files are served to anyone, tokens or not (they hold no data; the console
/// asks for a token to call the API), with their content type, a Content-Security-Policy that
/// allows only the page's own origin and no inline script, and revalidation by ETag.
#[tokio::test]
async fn the_console_is_served_without_a_token_with_its_security_headers() {
    let (_, router) = secured_server();
    for (method, path, status) in console_operations() {
        let answer = send(&router, method.clone(), path, None, "").await;
        assert_eq!(answer.status, status, "{method} {path}: {}", answer.text());
    }
    let redirect = get(&router, "/ui").await;
    assert_eq!(redirect.headers.get(header::LOCATION).unwrap(), "ui/");

    let page = get(&router, "/ui/").await;
    assert_eq!(page.content_type(), "text/html; charset=utf-8");
    let header_of = |answer: &Answer, name: &str| {
        answer
            .headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name}"))
            .to_str()
            .unwrap()
            .to_string()
    };
    let policy = header_of(&page, "content-security-policy");
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(policy.contains(directive), "{directive} missing: {policy}");
    }
    assert!(!policy.contains("unsafe"), "{policy}");
    assert_eq!(header_of(&page, "x-content-type-options"), "nosniff");
    assert_eq!(header_of(&page, "cache-control"), "no-cache");
    assert!(page.text().contains("assets/main.js"));

    for (asset, content_type) in [
        ("main.js", "text/javascript; charset=utf-8"),
        ("feed.js", "text/javascript; charset=utf-8"),
        ("style.css", "text/css; charset=utf-8"),
        ("icon.svg", "image/svg+xml"),
    ] {
        let answer = get(&router, &format!("/ui/assets/{asset}")).await;
        assert_eq!(answer.status, StatusCode::OK, "{asset}");
        assert_eq!(answer.content_type(), content_type, "{asset}");
        assert!(!answer.bytes.is_empty(), "{asset}");
        assert!(answer.headers.contains_key("content-security-policy"));
    }
    let missing = get(&router, "/ui/assets/nothing.js").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.code(), "not_found");
    for name in ["..%2Fmain.js", "ma%69n.js", "%ff", "main.js%00"] {
        let odd = get(&router, &format!("/ui/assets/{name}")).await;
        assert_eq!(odd.status, StatusCode::NOT_FOUND, "{name}");
        assert_eq!(odd.code(), "not_found", "{name}");
    }
    let written = send(&router, Method::POST, "/ui/", Some(ADMIN_TOKEN), "{}").await;
    assert_eq!(written.status, StatusCode::METHOD_NOT_ALLOWED);

    // A browser that has the file revalidates it for a 304 and no body; a changed file (another
    // ETag) is sent again.
    let etag = header_of(&page, "etag");
    let revalidate = |tag: String| {
        let request = axum::http::Request::builder()
            .uri("/ui/")
            .header(header::IF_NONE_MATCH, tag)
            .body(axum::body::Body::empty())
            .unwrap();
        tower::ServiceExt::oneshot(router.clone(), request)
    };
    let unchanged = revalidate(etag.clone()).await.unwrap();
    assert_eq!(unchanged.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(
        unchanged.headers().get(header::ETAG).unwrap(),
        etag.as_str()
    );
    let body = axum::body::to_bytes(unchanged.into_body(), usize::MAX)
        .await
        .unwrap();
    assert!(body.is_empty());
    let changed = revalidate("\"0000000000000000\"".into()).await.unwrap();
    assert_eq!(changed.status(), StatusCode::OK);

    // The API behind it still asks for a token.
    assert_eq!(
        get(&router, "/v1/pools").await.status,
        StatusCode::UNAUTHORIZED
    );
}
