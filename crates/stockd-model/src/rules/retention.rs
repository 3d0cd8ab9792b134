//! Retention and expiry: finished holds are kept for their retention and then forgotten (the id
//! free again); a confirmed hold is refundable for its longer retention; a hold past its deadline
//! is expired by the first command that touches it; extends move the deadline from now; one
//! sweep expires holds in deadline order; restock request ids are kept for the hold retention.
//!
//! Error codes are written out on purpose: these rules are an independent oracle of the contract.

use stockd_core::{Error, EventKind, HoldStatus, PoolSpec, Reply};

use super::commands::*;
use super::{Done, Driver, Scenario, CONFIG, T0};

/// The retention scenarios, by name.
pub const SCENARIOS: &[(&str, Scenario)] = &[
    (
        "finished holds are forgotten after their retention and the id can be used again",
        finished_holds_are_forgotten_after_retention,
    ),
    (
        "a confirmed hold is refundable until its longer retention",
        confirmed_hold_is_refundable_until_its_retention,
    ),
    (
        "a forgotten confirmed hold still counts against the user's limit",
        forgotten_confirmed_hold_still_counts_against_the_limit,
    ),
    (
        "a restock retried with its request id adds once",
        a_restock_retried_with_its_request_id_adds_once,
    ),
    (
        "a request id with another delta or pool is a conflict",
        a_request_id_with_another_delta_or_pool_is_a_conflict,
    ),
    (
        "a refused restock does not remember its request id",
        a_refused_restock_does_not_remember_its_request_id,
    ),
    (
        "a request id is forgotten after the hold retention, swept or not",
        a_request_id_is_forgotten_after_the_hold_retention,
    ),
    (
        "a hold past its deadline is expired by the first command that touches it",
        a_hold_past_its_deadline_is_expired_without_a_sweep,
    ),
    (
        "extend moves the deadline from now",
        extend_moves_the_deadline_from_now,
    ),
    (
        "one sweep expires holds in deadline order",
        one_sweep_expires_holds_in_deadline_order,
    ),
    (
        "a hold past its retention is gone for commands before any sweep",
        a_hold_past_retention_is_gone_before_any_sweep,
    ),
];

fn hold_status(t: &mut Driver, hold: &str, now_ms: u64) -> Result<HoldStatus, &'static str> {
    let done = t.run(get_hold(hold), now_ms);
    match done.outcome() {
        Ok(Reply::Hold { hold, .. }) => Ok(hold.status),
        Ok(other) => panic!("expected a hold, got {other:?}"),
        Err(error) => Err(error.code()),
    }
}

fn finished_holds_are_forgotten_after_retention(t: &mut Driver) {
    let (hold_retention, confirmed_retention) =
        (CONFIG.hold_retention_ms, CONFIG.confirmed_retention_ms);
    // (how the hold finishes, when (from the case's start), retention from then); the hold's
    // deadline is 1,000 ms after the start. Each case has a pool and a hold of its own.
    let cases = [
        ("released", 999, hold_retention),
        ("expired", 1_000, hold_retention),
        ("confirmed", 999, confirmed_retention),
        ("refunded", 999, hold_retention),
    ];
    let mut start = T0;
    for (case, (name, finished_after, retention_ms)) in cases.into_iter().enumerate() {
        let (pool, hold) = (format!("p{case}"), format!("h{case}"));
        t.run(put_pool(&pool, 10), start).ok();
        t.run(with_ttl(reserve(&hold, &[(&pool, 1)]), 1_000), start)
            .ok();
        let finished_at_ms = start + finished_after;
        match name {
            "released" => {
                t.run(release(&hold), finished_at_ms).ok();
            }
            "expired" => {
                let done = t.tick(finished_at_ms);
                assert_eq!(done.kinds(), [EventKind::Expired], "{name}");
            }
            "confirmed" => {
                t.run(confirm(&hold), finished_at_ms).ok();
            }
            _ => {
                t.run(confirm(&hold), start + 500).ok();
                t.run(refund(&hold), finished_at_ms).ok();
            }
        }
        let kept = t.run(get_hold(&hold), finished_at_ms);
        assert_eq!(
            hold_view(kept.outcome()).finished_at_ms,
            Some(finished_at_ms),
            "{name}"
        );

        let last_kept_ms = finished_at_ms + retention_ms - 1;
        t.tick(last_kept_ms);
        assert!(
            hold_status(t, &hold, last_kept_ms).is_ok(),
            "{name}: kept until retention"
        );
        // Idempotent while kept: the same reserve is a replay, a different one a conflict.
        let replay = t.run(reserve(&hold, &[(&pool, 1)]), last_kept_ms);
        assert!(!created(replay.outcome()), "{name}");
        assert_eq!(
            t.run(reserve(&hold, &[(&pool, 2)]), last_kept_ms)
                .error_code(),
            Some("hold_id_conflict"),
            "{name}"
        );

        let forgotten_at_ms = finished_at_ms + retention_ms;
        let purged = t.tick(forgotten_at_ms);
        assert!(
            purged.events.is_empty(),
            "{name}: forgetting writes no event"
        );
        assert_eq!(
            hold_status(t, &hold, forgotten_at_ms),
            Err("hold_not_found"),
            "{name}"
        );
        let reused = t.run(reserve(&hold, &[(&pool, 2)]), forgotten_at_ms);
        assert!(created(reused.outcome()), "{name}: the id is free again");
        assert_eq!(hold_view(reused.outcome()).items[0].qty, 2, "{name}");
        t.run(release(&hold), forgotten_at_ms).ok();
        start = forgotten_at_ms + 1;
    }
}

