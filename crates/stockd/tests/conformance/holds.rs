//! Hold cases: reserve, confirm, release, extend, refund, expiry, and their conflicts.
//!
//! The cases are data (see `case.rs`), run by `runner.rs`.

use serde_json::json;

use crate::case::*;

pub(crate) fn hold_cases() -> Vec<Case> {
    let a = "{p}-a";
    let b = "{p}-b";
    let c = "{p}-c";
    let none = json!({});
    vec![
        case("hold: a single-item reserve is 201 with the hold object; available moves to held")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 3)], none.clone()), 201, json!({
                "hold_id": "{p}-h", "status": "held", "user": null, "items": [{"pool": a, "qty": 3}],
                "created_at_ms": "$now", "expires_at_ms": "$now+600000", "finished_at_ms": null,
                "partition": "$partition:h",
            }))
            .get_pool(a, counts(10, 7, 3, 0))
            .get_hold("{p}-h", 200, json!({
                "hold_id": "{p}-h", "status": "held", "user": null, "items": [{"pool": a, "qty": 3}],
                "created_at_ms": "$save:created", "expires_at_ms": "$save:expires", "finished_at_ms": null,
                "partition": "$partition:h",
            }))
            .get_hold("{p}-h", 200, json!({"created_at_ms": "$same:created", "expires_at_ms": "$same:expires"})),
        case("hold: a multi-item reserve takes every item")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .put_pool(b, json!({"total": 5}), 201, json!({}))
            .put_pool(c, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 2), (c, 5)], json!({"user": "u1"})), 201, json!({
                "hold_id": "{p}-h", "status": "held", "user": "u1",
                "items": items(json!([{"pool": a, "qty": 1}, {"pool": b, "qty": 2}, {"pool": c, "qty": 5}])),
                "finished_at_ms": null,
            }))
            .get_pool(a, counts(5, 4, 1, 0))
            .get_pool(b, counts(5, 3, 2, 0))
            .get_pool(c, counts(5, 0, 5, 0))
            .get_hold("{p}-h", 200, json!({"user": "u1", "items": items(json!([{"pool": a, "qty": 1}, {"pool": b, "qty": 2}, {"pool": c, "qty": 5}]))})),
        case("hold: ttl_ms sets expires_at_ms = now + ttl_ms, at both edges")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], json!({"ttl_ms": 1000})), 201, json!({"expires_at_ms": "$now+1000"}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], json!({"ttl_ms": 86_400_000})), 201, json!({"expires_at_ms": "$now+86400000"})),
        case("hold: null optional fields are the same as leaving them out")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"user": null, "ttl_ms": null, "confirm": null, "wait_ms": null})),
                201,
                json!({"status": "held", "user": null, "expires_at_ms": "$now+600000"}),
            )
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 200, status("held")),
        case("hold: all-or-nothing: a failing item changes nothing anywhere, and is not remembered")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .put_pool(b, json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 3), (b, 2)], json!({"user": "u1"})), 409, json!({"error": "insufficient_stock", "pool": b, "available": 1, "requested": 2}))
            .get_pool(a, counts(10, 10, 0, 0))
            .get_pool(b, counts(1, 1, 0, 0))
            .get_hold("{p}-h", 404, err("hold_not_found"))
            .restock(b, 1, 200, counts(2, 2, 0, 0))
            .reserve(hold_req("{p}-h", &[(a, 3), (b, 2)], json!({"user": "u1"})), 201, status("held"))
            .get_pool(a, counts(10, 7, 3, 0))
            .get_pool(b, counts(2, 0, 2, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("pool_upserted", json!({"pool": b})),
                ev("restocked", json!({"pool": b})),
                ev("held", json!({"hold_id": "{p}-h", "user": "u1", "items": items(json!([{"pool": a, "qty": 3}, {"pool": b, "qty": 2}]))})),
            ])),
        case("hold: all-or-nothing with confirm:true")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .put_pool(b, json!({"total": 0}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 1)], json!({"confirm": true})), 409, json!({"error": "insufficient_stock", "pool": b, "available": 0, "requested": 1}))
            .get_pool(a, counts(10, 10, 0, 0))
            .get_hold("{p}-h", 404, err("hold_not_found")),
        case("hold: request validation comes before any lookup")
            .reserve(hold_req("{p}-h", &[("{p}-missing", 1), ("{p}-missing2", 0)], none.clone()), 422, err("invalid_request"))
            .reserve(hold_req("{p}-h", &[("{p}-missing", 1)], json!({"ttl_ms": 5})), 422, err("invalid_request"))
            .reserve(hold_req("{p}-h", &[("{p}-missing", 1), ("{p}-missing", 1)], none.clone()), 422, err("invalid_request"))
            .reserve(hold_req("{p}-h", &[("{p}-missing", 1)], json!({"user": "-bad"})), 422, err("invalid_request"))
            .reserve(hold_req("{p}-h", &[("{p}-missing", 1)], json!({"wait_ms": 30_001})), 422, err("invalid_request"))
            .reserve(hold_req("{p}-h", &[("{p}-missing", 1)], none.clone()), 404, json!({"error": "pool_not_found", "pool": "{p}-missing"})),
        case("hold: pool_not_found names the first missing pool in item order")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), ("{p}-m1", 1), ("{p}-m2", 1)], none.clone()), 404, json!({"error": "pool_not_found", "pool": "{p}-m1"}))
            .reserve(hold_req("{p}-h", &[("{p}-m2", 1), (a, 1), ("{p}-m1", 1)], none.clone()), 404, json!({"error": "pool_not_found", "pool": "{p}-m2"}))
            .get_pool(a, counts(10, 10, 0, 0)),
        case("hold: first failure wins in item order: insufficient_stock vs pool_not_found")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2), ("{p}-m", 1)], none.clone()), 409, json!({"error": "insufficient_stock", "pool": a, "available": 1, "requested": 2}))
            .reserve(hold_req("{p}-h", &[("{p}-m", 1), (a, 2)], none.clone()), 404, json!({"error": "pool_not_found", "pool": "{p}-m"})),
        case("hold: user_required when a pool has a per-user limit and no user is given")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .put_pool("{p}-u", json!({"total": 10, "per_user_limit": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), ("{p}-u", 1)], none.clone()), 422, err("user_required"))
            .reserve(hold_req("{p}-h", &[(a, 1), ("{p}-u", 1)], json!({"user": null})), 422, err("user_required"))
            .get_pool(a, counts(10, 10, 0, 0))
            .get_pool("{p}-u", counts(10, 10, 0, 0))
            .reserve(hold_req("{p}-h", &[(a, 1), ("{p}-u", 1)], json!({"user": "u1"})), 201, status("held")),
        case("hold: within one item, user_required comes before the sale window and stock")
            .put_pool("{p}-u", json!({"total": 0, "per_user_limit": 1, "ends_at_ms": LONG_AGO_MS}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[("{p}-u", 1)], none.clone()), 422, err("user_required")),
        case("hold: item order decides between user_required and insufficient_stock")
            .put_pool("{p}-u", json!({"total": 10, "per_user_limit": 2}), 201, json!({}))
            .put_pool("{p}-s", json!({"total": 0}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[("{p}-s", 1), ("{p}-u", 1)], none.clone()), 409, json!({"error": "insufficient_stock", "pool": "{p}-s"}))
            .reserve(hold_req("{p}-h", &[("{p}-u", 1), ("{p}-s", 1)], none.clone()), 422, err("user_required")),
        case("hold: item order decides between user_required and pool_not_found")
            .put_pool("{p}-u", json!({"total": 10, "per_user_limit": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[("{p}-m", 1), ("{p}-u", 1)], none.clone()), 404, json!({"error": "pool_not_found", "pool": "{p}-m"}))
            .reserve(hold_req("{p}-h", &[("{p}-u", 1), ("{p}-m", 1)], none.clone()), 422, err("user_required")),
        case("hold: sale window: open, not started, ended; first failing item wins")
            .put_pool("{p}-open", json!({"total": 5, "starts_at_ms": LONG_AGO_MS, "ends_at_ms": FAR_FUTURE_MS}), 201, json!({}))
            .put_pool("{p}-early", json!({"total": 5, "starts_at_ms": FAR_FUTURE_MS}), 201, json!({}))
            .put_pool("{p}-late", json!({"total": 5, "ends_at_ms": LONG_AGO_MS}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[("{p}-open", 1)], none.clone()), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[("{p}-early", 1)], none.clone()), 409, err("sale_not_started"))
            .reserve(hold_req("{p}-h2", &[("{p}-late", 1)], none.clone()), 409, err("sale_ended"))
            .reserve(hold_req("{p}-h2", &[("{p}-late", 1), ("{p}-early", 1)], none.clone()), 409, err("sale_ended"))
            .reserve(hold_req("{p}-h2", &[("{p}-early", 1), ("{p}-late", 1)], none.clone()), 409, err("sale_not_started"))
            .reserve(hold_req("{p}-h2", &[("{p}-open", 1), ("{p}-late", 1)], none.clone()), 409, err("sale_ended"))
            .get_pool("{p}-open", counts(5, 4, 1, 0))
            .get_pool("{p}-early", counts(5, 5, 0, 0))
            .get_pool("{p}-late", counts(5, 5, 0, 0)),
        case("hold: only one bound set: starts in the past or ends in the future is open")
            .put_pool("{p}-s", json!({"total": 5, "starts_at_ms": LONG_AGO_MS}), 201, json!({}))
            .put_pool("{p}-e", json!({"total": 5, "ends_at_ms": FAR_FUTURE_MS}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[("{p}-s", 1), ("{p}-e", 1)], none.clone()), 201, status("held")),
        case("hold: within one item, the sale window comes before stock")
            .put_pool("{p}-late", json!({"total": 0, "ends_at_ms": LONG_AGO_MS}), 201, json!({}))
            .put_pool("{p}-early", json!({"total": 0, "starts_at_ms": FAR_FUTURE_MS}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[("{p}-late", 1)], none.clone()), 409, err("sale_ended"))
            .reserve(hold_req("{p}-h", &[("{p}-early", 1)], none.clone()), 409, err("sale_not_started")),
        case("hold: item order decides between a sale window and insufficient_stock")
            .put_pool("{p}-late", json!({"total": 5, "ends_at_ms": LONG_AGO_MS}), 201, json!({}))
            .put_pool("{p}-s", json!({"total": 0}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[("{p}-s", 1), ("{p}-late", 1)], none.clone()), 409, json!({"error": "insufficient_stock", "pool": "{p}-s"}))
            .reserve(hold_req("{p}-h", &[("{p}-late", 1), ("{p}-s", 1)], none.clone()), 409, err("sale_ended")),
        case("hold: insufficient_stock carries pool, available and requested")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 4)], none.clone()), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(a, 2)], none.clone()), 409, json!({"error": "insufficient_stock", "pool": a, "available": 1, "requested": 2}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], none.clone()), 201, status("held"))
            .reserve(hold_req("{p}-h3", &[(a, 1)], none.clone()), 409, json!({"error": "insufficient_stock", "pool": a, "available": 0, "requested": 1})),
        case("hold: within one item, stock comes before the per-user limit")
            .put_pool(a, json!({"total": 2, "per_user_limit": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 3)], json!({"user": "u1"})), 409, json!({"error": "insufficient_stock", "pool": a, "available": 2, "requested": 3})),
        case("hold: user_limit_exceeded carries pool, limit, used and requested; other users unaffected")
            .put_pool(a, json!({"total": 10, "per_user_limit": 3}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 2)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(a, 2)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "pool": a, "limit": 3, "used": 2, "requested": 2}))
            .reserve(hold_req("{p}-h3", &[(a, 1)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h4", &[(a, 1)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "pool": a, "limit": 3, "used": 3, "requested": 1}))
            .reserve(hold_req("{p}-h5", &[(a, 3)], json!({"user": "u2"})), 201, status("held"))
            .get_pool(a, counts(10, 4, 6, 0)),
        case("hold: one request above the limit is user_limit_exceeded with used 0")
            .put_pool(a, json!({"total": 10, "per_user_limit": 3}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 4)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "pool": a, "limit": 3, "used": 0, "requested": 4}))
            .get_pool(a, counts(10, 10, 0, 0)),
        case("hold: per-user usage counts confirmed holds")
            .put_pool(a, json!({"total": 10, "per_user_limit": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 2)], json!({"user": "u1", "confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h2", &[(a, 1)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "used": 2, "requested": 1, "limit": 2})),
        case("hold: per-user usage is kept per pool")
            .put_pool(a, json!({"total": 10, "per_user_limit": 1}), 201, json!({}))
            .put_pool(b, json!({"total": 10, "per_user_limit": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(b, 1)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h3", &[(b, 1)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "pool": b, "used": 1})),
        case("hold: a user on a pool without a limit is fine; the limit applies only where set")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .put_pool(b, json!({"total": 10, "per_user_limit": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 9), (b, 1)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(a, 1), (b, 1)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "pool": b})),
        case("hold: item order decides between user_limit_exceeded and insufficient_stock")
            .put_pool(a, json!({"total": 10, "per_user_limit": 1}), 201, json!({}))
            .put_pool("{p}-s", json!({"total": 0}), 201, json!({}))
            .reserve(hold_req("{p}-h0", &[(a, 1)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h1", &[(a, 1), ("{p}-s", 1)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "pool": a, "limit": 1, "used": 1, "requested": 1}))
            .reserve(hold_req("{p}-h1", &[("{p}-s", 1), (a, 1)], json!({"user": "u1"})), 409, json!({"error": "insufficient_stock", "pool": "{p}-s"})),
        case("hold: item order decides between user_limit_exceeded and a sale window")
            .put_pool(a, json!({"total": 10, "per_user_limit": 1}), 201, json!({}))
            .put_pool("{p}-late", json!({"total": 10, "ends_at_ms": LONG_AGO_MS}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 2), ("{p}-late", 1)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "pool": a}))
            .reserve(hold_req("{p}-h1", &[("{p}-late", 1), (a, 2)], json!({"user": "u1"})), 409, err("sale_ended")),
        case("hold: release gives per-user usage back")
            .put_pool(a, json!({"total": 10, "per_user_limit": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 2)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(a, 2)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "used": 2}))
            .release("{p}-h1", 200, status("released"))
            .reserve(hold_req("{p}-h2", &[(a, 2)], json!({"user": "u1"})), 201, status("held")),
        case("hold: refund gives per-user usage back")
            .put_pool(a, json!({"total": 10, "per_user_limit": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 2)], json!({"user": "u1", "confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h2", &[(a, 2)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "used": 2}))
            .refund("{p}-h1", 200, status("refunded"))
            .reserve(hold_req("{p}-h2", &[(a, 2)], json!({"user": "u1"})), 201, status("held")),
        case("hold: expiry gives per-user usage back")
            .put_pool(a, json!({"total": 10, "per_user_limit": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 2)], json!({"user": "u1", "ttl_ms": 1000})), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(a, 2)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "used": 2}))
            .poll_pool(a, 1000, counts(10, 10, 0, 0))
            .reserve(hold_req("{p}-h2", &[(a, 2)], json!({"user": "u1"})), 201, status("held")),
        case("hold: the same request again is 200 with the same hold, in any item order, nothing changes")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .put_pool(b, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 2)], json!({"user": "u1"})), 201, json!({"created_at_ms": "$save:created", "expires_at_ms": "$save:expires"}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 2)], json!({"user": "u1"})), 200, json!({
                "hold_id": "{p}-h", "status": "held", "user": "u1", "created_at_ms": "$same:created", "expires_at_ms": "$same:expires",
                "items": items(json!([{"pool": a, "qty": 1}, {"pool": b, "qty": 2}])),
            }))
            .reserve(hold_req("{p}-h", &[(b, 2), (a, 1)], json!({"user": "u1"})), 200, json!({"created_at_ms": "$same:created"}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 2)], json!({"user": "u1", "ttl_ms": 5000, "wait_ms": 0})), 200, json!({"expires_at_ms": "$same:expires"}))
            .get_pool(a, counts(10, 9, 1, 0))
            .get_pool(b, counts(10, 8, 2, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("pool_upserted", json!({"pool": b})),
                ev("held", json!({"hold_id": "{p}-h"})),
            ])),
        case("hold: a replay after confirm answers the current state")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 201, status("held"))
            .confirm("{p}-h", 200, status("confirmed"))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 200, status("confirmed"))
            .get_pool(a, counts(10, 9, 0, 1)),
        case("hold: a replay after release answers released and takes no stock")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 201, status("held"))
            .release("{p}-h", 200, status("released"))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 200, status("released"))
            .get_pool(a, counts(10, 10, 0, 0)),
        case("hold: a replay after refund answers refunded and takes no stock")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .refund("{p}-h", 200, status("refunded"))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"confirm": true})), 200, status("refunded"))
            .get_pool(a, counts(10, 10, 0, 0)),
        case("hold: confirm left out equals confirm false, user left out equals user null")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 201, status("held"))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"confirm": false, "user": null})), 200, status("held"))
            .get_pool(a, counts(10, 9, 1, 0)),
        case("hold: hold_id_conflict for a different user, items or confirm flag; nothing changes")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .put_pool(b, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"user": "u2"})), 409, err("hold_id_conflict"))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 409, err("hold_id_conflict"))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"user": "u1"})), 409, err("hold_id_conflict"))
            .reserve(hold_req("{p}-h", &[(b, 1)], json!({"user": "u1"})), 409, err("hold_id_conflict"))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 1)], json!({"user": "u1"})), 409, err("hold_id_conflict"))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"user": "u1", "confirm": true})), 409, err("hold_id_conflict"))
            .get_pool(a, counts(10, 9, 1, 0))
            .get_pool(b, counts(10, 10, 0, 0))
            .get_hold("{p}-h", 200, json!({"status": "held", "user": "u1", "items": [{"pool": a, "qty": 1}]})),
        case("hold: hold_id_conflict when a confirm:true hold is replayed without confirm")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 409, err("hold_id_conflict"))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"confirm": true})), 200, status("confirmed"))
            .get_pool(a, counts(10, 9, 0, 1)),
        case("hold: confirm:true reserves and confirms in one step")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"confirm": true})), 201, json!({
                "hold_id": "{p}-h", "status": "confirmed", "items": [{"pool": a, "qty": 2}],
                "created_at_ms": "$now", "finished_at_ms": "$now",
            }))
            .get_pool(a, counts(5, 3, 0, 2))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
            ])),
        case("hold: confirm moves held to sold; repeating it is 200 with no change")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], none.clone()), 201, status("held"))
            .confirm("{p}-h", 200, json!({"hold_id": "{p}-h", "status": "confirmed", "finished_at_ms": "$now", "items": [{"pool": a, "qty": 2}]}))
            .get_pool(a, counts(5, 3, 0, 2))
            .get_hold("{p}-h", 200, json!({"status": "confirmed", "finished_at_ms": "$save:finished"}))
            .confirm("{p}-h", 200, json!({"status": "confirmed", "finished_at_ms": "$same:finished"}))
            .get_pool(a, counts(5, 3, 0, 2))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
            ])),
        case("hold: confirm refuses released and refunded holds; a missing hold is 404")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], none.clone()), 201, status("held"))
            .release("{p}-h1", 200, status("released"))
            .confirm("{p}-h1", 409, err("hold_released"))
            .reserve(hold_req("{p}-h2", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .refund("{p}-h2", 200, status("refunded"))
            .confirm("{p}-h2", 409, err("hold_refunded"))
            .confirm("{p}-nope", 404, err("hold_not_found"))
            .get_pool(a, counts(5, 5, 0, 0)),
        case("hold: past its deadline a hold is expired even before any sweep: confirm refuses it")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"ttl_ms": 1000})), 201, json!({"expires_at_ms": "$save:deadline"}))
            .wait_past("deadline")
            .confirm("{p}-h", 409, err("hold_expired"))
            .poll_pool(a, 0, counts(5, 5, 0, 0))
            .get_hold("{p}-h", 200, json!({"status": "expired", "finished_at_ms": "$int"})),
        case("hold: release returns units; repeating it is 200 with no change")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], none.clone()), 201, status("held"))
            .release("{p}-h", 200, json!({"hold_id": "{p}-h", "status": "released", "finished_at_ms": "$now"}))
            .get_pool(a, counts(5, 5, 0, 0))
            .get_hold("{p}-h", 200, json!({"status": "released", "finished_at_ms": "$save:finished"}))
            .release("{p}-h", 200, json!({"status": "released", "finished_at_ms": "$same:finished"}))
            .get_pool(a, counts(5, 5, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("released", json!({"hold_id": "{p}-h"})),
            ])),
        case("hold: release refuses confirmed and refunded holds; a missing hold is 404")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .release("{p}-h", 409, err("hold_confirmed"))
            .get_pool(a, counts(5, 4, 0, 1))
            .refund("{p}-h", 200, status("refunded"))
            .release("{p}-h", 409, err("hold_refunded"))
            .release("{p}-nope", 404, err("hold_not_found"))
            .get_pool(a, counts(5, 5, 0, 0)),
        case("hold: release past the deadline is 200 with status expired")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"ttl_ms": 1000})), 201, json!({"expires_at_ms": "$save:deadline"}))
            .wait_past("deadline")
            .release("{p}-h", 200, json!({"hold_id": "{p}-h", "status": "expired"}))
            .poll_pool(a, 0, counts(5, 5, 0, 0))
            .release("{p}-h", 200, status("expired"))
            .get_pool(a, counts(5, 5, 0, 0)),
        case("hold: an expired hold: units back without traffic, and every transition answers per contract")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 3)], json!({"user": "u1", "ttl_ms": 1000})), 201, status("held"))
            .poll_pool(a, 1000, counts(5, 5, 0, 0))
            .get_hold("{p}-h", 200, json!({"status": "expired", "finished_at_ms": "$int", "user": "u1"}))
            .confirm("{p}-h", 409, err("hold_expired"))
            .extend("{p}-h", 5000, 409, err("hold_expired"))
            .refund("{p}-h", 409, err("hold_not_confirmed"))
            .release("{p}-h", 200, status("expired"))
            .reserve(hold_req("{p}-h", &[(a, 3)], json!({"user": "u1", "ttl_ms": 1000})), 200, status("expired"))
            .get_pool(a, counts(5, 5, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h", "user": "u1", "items": [{"pool": a, "qty": 3}]})),
                ev("expired", json!({"hold_id": "{p}-h"})),
            ])),
        case("hold: extend sets expires_at_ms = now + ttl_ms, at both edges")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"ttl_ms": 1000})), 201, status("held"))
            .extend("{p}-h", 86_400_000, 200, json!({"hold_id": "{p}-h", "status": "held", "expires_at_ms": "$now+86400000", "finished_at_ms": null}))
            .get_hold("{p}-h", 200, json!({"status": "held", "expires_at_ms": "$save:expires"}))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 200, json!({"expires_at_ms": "$same:expires"}))
            .extend("{p}-h", 1000, 200, json!({"expires_at_ms": "$now+1000"}))
            .get_pool(a, counts(5, 4, 1, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("extended", json!({"hold_id": "{p}-h"})),
                ev("extended", json!({"hold_id": "{p}-h"})),
            ])),
        case("hold: extend keeps a hold alive past its first deadline")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"ttl_ms": 1000})), 201, json!({"expires_at_ms": "$save:first"}))
            .extend("{p}-h", 60_000, 200, status("held"))
            .wait_past("first")
            .confirm("{p}-h", 200, status("confirmed"))
            .get_pool(a, counts(5, 4, 0, 1)),
        case("hold: extend refuses confirmed, released, refunded and expired holds; missing is 404")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .extend("{p}-h1", 5000, 409, err("hold_confirmed"))
            .reserve(hold_req("{p}-h2", &[(a, 1)], none.clone()), 201, status("held"))
            .release("{p}-h2", 200, status("released"))
            .extend("{p}-h2", 5000, 409, err("hold_released"))
            .reserve(hold_req("{p}-h3", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .refund("{p}-h3", 200, status("refunded"))
            .extend("{p}-h3", 5000, 409, err("hold_refunded"))
            .reserve(hold_req("{p}-h4", &[(a, 1)], json!({"ttl_ms": 1000})), 201, json!({"expires_at_ms": "$save:deadline"}))
            .wait_past("deadline")
            .extend("{p}-h4", 5000, 409, err("hold_expired"))
            .extend("{p}-nope", 5000, 404, err("hold_not_found"))
            .poll_pool(a, 0, counts(5, 4, 0, 1)),
        case("hold: refund returns sold units to available; repeating it is 200 with no change")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"confirm": true})), 201, status("confirmed"))
            .refund("{p}-h", 200, json!({"hold_id": "{p}-h", "status": "refunded", "finished_at_ms": "$now"}))
            .get_pool(a, counts(5, 5, 0, 0))
            .get_hold("{p}-h", 200, json!({"status": "refunded", "finished_at_ms": "$save:finished"}))
            .refund("{p}-h", 200, json!({"status": "refunded", "finished_at_ms": "$same:finished"}))
            .get_pool(a, counts(5, 5, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
                ev("refunded", json!({"hold_id": "{p}-h", "restock": true})),
            ])),
        case("hold: refund with restock false takes the sold units out of every pool; a repeat is 200 unchanged")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .put_pool(b, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2), (b, 1)], json!({"confirm": true, "user": "u1"})), 201, status("confirmed"))
            .get_pool(a, counts(5, 3, 0, 2))
            .refund_with("{p}-h", json!({"restock": false}), 200, json!({"hold_id": "{p}-h", "status": "refunded", "finished_at_ms": "$now"}))
            .get_pool(a, counts(3, 3, 0, 0))
            .get_pool(b, counts(4, 4, 0, 0))
            .get_hold("{p}-h", 200, json!({"status": "refunded", "finished_at_ms": "$save:finished"}))
            .refund("{p}-h", 200, json!({"status": "refunded", "finished_at_ms": "$same:finished"}))
            .refund_with("{p}-h", json!({"restock": false}), 200, json!({"status": "refunded", "finished_at_ms": "$same:finished"}))
            .refund_with("{p}-h", json!({"restock": true}), 200, json!({"status": "refunded", "finished_at_ms": "$same:finished"}))
            .get_pool(a, counts(3, 3, 0, 0))
            .get_pool(b, counts(4, 4, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("pool_upserted", json!({"pool": b})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
                ev("refunded", json!({"hold_id": "{p}-h", "restock": false})),
            ])),
        case("hold: refund's body: empty, null, {} and restock true put the units back; a bad restock is 422")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h2", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h3", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h4", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .refund_with("{p}-h1", json!({"restock": "no"}), 422, err("invalid_request"))
            .refund_with("{p}-h1", json!({"restock": 0}), 422, err("invalid_request"))
            .refund_with("{p}-h1", json!({"restok": false}), 422, err("invalid_request"))
            .refund_with("{p}-h1", json!([false]), 422, err("invalid_request"))
            .get_pool(a, counts(5, 1, 0, 4))
            .raw("POST", "/v1/holds/{p}-h1/refund", "null", 200, status("refunded"))
            .raw("POST", "/v1/holds/{p}-h2/refund", "{}", 200, status("refunded"))
            .refund_with("{p}-h3", json!({"restock": null}), 200, status("refunded"))
            .refund_with("{p}-h4", json!({"restock": true}), 200, status("refunded"))
            .get_pool(a, counts(5, 5, 0, 0)),
        case("hold: refund refuses held, released and expired holds; missing is 404")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], none.clone()), 201, status("held"))
            .refund("{p}-h1", 409, err("hold_not_confirmed"))
            .reserve(hold_req("{p}-h2", &[(a, 1)], none.clone()), 201, status("held"))
            .release("{p}-h2", 200, status("released"))
            .refund("{p}-h2", 409, err("hold_not_confirmed"))
            .refund("{p}-nope", 404, err("hold_not_found"))
            .get_pool(a, counts(5, 4, 1, 0))
            .get_hold("{p}-h1", 200, status("held")),
        case("hold: a multi-pool hold moves every pool on each transition")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .put_pool(b, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 2)], none.clone()), 201, status("held"))
            .confirm("{p}-h", 200, status("confirmed"))
            .get_pool(a, counts(5, 4, 0, 1))
            .get_pool(b, counts(5, 3, 0, 2))
            .refund("{p}-h", 200, status("refunded"))
            .get_pool(a, counts(5, 5, 0, 0))
            .get_pool(b, counts(5, 5, 0, 0)),
        case("hold: finished_at_ms follows the latest transition")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"confirm": true})), 201, json!({"finished_at_ms": "$save:confirmed_at"}))
            .refund("{p}-h", 200, json!({"finished_at_ms": "$now"}))
            .get_hold("{p}-h", 200, json!({"status": "refunded", "finished_at_ms": "$int"})),
        case("hold: GET of a missing hold is 404 hold_not_found")
            .get_hold("{p}-nope", 404, err("hold_not_found")),
        case("hold: wait_ms with stock short fails with insufficient_stock when nothing comes back")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], none.clone()), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(a, 1)], json!({"wait_ms": 200})), 409, json!({"error": "insufficient_stock", "pool": a, "available": 0, "requested": 1}))
            .get_pool(a, counts(1, 0, 1, 0))
            .get_hold("{p}-h2", 404, err("hold_not_found")),
        case("hold: wait_ms 30000 with stock available succeeds at once")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"wait_ms": 30_000})), 201, status("held")),
        case("hold: a failed reserve of one hold_id does not block a later one")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], none.clone()), 409, err("insufficient_stock"))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"user": "u9"})), 201, json!({"status": "held", "user": "u9", "items": [{"pool": a, "qty": 1}]})),
        case("hold: identifiers use the whole alphabet: . _ : - after an alphanumeric first byte")
            .put_pool("{p}.a_b:c-d", json!({"total": 2}), 201, json!({"pool": "{p}.a_b:c-d"}))
            .reserve(hold_req("{p}.h_1:x-y", &[("{p}.a_b:c-d", 1)], json!({"user": "0.u_1:x-Y"})), 201, json!({"hold_id": "{p}.h_1:x-y", "user": "0.u_1:x-Y"}))
            .get_hold("{p}.h_1:x-y", 200, status("held"))
            .confirm("{p}.h_1:x-y", 200, status("confirmed")),
    ]
}
