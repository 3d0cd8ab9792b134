//! Small hand-written histories: one that is explained, and variants that must be rejected, each
//! for one reason (proof that the checker can fail, and fails for the right reason).

use serde_json::{json, Value};

use crate::{check, Bounds, History, Item, Op, Outcome, Request};

const MS: u64 = 1_000;

/// An op by `process` sent at `from_ms` and answered at `to_ms`.
fn answered(
    (process, from_ms, to_ms): (u32, u64, u64),
    request: Request,
    status: u16,
    body: Value,
) -> Op {
    Op {
        process,
        invoke_us: from_ms * MS,
        complete_us: to_ms * MS,
        request,
        outcome: Outcome::Answered { status, body },
    }
}

fn unknown((process, from_ms, to_ms): (u32, u64, u64), request: Request) -> Op {
    Op {
        process,
        invoke_us: from_ms * MS,
        complete_us: to_ms * MS,
        request,
        outcome: Outcome::Unknown {
            why: "connection reset".to_string(),
        },
    }
}

fn reserve(hold_id: &str, user: &str, qty: u64) -> Request {
    Request::Reserve {
        hold_id: hold_id.to_string(),
        user: Some(user.to_string()),
        items: vec![Item {
            pool: "p".to_string(),
            qty,
        }],
        ttl_ms: 1_000,
        confirm: false,
        wait_ms: 0,
    }
}

fn hold(hold_id: &str, user: &str, qty: u64, status: &str, created: u64) -> Value {
    json!({"hold_id": hold_id, "status": status, "user": user,
           "items": [{"pool": "p", "qty": qty}], "created_at_ms": created,
           "expires_at_ms": created + 1_000, "finished_at_ms": null, "partition": 0})
}

fn held(seq: u64, at: u64, hold_id: &str, user: &str, qty: u64) -> Value {
    json!({"seq": seq, "at_ms": at, "type": "held", "hold_id": hold_id, "user": user,
           "items": [{"pool": "p", "qty": qty}], "created_at_ms": at, "expires_at_ms": at + 1_000})
}

fn step(seq: u64, at: u64, kind: &str, hold_id: &str, user: &str, expires: u64) -> Value {
    json!({"seq": seq, "at_ms": at, "type": kind, "hold_id": hold_id, "user": user,
           "items": [{"pool": "p", "qty": 1}], "expires_at_ms": expires})
}

fn pool(total: u64, available: u64, held: u64, sold: u64) -> Value {
    json!({"pool": "p", "total": total, "available": available, "held": held, "sold": sold,
           "per_user_limit": 2, "starts_at_ms": null, "ends_at_ms": null,
           "low_stock_threshold": null, "partition": 0})
}

/// A reserve of `qty` answered 201 with the hold held, created at `created`.
fn reserved(
    (process, from_ms, to_ms): (u32, u64, u64),
    hold_id: &str,
    user: &str,
    qty: u64,
    created: u64,
) -> Op {
    answered(
        (process, from_ms, to_ms),
        reserve(hold_id, user, qty),
        201,
        hold(hold_id, user, qty, "held", created),
    )
}

/// The answered put of pool p with 2 units, and its event.
fn pool_put() -> (Op, Value) {
    (
        answered(
            (0, 1_000, 1_002),
            Request::PutPool {
                pool: "p".to_string(),
                total: 2,
                per_user_limit: Some(2),
                low_stock_threshold: None,
                segments: None,
            },
            201,
            pool(2, 2, 0, 0),
        ),
        json!({"seq": 1, "at_ms": 1_001, "type": "pool_upserted", "pool": "p", "delta": 2, "total": 2, "available": 2}),
    )
}

fn confirm(hold_id: &str) -> Request {
    Request::Confirm {
        hold_id: hold_id.to_string(),
    }
}

fn release(hold_id: &str) -> Request {
    Request::Release {
        hold_id: hold_id.to_string(),
    }
}

/// Numbers the events of the first partition's feed 1, 2, ... in their order.
fn renumber(history: &mut History) {
    for (seq, event) in history.feed[0].iter_mut().enumerate() {
        event["seq"] = json!(seq + 1);
    }
}