fn confirmed_hold_is_refundable_until_its_retention(t: &mut Driver) {
    t.run(put_pool("p", 10), T0).ok();
    t.run(with_confirm(reserve("h", &[("p", 3)])), T0).ok();
    let later = T0 + CONFIG.hold_retention_ms + 1;
    t.tick(later);
    let refunded = t.run(refund("h"), later).ok();
    assert_eq!(status(refunded.outcome()), HoldStatus::Refunded);
    assert_eq!(t.available("p"), 10);
}

/// Contract silent; decision kept by every backend: units sold to a user stay counted against the
/// user's limit after the confirmed hold is forgotten (they never came back).
fn forgotten_confirmed_hold_still_counts_against_the_limit(t: &mut Driver) {
    let spec = PoolSpec {
        total: 10,
        per_user_limit: Some(2),
        ..PoolSpec::default()
    };
    t.run(put_pool_with("p", spec), T0).ok();
    t.run(with_user(with_confirm(reserve("h", &[("p", 2)])), "u"), T0)
        .ok();
    let forgotten_at_ms = T0 + CONFIG.confirmed_retention_ms;
    t.tick(forgotten_at_ms);
    assert_eq!(hold_status(t, "h", forgotten_at_ms), Err("hold_not_found"));
    let again = t.run(with_user(reserve("h2", &[("p", 1)]), "u"), forgotten_at_ms);
    assert_eq!(
        again.outcome(),
        &Err(Error::UserLimitExceeded {
            pool: pool_id("p"),
            limit: 2,
            used: 2,
            requested: 1
        })
    );
}

/// A restock's answer: the pool's (total, available) and whether it was a replay.
fn restocked(done: &Done) -> ((u64, u64), bool) {
    match done.outcome() {
        Ok(Reply::Pool {
            pool,
            created: false,
            replayed,
        }) => ((pool.total, pool.available), *replayed),
        other => panic!("expected the pool, got {other:?}"),
    }
}

fn a_restock_retried_with_its_request_id_adds_once(t: &mut Driver) {
    t.run(put_pool("p", 10), T0).ok();
    let first = t.run(restock_once("p", 5, "r1"), T0).ok();
    assert_eq!(first.kinds(), [EventKind::Restocked]);
    assert_eq!(
        first.events[0].request_id.as_ref().map(|id| id.as_str()),
        Some("r1")
    );
    assert_eq!(
        restocked(&first),
        ((15, 15), false),
        "the first one applies"
    );
    // Meanwhile the pool changes; the retry answers it as it is now, says it is a replay, and
    // changes nothing.
    t.run(restock("p", 1), T0 + 1).ok();
    let retry = t.run(restock_once("p", 5, "r1"), T0 + 2);
    assert!(retry.events.is_empty());
    assert_eq!(restocked(&retry), ((16, 16), true));
    // A conflict is still a conflict, not a replay.
    assert_eq!(
        t.run(restock_once("p", 6, "r1"), T0 + 2).error_code(),
        Some("request_id_conflict")
    );
    // Without a request id every restock adds, and none is a replay.
    let plain = t.run(restock("p", 1), T0 + 3).ok();
    assert_eq!(restocked(&plain), ((17, 17), false));
    let again = t.run(restock("p", 1), T0 + 3).ok();
    assert_eq!(restocked(&again), ((18, 18), false));
}

