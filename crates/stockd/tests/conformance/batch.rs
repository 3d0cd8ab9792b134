//! Batch cases: a script of ops run in one `POST /v1/batch`, each op answered as its single
//! endpoint would.
//!
//! The cases are data (see `case.rs`), run by `runner.rs`.

use serde_json::{json, Value};

use crate::case::*;

/// One op with the single endpoint's expected answer. The batch case and the single-endpoint case
/// are built from the same list, so "each op gets exactly the single endpoint's result" is checked
/// by both cases passing against the same expectations.
fn batch_script() -> Vec<(Value, u16, Value)> {
    let a = "{p}-a";
    vec![
        (
            json!({"op": "reserve", "hold_id": "{p}-h1", "items": [{"pool": a, "qty": 2}]}),
            201,
            json!({"hold_id": "{p}-h1", "status": "held", "finished_at_ms": null}),
        ),
        (
            json!({"op": "reserve", "hold_id": "{p}-h2", "items": [{"pool": a, "qty": 2}]}),
            409,
            json!({"error": "insufficient_stock", "pool": a, "available": 1, "requested": 2}),
        ),
        (
            json!({"op": "confirm", "hold_id": "{p}-h1"}),
            200,
            json!({"hold_id": "{p}-h1", "status": "confirmed"}),
        ),
        (
            json!({"op": "release", "hold_id": "{p}-h1"}),
            409,
            err("hold_confirmed"),
        ),
        (
            json!({"op": "refund", "hold_id": "{p}-h1"}),
            200,
            status("refunded"),
        ),
        (
            json!({"op": "refund", "hold_id": "{p}-h1"}),
            200,
            status("refunded"),
        ),
        (
            json!({"op": "confirm", "hold_id": "{p}-nope"}),
            404,
            err("hold_not_found"),
        ),
        (
            json!({"op": "reserve", "hold_id": "{p}-h3", "user": "u1", "items": [{"pool": a, "qty": 1}], "ttl_ms": 5000}),
            201,
            json!({"status": "held", "user": "u1", "expires_at_ms": "$now+5000"}),
        ),
        (
            json!({"op": "extend", "hold_id": "{p}-h3", "ttl_ms": 60_000}),
            200,
            json!({"status": "held", "expires_at_ms": "$now+60000"}),
        ),
        (
            json!({"op": "release", "hold_id": "{p}-h3"}),
            200,
            status("released"),
        ),
        (
            json!({"op": "reserve", "hold_id": "{p}-h1", "items": [{"pool": a, "qty": 2}]}),
            200,
            status("refunded"),
        ),
        (
            json!({"op": "reserve", "hold_id": "{p}-h1", "items": [{"pool": a, "qty": 1}]}),
            409,
            err("hold_id_conflict"),
        ),
        (
            json!({"op": "refund", "hold_id": "{p}-h3"}),
            409,
            err("hold_not_confirmed"),
        ),
        (
            json!({"op": "extend", "hold_id": "{p}-h3", "ttl_ms": 5000}),
            409,
            err("hold_released"),
        ),
        (
            json!({"op": "reserve", "hold_id": "{p}-h4", "items": [{"pool": a, "qty": 3}], "confirm": true}),
            201,
            status("confirmed"),
        ),
        (
            json!({"op": "confirm", "hold_id": "{p}-h4"}),
            200,
            status("confirmed"),
        ),
        (
            json!({"op": "reserve", "hold_id": "{p}-h5", "items": [{"pool": a, "qty": 1}]}),
            409,
            json!({"error": "insufficient_stock", "pool": a, "available": 0, "requested": 1}),
        ),
        (
            json!({"op": "reserve", "hold_id": "{p}-h5", "items": [{"pool": "{p}-m", "qty": 1}]}),
            404,
            json!({"error": "pool_not_found", "pool": "{p}-m"}),
        ),
        (
            json!({"op": "release", "hold_id": "{p}-h4"}),
            409,
            err("hold_confirmed"),
        ),
    ]
}

fn batch_script_events() -> Value {
    json!([
        ev("pool_upserted", json!({"pool": "{p}-a"})),
        ev("held", json!({"hold_id": "{p}-h1"})),
        ev("confirmed", json!({"hold_id": "{p}-h1"})),
        ev("refunded", json!({"hold_id": "{p}-h1"})),
        ev("held", json!({"hold_id": "{p}-h3", "user": "u1"})),
        ev("extended", json!({"hold_id": "{p}-h3"})),
        ev("released", json!({"hold_id": "{p}-h3"})),
        ev("held", json!({"hold_id": "{p}-h4"})),
        ev("confirmed", json!({"hold_id": "{p}-h4"})),
    ])
}

