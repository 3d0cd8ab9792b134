//! The hold list (`GET /v1/holds`): filters, paging, retention, and the retention flags.
//!
//! The cases are data (see `case.rs`), run by `runner.rs`.

use serde_json::{json, Value};

use crate::case::*;
use crate::support::{Server, ServerConfig};

/// A page of the given hold ids (with the case's prefix) in this order, and its `next`.
fn hold_page(ids: &[&str], next: Value) -> Value {
    let holds: Vec<Value> = ids
        .iter()
        .map(|id| json!({"hold_id": format!("{{p}}-{id}")}))
        .collect();
    json!({"holds": holds, "next": next})
}

pub(crate) fn hold_list_cases() -> Vec<Case> {
    let a = "{p}-a";
    let b = "{p}-b";
    let as_user =
        |user: &str, confirm: bool| json!({"user": format!("{{p}}-{user}"), "confirm": confirm});
    vec![
        case("hold list: ordered by hold_id, each filter alone and combined, in every status")
            .put_pool(a, json!({"total": 100}), 201, json!({}))
            .put_pool(b, json!({"total": 100}), 201, json!({}))
            .reserve(hold_req("{p}-h3", &[(a, 1)], as_user("u1", false)), 201, status("held"))
            .reserve(hold_req("{p}-h1", &[(a, 1), (b, 2)], as_user("u2", false)), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(b, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h4", &[(b, 1)], as_user("u1", false)), 201, status("held"))
            .release("{p}-h4", 200, status("released"))
            .reserve(hold_req("{p}-h5", &[(a, 1)], as_user("u2", true)), 201, status("confirmed"))
            .refund("{p}-h5", 200, status("refunded"))
            .get("/v1/holds?pool={p}-a", 200, hold_page(&["h1", "h3", "h5"], json!(null)))
            .get("/v1/holds?pool={p}-b", 200, hold_page(&["h1", "h2", "h4"], json!(null)))
            .get("/v1/holds?user={p}-u1", 200, hold_page(&["h3", "h4"], json!(null)))
            .get("/v1/holds?user={p}-u2&pool={p}-b", 200, hold_page(&["h1"], json!(null)))
            .get("/v1/holds?status=held&pool={p}-a", 200, hold_page(&["h1", "h3"], json!(null)))
            .get("/v1/holds?status=confirmed&pool={p}-b", 200, hold_page(&["h2"], json!(null)))
            .get("/v1/holds?status=released&user={p}-u1", 200, hold_page(&["h4"], json!(null)))
            .get("/v1/holds?status=refunded&user={p}-u2&pool={p}-a", 200, hold_page(&["h5"], json!(null)))
            .get("/v1/holds?status=expired&pool={p}-a", 200, hold_page(&[], json!(null)))
            .get("/v1/holds?user={p}-nobody", 200, hold_page(&[], json!(null)))
            .get("/v1/holds?pool={p}-none", 200, hold_page(&[], json!(null)))
            // Without filters every retained hold is listed; this case's ids follow `{p}`.
            .get("/v1/holds?after={p}&limit=4", 200, hold_page(&["h1", "h2", "h3", "h4"], json!("$any")))
            // Each hold as GET /v1/holds/{id} shows it.
            .get("/v1/holds?pool={p}-a&user={p}-u1", 200, json!({"holds": [{
                "hold_id": "{p}-h3", "status": "held", "user": "{p}-u1", "items": [{"pool": a, "qty": 1}],
                "created_at_ms": "$int", "expires_at_ms": "$int", "finished_at_ms": null,
                "partition": "$partition",
            }], "next": null}))
            .get("/v1/holds?pool={p}-b&status=released", 200, json!({"holds": [{
                "hold_id": "{p}-h4", "status": "released", "user": "{p}-u1", "items": [{"pool": b, "qty": 1}],
                "finished_at_ms": "$int",
            }], "next": null})),
        case("hold list: pages follow next to null, each hold once; limit default 100, 1..=1000")
            .put_pool(a, json!({"total": 200}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], json!({})), 201, json!({}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], json!({})), 201, json!({}))
            .reserve(hold_req("{p}-h3", &[(a, 1)], json!({})), 201, json!({}))
            .reserve(hold_req("{p}-h4", &[(a, 1)], json!({})), 201, json!({}))
            .reserve(hold_req("{p}-h5", &[(a, 1)], json!({})), 201, json!({}))
            .get("/v1/holds?pool={p}-a&limit=2", 200, hold_page(&["h1", "h2"], json!("$save:n1")))
            .get("/v1/holds?pool={p}-a&limit=2&after={$n1}", 200, hold_page(&["h3", "h4"], json!("$save:n2")))
            .get("/v1/holds?pool={p}-a&limit=2&after={$n2}", 200, hold_page(&["h5"], json!(null)))
            .get("/v1/holds?pool={p}-a&limit=1&after={p}-h4", 200, hold_page(&["h5"], json!(null)))
            .get("/v1/holds?pool={p}-a&after={p}-h2x", 200, hold_page(&["h3", "h4", "h5"], json!(null)))
            .get("/v1/holds?pool={p}-a&limit=1000", 200, json!({"holds": {"$len": 5}, "next": null}))
            .get("/v1/holds?pool={p}-a", 200, json!({"holds": {"$len": 5}, "next": null})),
        case("hold list: bad query values are 422 invalid_request, unknown parameters refused")
            .get("/v1/holds?limit=0", 422, err("invalid_request"))
            .get("/v1/holds?limit=1001", 422, err("invalid_request"))
            .get("/v1/holds?limit=-1", 422, err("invalid_request"))
            .get("/v1/holds?limit=ten", 422, err("invalid_request"))
            .get("/v1/holds?status=sold", 422, json!({"error": "invalid_request", "message": "status: must be one of held, confirmed, released, expired, refunded, got \"sold\""}))
            .get("/v1/holds?status=", 422, err("invalid_request"))
            .get("/v1/holds?pool=-x", 422, err("invalid_request"))
            .get("/v1/holds?user=a%20b", 422, err("invalid_request"))
            .get("/v1/holds?after=", 422, err("invalid_request"))
            .get("/v1/holds?prefix=a", 422, err("invalid_request"))
            .get("/v1/holds?pool={p}-a&pool={p}-b", 422, err("invalid_request")),
        case("hold list: a hold past its deadline is listed as expired, swept or not, as GET shows it")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"ttl_ms": 1000})), 201, json!({"expires_at_ms": "$save:expires"}))
            .get("/v1/holds?pool={p}-a&status=held", 200, hold_page(&["h"], json!(null)))
            .wait_past("expires")
            .get("/v1/holds?pool={p}-a&status=held", 200, hold_page(&[], json!(null)))
            .get("/v1/holds?pool={p}-a&status=expired", 200, json!({"holds": [{
                "hold_id": "{p}-h", "status": "expired", "finished_at_ms": "$same:expires",
            }], "next": null}))
            .get_hold("{p}-h", 200, json!({"status": "expired", "finished_at_ms": "$same:expires"}))
            .get("/v1/holds?pool={p}-a", 200, json!({"holds": [{"status": "expired", "finished_at_ms": "$same:expires"}], "next": null})),
        case("hold list: a hold over several pools (and partitions) is listed once")
            .put_pool("{p}-a", json!({"total": 5}), 201, json!({}))
            .put_pool("{p}-b", json!({"total": 5}), 201, json!({}))
            .put_pool("{p}-c", json!({"total": 5}), 201, json!({}))
            .put_pool("{p}-d", json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[("{p}-a", 1), ("{p}-b", 1), ("{p}-c", 1), ("{p}-d", 1)], as_user("u", false)), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[("{p}-d", 1)], as_user("u", false)), 201, status("held"))
            .reserve(hold_req("{p}-h3", &[("{p}-c", 1), ("{p}-a", 1)], as_user("u", true)), 201, status("confirmed"))
            .get("/v1/holds?user={p}-u", 200, hold_page(&["h1", "h2", "h3"], json!(null)))
            .get("/v1/holds?user={p}-u&limit=1", 200, hold_page(&["h1"], json!("{p}-h1")))
            .get("/v1/holds?user={p}-u&limit=1&after={p}-h1", 200, hold_page(&["h2"], json!("{p}-h2")))
            .get("/v1/holds?user={p}-u&limit=2&after={p}-h1", 200, hold_page(&["h2", "h3"], json!(null)))
            .get("/v1/holds?pool={p}-a", 200, hold_page(&["h1", "h3"], json!(null)))
            .get("/v1/holds?pool={p}-b", 200, hold_page(&["h1"], json!(null)))
            .get("/v1/holds?pool={p}-c&status=confirmed", 200, hold_page(&["h3"], json!(null)))
            .get("/v1/holds?pool={p}-d", 200, hold_page(&["h1", "h2"], json!(null)))
            .get("/v1/holds?after={p}&limit=3", 200, hold_page(&["h1", "h2", "h3"], json!("$any")))
            .release("{p}-h1", 200, status("released"))
            .get("/v1/holds?pool={p}-b", 200, json!({"holds": [{"hold_id": "{p}-h1", "status": "released"}], "next": null}))
            .get("/v1/holds?user={p}-u&status=held", 200, hold_page(&["h2"], json!(null))),
    ]
}

