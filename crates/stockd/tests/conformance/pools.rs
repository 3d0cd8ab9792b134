//! Pool cases: create, read, change the total, restock (with request ids), delete, list.
//!
//! The cases are data (see `case.rs`), run by `runner.rs`.

use serde_json::{json, Value};

use crate::case::*;

fn full_pool(pool: &str, total: u64) -> Value {
    json!({
        "pool": pool, "total": total, "available": total, "held": 0, "sold": 0,
        "per_user_limit": null, "starts_at_ms": null, "ends_at_ms": null, "low_stock_threshold": null,
        "partition": "$partition", "segments": 1,
    })
}

pub(crate) fn pool_cases() -> Vec<Case> {
    let rules = json!({
        "total": 5, "per_user_limit": 2, "starts_at_ms": LONG_AGO_MS, "ends_at_ms": FAR_FUTURE_MS,
        "low_stock_threshold": 1,
    });
    let mut cases = vec![
        case("pool: create is 201 with the full pool object, rule fields null")
            .put_pool("{p}-a", json!({"total": 10}), 201, full_pool("{p}-a", 10))
            .get_pool("{p}-a", full_pool("{p}-a", 10))
            .put_pool("{p}-a", json!({"total": 10}), 200, full_pool("{p}-a", 10)),
        case("pool: rule fields are echoed; a PUT that leaves them out unsets them")
            .put_pool("{p}-a", rules.clone(), 201, {
                let mut expect = rules.clone();
                expect["pool"] = json!("{p}-a");
                expect["available"] = json!(5);
                expect["held"] = json!(0);
                expect["sold"] = json!(0);
                expect
            })
            .get_pool("{p}-a", json!({"per_user_limit": 2, "starts_at_ms": LONG_AGO_MS, "ends_at_ms": FAR_FUTURE_MS, "low_stock_threshold": 1}))
            .put_pool("{p}-a", json!({"total": 5}), 200, full_pool("{p}-a", 5))
            .get_pool("{p}-a", full_pool("{p}-a", 5)),
        case("pool: a PUT replaces rules one by one (left out = unset)")
            .put_pool("{p}-a", json!({"total": 5, "per_user_limit": 3}), 201, json!({"per_user_limit": 3, "low_stock_threshold": null}))
            .put_pool("{p}-a", json!({"total": 5, "low_stock_threshold": 0}), 200, json!({"per_user_limit": null, "low_stock_threshold": 0}))
            .put_pool("{p}-a", json!({"total": 5, "starts_at_ms": LONG_AGO_MS}), 200, json!({"low_stock_threshold": null, "starts_at_ms": LONG_AGO_MS, "ends_at_ms": null}))
            .put_pool("{p}-a", json!({"total": 5, "ends_at_ms": FAR_FUTURE_MS}), 200, json!({"starts_at_ms": null, "ends_at_ms": FAR_FUTURE_MS})),
        case("pool: null rule fields are the same as leaving them out")
            .put_pool(
                "{p}-a",
                json!({"total": 3, "per_user_limit": null, "starts_at_ms": null, "ends_at_ms": null, "low_stock_threshold": null}),
                201,
                full_pool("{p}-a", 3),
            )
            .put_pool("{p}-a", json!({"total": 3, "per_user_limit": 4}), 200, json!({"per_user_limit": 4}))
            .put_pool("{p}-a", json!({"total": 3, "per_user_limit": null}), 200, full_pool("{p}-a", 3)),
        case("pool: changing total moves available by the same delta")
            .put_pool("{p}-a", json!({"total": 10}), 201, counts(10, 10, 0, 0))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 3}]}), 201, status("held"))
            .put_pool("{p}-a", json!({"total": 15}), 200, counts(15, 12, 3, 0))
            .put_pool("{p}-a", json!({"total": 5}), 200, counts(5, 2, 3, 0))
            .confirm("{p}-h", 200, status("confirmed"))
            .put_pool("{p}-a", json!({"total": 3}), 200, counts(3, 0, 0, 3))
            .get_pool("{p}-a", counts(3, 0, 0, 3)),
        case("pool: a total below held + sold is 409 total_below_committed and changes nothing")
            .put_pool("{p}-a", json!({"total": 10, "per_user_limit": 5}), 201, counts(10, 10, 0, 0))
            .reserve(json!({"hold_id": "{p}-h1", "user": "u1", "items": [{"pool": "{p}-a", "qty": 4}]}), 201, status("held"))
            .reserve(json!({"hold_id": "{p}-h2", "user": "u2", "items": [{"pool": "{p}-a", "qty": 2}], "confirm": true}), 201, status("confirmed"))
            .put_pool("{p}-a", json!({"total": 5, "low_stock_threshold": 1}), 409, err("total_below_committed"))
            .put_pool("{p}-a", json!({"total": 0}), 409, err("total_below_committed"))
            .get_pool("{p}-a", json!({"total": 10, "available": 4, "held": 4, "sold": 2, "per_user_limit": 5, "low_stock_threshold": null}))
            .put_pool("{p}-a", json!({"total": 6, "per_user_limit": 5}), 200, counts(6, 0, 4, 2)),
        case("pool: total 0 and 1_000_000_000_000 are accepted")
            .put_pool("{p}-a", json!({"total": 0}), 201, counts(0, 0, 0, 0))
            .put_pool("{p}-b", json!({"total": 1_000_000_000_000u64}), 201, counts(1_000_000_000_000, 1_000_000_000_000, 0, 0))
            .put_pool("{p}-a", json!({"total": 1_000_000_000_000u64}), 200, counts(1_000_000_000_000, 1_000_000_000_000, 0, 0))
            .put_pool("{p}-b", json!({"total": 0}), 200, counts(0, 0, 0, 0)),
        case("pool: if_absent=true creates a missing pool, then leaves it unchanged")
            .put_pool("{p}-a?if_absent=true", json!({"total": 7, "low_stock_threshold": 2}), 201, json!({"pool": "{p}-a", "total": 7, "available": 7, "low_stock_threshold": 2}))
            .put_pool("{p}-a?if_absent=true", json!({"total": 99}), 200, json!({"pool": "{p}-a", "total": 7, "available": 7, "low_stock_threshold": 2}))
            .get_pool("{p}-a", json!({"total": 7, "available": 7, "low_stock_threshold": 2, "per_user_limit": null}))
            .events(json!([ev("pool_upserted", json!({"pool": "{p}-a"}))])),
        case("pool: if_absent=true on a pool with holds answers the pool as it is")
            .put_pool("{p}-a", json!({"total": 5}), 201, counts(5, 5, 0, 0))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 2}]}), 201, status("held"))
            .put_pool("{p}-a?if_absent=true", json!({"total": 1, "per_user_limit": 1}), 200, json!({"total": 5, "available": 3, "held": 2, "per_user_limit": null})),
        case("pool: if_absent=false is a plain upsert")
            .put_pool("{p}-a?if_absent=false", json!({"total": 3}), 201, counts(3, 3, 0, 0))
            .put_pool("{p}-a?if_absent=false", json!({"total": 4}), 200, counts(4, 4, 0, 0)),
        case("restock: a positive delta raises total and available")
            .put_pool("{p}-a", json!({"total": 10, "per_user_limit": 7}), 201, counts(10, 10, 0, 0))
            .reserve(json!({"hold_id": "{p}-h", "user": "u", "items": [{"pool": "{p}-a", "qty": 4}]}), 201, status("held"))
            .restock("{p}-a", 5, 200, json!({"pool": "{p}-a", "total": 15, "available": 11, "held": 4, "sold": 0, "per_user_limit": 7}))
            .get_pool("{p}-a", counts(15, 11, 4, 0)),
        case("restock: a negative delta lowers total and available, down to available 0")
            .put_pool("{p}-a", json!({"total": 10}), 201, counts(10, 10, 0, 0))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 4}]}), 201, status("held"))
            .restock("{p}-a", -6, 200, counts(4, 0, 4, 0))
            .restock("{p}-a", -1, 409, err("insufficient_stock"))
            .get_pool("{p}-a", counts(4, 0, 4, 0)),
        case("restock: a negative delta larger than available is 409 insufficient_stock, nothing changes")
            .put_pool("{p}-a", json!({"total": 10}), 201, counts(10, 10, 0, 0))
            .restock("{p}-a", -11, 409, err("insufficient_stock"))
            .get_pool("{p}-a", counts(10, 10, 0, 0))
            .restock("{p}-a", -10, 200, counts(0, 0, 0, 0))
            .restock("{p}-a", 1, 200, counts(1, 1, 0, 0)),
        case("restock: a retry with its request_id changes nothing and answers the pool as it is now, with Stockd-Replayed: true")
            .put_pool("{p}-a", json!({"total": 10}), 201, counts(10, 10, 0, 0))
            .restock_with("{p}-a", json!({"delta": 5, "request_id": "{p}-r"}), 200, json!({"pool": "{p}-a", "total": 15, "available": 15}))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 4}]}), 201, status("held"))
            .restock_with("{p}-a", json!({"delta": 5, "request_id": "{p}-r"}), 200, counts(15, 11, 4, 0)).replayed()
            .restock_with("{p}-a", json!({"delta": 5, "request_id": "{p}-r"}), 200, counts(15, 11, 4, 0)).replayed()
            .restock_with("{p}-a", json!({"delta": 6, "request_id": "{p}-r"}), 409, err("request_id_conflict"))
            .restock_with("{p}-a", json!({"delta": 5, "request_id": "{p}-r2"}), 200, counts(20, 16, 4, 0))
            .restock("{p}-a", 5, 200, counts(25, 21, 4, 0))
            .restock_with("{p}-a", json!({"delta": 5, "request_id": "{p}-r2"}), 200, counts(25, 21, 4, 0)).replayed()
            .get_pool("{p}-a", counts(25, 21, 4, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": "{p}-a"})),
                ev("restocked", json!({"pool": "{p}-a", "delta": 5, "total": 15, "available": 15, "request_id": "{p}-r"})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("restocked", json!({"pool": "{p}-a", "delta": 5, "total": 20, "available": 16, "request_id": "{p}-r2"})),
                ev("restocked", json!({"pool": "{p}-a", "delta": 5, "total": 25, "available": 21})),
            ])),
        case("restock: a request_id with another delta or on another pool is 409 request_id_conflict, nothing changes")
            .put_pool("{p}-a", json!({"total": 10}), 201, counts(10, 10, 0, 0))
            .put_pool("{p}-b", json!({"total": 10}), 201, counts(10, 10, 0, 0))
            .restock_with("{p}-a", json!({"delta": 5, "request_id": "{p}-r"}), 200, counts(15, 15, 0, 0))
            .restock_with("{p}-a", json!({"delta": 4, "request_id": "{p}-r"}), 409,
                json!({"error": "request_id_conflict", "request_id": "{p}-r", "pool": "{p}-a", "delta": 5}))
            .restock_with("{p}-a", json!({"delta": -5, "request_id": "{p}-r"}), 409,
                json!({"error": "request_id_conflict", "request_id": "{p}-r", "pool": "{p}-a", "delta": 5}))
            .restock_with("{p}-b", json!({"delta": 5, "request_id": "{p}-r"}), 409,
                json!({"error": "request_id_conflict", "request_id": "{p}-r", "pool": "{p}-a", "delta": 5}))
            .restock_with("{p}-nope", json!({"delta": 5, "request_id": "{p}-r"}), 409,
                json!({"error": "request_id_conflict", "request_id": "{p}-r", "pool": "{p}-a", "delta": 5}))
            .get_pool("{p}-a", counts(15, 15, 0, 0))
            .get_pool("{p}-b", counts(10, 10, 0, 0)),
        case("restock: without request_id each restock adds; null is absent")
            .put_pool("{p}-a", json!({"total": 1}), 201, counts(1, 1, 0, 0))
            .restock("{p}-a", 2, 200, counts(3, 3, 0, 0))
            .restock("{p}-a", 2, 200, counts(5, 5, 0, 0))
            .restock_with("{p}-a", json!({"delta": 2, "request_id": null}), 200, counts(7, 7, 0, 0))
            .restock_with("{p}-a", json!({"delta": 2, "request_id": null}), 200, counts(9, 9, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": "{p}-a"})),
                ev("restocked", json!({"pool": "{p}-a", "delta": 2, "total": 3})),
                ev("restocked", json!({"pool": "{p}-a", "delta": 2, "total": 5})),
                ev("restocked", json!({"pool": "{p}-a", "delta": 2, "total": 7})),
                ev("restocked", json!({"pool": "{p}-a", "delta": 2, "total": 9})),
            ])),
        case("restock: a bad request_id is 422 invalid_request, nothing changes")
            .put_pool("{p}-a", json!({"total": 1}), 201, counts(1, 1, 0, 0))
            .restock_with("{p}-a", json!({"delta": 1, "request_id": ""}), 422, err("invalid_request"))
            .restock_with("{p}-a", json!({"delta": 1, "request_id": "-r"}), 422, err("invalid_request"))
            .restock_with("{p}-a", json!({"delta": 1, "request_id": "a b"}), 422, err("invalid_request"))
            .restock_with("{p}-a", json!({"delta": 1, "request_id": id_of_len(129)}), 422, err("invalid_request"))
            .restock_with("{p}-a", json!({"delta": 1, "request_id": 7}), 422, err("invalid_request"))
            .restock_with("{p}-a", json!({"delta": 0, "request_id": "{p}-r"}), 422, err("invalid_request"))
            .get_pool("{p}-a", counts(1, 1, 0, 0))
            .restock_with("{p}-a", json!({"delta": 1, "request_id": "{p}-r"}), 200, counts(2, 2, 0, 0)),
        case("restock: a refused restock is not remembered: its request_id is new after it")
            .put_pool("{p}-a", json!({"total": 3}), 201, counts(3, 3, 0, 0))
            .restock_with("{p}-a", json!({"delta": -5, "request_id": "{p}-r"}), 409, err("insufficient_stock"))
            .restock_with("{p}-nope", json!({"delta": 5, "request_id": "{p}-r2"}), 404, err("pool_not_found"))
            .restock("{p}-a", 10, 200, counts(13, 13, 0, 0))
            .restock_with("{p}-a", json!({"delta": -5, "request_id": "{p}-r"}), 200, counts(8, 8, 0, 0))
            .restock_with("{p}-a", json!({"delta": -5, "request_id": "{p}-r"}), 200, counts(8, 8, 0, 0)).replayed()
            .restock_with("{p}-a", json!({"delta": 1, "request_id": "{p}-r2"}), 200, counts(9, 9, 0, 0))
            .get_pool("{p}-a", counts(9, 9, 0, 0)),
        case("restock: a missing pool is 404 pool_not_found")
            .restock("{p}-nope", 5, 404, err("pool_not_found"))
            .get("/v1/pools/{p}-nope", 404, err("pool_not_found")),
        case("pool: GET of a missing pool is 404 pool_not_found")
            .get("/v1/pools/{p}-missing", 404, err("pool_not_found")),
        case("pools list: prefix filters, ordered by pool id, full objects, paged with next")
            .put_pool("{p}-c", json!({"total": 3}), 201, json!({}))
            .put_pool("{p}-a", json!({"total": 1}), 201, json!({}))
            .put_pool("{p}-e", json!({"total": 5}), 201, json!({}))
            .put_pool("{p}-b", json!({"total": 2}), 201, json!({}))
            .put_pool("{p}-d", json!({"total": 4}), 201, json!({}))
            .put_pool("{p}Xa", json!({"total": 9}), 201, json!({}))
            .get("/v1/pools?prefix={p}-", 200, json!({
                "pools": [full_pool("{p}-a", 1), full_pool("{p}-b", 2), full_pool("{p}-c", 3), full_pool("{p}-d", 4), full_pool("{p}-e", 5)],
                "next": null,
            }))
            .get("/v1/pools?prefix={p}X", 200, json!({"pools": [{"pool": "{p}Xa", "total": 9}], "next": null}))
            .get("/v1/pools?prefix={p}-&limit=2", 200, json!({"pools": [{"pool": "{p}-a"}, {"pool": "{p}-b"}], "next": "$save:n1"}))
            .get("/v1/pools?prefix={p}-&limit=2&after={$n1}", 200, json!({"pools": [{"pool": "{p}-c"}, {"pool": "{p}-d"}], "next": "$save:n2"}))
            .get("/v1/pools?prefix={p}-&limit=2&after={$n2}", 200, json!({"pools": [{"pool": "{p}-e"}], "next": null}))
            .get("/v1/pools?prefix={p}-&limit=1000", 200, json!({"pools": {"$len": 5}, "next": null}))
            .get("/v1/pools?prefix={p}Y", 200, json!({"pools": [], "next": null}))
            .get("/v1/pools", 200, json!({"pools": "$any", "next": "$any"})),
        case("pools list: a deleted pool is not listed")
            .put_pool("{p}-a", json!({"total": 1}), 201, json!({}))
            .put_pool("{p}-b", json!({"total": 1}), 201, json!({}))
            .delete_pool("{p}-a", 204, Value::Null)
            .get("/v1/pools?prefix={p}-", 200, json!({"pools": [{"pool": "{p}-b"}], "next": null})),
        case("pool delete: 204, then the pool is gone everywhere")
            .put_pool("{p}-a", json!({"total": 3}), 201, json!({}))
            .delete_pool("{p}-a", 204, Value::Null)
            .get("/v1/pools/{p}-a", 404, err("pool_not_found"))
            .delete_pool("{p}-a", 404, err("pool_not_found"))
            .restock("{p}-a", 1, 404, err("pool_not_found"))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 1}]}), 404, json!({"error": "pool_not_found", "pool": "{p}-a"})),
        case("pool delete: 409 pool_has_active_holds while held > 0; allowed once released")
            .put_pool("{p}-a", json!({"total": 3}), 201, json!({}))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 1}]}), 201, status("held"))
            .delete_pool("{p}-a", 409, err("pool_has_active_holds"))
            .get_pool("{p}-a", counts(3, 2, 1, 0))
            .release("{p}-h", 200, status("released"))
            .delete_pool("{p}-a", 204, Value::Null)
            .get("/v1/pools/{p}-a", 404, err("pool_not_found")),
        case("pool delete: refunds on a deleted pool are 409 pool_deleted, even after re-creating it")
            .put_pool("{p}-a", json!({"total": 5}), 201, json!({}))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 2}], "confirm": true}), 201, status("confirmed"))
            .delete_pool("{p}-a", 204, Value::Null)
            .refund("{p}-h", 409, err("pool_deleted"))
            .get_hold("{p}-h", 200, status("confirmed"))
            .put_pool("{p}-a", json!({"total": 5}), 201, counts(5, 5, 0, 0))
            .refund("{p}-h", 409, err("pool_deleted"))
            .get_pool("{p}-a", counts(5, 5, 0, 0))
            .get_hold("{p}-h", 200, status("confirmed"))
            .events(json!([
                ev("pool_upserted", json!({"pool": "{p}-a"})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
                ev("pool_deleted", json!({"pool": "{p}-a"})),
                ev("pool_upserted", json!({"pool": "{p}-a"})),
            ])),
        case("pool delete: a refund spanning a deleted pool changes no other pool")
            .put_pool("{p}-a", json!({"total": 5}), 201, json!({}))
            .put_pool("{p}-b", json!({"total": 5}), 201, json!({}))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 1}, {"pool": "{p}-b", "qty": 2}], "confirm": true}), 201, status("confirmed"))
            .delete_pool("{p}-a", 204, Value::Null)
            .refund("{p}-h", 409, err("pool_deleted"))
            .get_pool("{p}-b", counts(5, 3, 0, 2))
            .get_hold("{p}-h", 200, status("confirmed")),
    ];
    // Default page size: 101 pools, the first page holds 100.
    let mut many = case("pools list: limit defaults to 100");
    for index in 0..101 {
        many = many.put_pool(
            &format!("{{p}}-{index:03}"),
            json!({"total": 1}),
            201,
            json!({}),
        );
    }
    cases.push(
        many.get(
            "/v1/pools?prefix={p}-",
            200,
            json!({"pools": {"$len": 100}, "next": "$save:next"}),
        )
        .get(
            "/v1/pools?prefix={p}-&limit=1",
            200,
            json!({"pools": [{"pool": "{p}-000"}], "next": "$any"}),
        )
        .get(
            "/v1/pools?prefix={p}-&after={$next}",
            200,
            json!({"pools": [{"pool": "{p}-100"}], "next": null}),
        ),
    );
    cases
}