/// The single-endpoint form of a batch op.
fn single_step(case: Case, op: &Value, status: u16, expect: Value) -> Case {
    let hold = op["hold_id"].as_str().expect("hold_id").to_string();
    match op["op"].as_str().expect("op") {
        "reserve" => {
            let mut body = op.clone();
            body.as_object_mut().unwrap().remove("op");
            case.reserve(body, status, expect)
        }
        "extend" => case.extend(&hold, op["ttl_ms"].as_u64().unwrap(), status, expect),
        verb @ ("confirm" | "release" | "refund") => case.req(
            "POST",
            &format!("/v1/holds/{hold}/{verb}"),
            None,
            status,
            expect,
        ),
        other => panic!("unknown op {other}"),
    }
}

pub(crate) fn batch_cases() -> Vec<Case> {
    let a = "{p}-a";
    let script = batch_script();
    let mut single = case(
        "batch: the script through single endpoints (reference for the batch case)",
    )
    .put_pool(a, json!({"total": 3}), 201, json!({}));
    for (op, status, expect) in &script {
        single = single_step(single, op, *status, expect.clone());
    }
    single = single
        .get_pool(a, counts(3, 0, 0, 3))
        .events(batch_script_events());

    let ops: Vec<Value> = script.iter().map(|(op, _, _)| op.clone()).collect();
    let results: Vec<Value> = script
        .iter()
        .map(|(_, status, body)| json!({"status": status, "body": body}))
        .collect();
    let batched =
        case("batch: the same script in one batch gives every single-endpoint answer, in order")
            .put_pool(a, json!({"total": 3}), 201, json!({}))
            .batch(json!(ops), 200, json!({"results": results}))
            .get_pool(a, counts(3, 0, 0, 3))
            .get_hold("{p}-h1", 200, status("refunded"))
            .get_hold("{p}-h4", 200, status("confirmed"))
            .events(batch_script_events());

    let b = "{p}-b";
    let refund_without_restock = case("batch: a refund op takes restock, as its single endpoint")
        .put_pool(a, json!({"total": 5}), 201, json!({}))
        .put_pool(b, json!({"total": 5}), 201, json!({}))
        .reserve(
            hold_req("{p}-h1", &[(a, 2), (b, 1)], json!({"confirm": true})),
            201,
            status("confirmed"),
        )
        .reserve(
            hold_req("{p}-h2", &[(a, 1)], json!({"confirm": true})),
            201,
            status("confirmed"),
        )
        .batch(
            json!([
                {"op": "refund", "hold_id": "{p}-h1", "restock": "no"},
                {"op": "refund", "hold_id": "{p}-h1", "restock": false},
                {"op": "refund", "hold_id": "{p}-h1", "restock": true},
                {"op": "refund", "hold_id": "{p}-h2", "restock": null},
            ]),
            200,
            json!({"results": [
                {"status": 422, "body": {"error": "invalid_request"}},
                {"status": 200, "body": {"hold_id": "{p}-h1", "status": "refunded"}},
                {"status": 200, "body": {"hold_id": "{p}-h1", "status": "refunded"}},
                {"status": 200, "body": {"hold_id": "{p}-h2", "status": "refunded"}},
            ]}),
        )
        .get_pool(a, counts(3, 3, 0, 0))
        .get_pool(b, counts(4, 4, 0, 0))
        .events(json!([
            ev("pool_upserted", json!({"pool": a})),
            ev("pool_upserted", json!({"pool": b})),
            ev("held", json!({"hold_id": "{p}-h1"})),
            ev("confirmed", json!({"hold_id": "{p}-h1"})),
            ev("held", json!({"hold_id": "{p}-h2"})),
            ev("confirmed", json!({"hold_id": "{p}-h2"})),
            ev("refunded", json!({"hold_id": "{p}-h1", "restock": false})),
            ev("refunded", json!({"hold_id": "{p}-h2", "restock": true})),
        ]));

    let thousand: Vec<Value> = (0..1000)
        .map(|i| json!({"op": "reserve", "hold_id": format!("{{p}}-h{i}"), "items": [{"pool": a, "qty": 1}]}))
        .collect();
    let thousand_results: Vec<Value> = (0..1000)
        .map(|i| json!({"status": 201, "body": {"hold_id": format!("{{p}}-h{i}")}}))
        .collect();
    let mut too_many = thousand.clone();
    too_many
        .push(json!({"op": "reserve", "hold_id": "{p}-h1000", "items": [{"pool": a, "qty": 1}]}));

    vec![
        single,
        batched,
        refund_without_restock,
        case("batch: one op is accepted")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .batch(json!([{"op": "reserve", "hold_id": "{p}-h", "items": [{"pool": a, "qty": 1}]}]), 200, json!({"results": [{"status": 201, "body": status("held")}]}))
            .get_pool(a, counts(1, 0, 1, 0)),
        case("batch: 1000 ops are accepted and all applied")
            .put_pool(a, json!({"total": 1000}), 201, json!({}))
            .batch(json!(thousand), 200, json!({"results": thousand_results}))
            .get_pool(a, counts(1000, 0, 1000, 0))
            .get_hold("{p}-h999", 200, status("held")),
        case("batch: 0 ops and 1001 ops are 422 invalid_request and apply nothing")
            .put_pool(a, json!({"total": 2000}), 201, json!({}))
            .batch(json!([]), 422, err("invalid_request"))
            .batch(json!(too_many), 422, err("invalid_request"))
            .get_pool(a, counts(2000, 2000, 0, 0))
            .get_hold("{p}-h0", 404, err("hold_not_found")),
        case("batch: ops are independent: a failing op does not stop the next")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .batch(
                json!([
                    {"op": "reserve", "hold_id": "{p}-h1", "items": [{"pool": a, "qty": 2}]},
                    {"op": "reserve", "hold_id": "{p}-h2", "items": [{"pool": a, "qty": 1}]},
                    {"op": "confirm", "hold_id": "{p}-h1"},
                    {"op": "confirm", "hold_id": "{p}-h2"},
                ]),
                200,
                json!({"results": [
                    {"status": 409, "body": {"error": "insufficient_stock", "pool": a, "available": 1, "requested": 2}},
                    {"status": 201, "body": {"hold_id": "{p}-h2", "status": "held"}},
                    {"status": 404, "body": err("hold_not_found")},
                    {"status": 200, "body": status("confirmed")},
                ]}),
            )
            .get_pool(a, counts(1, 0, 0, 1)),
        case("batch: an invalid op answers its own 422, the other ops still apply")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .batch(
                json!([
                    {"op": "reserve", "hold_id": "{p}-h1", "items": [{"pool": a, "qty": 0}]},
                    {"op": "reserve", "hold_id": "{p}-h2", "items": [{"pool": a, "qty": 1}]},
                    {"op": "confirm", "hold_id": "-bad"},
                    {"op": "extend", "hold_id": "{p}-h2", "ttl_ms": 999},
                    {"op": "extend", "hold_id": "{p}-h2", "ttl_ms": 1000},
                ]),
                200,
                json!({"results": [
                    {"status": 422, "body": err("invalid_request")},
                    {"status": 201, "body": status("held")},
                    {"status": 422, "body": err("invalid_request")},
                    {"status": 422, "body": err("invalid_request")},
                    {"status": 200, "body": {"expires_at_ms": "$now+1000"}},
                ]}),
            )
            .get_hold("{p}-h1", 404, err("hold_not_found"))
            .get_pool(a, counts(5, 4, 1, 0)),
        case("batch: a reserve replayed inside one batch is 201 then 200, stock taken once")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .batch(
                json!([
                    {"op": "reserve", "hold_id": "{p}-h", "items": [{"pool": a, "qty": 2}], "confirm": true},
                    {"op": "reserve", "hold_id": "{p}-h", "items": [{"pool": a, "qty": 2}], "confirm": true},
                ]),
                200,
                json!({"results": [
                    {"status": 201, "body": {"status": "confirmed", "created_at_ms": "$save:created"}},
                    {"status": 200, "body": {"status": "confirmed", "created_at_ms": "$same:created"}},
                ]}),
            )
            .get_pool(a, counts(5, 3, 0, 2))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
            ])),
        case("batch: per-op failure kinds carry their details")
            .put_pool(a, json!({"total": 5, "per_user_limit": 1}), 201, json!({}))
            .put_pool("{p}-late", json!({"total": 5, "ends_at_ms": LONG_AGO_MS}), 201, json!({}))
            .batch(
                json!([
                    {"op": "reserve", "hold_id": "{p}-h1", "items": [{"pool": a, "qty": 1}]},
                    {"op": "reserve", "hold_id": "{p}-h1", "user": "u1", "items": [{"pool": a, "qty": 2}]},
                    {"op": "reserve", "hold_id": "{p}-h2", "items": [{"pool": "{p}-late", "qty": 1}]},
                ]),
                200,
                json!({"results": [
                    {"status": 422, "body": err("user_required")},
                    {"status": 409, "body": {"error": "user_limit_exceeded", "pool": a, "limit": 1, "used": 0, "requested": 2}},
                    {"status": 409, "body": err("sale_ended")},
                ]}),
            )
            .get_pool(a, counts(5, 5, 0, 0)),
    ]
}