/// Run on a server that keeps finished holds 1.5 s.
pub(crate) fn hold_list_retention_cases() -> Vec<Case> {
    let a = "{p}-a";
    vec![case(
        "hold list: finished holds leave the list once forgotten after retention; held ones stay",
    )
    .put_pool(a, json!({"total": 5}), 201, json!({}))
    .reserve(
        hold_req("{p}-h1", &[(a, 1)], json!({"user": "{p}-u"})),
        201,
        status("held"),
    )
    .reserve(
        hold_req("{p}-h2", &[(a, 1)], json!({"user": "{p}-u"})),
        201,
        status("held"),
    )
    .reserve(
        hold_req("{p}-h3", &[(a, 1)], json!({"user": "{p}-u"})),
        201,
        status("held"),
    )
    .release("{p}-h1", 200, status("released"))
    .confirm("{p}-h3", 200, status("confirmed"))
    .confirm("{p}-h3", 200, status("confirmed"))
    .refund("{p}-h3", 200, status("refunded"))
    .get(
        "/v1/holds?pool={p}-a",
        200,
        hold_page(&["h1", "h2", "h3"], json!(null)),
    )
    .poll(
        "/v1/holds?pool={p}-a",
        5_000,
        hold_page(&["h2"], json!(null)),
    )
    .get("/v1/holds?user={p}-u", 200, hold_page(&["h2"], json!(null)))
    .get(
        "/v1/holds?after={p}&limit=1",
        200,
        json!({"holds": [{"hold_id": "{p}-h2"}], "next": "$any"}),
    )
    .get_hold("{p}-h1", 404, err("hold_not_found"))
    // The id is free again: made anew, it is listed anew.
    .reserve(
        hold_req("{p}-h1", &[(a, 1)], json!({})),
        201,
        status("held"),
    )
    .get(
        "/v1/holds?pool={p}-a",
        200,
        hold_page(&["h1", "h2"], json!(null)),
    )
    .get("/v1/holds?user={p}-u", 200, hold_page(&["h2"], json!(null)))]
}

