//! Errors and limits: validation at every edge (ids, quantities, bodies, methods, sizes).
//!
//! The cases are data (see `case.rs`), run by `runner.rs`.

use serde_json::json;

use crate::case::*;

/// Identifiers that must be refused, written with `{p}` so each stays unique per case.
fn bad_ids() -> Vec<String> {
    let mut ids: Vec<String> = [
        "",
        "-{p}",
        ".{p}",
        ":{p}",
        "_{p}",
        "{p} x",
        "{p}/x",
        "{p}*x",
        "{p}@x",
        "{p}é",
        "{p}+x",
        "{p}!x",
        "{p}\u{0}x",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    ids.push(id_of_len(129));
    ids
}

/// Identifiers in a path that must be refused (percent-encoded where needed).
fn bad_path_ids() -> Vec<String> {
    let mut ids: Vec<String> = [
        "-{p}",
        ".{p}",
        ":{p}",
        "_{p}",
        "{p}%20x",
        "{p}*x",
        "{p}@x",
        "{p}%C3%A9",
        "{p}+x",
        "{p}!x",
        "{p}~x",
        "{p}%00x",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    ids.push(id_of_len(129));
    ids
}

fn as_refs(list: &[(String, u64)]) -> Vec<(&str, u64)> {
    list.iter()
        .map(|(pool, qty)| (pool.as_str(), *qty))
        .collect()
}

fn padded_body(json_text: &str, len: usize) -> Vec<u8> {
    assert!(json_text.len() <= len);
    let mut body = json_text.as_bytes().to_vec();
    body.resize(len, b' ');
    body
}

pub(crate) fn error_cases() -> Vec<Case> {
    let a = "{p}-a";
    let none = json!({});
    let invalid = || err("invalid_request");
    let mut cases = Vec::new();

    // ---- identifiers ----
    let mut pool_ids = case(
        "identifiers: pool in the path: 1 and 128 bytes accepted, bad ones refused before lookup",
    )
    .put_pool("P", json!({"total": 1}), 201, json!({"pool": "P"}))
    .put_pool(
        &id_of_len(128),
        json!({"total": 1}),
        201,
        json!({"pool": id_of_len(128)}),
    )
    .get_pool(&id_of_len(128), json!({"pool": id_of_len(128)}));
    for bad in bad_path_ids() {
        pool_ids = pool_ids
            .put_pool(&bad, json!({"total": 1}), 422, invalid())
            .get(&format!("/v1/pools/{bad}"), 422, invalid())
            .delete_pool(&bad, 422, invalid())
            .restock(&bad, 1, 422, invalid());
    }
    cases.push(pool_ids.get(
        "/v1/pools?prefix={p}",
        200,
        json!({"pools": [{"pool": id_of_len(128)}]}),
    ));

    let mut hold_ids =
        case("identifiers: hold_id: 1 and 128 bytes accepted, 0, 129 and bad characters refused")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(
                hold_req("H", &[(a, 1)], none.clone()),
                201,
                json!({"hold_id": "H"}),
            )
            .reserve(
                hold_req(&id_of_len(128), &[(a, 1)], none.clone()),
                201,
                json!({"hold_id": id_of_len(128)}),
            )
            .get_hold(&id_of_len(128), 200, status("held"));
    for bad in bad_ids() {
        hold_ids = hold_ids.reserve(hold_req(&bad, &[(a, 1)], none.clone()), 422, invalid());
    }
    for bad in [json!(5), json!(null), json!(true), json!(["x"])] {
        hold_ids = hold_ids.reserve(
            json!({"hold_id": bad, "items": [{"pool": a, "qty": 1}]}),
            422,
            invalid(),
        );
    }
    cases.push(
        hold_ids
            .reserve(json!({"items": [{"pool": a, "qty": 1}]}), 422, invalid())
            .get_pool(a, counts(10, 8, 2, 0)),
    );

    let mut hold_paths = case("identifiers: hold_id in the path is validated before lookup");
    for bad in bad_path_ids() {
        hold_paths = hold_paths
            .get_hold(&bad, 422, invalid())
            .confirm(&bad, 422, invalid())
            .release(&bad, 422, invalid())
            .refund(&bad, 422, invalid())
            .extend(&bad, 5000, 422, invalid());
    }
    cases.push(
        hold_paths
            .get_hold(&id_of_len(128), 404, err("hold_not_found"))
            .get_hold("h", 404, err("hold_not_found")),
    );

    let mut users =
        case("identifiers: user: 1 and 128 bytes accepted, 0, 129 and bad characters refused")
            .put_pool(a, json!({"total": 10, "per_user_limit": 5}), 201, json!({}))
            .reserve(
                hold_req("{p}-h1", &[(a, 1)], json!({"user": "U"})),
                201,
                json!({"user": "U"}),
            )
            .reserve(
                hold_req("{p}-h2", &[(a, 1)], json!({"user": id_of_len(128)})),
                201,
                json!({"user": id_of_len(128)}),
            );
    for bad in bad_ids() {
        users = users.reserve(
            hold_req("{p}-h3", &[(a, 1)], json!({"user": bad})),
            422,
            invalid(),
        );
    }
    cases.push(
        users
            .reserve(
                hold_req("{p}-h3", &[(a, 1)], json!({"user": 42})),
                422,
                invalid(),
            )
            .get_pool(a, counts(10, 8, 2, 0)),
    );

    let mut item_pools =
        case("identifiers: item pool: 1 and 128 bytes accepted, 0, 129 and bad characters refused")
            .reserve(
                hold_req("{p}-h", &[("Q", 1)], none.clone()),
                404,
                json!({"error": "pool_not_found", "pool": "Q"}),
            )
            .put_pool(&id_of_len(128), json!({"total": 1}), 201, json!({}))
            .reserve(
                hold_req("{p}-h", &[(&id_of_len(128), 1)], none.clone()),
                201,
                json!({"items": [{"pool": id_of_len(128), "qty": 1}]}),
            );
    for bad in bad_ids() {
        item_pools = item_pools.reserve(
            hold_req("{p}-h2", &[(&bad, 1)], none.clone()),
            422,
            invalid(),
        );
    }
    cases.push(item_pools.reserve(
        json!({"hold_id": "{p}-h2", "items": [{"pool": 7, "qty": 1}]}),
        422,
        invalid(),
    ));

    // ---- quantities ----
    let mut qty = case("qty: 1 and 1_000_000_000 accepted; 0, 1_000_000_001, negative, float, string, null refused")
        .put_pool(a, json!({"total": 3_000_000_000u64}), 201, json!({}))
        .reserve(hold_req("{p}-h1", &[(a, 1)], none.clone()), 201, json!({"items": [{"pool": a, "qty": 1}]}))
        .reserve(hold_req("{p}-h2", &[(a, 1_000_000_000)], none.clone()), 201, json!({"items": [{"pool": a, "qty": 1_000_000_000}]}));
    for bad in [
        json!(0),
        json!(1_000_000_001u64),
        json!(-1),
        json!(1.5),
        json!(1.0),
        json!("1"),
        json!(null),
        json!(true),
        json!([1]),
        json!(1e3),
    ] {
        qty = qty.reserve(
            json!({"hold_id": "{p}-h3", "items": [{"pool": a, "qty": bad}]}),
            422,
            invalid(),
        );
    }
    cases.push(
        qty.reserve(
            json!({"hold_id": "{p}-h3", "items": [{"pool": a}]}),
            422,
            invalid(),
        )
        .raw(
            "POST",
            "/v1/holds",
            r#"{"hold_id": "{p}-h3", "items": [{"pool": "{p}-a", "qty": 18446744073709551617}]}"#,
            422,
            invalid(),
        )
        .get_pool(a, counts(3_000_000_000, 1_999_999_999, 1_000_000_001, 0)),
    );

    let mut total = case(
        "total: 1_000_000_000_001, negative, float, string, null, missing refused; nothing created",
    )
    .put_pool(a, json!({}), 422, invalid());
    for bad in [
        json!(1_000_000_000_001u64),
        json!(-1),
        json!(2.5),
        json!(10.0),
        json!("10"),
        json!(null),
        json!(true),
        json!({}),
    ] {
        total = total.put_pool(a, json!({"total": bad}), 422, invalid());
    }
    cases.push(
        total
            .raw(
                "PUT",
                "/v1/pools/{p}-a",
                r#"{"total": 18446744073709551616}"#,
                422,
                invalid(),
            )
            .raw(
                "PUT",
                "/v1/pools/{p}-a",
                r#"{"total": 1e3}"#,
                422,
                invalid(),
            )
            .get("/v1/pools/{p}-a", 404, err("pool_not_found")),
    );

    cases.push(
        case("pool body: JSON that is not an object is 422")
            .put_pool(a, json!([]), 422, invalid())
            .put_pool(a, json!(42), 422, invalid())
            .put_pool(a, json!("total"), 422, invalid())
            .put_pool(a, json!(null), 422, invalid())
            .get("/v1/pools/{p}-a", 404, err("pool_not_found")),
    );

    let mut rules = case("pool rules: per_user_limit 1 and 1e9 accepted, 0 and 1e9+1 refused; low_stock_threshold >= 0")
        .put_pool(a, json!({"total": 5, "per_user_limit": 1}), 201, json!({"per_user_limit": 1}))
        .put_pool(a, json!({"total": 5, "per_user_limit": 1_000_000_000}), 200, json!({"per_user_limit": 1_000_000_000}))
        .put_pool(a, json!({"total": 5, "low_stock_threshold": 0}), 200, json!({"low_stock_threshold": 0, "per_user_limit": null}));
    for bad in [
        json!(0),
        json!(1_000_000_001u64),
        json!(-1),
        json!(1.5),
        json!("2"),
        json!(true),
    ] {
        rules = rules.put_pool(
            a,
            json!({"total": 6, "per_user_limit": bad}),
            422,
            invalid(),
        );
    }
    for bad in [json!(-1), json!(1.5), json!("1"), json!(false)] {
        rules = rules.put_pool(
            a,
            json!({"total": 6, "low_stock_threshold": bad}),
            422,
            invalid(),
        );
    }
    for field in ["starts_at_ms", "ends_at_ms"] {
        for bad in [json!("soon"), json!(1.5), json!(true), json!([1])] {
            rules = rules.put_pool(a, json!({"total": 6, field: bad}), 422, invalid());
        }
    }
    cases.push(
        rules
            .put_pool(a, json!({"total": 6, "totl": 6}), 422, invalid())
            .put_pool(a, json!({"total": 6, "per_user_limt": 6}), 422, invalid())
            .get_pool(
                a,
                json!({"total": 5, "low_stock_threshold": 0, "per_user_limit": null}),
            ),
    );

    cases.push(
        case("restock: delta 0, missing, float, string, null and unknown fields are 422")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .req(
                "POST",
                "/v1/pools/{p}-a/restock",
                Some(json!({"delta": 0})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/pools/{p}-a/restock",
                Some(json!({})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/pools/{p}-a/restock",
                Some(json!({"delta": 1.5})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/pools/{p}-a/restock",
                Some(json!({"delta": "1"})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/pools/{p}-a/restock",
                Some(json!({"delta": null})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/pools/{p}-a/restock",
                Some(json!({"delta": 1, "x": 1})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/pools/{p}-a/restock",
                Some(json!({"total": 1})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/pools/{p}-nope/restock",
                Some(json!({"delta": 0})),
                422,
                invalid(),
            )
            .get_pool(a, counts(5, 5, 0, 0)),
    );

    // ---- items ----
    let pools64: Vec<(String, u64)> = (0..65).map(|i| (format!("{{p}}-{i:02}"), 1)).collect();
    let mut items_case =
        case("items: 1 and 64 accepted; 0, 65, a repeated pool and wrong shapes refused");
    for (pool, _) in &pools64 {
        items_case = items_case.put_pool(pool, json!({"total": 2}), 201, json!({}));
    }
    items_case = items_case
        .reserve(
            hold_req("{p}-h65", &as_refs(&pools64), none.clone()),
            422,
            invalid(),
        )
        .reserve(
            hold_req("{p}-h64", &as_refs(&pools64[..64]), none.clone()),
            201,
            json!({"items": {"$len": 64}}),
        )
        .reserve(
            hold_req("{p}-h1", &as_refs(&pools64[..1]), none.clone()),
            201,
            json!({"items": {"$len": 1}}),
        )
        .reserve(hold_req("{p}-h0", &[], none.clone()), 422, invalid())
        .reserve(
            hold_req("{p}-hd", &[("{p}-64", 1), ("{p}-64", 1)], none.clone()),
            422,
            invalid(),
        )
        .reserve(
            hold_req(
                "{p}-hd",
                &[("{p}-64", 1), ("{p}-63", 1), ("{p}-64", 1)],
                none.clone(),
            ),
            422,
            invalid(),
        )
        .reserve(json!({"hold_id": "{p}-hx"}), 422, invalid())
        .reserve(json!({"hold_id": "{p}-hx", "items": null}), 422, invalid())
        .reserve(
            json!({"hold_id": "{p}-hx", "items": {"pool": "{p}-64", "qty": 1}}),
            422,
            invalid(),
        )
        .reserve(json!({"hold_id": "{p}-hx", "items": [1]}), 422, invalid())
        .reserve(
            json!({"hold_id": "{p}-hx", "items": [{"qty": 1}]}),
            422,
            invalid(),
        )
        .reserve(
            json!({"hold_id": "{p}-hx", "items": [{"pool": "{p}-64", "qty": 1, "x": 1}]}),
            422,
            invalid(),
        )
        .get_pool("{p}-00", counts(2, 0, 2, 0))
        .get_pool("{p}-63", counts(2, 1, 1, 0))
        .get_pool("{p}-64", counts(2, 2, 0, 0));
    cases.push(items_case);

    // ---- times ----
    let mut ttl = case("ttl_ms on reserve: 999 and 86_400_001 refused, and wrong types");
    for bad in [
        json!(999),
        json!(86_400_001),
        json!(0),
        json!(-1),
        json!(1000.5),
        json!("1000"),
        json!(true),
    ] {
        ttl = ttl.reserve(
            hold_req("{p}-h", &[(a, 1)], json!({"ttl_ms": bad})),
            422,
            invalid(),
        );
    }
    cases.push(
        ttl.put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"ttl": 1000})),
                422,
                invalid(),
            )
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"ttl_ms": 999})),
                422,
                invalid(),
            )
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"ttl_ms": 1000})),
                201,
                json!({"expires_at_ms": "$now+1000"}),
            ),
    );

    let mut extend =
        case("ttl_ms on extend: 1000 and 86_400_000 accepted, 999 and 86_400_001 refused")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(
                hold_req("{p}-h", &[(a, 1)], none.clone()),
                201,
                json!({"expires_at_ms": "$save:first"}),
            );
    for bad in [
        json!(999),
        json!(86_400_001),
        json!(0),
        json!(-5),
        json!(1000.5),
        json!("1000"),
        json!(null),
    ] {
        extend = extend.req(
            "POST",
            "/v1/holds/{p}-h/extend",
            Some(json!({"ttl_ms": bad})),
            422,
            invalid(),
        );
    }
    cases.push(
        extend
            .req(
                "POST",
                "/v1/holds/{p}-h/extend",
                Some(json!({})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/holds/{p}-h/extend",
                Some(json!({"ttl": 5000})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/holds/{p}-h/extend",
                Some(json!({"ttl_ms": 5000, "x": 1})),
                422,
                invalid(),
            )
            .get_hold("{p}-h", 200, json!({"expires_at_ms": "$same:first"}))
            .extend("{p}-h", 1000, 200, json!({"expires_at_ms": "$now+1000"}))
            .extend(
                "{p}-h",
                86_400_000,
                200,
                json!({"expires_at_ms": "$now+86400000"}),
            ),
    );

    let mut wait = case("wait_ms on reserve: 30_000 accepted, 30_001 and wrong types refused")
        .put_pool(a, json!({"total": 1}), 201, json!({}));
    for bad in [
        json!(30_001),
        json!(-1),
        json!(1.5),
        json!("0"),
        json!(true),
    ] {
        wait = wait.reserve(
            hold_req("{p}-h", &[(a, 1)], json!({"wait_ms": bad})),
            422,
            invalid(),
        );
    }
    cases.push(wait.reserve(
        hold_req("{p}-h", &[(a, 1)], json!({"wait_ms": 30_000})),
        201,
        status("held"),
    ));

    cases.push(
        case("confirm flag: only booleans")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"confirm": "true"})),
                422,
                invalid(),
            )
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"confirm": 1})),
                422,
                invalid(),
            )
            .get_pool(a, counts(1, 1, 0, 0)),
    );

    cases.push(
        case("unknown fields are refused: a typo such as ttl for ttl_ms is caught")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"ttl": 1000})),
                422,
                invalid(),
            )
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"usr": "u1"})),
                422,
                invalid(),
            )
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"confirmed": true})),
                422,
                invalid(),
            )
            .get_pool(a, counts(1, 1, 0, 0))
            .get_hold("{p}-h", 404, err("hold_not_found")),
    );

    cases.push(
        case("hold body: JSON that is not an object is 422")
            .reserve(json!([]), 422, invalid())
            .reserve(json!(1), 422, invalid())
            .reserve(json!(null), 422, invalid())
            .reserve(json!("hold"), 422, invalid()),
    );

    cases.push(
        case("batch body: wrong shapes are 422 and apply nothing")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .req("POST", "/v1/batch", Some(json!({})), 422, invalid())
            .req("POST", "/v1/batch", Some(json!({"ops": {}})), 422, invalid())
            .req("POST", "/v1/batch", Some(json!({"ops": null})), 422, invalid())
            .req("POST", "/v1/batch", Some(json!([{"op": "confirm", "hold_id": "{p}-h"}])), 422, invalid())
            .req(
                "POST",
                "/v1/batch",
                Some(json!({"ops": [{"op": "reserve", "hold_id": "{p}-h", "items": [{"pool": a, "qty": 1}]}], "x": 1})),
                422,
                invalid(),
            )
            .get_pool(a, counts(1, 1, 0, 0)),
    );

    // ---- query parameters ----
    cases.push(
        case("events query: limit 1000 and wait_ms 30000 accepted; limit 1001, wait_ms 30001 and bad values refused")
            .put_pool(a, json!({"total": 1}), 201, json!({"partition": "$partition:pa"}))
            .get("/v1/events?partition={$pa}&after=0&limit=1000", 200, json!({"events": "$any", "next_after": "$int"}))
            .get("/v1/events?partition={$pa}&after=0&limit=1&wait_ms=30000", 200, json!({"events": {"$len": 1}, "next_after": "$int"}))
            .get("/v1/events?partition={$pa}&after=0&limit=1001", 422, invalid())
            .get("/v1/events?partition={$pa}&after=0&wait_ms=30001", 422, invalid())
            .get("/v1/events?partition={$pa}&after=0&limit=abc", 422, invalid())
            .get("/v1/events?partition={$pa}&after=0&limit=-1", 422, invalid())
            .get("/v1/events?partition={$pa}&after=0&limit=1.5", 422, invalid())
            .get("/v1/events?partition={$pa}&after=-1", 422, invalid())
            .get("/v1/events?partition={$pa}&after=x", 422, invalid())
            .get("/v1/events?partition={$pa}&after=0&wait_ms=1.5", 422, invalid())
            .get("/v1/events?partition={$pa}&after=0&wait_ms=-1", 422, invalid())
            .get("/v1/events?after=0&partition=0", 200, json!({"events": "$any", "next_after": "$int"}))
            .get("/v1/events?after=0&partition={P-1}", 200, json!({"events": "$any", "next_after": "$int"}))
            .get("/v1/events?after=0&partition={P}", 422, invalid())
            .get("/v1/events?after=0&partition=x", 422, invalid()),
    );
    cases.push(
        case("events query: with one partition, the same bounds hold without partition")
            .only(When::OnePartition)
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .get(
                "/v1/events?after=0&limit=1000",
                200,
                json!({"events": "$any", "next_after": "$int"}),
            )
            .get(
                "/v1/events?after=0&limit=1&wait_ms=30000",
                200,
                json!({"events": {"$len": 1}, "next_after": "$int"}),
            )
            .get("/v1/events?after=0&limit=1001", 422, invalid())
            .get("/v1/events?after=0&wait_ms=30001", 422, invalid())
            .get("/v1/events?after=0&limit=abc", 422, invalid())
            .get("/v1/events?after=0&limit=-1", 422, invalid())
            .get("/v1/events?after=0&limit=1.5", 422, invalid())
            .get("/v1/events?after=-1", 422, invalid())
            .get("/v1/events?after=x", 422, invalid())
            .get("/v1/events?after=0&wait_ms=1.5", 422, invalid())
            .get("/v1/events?after=0&wait_ms=-1", 422, invalid()),
    );
    cases.push(
        case("pools list query: limit 1000 accepted; 1001 and bad values refused")
            .get(
                "/v1/pools?prefix={p}&limit=1000",
                200,
                json!({"pools": [], "next": null}),
            )
            .get("/v1/pools?limit=1001", 422, invalid())
            .get("/v1/pools?limit=x", 422, invalid())
            .get("/v1/pools?limit=-1", 422, invalid())
            .put_pool("{p}-a?if_absent=maybe", json!({"total": 1}), 422, invalid())
            .get("/v1/pools/{p}-a", 404, err("pool_not_found")),
    );

    // ---- malformed JSON ----
    let malformed: Vec<&[u8]> = vec![
        b"{\"total\": ",
        b"not json",
        b"{\"total\": 1,}",
        b"{\"total\": 1} x",
        b"{'total': 1}",
        b"\xff\xfe{}",
        b"{\"total\": 1",
        b"[",
    ];
    let routes: [(&'static str, &str); 8] = [
        ("PUT", "/v1/pools/{p}-a"),
        ("POST", "/v1/pools/{p}-a/restock"),
        ("POST", "/v1/holds"),
        ("POST", "/v1/holds/{p}-h/extend"),
        ("POST", "/v1/batch"),
        ("POST", "/v1/locks/{p}-l/acquire"),
        ("POST", "/v1/locks/{p}-l/renew"),
        ("POST", "/v1/locks/{p}-l/release"),
    ];
    // One case per route and body, so every wrong answer is reported, not only the first.
    for (method, path) in routes {
        for body in &malformed {
            let shown = String::from_utf8_lossy(body).escape_debug().to_string();
            cases.push(
                case(&format!(
                    "malformed JSON on {method} {path} is 400 invalid_json: {shown}"
                ))
                .raw(method, path, body.to_vec(), 400, err("invalid_json"))
                .get("/v1/pools/{p}-a", 404, err("pool_not_found")),
            );
        }
    }

    // ---- body size ----
    cases.push(
        case("body size: exactly 1 MiB is accepted, 1 MiB + 1 byte is 413 payload_too_large")
            .raw(
                "PUT",
                "/v1/pools/{p}-a",
                padded_body(r#"{"total": 1}"#, BODY_LIMIT_BYTES + 1),
                413,
                err("payload_too_large"),
            )
            .get("/v1/pools/{p}-a", 404, err("pool_not_found"))
            .raw(
                "PUT",
                "/v1/pools/{p}-a",
                padded_body(r#"{"total": 1}"#, BODY_LIMIT_BYTES),
                201,
                counts(1, 1, 0, 0),
            )
            .raw(
                "POST",
                "/v1/holds",
                padded_body(
                    r#"{"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 1}]}"#,
                    BODY_LIMIT_BYTES + 1,
                ),
                413,
                err("payload_too_large"),
            )
            .raw(
                "POST",
                "/v1/batch",
                padded_body(
                    r#"{"ops": [{"op": "confirm", "hold_id": "{p}-h"}]}"#,
                    BODY_LIMIT_BYTES + 1,
                ),
                413,
                err("payload_too_large"),
            )
            .get_pool("{p}-a", counts(1, 1, 0, 0))
            .get_hold("{p}-h", 404, err("hold_not_found")),
    );

    // ---- routing ----
    let mut not_found = case("unknown routes are 404 not_found");
    for (method, path) in [
        ("GET", "/v1/nope"),
        ("GET", "/nope"),
        ("GET", "/v2/pools"),
        ("POST", "/v1/pools/{p}-a/nope"),
        ("GET", "/v1/holds/{p}-h/nope/more"),
        ("POST", "/v1/locks/{p}-l/steal"),
    ] {
        not_found = not_found.req(method, path, None, 404, err("not_found"));
    }
    cases.push(not_found);

    let mut wrong_method = case("known routes with the wrong method are 405 method_not_allowed");
    for (method, path) in [
        ("DELETE", "/v1/holds"),
        ("PUT", "/v1/holds"),
        ("GET", "/v1/holds/{p}-h/confirm"),
        ("GET", "/v1/holds/{p}-h/release"),
        ("PUT", "/v1/holds/{p}-h"),
        ("DELETE", "/v1/holds/{p}-h"),
        ("PATCH", "/v1/pools/{p}-a"),
        ("POST", "/v1/pools/{p}-a"),
        ("GET", "/v1/pools/{p}-a/restock"),
        ("DELETE", "/v1/pools"),
        ("GET", "/v1/batch"),
        ("POST", "/v1/events"),
        ("POST", "/v1/events/partitions"),
        ("DELETE", "/v1/events/partitions"),
        ("GET", "/v1/locks/{p}-l/acquire"),
        ("POST", "/healthz"),
    ] {
        wrong_method = wrong_method.req(method, path, None, 405, err("method_not_allowed"));
    }
    cases.push(wrong_method.get("/v1/pools/{p}-a", 404, err("pool_not_found")));

    cases
}