/// An acquire of lock L by `owner` granted with `token` until `expires`.
fn acquired(
    (process, from_ms, to_ms): (u32, u64, u64),
    owner: &str,
    token: u64,
    expires: u64,
) -> Op {
    answered(
        (process, from_ms, to_ms),
        acquire(owner),
        200,
        json!({"token": token, "expires_at_ms": expires}),
    )
}

fn acquire(owner: &str) -> Request {
    Request::LockAcquire {
        name: "L".to_string(),
        owner: owner.to_string(),
        ttl_ms: 500,
    }
}

/// Two units, three buyers, a confirm, an expiry, a refusal, a read, and a lock passing hands.
fn explained() -> History {
    let (put, upserted) = pool_put();
    History {
        ops: vec![
            put,
            reserved((1, 1_010, 1_012), "h1", "u1", 1, 1_011),
            reserved((2, 1_020, 1_022), "h2", "u2", 1, 1_021),
            answered(
                (3, 1_030, 1_032),
                reserve("h3", "u3", 1),
                409,
                json!({"error": "insufficient_stock", "pool": "p", "available": 0, "requested": 1}),
            ),
            answered(
                (1, 1_040, 1_042),
                confirm("h1"),
                200,
                hold("h1", "u1", 1, "confirmed", 1_011),
            ),
            answered(
                (3, 2_100, 2_101),
                Request::GetPool {
                    pool: "p".to_string(),
                },
                200,
                pool(2, 1, 0, 1),
            ),
            answered(
                (2, 2_110, 2_111),
                confirm("h2"),
                409,
                json!({"error": "hold_expired", "hold_id": "h2"}),
            ),
            acquired((4, 1_000, 1_002), "o1", 1, 1_501),
            answered(
                (5, 1_100, 1_102),
                acquire("o2"),
                409,
                json!({"error": "lock_held", "expires_at_ms": 1_501}),
            ),
            acquired((5, 1_600, 1_602), "o2", 2, 2_101),
        ],
        feed: vec![vec![
            upserted,
            held(2, 1_011, "h1", "u1", 1),
            held(3, 1_021, "h2", "u2", 1),
            step(4, 1_041, "confirmed", "h1", "u1", 2_011),
            step(5, 2_030, "expired", "h2", "u2", 2_021),
        ]],
        feed_read_us: 3_000 * MS,
    }
}

fn violations(history: &History) -> Vec<String> {
    check(history, Bounds::default()).violations
}

/// The history is rejected, and some violation mentions `why`.
fn rejected(history: &History, why: &str) {
    let found = violations(history);
    assert!(
        found.iter().any(|v| v.contains(why)),
        "expected a violation mentioning {why:?}, got {found:#?}"
    );
}

#[test]
fn an_explained_history_passes_and_is_counted() {
    let report = check(&explained(), Bounds::default());
    assert!(report.ok(), "{:#?}", report.violations);
    assert_eq!(report.stats.ops, 10);
    assert_eq!(report.stats.answered, 10);
    assert_eq!(report.stats.events, 5);
    assert_eq!(report.stats.holds, 2);
    assert_eq!(report.stats.expiries, 1);
    assert_eq!(report.stats.expiry_lag_max_ms, 9);
    assert_eq!(report.stats.lock_grants, 2);
    assert_eq!(report.stats.answers["reserve 409 insufficient_stock"], 1);
}

#[test]
fn an_oversell_is_rejected() {
    let mut history = explained();
    history.ops[3] = reserved((3, 1_030, 1_032), "h3", "u3", 1, 1_031);
    history.feed[0].insert(3, held(4, 1_031, "h3", "u3", 1));
    renumber(&mut history);
    rejected(&history, "OVERSELL");
}

#[test]
fn a_hold_applied_twice_is_rejected() {
    let mut history = explained();
    // A retry of h1 whose outcome is unknown, and a second held event for it.
    history
        .ops
        .push(unknown((1, 1_013, 1_015), reserve("h1", "u1", 1)));
    history.feed[0].insert(2, held(3, 1_014, "h1", "u1", 1));
    renumber(&mut history);
    rejected(&history, "applied twice");
}