fn a_request_id_with_another_delta_or_pool_is_a_conflict(t: &mut Driver) {
    t.run(put_pool("p", 10), T0).ok();
    t.run(put_pool("q", 10), T0).ok();
    t.run(restock_once("p", 5, "r1"), T0).ok();
    for (other, at) in [restock_once("p", 4, "r1"), restock_once("q", 5, "r1")]
        .into_iter()
        .zip(T0 + 1..)
    {
        let done = t.run(other, at);
        assert_eq!(
            done.outcome(),
            &Err(Error::RequestIdConflict {
                request_id: request_id("r1"),
                pool: pool_id("p"),
                delta: 5,
            })
        );
        assert!(done.events.is_empty());
    }
    assert_eq!(t.pool("p").total, 15);
    assert_eq!(t.pool("q").total, 10);
}

fn a_refused_restock_does_not_remember_its_request_id(t: &mut Driver) {
    t.run(put_pool("p", 3), T0).ok();
    let refused = t.run(restock_once("p", -5, "r1"), T0);
    assert_eq!(refused.error_code(), Some("insufficient_stock"));
    let missing = t.run(restock_once("nope", 5, "r2"), T0);
    assert_eq!(missing.error_code(), Some("pool_not_found"));
    t.run(restock("p", 10), T0 + 1).ok();
    // Neither id was remembered: each is a new restock now, with any pool or delta.
    t.run(restock_once("p", -5, "r1"), T0 + 2).ok();
    t.run(restock_once("p", 2, "r2"), T0 + 2).ok();
    assert_eq!(t.pool("p").total, 10);
}

/// Forgotten by a sweep, or by the restock itself: either way the id is new again once the hold
/// retention has passed since the first restock. Each case has a pool and an id of its own.
fn a_request_id_is_forgotten_after_the_hold_retention(t: &mut Driver) {
    let retention = CONFIG.hold_retention_ms;
    let mut start = T0;
    for swept in [false, true] {
        let (pool, id) = (format!("p-{swept}"), format!("r-{swept}"));
        t.run(put_pool(&pool, 10), start).ok();
        t.run(restock_once(&pool, 5, &id), start).ok();
        let last_kept_ms = start + retention - 1;
        let retry = t.run(restock_once(&pool, 5, &id), last_kept_ms);
        assert!(retry.events.is_empty(), "kept until retention");
        assert_eq!(restocked(&retry), ((15, 15), true), "kept until retention");
        assert_eq!(
            t.run(restock_once(&pool, 4, &id), last_kept_ms)
                .error_code(),
            Some("request_id_conflict")
        );
        if swept {
            let forgotten = t.tick(start + retention);
            assert!(forgotten.events.is_empty());
        }
        let again = t.run(restock_once(&pool, 4, &id), start + retention).ok();
        assert_eq!(again.kinds(), [EventKind::Restocked], "a new restock");
        assert_eq!(restocked(&again), ((19, 19), false), "a new restock");
        assert_eq!(t.pool(&pool).total, 19);
        start += retention + 1;
    }
}

