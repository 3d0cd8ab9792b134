//! Lock cases (acquire, renew, release, fencing tokens), and fencing tokens across restarts.
//!
//! The cases are data (see `case.rs`), run by `runner.rs`.

use std::time::Duration;

use serde_json::json;

use crate::case::*;
use crate::support::{now_ms, Api, Server};

/// A token no server hands out in these tests.
const WRONG_TOKEN: u64 = 987_654_321_987;

pub(crate) fn lock_cases() -> Vec<Case> {
    let l = "{p}-lock";
    vec![
        case("lock: acquire is 200 with a token; others and the owner itself get lock_held")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 10_000}), 200, json!({"token": "$save:t1", "expires_at_ms": "$now+10000"}))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 1000}), 409, json!({"error": "lock_held", "expires_at_ms": "$int"}))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 409, json!({"error": "lock_held", "expires_at_ms": "$int"}))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 20_000}), 200, json!({"token": "$same:t1", "expires_at_ms": "$now+20000"}))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 30_000}), 200, json!({"token": "$same:t1", "expires_at_ms": "$save:e1"}))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 1000}), 409, json!({"error": "lock_held", "expires_at_ms": "$same:e1"}))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}"}), 200, json!({"released": true}))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 1000}), 200, json!({"token": "$gt:t1", "expires_at_ms": "$now+1000"})),
        case("lock: a wrong owner or token is not_lock_owner and changes nothing")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 10_000}), 200, json!({"token": "$save:t1"}))
            .lock(l, "renew", json!({"owner": "o2", "token": "{$t1}", "ttl_ms": 1000}), 409, err("not_lock_owner"))
            .lock(l, "renew", json!({"owner": "o1", "token": WRONG_TOKEN, "ttl_ms": 1000}), 409, err("not_lock_owner"))
            .lock(l, "release", json!({"owner": "o2", "token": "{$t1}"}), 409, err("not_lock_owner"))
            .lock(l, "release", json!({"owner": "o1", "token": WRONG_TOKEN}), 409, err("not_lock_owner"))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 1000}), 409, err("lock_held"))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 1000}), 200, json!({"token": "$same:t1"}))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}"}), 200, json!({"released": true})),
        case("lock: renew or release of a never-acquired lock is not_lock_owner")
            .lock(l, "renew", json!({"owner": "o1", "token": WRONG_TOKEN, "ttl_ms": 1000}), 409, err("not_lock_owner"))
            .lock(l, "release", json!({"owner": "o1", "token": WRONG_TOKEN}), 409, err("not_lock_owner")),
        case("lock: an expired lease is free for others; its old owner gets not_lock_owner")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 100}), 200, json!({"token": "$save:t1", "expires_at_ms": "$save:e1"}))
            .wait_past("e1")
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 10_000}), 200, json!({"token": "$gt:t1"}))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 1000}), 409, err("not_lock_owner"))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}"}), 409, err("not_lock_owner"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 409, err("lock_held")),
        case("lock: an expired lease cannot be renewed or released by its owner, even if nobody took it")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 100}), 200, json!({"token": "$save:t1", "expires_at_ms": "$save:e1"}))
            .wait_past("e1")
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 1000}), 409, err("not_lock_owner"))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}"}), 409, err("not_lock_owner"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 200, json!({"token": "$gt:t1"})),
        case("lock: fencing tokens strictly increase per name over acquisitions")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 5000}), 200, json!({"token": "$save:t1"}))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}"}), 200, json!({"released": true}))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 5000}), 200, json!({"token": "$gt:t1"}))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 5000}), 409, err("lock_held"))
            .lock("{p}-other", "acquire", json!({"owner": "o1", "ttl_ms": 5000}), 200, json!({"token": "$int"}))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 5000}), 409, err("not_lock_owner")),
        case("lock: tokens of successive holders increase")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 5000}), 200, json!({"token": "$save:t1"}))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}"}), 200, json!({"released": true}))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 5000}), 200, json!({"token": "$gt:t1"}))
            .lock(l, "renew", json!({"owner": "o2", "token": "{$t1}", "ttl_ms": 5000}), 409, err("not_lock_owner")),
        case("lock: acquire with wait_ms gets the lock once the lease runs out")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 300}), 200, json!({"token": "$save:t1"}))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 1000, "wait_ms": 5000}), 200, json!({"token": "$gt:t1"})),
        case("lock: acquire with wait_ms gives up with lock_held when the lease outlives it")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 60_000}), 200, json!({"token": "$save:t1"}))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 1000, "wait_ms": 200}), 409, json!({"error": "lock_held", "expires_at_ms": "$int"})),
        case("lock: different names are independent")
            .lock("{p}-l1", "acquire", json!({"owner": "o1", "ttl_ms": 5000}), 200, json!({"token": "$int"}))
            .lock("{p}-l2", "acquire", json!({"owner": "o2", "ttl_ms": 5000}), 200, json!({"token": "$int"}))
            .lock("{p}-l2", "acquire", json!({"owner": "o1", "ttl_ms": 5000}), 409, err("lock_held")),
        case("lock: ttl_ms edges: 100 and 3_600_000 accepted")
            .lock("{p}-l1", "acquire", json!({"owner": "o1", "ttl_ms": 100}), 200, json!({"expires_at_ms": "$now+100"}))
            .lock("{p}-l2", "acquire", json!({"owner": "o1", "ttl_ms": 3_600_000}), 200, json!({"token": "$save:t2", "expires_at_ms": "$now+3600000"}))
            .lock("{p}-l2", "renew", json!({"owner": "o1", "token": "{$t2}", "ttl_ms": 100}), 200, json!({"expires_at_ms": "$now+100"}))
            .lock("{p}-l2", "renew", json!({"owner": "o1", "token": "{$t2}", "ttl_ms": 3_600_000}), 200, json!({"expires_at_ms": "$now+3600000"})),
        case("lock: ttl_ms edges: 99 and 3_600_001 refused on acquire and renew")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 99}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 3_600_001}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 5000}), 200, json!({"token": "$save:t1"}))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 99}), 422, err("invalid_request"))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 3_600_001}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 100}), 409, err("lock_held")),
        case("lock: wait_ms edges: 30_000 accepted, 30_001 refused")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000, "wait_ms": 30_001}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000, "wait_ms": 30_000}), 200, json!({"token": "$int"})),
        case("lock: null wait_ms is the same as absent")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000, "wait_ms": null}), 200, json!({"token": "$int"})),
        case("lock: required fields, unknown fields and wrong types are 422")
            .lock(l, "acquire", json!({"ttl_ms": 1000}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1"}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000, "ttl": 5}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": "1000"}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000.5}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": -1000}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": 7, "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 200, json!({"token": "$save:t1"}))
            .lock(l, "renew", json!({"owner": "o1", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}"}), 422, err("invalid_request"))
            .lock(l, "renew", json!({"owner": "o1", "token": "x", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock(l, "renew", json!({"owner": "o1", "token": 1.5, "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 1000, "x": 1}), 422, err("invalid_request"))
            .lock(l, "release", json!({"owner": "o1"}), 422, err("invalid_request"))
            .lock(l, "release", json!({"token": "{$t1}"}), 422, err("invalid_request"))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}", "x": 1}), 422, err("invalid_request"))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}"}), 200, json!({"released": true})),
        case("lock: lock name and owner identifiers at their edges")
            .lock("K", "acquire", json!({"owner": "O", "ttl_ms": 1000}), 200, json!({"token": "$int"}))
            .lock(&id_of_len(128), "acquire", json!({"owner": id_of_len(128), "ttl_ms": 1000}), 200, json!({"token": "$int"}))
            .lock(&id_of_len(129), "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock("{p}-l", "acquire", json!({"owner": id_of_len(129), "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock("{p}-l", "acquire", json!({"owner": "", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock("{p}-l", "acquire", json!({"owner": "-o", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock("{p}-l", "acquire", json!({"owner": "o o", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock("-{p}", "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock("{p}*l", "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock("{p}%20l", "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 422, err("invalid_request")),
        case("lock: locks append no events")
            .put_pool("{p}-a", json!({"total": 1}), 201, json!({}))
            .lock("{p}-l", "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 200, json!({"token": "$save:t1"}))
            .lock("{p}-l", "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 1000}), 200, json!({}))
            .lock("{p}-l", "release", json!({"owner": "o1", "token": "{$t1}"}), 200, json!({}))
            .events(json!([ev("pool_upserted", json!({"pool": "{p}-a"}))])),
    ]
}

/// Fencing tokens strictly increase per lock name across all acquisitions, restarts included:
/// after a released lease, after a lease that ran out while the server was down, and after a
/// graceful stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_increase_across_restarts() {
    let mut server = Server::start().await;
    let acquire = |api: Api, name: &'static str, ttl_ms: u64| async move {
        let (status, body) = api
            .call(
                "POST",
                &format!("/v1/locks/{name}/acquire"),
                Some(json!({"owner": "o1", "ttl_ms": ttl_ms})),
            )
            .await;
        assert_eq!(status, 200, "acquire {name}: {body}");
        (
            body["token"].as_u64().expect("integer token"),
            body["expires_at_ms"].as_u64().expect("expires_at_ms"),
        )
    };

    let (t1, _) = acquire(server.api(), "fence", 5000).await;
    let (status, body) = server
        .api()
        .call(
            "POST",
            "/v1/locks/fence/release",
            Some(json!({"owner": "o1", "token": t1})),
        )
        .await;
    expect_subset(status, &body, json!({"released": true}), "release");

    server.restart().await;
    let (t2, expires) = acquire(server.api(), "fence", 100).await;
    assert!(
        t2 > t1,
        "after SIGKILL + restart: token {t2} not above {t1}"
    );

    // Let the lease run out across a restart, then take it again.
    server.restart().await;
    while now_ms() <= expires {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (t3, _) = acquire(server.api(), "fence", 5000).await;
    assert!(
        t3 > t2,
        "expired lease after restart: token {t3} not above {t2}"
    );
    let (status, body) = server
        .api()
        .call(
            "POST",
            "/v1/locks/fence/renew",
            Some(json!({"owner": "o1", "token": t2, "ttl_ms": 1000})),
        )
        .await;
    assert_eq!(
        (status, body["error"].clone()),
        (409, json!("not_lock_owner")),
        "old token after restart"
    );

    // A held lease survives a restart: still held, same token renews.
    server.stop_graceful().await;
    server.start_again().await;
    let (status, body) = server
        .api()
        .call(
            "POST",
            "/v1/locks/fence/acquire",
            Some(json!({"owner": "o2", "ttl_ms": 1000})),
        )
        .await;
    assert_eq!(
        (status, body["error"].clone()),
        (409, json!("lock_held")),
        "lease lost on graceful restart: {body}"
    );
    let (status, body) = server
        .api()
        .call(
            "POST",
            "/v1/locks/fence/release",
            Some(json!({"owner": "o1", "token": t3})),
        )
        .await;
    expect_subset(
        status,
        &body,
        json!({"released": true}),
        "release after a graceful restart",
    );
    let (t4, _) = acquire(server.api(), "fence", 5000).await;
    assert!(t4 > t3, "after graceful restart: token {t4} not above {t3}");
}