/// The retention flags are accepted, and finished holds stay readable and idempotent while
/// retained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_flags_keep_finished_holds() {
    let config = ServerConfig::default()
        .arg("--hold-retention-ms")
        .arg("60000")
        .arg("--confirmed-retention-ms")
        .arg("120000");
    let server = Server::start_with(config).await;
    let api = server.api();
    let (status, _) = api
        .call("PUT", "/v1/pools/r-a", Some(json!({"total": 3})))
        .await;
    assert_eq!(status, 201);
    for (hold, confirm) in [("r-released", false), ("r-confirmed", true)] {
        let body =
            json!({"hold_id": hold, "items": [{"pool": "r-a", "qty": 1}], "confirm": confirm});
        let (status, reply) = api.call("POST", "/v1/holds", Some(body.clone())).await;
        assert_eq!(status, 201, "{reply}");
        if !confirm {
            let (status, _) = api
                .call("POST", &format!("/v1/holds/{hold}/release"), None)
                .await;
            assert_eq!(status, 200);
        }
        let (status, reply) = api.call("POST", "/v1/holds", Some(body)).await;
        assert_eq!(
            status, 200,
            "a retained hold answers a retry idempotently: {reply}"
        );
        let want = if confirm { "confirmed" } else { "released" };
        assert_eq!(reply["status"], want, "{reply}");
    }
    let pool = api.pool("r-a").await;
    assert_eq!(
        (&pool["available"], &pool["sold"]),
        (&json!(2), &json!(1)),
        "{pool}"
    );
}