fn a_hold_past_its_deadline_is_expired_without_a_sweep(t: &mut Driver) {
    // (command at the deadline, expected outcome: Ok(status) or Err(code)); each case has a pool
    // and a hold of its own, and starts 2 s after the last.
    type Case = (
        fn(&str, &str) -> stockd_core::Command,
        Result<HoldStatus, &'static str>,
    );
    let cases: [Case; 6] = [
        (|hold, _| confirm(hold), Err("hold_expired")),
        (|hold, _| release(hold), Ok(HoldStatus::Expired)),
        (|hold, _| extend(hold, 5_000), Err("hold_expired")),
        (|hold, _| refund(hold), Err("hold_not_confirmed")),
        (|hold, _| get_hold(hold), Ok(HoldStatus::Expired)),
        (
            |hold, pool| with_ttl(reserve(hold, &[(pool, 2)]), 1_000),
            Ok(HoldStatus::Expired),
        ),
    ];
    let mut start = T0;
    for (case, (command, expected)) in cases.into_iter().enumerate() {
        let (pool, hold) = (format!("p{case}"), format!("h{case}"));
        let command = command(&hold, &pool);
        let name = format!("{command:?}");
        t.run(put_pool(&pool, 5), start).ok();
        t.run(with_ttl(reserve(&hold, &[(&pool, 2)]), 1_000), start)
            .ok();
        // One millisecond before the deadline it is still held.
        assert_eq!(hold_status(t, &hold, start + 999), Ok(HoldStatus::Held));
        let deadline = start + 1_000;
        let done = t.run(command, deadline);
        match expected {
            Ok(expected) => assert_eq!(status(done.outcome()), expected, "{name}"),
            Err(code) => assert_eq!(done.error_code(), Some(code), "{name}"),
        }
        assert_eq!(done.kinds(), [EventKind::Expired], "{name}");
        let view = t.run(get_hold(&hold), deadline);
        let view = hold_view(view.outcome());
        assert_eq!(
            (view.status, view.finished_at_ms),
            (HoldStatus::Expired, Some(deadline)),
            "{name}"
        );
        let numbers = t.pool(&pool);
        assert_eq!(
            (numbers.available, numbers.held),
            (5, 0),
            "{name}: the units are back"
        );
        // A later sweep finds nothing more to do.
        let swept = t.tick(deadline);
        assert!(swept.events.is_empty(), "{name}");
        start = deadline + 1_000;
    }
}

fn extend_moves_the_deadline_from_now(t: &mut Driver) {
    t.run(put_pool("p", 5), T0).ok();
    t.run(with_ttl(reserve("h", &[("p", 2)]), 1_000), T0).ok();
    let extended = t.run(extend("h", 3_000), T0 + 900).ok();
    assert_eq!(hold_view(extended.outcome()).expires_at_ms, T0 + 3_900);
    assert_eq!(extended.kinds(), [EventKind::Extended]);
    assert!(t.tick(T0 + 3_899).events.is_empty());
    assert_eq!(t.tick(T0 + 3_900).kinds(), [EventKind::Expired]);
}

/// Holds that expire in one sweep expire in deadline order, whatever their history (extended).
fn one_sweep_expires_holds_in_deadline_order(t: &mut Driver) {
    t.run(put_pool("p", 10), T0).ok();
    // "a" first had the earliest deadline, then was extended past "b"'s.
    t.run(with_ttl(reserve("a", &[("p", 1)]), 1_000), T0).ok();
    t.run(with_ttl(reserve("b", &[("p", 1)]), 1_500), T0).ok();
    t.run(extend("a", 1_000), T0 + 900).ok();
    let done = t.tick(T0 + 3_000);
    let expired: Vec<_> = done
        .events
        .iter()
        .map(|e| e.hold_id.clone().expect("an expiry names its hold"))
        .collect();
    assert_eq!(expired, [hold_id("b"), hold_id("a")]);
}

/// A finished hold past its retention is gone for every command at once, though no sweep ran:
/// the id makes a new hold, and the sold units of a forgotten confirmed hold stay sold.
fn a_hold_past_retention_is_gone_before_any_sweep(t: &mut Driver) {
    t.run(put_pool("p", 10), T0).ok();
    t.run(with_confirm(reserve("c", &[("p", 1)])), T0).ok();
    t.run(reserve("r", &[("p", 1)]), T0).ok();
    t.run(release("r"), T0).ok();
    let released_gone_ms = T0 + CONFIG.hold_retention_ms;
    assert!(hold_status(t, "r", released_gone_ms - 1).is_ok(), "kept");
    assert_eq!(hold_status(t, "r", released_gone_ms), Err("hold_not_found"));
    let again = t.run(reserve("r", &[("p", 2)]), released_gone_ms);
    assert!(created(again.outcome()), "a new hold under the id");
    let refund_late = t.run(refund("c"), T0 + CONFIG.confirmed_retention_ms);
    assert_eq!(refund_late.error_code(), Some("hold_not_found"));
    assert!(refund_late.events.is_empty());
    assert_eq!(t.pool("p").sold, 1);
}
