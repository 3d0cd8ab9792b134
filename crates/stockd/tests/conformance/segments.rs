//! Segmented pools: the count is set when a pool is created and fixed after; every rule holds
//! for the pool as a whole (counts, restock, total changes, per-user limits, sale windows,
//! delete, `low_stock`), and `GET /v1/pools/{pool}/segments` adds up to the pool.
//!
//! The cases are data (see `case.rs`), run by `runner.rs`. They hold on every backend; the
//! list of segments itself is checked where the contract fixes it (one segment, 0, on one
//! partition: the embedded engine and a single Redis keep a segmented pool whole).

use serde_json::{json, Value};

use crate::case::*;

fn segments_path(pool: &str) -> String {
    format!("/v1/pools/{pool}/segments")
}

/// A pool's counts with its segment count.
fn pool_of(segments: u64, total: u64, available: u64, held: u64, sold: u64) -> Value {
    json!({"segments": segments, "total": total, "available": available, "held": held, "sold": sold})
}

pub(crate) fn segment_cases() -> Vec<Case> {
    vec![
        case("segments: a pool has one segment unless created with more, and says so")
            .put_pool("{p}-a", json!({"total": 5}), 201, pool_of(1, 5, 5, 0, 0))
            .put_pool("{p}-b", json!({"total": 5, "segments": 1}), 201, pool_of(1, 5, 5, 0, 0))
            .put_pool("{p}-c", json!({"total": 8, "segments": 4}), 201, pool_of(4, 8, 8, 0, 0))
            .get_pool("{p}-c", pool_of(4, 8, 8, 0, 0))
            .get("/v1/pools?prefix={p}-", 200, json!({"pools": [
                {"pool": "{p}-a", "segments": 1}, {"pool": "{p}-b", "segments": 1},
                {"pool": "{p}-c", "segments": 4},
            ]})),
        case("segments: 1 and 64 are accepted; 0, 65 and a non-integer are 422 invalid_request, nothing created")
            .put_pool("{p}-a", json!({"total": 1, "segments": 0}), 422, err("invalid_request"))
            .put_pool("{p}-a", json!({"total": 1, "segments": 65}), 422, err("invalid_request"))
            .put_pool("{p}-a", json!({"total": 1, "segments": 2.5}), 422, err("invalid_request"))
            .put_pool("{p}-a", json!({"total": 1, "segments": "2"}), 422, err("invalid_request"))
            .put_pool("{p}-a", json!({"total": 1, "segments": -1}), 422, err("invalid_request"))
            .get("/v1/pools/{p}-a", 404, err("pool_not_found"))
            .put_pool("{p}-a", json!({"total": 1, "segments": 64}), 201, pool_of(64, 1, 1, 0, 0))
            .put_pool("{p}-b", json!({"total": 1, "segments": 1}), 201, pool_of(1, 1, 1, 0, 0)),
        case("segments: null is the same as leaving it out")
            .put_pool("{p}-a", json!({"total": 3, "segments": null}), 201, pool_of(1, 3, 3, 0, 0))
            .put_pool("{p}-b", json!({"total": 3, "segments": 3}), 201, pool_of(3, 3, 3, 0, 0))
            .put_pool("{p}-b", json!({"total": 4, "segments": null}), 200, pool_of(3, 4, 4, 0, 0)),
        case("segments: fixed at creation; a PUT naming another count is 409 segments_fixed and changes nothing")
            .put_pool("{p}-a", json!({"total": 6, "segments": 3}), 201, pool_of(3, 6, 6, 0, 0))
            .put_pool("{p}-a", json!({"total": 9, "segments": 2}), 409, json!({"error": "segments_fixed", "pool": "{p}-a", "segments": 3, "requested": 2}))
            .put_pool("{p}-a", json!({"total": 9, "segments": 1}), 409, err("segments_fixed"))
            .get_pool("{p}-a", pool_of(3, 6, 6, 0, 0))
            .put_pool("{p}-b", json!({"total": 6}), 201, pool_of(1, 6, 6, 0, 0))
            .put_pool("{p}-b", json!({"total": 6, "segments": 2}), 409, json!({"error": "segments_fixed", "segments": 1, "requested": 2}))
            .get_pool("{p}-b", pool_of(1, 6, 6, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": "{p}-a", "total": 6})),
                ev("pool_upserted", json!({"pool": "{p}-b", "total": 6})),
            ])),
        case("segments: a PUT with the same count or none replaces total and rules and keeps the count")
            .put_pool("{p}-a", json!({"total": 6, "segments": 3}), 201, pool_of(3, 6, 6, 0, 0))
            .put_pool("{p}-a", json!({"total": 9, "segments": 3, "per_user_limit": 2}), 200, json!({"segments": 3, "total": 9, "per_user_limit": 2}))
            .put_pool("{p}-a", json!({"total": 7}), 200, json!({"segments": 3, "total": 7, "available": 7, "per_user_limit": null})),
        case("segments: if_absent=true leaves an existing pool as it is, whatever count it names")
            .put_pool("{p}-a?if_absent=true", json!({"total": 6, "segments": 3}), 201, pool_of(3, 6, 6, 0, 0))
            .put_pool("{p}-a?if_absent=true", json!({"total": 9, "segments": 2}), 200, pool_of(3, 6, 6, 0, 0)),
        case("segments: holds, confirms, releases and refunds count the pool as a whole, to the last unit")
            .put_pool("{p}-a", json!({"total": 8, "segments": 4}), 201, pool_of(4, 8, 8, 0, 0))
            .reserve(hold_req("{p}-h1", &[("{p}-a", 5)], json!({})), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[("{p}-a", 3)], json!({"confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h3", &[("{p}-a", 1)], json!({})), 409, json!({"error": "insufficient_stock", "available": 0, "requested": 1}))
            .get_pool("{p}-a", pool_of(4, 8, 0, 5, 3))
            .release("{p}-h1", 200, status("released"))
            .refund("{p}-h2", 200, status("refunded"))
            .get_pool("{p}-a", pool_of(4, 8, 8, 0, 0))
            .reserve(hold_req("{p}-h4", &[("{p}-a", 8)], json!({"confirm": true})), 201, status("confirmed"))
            .get_pool("{p}-a", pool_of(4, 8, 0, 0, 8)),
        case("segments: a hold over a segmented and a plain pool is all-or-nothing")
            .put_pool("{p}-a", json!({"total": 4, "segments": 2}), 201, json!({}))
            .put_pool("{p}-b", json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[("{p}-a", 3), ("{p}-b", 2)], json!({})), 409, err("insufficient_stock"))
            .get_pool("{p}-a", pool_of(2, 4, 4, 0, 0))
            .reserve(hold_req("{p}-h2", &[("{p}-a", 4), ("{p}-b", 1)], json!({})), 201, status("held"))
            .get_pool("{p}-a", pool_of(2, 4, 0, 4, 0))
            .get_pool("{p}-b", counts(1, 0, 1, 0)),
        case("segments: a per-user limit counts the user's units across the whole pool")
            .put_pool("{p}-a", json!({"total": 20, "segments": 4, "per_user_limit": 3}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[("{p}-a", 2)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[("{p}-a", 1)], json!({"user": "u1", "confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h3", &[("{p}-a", 1)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "limit": 3, "used": 3, "requested": 1}))
            .reserve(hold_req("{p}-h4", &[("{p}-a", 3)], json!({"user": "u2"})), 201, status("held"))
            .release("{p}-h1", 200, status("released"))
            .reserve(hold_req("{p}-h5", &[("{p}-a", 2)], json!({"user": "u1"})), 201, status("held")),
        case("segments: restock (with request_id), total changes and sale windows apply to the whole pool")
            .put_pool("{p}-a", json!({"total": 4, "segments": 2}), 201, json!({}))
            .restock_with("{p}-a", json!({"delta": 6, "request_id": "{p}-r"}), 200, pool_of(2, 10, 10, 0, 0))
            .restock_with("{p}-a", json!({"delta": 6, "request_id": "{p}-r"}), 200, pool_of(2, 10, 10, 0, 0)).replayed()
            .restock("{p}-a", -11, 409, err("insufficient_stock"))
            .restock("{p}-a", -10, 200, pool_of(2, 0, 0, 0, 0))
            .put_pool("{p}-a", json!({"total": 3, "ends_at_ms": LONG_AGO_MS}), 200, pool_of(2, 3, 3, 0, 0))
            .reserve(hold_req("{p}-h1", &[("{p}-a", 1)], json!({})), 409, err("sale_ended"))
            .put_pool("{p}-a", json!({"total": 3, "starts_at_ms": FAR_FUTURE_MS}), 200, json!({}))
            .reserve(hold_req("{p}-h2", &[("{p}-a", 1)], json!({})), 409, err("sale_not_started"))
            .get_pool("{p}-a", pool_of(2, 3, 3, 0, 0)),
        case("segments: low_stock fires once when the pool's available first falls to the threshold")
            .put_pool("{p}-a", json!({"total": 6, "segments": 3, "low_stock_threshold": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[("{p}-a", 3)], json!({})), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[("{p}-a", 1)], json!({})), 201, status("held"))
            .reserve(hold_req("{p}-h3", &[("{p}-a", 1)], json!({})), 201, status("held"))
            .events(json!([
                ev("pool_upserted", json!({"pool": "{p}-a"})),
                ev("held", json!({"hold_id": "{p}-h1"})),
                ev("held", json!({"hold_id": "{p}-h2"})),
                ev("low_stock", json!({"pool": "{p}-a", "available": 2, "low_stock_threshold": 2})),
                ev("held", json!({"hold_id": "{p}-h3"})),
            ])),
        case("segments: a pool with active holds cannot be deleted; deleted, it ends with its segments")
            .put_pool("{p}-a", json!({"total": 4, "segments": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[("{p}-a", 1)], json!({})), 201, status("held"))
            .delete_pool("{p}-a", 409, err("pool_has_active_holds"))
            .release("{p}-h", 200, status("released"))
            .delete_pool("{p}-a", 204, Value::Null)
            .get(&segments_path("{p}-a"), 404, err("pool_not_found"))
            .put_pool("{p}-a", json!({"total": 2, "segments": 3}), 201, pool_of(3, 2, 2, 0, 0)),
        case("segments: the segments of a missing pool are 404 pool_not_found")
            .get(&segments_path("{p}-none"), 404, json!({"error": "pool_not_found", "pool": "{p}-none"})),
        case("segments: the segments list adds up to the pool")
            .put_pool("{p}-a", json!({"total": 9, "segments": 3}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[("{p}-a", 2)], json!({})), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[("{p}-a", 3)], json!({"confirm": true})), 201, status("confirmed"))
            .get_pool("{p}-a", pool_of(3, 9, 4, 2, 3))
            .get(&segments_path("{p}-a"), 200, json!({"segments": {"$sum": {"total": 9, "available": 4, "held": 2, "sold": 3}}})),
        case("segments: on one partition a segmented pool is one segment, 0, with the pool's counts")
            .only(When::OnePartition)
            .put_pool("{p}-a", json!({"total": 9, "segments": 3}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[("{p}-a", 2)], json!({})), 201, status("held"))
            .get(&segments_path("{p}-a"), 200, json!({"segments": [
                {"segment": 0, "partition": 0, "total": 9, "available": 7, "held": 2, "sold": 0},
            ]}))
            .put_pool("{p}-b", json!({"total": 1}), 201, json!({}))
            .get(&segments_path("{p}-b"), 200, json!({"segments": [
                {"segment": 0, "partition": 0, "total": 1, "available": 1, "held": 0, "sold": 0},
            ]})),
    ]
}