#[test]
fn a_held_event_created_at_another_time_is_rejected() {
    let mut history = explained();
    // The feed's second event is h1's held (seq 2 at 1_011): one partition creates a hold when
    // it holds it.
    assert_eq!(history.feed[0][1]["hold_id"], "h1");
    history.feed[0][1]["created_at_ms"] = json!(1_009);
    rejected(&history, "created_at_ms is not at_ms");
}

#[test]
fn a_stale_read_is_rejected() {
    let mut history = explained();
    // Read 70 ms after the expiry was applied, yet showing the unit still held.
    history.ops[5] = answered(
        (3, 2_100, 2_101),
        Request::GetPool {
            pool: "p".to_string(),
        },
        200,
        pool(2, 0, 1, 1),
    );
    rejected(&history, "not a state the pool had");
}

#[test]
fn a_refusal_no_state_explains_is_rejected() {
    let mut history = explained();
    // h3 refused while a unit was surely free: h2 was expired long before.
    history.ops[3] = answered(
        (3, 2_200, 2_201),
        reserve("h3", "u3", 1),
        409,
        json!({"error": "insufficient_stock", "pool": "p", "available": 0, "requested": 1}),
    );
    rejected(&history, "gives this refusal");
}

#[test]
fn a_fencing_token_going_backwards_is_rejected() {
    let mut history = explained();
    history
        .ops
        .push(acquired((6, 2_200, 2_202), "o3", 1, 2_701));
    rejected(&history, "token went backwards");
}

#[test]
fn two_owners_at_once_are_rejected() {
    let mut history = explained();
    // o2 granted while o1's lease (until 1501) was valid.
    history.ops[8] = acquired((5, 1_100, 1_102), "o2", 2, 1_601);
    history.ops.remove(9);
    rejected(&history, "two owners at once");
}

#[test]
fn a_released_lease_may_pass_hands_early() {
    let mut history = explained();
    history.ops.push(answered(
        (4, 1_050, 1_052),
        Request::LockRelease {
            name: "L".to_string(),
            owner: "o1".to_string(),
            token: 1,
        },
        200,
        json!({"released": true}),
    ));
    history.ops[8] = acquired((5, 1_100, 1_102), "o2", 2, 1_601);
    history.ops.remove(9);
    let found = violations(&history);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn a_renew_may_shorten_a_lease() {
    let mut history = explained();
    // o1 renews with a short ttl at 1050: its lease now ends at 1200, and o2 gets it at 1300.
    history.ops.push(answered(
        (4, 1_050, 1_052),
        Request::LockRenew {
            name: "L".to_string(),
            owner: "o1".to_string(),
            token: 1,
            ttl_ms: 150,
        },
        200,
        json!({"token": 1, "expires_at_ms": 1_201}),
    ));
    history.ops[9] = acquired((5, 1_300, 1_302), "o2", 2, 1_801);
    let found = violations(&history);
    assert!(found.is_empty(), "{found:#?}");
    // ... but not at 1150.
    history.ops[9] = acquired((5, 1_150, 1_152), "o2", 2, 1_651);
    rejected(&history, "two owners at once");
}

#[test]
fn an_acknowledged_confirm_missing_from_the_feed_is_rejected() {
    let mut history = explained();
    history.feed[0].remove(3);
    history.feed[0][3] = step(4, 2_030, "expired", "h2", "u2", 2_021);
    rejected(&history, "confirmed");
}

#[test]
fn a_pool_upserted_without_its_delta_is_rejected() {
    let mut history = explained();
    history.feed[0][0]["delta"] = json!(0);
    rejected(&history, "the model has delta 2");
    history.feed[0][0].as_object_mut().unwrap().remove("delta");
    rejected(&history, "the model has delta 2");
}

#[test]
fn an_event_no_request_explains_is_rejected() {
    let mut history = explained();
    // h2 released although nobody asked.
    history.feed[0][4] = step(5, 1_500, "released", "h2", "u2", 2_021);
    history.ops.remove(6);
    rejected(&history, "no released request of h2 explains it");
}

#[test]
fn an_unknown_outcome_may_or_may_not_have_happened() {
    // The release of h2 was sent, the server was killed, and nobody knows: both feeds pass.
    let release = release("h2");
    let mut applied = explained();
    applied.ops.push(unknown((2, 1_500, 1_501), release));
    applied.ops.remove(6);
    let not_applied = applied.clone();
    applied.feed[0][4] = step(5, 1_700, "released", "h2", "u2", 2_021);
    assert!(
        violations(&applied).is_empty(),
        "{:#?}",
        violations(&applied)
    );
    assert!(
        violations(&not_applied).is_empty(),
        "{:#?}",
        violations(&not_applied)
    );
    // A 503 is the same as unknown.
    let mut answered_503 = applied.clone();
    let last = answered_503.ops.len() - 1;
    answered_503.ops[last].outcome = Outcome::Answered {
        status: 503,
        body: json!({"error": "backend_unavailable"}),
    };
    assert!(
        violations(&answered_503).is_empty(),
        "{:#?}",
        violations(&answered_503)
    );
}

#[test]
fn an_early_expiry_is_rejected() {
    let mut history = explained();
    history.feed[0][4] = step(5, 2_000, "expired", "h2", "u2", 2_021);
    rejected(&history, "expired before its deadline");
}

#[test]
fn a_hold_that_never_expires_is_rejected() {
    let mut history = explained();
    history.feed[0].remove(4);
    history.ops.truncate(5);
    history.feed_read_us = 9_000 * MS;
    rejected(&history, "never expired");
}

#[test]
fn a_feed_against_real_time_is_rejected() {
    let mut history = explained();
    // h2 was sent after h1 was acknowledged, but its held event comes first.
    history.ops[1] = reserved((1, 1_000, 1_003), "h1", "u1", 1, 1_004);
    history.ops[2] = reserved((2, 1_004, 1_006), "h2", "u2", 1, 1_004);
    history.feed[0][1] = held(2, 1_004, "h2", "u2", 1);
    history.feed[0][2] = held(3, 1_004, "h1", "u1", 1);
    history.feed[0][4] = step(5, 2_030, "expired", "h2", "u2", 2_004);
    history.ops[4] = answered(
        (1, 1_040, 1_042),
        confirm("h1"),
        200,
        hold("h1", "u1", 1, "confirmed", 1_004),
    );
    history.feed[0][3] = step(4, 1_041, "confirmed", "h1", "u1", 2_004);
    let found = violations(&history);
    assert!(
        found.iter().any(|v| v.contains("real-time order")),
        "{found:#?}"
    );
}

/// h2 released by a request whose answer was lost (sent at 1_025, the event at 1_026), and again
/// by one sent after the confirm of h1 was acknowledged: the second only replays the first.
fn released_twice() -> History {
    let mut history = explained();
    history.ops[6] = answered(
        (2, 2_110, 2_111),
        confirm("h2"),
        409,
        json!({"error": "hold_released", "hold_id": "h2"}),
    );
    history.ops.push(answered(
        (2, 1_043, 1_044),
        release("h2"),
        200,
        hold("h2", "u2", 1, "released", 1_021),
    ));
    history.ops.push(unknown((3, 1_025, 1_200), release("h2")));
    history.feed[0] = vec![
        history.feed[0][0].clone(),
        held(2, 1_011, "h1", "u1", 1),
        held(3, 1_021, "h2", "u2", 1),
        step(4, 1_026, "released", "h2", "u2", 2_021),
        step(5, 1_041, "confirmed", "h1", "u1", 2_011),
    ];
    history
}

#[test]
fn an_event_two_requests_may_have_caused_places_neither_in_real_time() {
    let history = released_twice();
    let report = check(&history, Bounds::default());
    assert!(report.ok(), "{:#?}", report.violations);
    // Without the lost request, the released event can only be the late one's, and the feed
    // has it before a confirm acknowledged before it was sent.
    let mut alone = history;
    alone.ops.pop();
    rejected(&alone, "real-time order");
}

#[test]
fn a_per_user_limit_broken_in_the_feed_is_rejected() {
    let mut history = explained();
    history.ops[2] = reserved((2, 1_020, 1_022), "h2", "u1", 2, 1_021);
    history.feed[0][2] = held(3, 1_021, "h2", "u1", 2);
    rejected(&history, "per-user limit");
}

#[test]
fn a_history_survives_a_round_trip_through_json() {
    let history = explained();
    let text = serde_json::to_string(&history).expect("serialise");
    let back: History = serde_json::from_str(&text).expect("parse");
    assert_eq!(back, history);
}

fn restock(delta: i64, request_id: Option<&str>) -> Request {
    Request::Restock {
        pool: "p".to_string(),
        delta,
        request_id: request_id.map(str::to_string),
    }
}

/// A restock with a request id, retried (answered as the pool is, no event of its own) and
/// reused with another delta (a conflict).
fn restock_retried() -> History {
    let (put, upserted) = pool_put();
    History {
        ops: vec![
            put,
            answered(
                (0, 1_100, 1_102),
                restock(3, Some("r1")),
                200,
                pool(5, 5, 0, 0),
            ),
            answered(
                (1, 1_200, 1_202),
                restock(3, Some("r1")),
                200,
                pool(5, 5, 0, 0),
            ),
            answered(
                (1, 1_300, 1_302),
                restock(1, Some("r1")),
                409,
                json!({"error": "request_id_conflict", "request_id": "r1", "pool": "p", "delta": 3}),
            ),
        ],
        feed: vec![vec![
            upserted,
            json!({"seq": 2, "at_ms": 1_101, "type": "restocked", "pool": "p", "total": 5, "available": 5, "delta": 3, "request_id": "r1"}),
        ]],
        feed_read_us: 3_000 * MS,
    }
}

#[test]
fn a_retried_restock_is_explained_by_its_first_event() {
    let report = check(&restock_retried(), Bounds::default());
    assert!(report.ok(), "{:#?}", report.violations);
    assert_eq!(report.stats.answers["restock 409 request_id_conflict"], 1);
}

#[test]
fn a_retried_restock_applied_twice_is_rejected() {
    let mut history = restock_retried();
    history.ops[2] = answered(
        (1, 1_200, 1_202),
        restock(3, Some("r1")),
        200,
        pool(8, 8, 0, 0),
    );
    history.feed[0].push(
        json!({"seq": 3, "at_ms": 1_201, "type": "restocked", "pool": "p",
        "total": 8, "available": 8, "delta": 3, "request_id": "r1"}),
    );
    rejected(&history, "restocked again");
}

#[test]
fn a_retry_answered_without_a_first_restock_is_rejected() {
    let mut history = restock_retried();
    history.feed[0].pop();
    rejected(&history, "no restock");
}

#[test]
fn a_conflict_naming_the_wrong_first_restock_is_rejected() {
    let mut history = restock_retried();
    history.ops[3] = answered(
        (1, 1_300, 1_302),
        restock(1, Some("r1")),
        409,
        json!({"error": "request_id_conflict", "request_id": "r1", "pool": "p", "delta": 1}),
    );
    rejected(&history, "details differ");
}

/// A restock whose first send's answer was lost (it ran) and whose retry, answered later, shows
/// the pool after a hold that came in between: the event is the first send's, the answer the
/// retry's. All within one millisecond, so that either send may have caused the event.
fn restock_lost_then_retried(retry_answer: Value) -> History {
    let (put, upserted) = pool_put();
    History {
        ops: vec![
            put,
            unknown((0, 1_100, 1_100), restock(3, Some("r1"))),
            reserved((1, 1_100, 1_100), "h1", "u1", 1, 1_100),
            answered((0, 1_100, 1_100), restock(3, Some("r1")), 200, retry_answer),
        ],
        feed: vec![vec![
            upserted,
            json!({"seq": 2, "at_ms": 1_100, "type": "restocked", "pool": "p", "total": 5, "available": 5, "delta": 3, "request_id": "r1"}),
            held(3, 1_100, "h1", "u1", 1),
        ]],
        feed_read_us: 1_900 * MS,
    }
}

#[test]
fn a_retried_restock_after_a_lost_answer_may_show_later_changes() {
    let report = check(
        &restock_lost_then_retried(pool(5, 4, 1, 0)),
        Bounds::default(),
    );
    assert!(report.ok(), "{:#?}", report.violations);
}

#[test]
fn a_retried_restock_after_a_lost_answer_showing_no_state_is_rejected() {
    rejected(
        &restock_lost_then_retried(pool(5, 3, 2, 0)),
        "not a state the pool had",
    );
}

/// Two identical restocks (+1, no request id) answered at once, with a release and a -1
/// between their events: which event is whose is a guess, and the checker must not insist on
/// its guess. `first_answer` is the answer of the op listed first.
fn twin_restocks(first_answer: Value) -> History {
    let (put, upserted) = pool_put();
    let plus = restock(1, None);
    History {
        ops: vec![
            put,
            reserved((1, 1_010, 1_012), "h1", "u1", 1, 1_011),
            // Listed first, applied last.
            answered((2, 1_100, 1_100), plus.clone(), 200, first_answer),
            answered((3, 1_100, 1_100), plus, 200, pool(3, 2, 1, 0)),
            answered((4, 1_100, 1_100), restock(-1, None), 200, pool(2, 1, 1, 0)),
            answered(
                (1, 1_100, 1_100),
                release("h1"),
                200,
                hold("h1", "u1", 1, "released", 1_011),
            ),
        ],
        feed: vec![vec![
            upserted,
            held(2, 1_011, "h1", "u1", 1),
            json!({"seq": 3, "at_ms": 1_100, "type": "restocked", "pool": "p", "total": 3, "available": 2, "delta": 1}),
            json!({"seq": 4, "at_ms": 1_100, "type": "restocked", "pool": "p", "total": 2, "available": 1, "delta": -1}),
            step(5, 1_100, "released", "h1", "u1", 2_011),
            json!({"seq": 6, "at_ms": 1_100, "type": "restocked", "pool": "p", "total": 3, "available": 3, "delta": 1}),
        ]],
        feed_read_us: 1_900 * MS,
    }
}

#[test]
fn twin_restocks_may_be_answered_in_either_order() {
    let report = check(&twin_restocks(pool(3, 3, 0, 0)), Bounds::default());
    assert!(report.ok(), "{:#?}", report.violations);
}

#[test]
fn a_twin_restock_answered_with_no_state_is_rejected() {
    rejected(&twin_restocks(pool(3, 1, 2, 0)), "not a state the pool had");
}

// Segmented pools: pool p of 2 units in 2 segments, its own events in partition 0; u1's units
// come from segment 0 (partition 0), u2's from segment 1 (partition 1). Requests are 100 ms
// apart, beyond the default slack and clock skew, so that real time orders them.

/// `event` with `"segments": [{"pool": "p", "segment": SEGMENT, "qty": QTY}, ...]`.
fn with_segments(mut event: Value, takes: &[(u64, u64)]) -> Value {
    event["segments"] = takes
        .iter()
        .map(|&(segment, qty)| json!({"pool": "p", "segment": segment, "qty": qty}))
        .collect();
    event
}

/// A hold object of `partition`.
fn hold_in(partition: u64, hold_id: &str, user: &str, status: &str, created: u64) -> Value {
    let mut body = hold(hold_id, user, 1, status, created);
    body["partition"] = json!(partition);
    body
}

/// A reserve of one unit answered 201, its hold in `partition`.
fn reserved_in(
    partition: u64,
    (process, from_ms, to_ms): (u32, u64, u64),
    hold_id: &str,
    user: &str,
) -> Op {
    answered(
        (process, from_ms, to_ms),
        reserve(hold_id, user, 1),
        201,
        hold_in(partition, hold_id, user, "held", from_ms + 1),
    )
}

fn sold_out(process: u32, from_ms: u64) -> Op {
    answered(
        (process, from_ms, from_ms + 2),
        reserve("h3", "u3", 1),
        409,
        json!({"error": "insufficient_stock", "pool": "p", "available": 0, "requested": 1}),
    )
}

/// Both units taken, one from each segment, then a reserve refused and a read.
fn segmented() -> History {
    let mut put = pool_put().0;
    if let Request::PutPool { segments, .. } = &mut put.request {
        *segments = Some(2);
    }
    let mut read = pool(2, 0, 2, 0);
    read["segments"] = json!(2);
    History {
        ops: vec![
            put,
            reserved_in(0, (1, 1_100, 1_102), "h1", "u1"),
            reserved_in(1, (2, 1_200, 1_202), "h2", "u2"),
            sold_out(3, 1_400),
            answered(
                (3, 1_500, 1_501),
                Request::GetPool {
                    pool: "p".to_string(),
                },
                200,
                read,
            ),
        ],
        feed: vec![
            vec![
                pool_put().1,
                with_segments(held(2, 1_101, "h1", "u1", 1), &[(0, 1)]),
            ],
            vec![with_segments(held(1, 1_201, "h2", "u2", 1), &[(1, 1)])],
        ],
        feed_read_us: 3_000 * MS,
    }
}

#[test]
fn a_segmented_history_passes_and_is_counted() {
    let report = check(&segmented(), Bounds::default());
    assert!(report.ok(), "{:#?}", report.violations);
    assert_eq!(report.stats.spread_pools, 1);
    // The held/sold split of the read of the pool within a window and of the PUT's answer are
    // beyond the model.
    assert_eq!(report.stats.spread_unchecked, 2);
    assert_eq!(report.stats.answers["reserve 409 insufficient_stock"], 1);
}

#[test]
fn a_segmented_pool_read_no_instant_gives_is_rejected() {
    let read_of = |total: u64, available: u64| {
        let mut history = segmented();
        let mut body = pool(total, available, total - available, 0);
        body["segments"] = json!(2);
        history.ops[4].outcome = Outcome::Answered { status: 200, body };
        history
    };
    // A total the pool never had.
    rejected(
        &read_of(1_002, 1_000),
        "no instant within the request's window gives spread pool p total 1002 and 1000 available",
    );
    // A unit available while both are surely held.
    rejected(
        &read_of(2, 1),
        "no instant within the request's window gives spread pool p total 2 and 1 available",
    );
}

#[test]
fn a_segmented_oversell_is_rejected() {
    let mut history = segmented();
    // A third unit taken from segment 1 while both are surely taken.
    history.ops[3] = reserved_in(1, (3, 1_400, 1_402), "h3", "u3");
    history.feed[1].push(with_segments(held(2, 1_401, "h3", "u3", 1), &[(1, 1)]));
    rejected(&history, "OVERSELL of spread pool p");
}

/// `segmented` with h2 released by a request sent at `from_ms` (its event in partition 1).
fn segmented_released_at(from_ms: u64) -> History {
    let mut history = segmented();
    history.ops.push(answered(
        (2, from_ms, from_ms + 2),
        release("h2"),
        200,
        hold_in(1, "h2", "u2", "released", 1_201),
    ));
    history.feed[1].push(with_segments(
        step(2, from_ms + 1, "released", "h2", "u2", 2_201),
        &[(1, 1)],
    ));
    history.ops.remove(4); // the read, which would see the released unit
    history
}

#[test]
fn a_segmented_false_sold_out_is_rejected() {
    // Released while the refused reserve was in flight: the refusal may have come first.
    let overlapping = segmented_released_at(1_399);
    let report = check(&overlapping, Bounds::default());
    assert!(report.ok(), "{:#?}", report.violations);
    // Released and acknowledged before the refused reserve was sent: a unit was surely free.
    rejected(
        &segmented_released_at(1_250),
        "no instant within the request's window gives spread pool p 0 available",
    );
}

#[test]
fn segments_not_adding_up_are_rejected() {
    let mut history = segmented();
    history.feed[1][0] = with_segments(held(1, 1_201, "h2", "u2", 1), &[(1, 2)]);
    rejected(&history, "segments of pool p add up to 2, the item takes 1");
    history.feed[1][0] = with_segments(held(1, 1_201, "h2", "u2", 1), &[(2, 1)]);
    rejected(&history, "segment 2 of pool p, which has 2 segments");
    history.feed[1][0] = held(1, 1_201, "h2", "u2", 1);
    rejected(&history, "no segments of pool p, which has 2 segments");
    // A later event of the hold says otherwise.
    let mut history = segmented_released_at(1_250);
    history.feed[1][1] = with_segments(step(2, 1_251, "released", "h2", "u2", 2_201), &[(0, 1)]);
    rejected(&history, "segments differ from the held event's");
}

#[test]
fn a_segmented_snapshot_off_is_rejected() {
    let mut history = segmented();
    // A restock after both units were surely taken whose available ignores them.
    history.ops.push(answered(
        (0, 1_600, 1_602),
        restock(1, None),
        200,
        pool(3, 3, 0, 0),
    ));
    history.feed[0].push(
        json!({"seq": 3, "at_ms": 1_601, "type": "restocked", "pool": "p",
                                "total": 3, "available": 3, "delta": 1}),
    );
    rejected(&history, "spread pool p has 0 units held or sold");
    // ... and the true one passes.
    history.feed[0][2]["available"] = json!(1);
    history.ops.last_mut().expect("the restock").outcome = Outcome::Answered {
        status: 200,
        body: pool(3, 1, 2, 0),
    };
    let report = check(&history, Bounds::default());
    assert!(report.ok(), "{:#?}", report.violations);
}

/// An op sent and answered within one millisecond (as the simulation's clock stamps them).
fn at_us(process: u32, (from_us, to_us): (u64, u64), request: Request, outcome: Outcome) -> Op {
    Op {
        process,
        invoke_us: from_us,
        complete_us: to_us,
        request,
        outcome,
    }
}

#[test]
fn an_event_order_no_instant_fits_is_rejected() {
    // Within millisecond 1_250 of one clock (no slack, no skew): h4 is acknowledged at
    // 1_250_300 µs, h2's release sent from 1_250_500 µs (twice, one answer lost). A feed of
    // partition 1 with the release before h4's held fits no instant. The pool has 3 units here,
    // so that either order keeps to the stock.
    let bounds = Bounds {
        slack_ms: 0,
        clock_skew_ms: 0,
        ..Bounds::default()
    };
    let mut history = segmented();
    history.ops.truncate(3); // no refusal, no read
    if let Request::PutPool { total, .. } = &mut history.ops[0].request {
        *total = 3;
    }
    history.ops[0].outcome = Outcome::Answered {
        status: 201,
        body: pool(3, 3, 0, 0),
    };
    for key in ["total", "available", "delta"] {
        history.feed[0][0][key] = json!(3);
    }
    history.ops.push(at_us(
        4,
        (1_250_100, 1_250_300),
        reserve("h4", "u2", 1),
        Outcome::Answered {
            status: 201,
            body: hold_in(1, "h4", "u2", "held", 1_250),
        },
    ));
    history.ops.push(at_us(
        2,
        (1_250_500, 1_250_700),
        release("h2"),
        Outcome::Answered {
            status: 200,
            body: hold_in(1, "h2", "u2", "released", 1_201),
        },
    ));
    history.ops.push(at_us(
        5,
        (1_250_600, 1_250_900),
        release("h2"),
        Outcome::Unknown {
            why: "connection reset".to_string(),
        },
    ));
    let h4 = |seq| with_segments(held(seq, 1_250, "h4", "u2", 1), &[(1, 1)]);
    let released = |seq| with_segments(step(seq, 1_250, "released", "h2", "u2", 2_201), &[(1, 1)]);
    history.feed[1].extend([h4(2), released(3)]);
    let report = check(&history, bounds);
    assert!(report.ok(), "{:#?}", report.violations);
    history.feed[1].truncate(1);
    history.feed[1].extend([released(2), h4(3)]);
    let found = check(&history, bounds).violations;
    assert!(
        found.iter().any(|v| v.contains("no instant fits it")),
        "{found:#?}"
    );
    // The release is a guess between two requests: the real-time order check leaves it out.
    assert!(
        !found.iter().any(|v| v.contains("real-time order")),
        "{found:#?}"
    );
}
