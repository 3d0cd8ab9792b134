//! What a request is answered and what it writes to the feed: a reserve replayed (same request,
//! items in any order) or in conflict, a failed reserve forgotten, the fields of hold events,
//! low-stock crossings, the sale window's edges and the order of a reserve's checks, and every
//! range of the contract at its edge. A refused request changes nothing: no event, the same
//! numbers.
//!
//! Error codes are written out on purpose: these rules are an independent oracle of the contract.

use stockd_core::limits::*;
use stockd_core::{Command, Error, EventKind, HoldStatus, PoolSpec, PoolView, Reply};

use super::commands::*;
use super::{Driver, Scenario, T0};

/// The request scenarios, by name.
pub const SCENARIOS: &[(&str, Scenario)] = &[
    (
        "the same request in any item order replays and anything else conflicts",
        same_request_in_any_item_order_replays_and_anything_else_conflicts,
    ),
    (
        "a failed reserve is not remembered",
        a_failed_reserve_is_not_remembered,
    ),
    (
        "low_stock fires on each crossing and on upserts at or below",
        low_stock_fires_on_each_crossing_and_on_upserts_at_or_below,
    ),
    (
        "hold events carry the hold, the user and the items",
        hold_events_carry_hold_user_and_items,
    ),
    (
        "held events carry the hold's created_at_ms and no other does",
        held_events_carry_the_holds_created_at_ms_and_no_other_does,
    ),
    (
        "the sale window is half open and checks come item by item",
        sale_window_is_half_open_and_checks_come_item_by_item,
    ),
    (
        "limits are enforced at their edges",
        limits_are_enforced_at_their_edges,
    ),
];

/// Every pool, as a list (ordered by id) shows them.
fn all_pools(t: &mut Driver, now_ms: u64) -> Vec<PoolView> {
    match t
        .run(list_pools("", None, POOL_LIST_LIMIT_MAX), now_ms)
        .outcome()
    {
        Ok(Reply::PoolList { pools, next }) => {
            assert_eq!(next, &None, "the scenario keeps fewer pools than a page");
            pools.clone()
        }
        other => panic!("expected a list of pools, got {other:?}"),
    }
}

fn same_request_in_any_item_order_replays_and_anything_else_conflicts(t: &mut Driver) {
    let original = with_ttl(
        with_user(reserve("h", &[("p", 1), ("q", 2), ("r", 3)]), "u1"),
        60_000,
    );
    let variant =
        |change: fn(&mut stockd_core::ReserveRequest)| edit_reserve(original.clone(), change);
    // (variant, replay?)
    let cases: [(&str, Command, bool); 11] = [
        ("same", variant(|_| {}), true),
        (
            "reversed",
            variant(|r| edit_items(r, |items| items.reverse())),
            true,
        ),
        (
            "rotated",
            variant(|r| edit_items(r, |items| items.rotate_left(1))),
            true,
        ),
        ("other ttl", variant(|r| r.ttl_ms = 1_000), true),
        ("waiting", variant(|r| r.wait_ms = 5_000), true),
        (
            "other qty",
            variant(|r| edit_items(r, |items| items[1].qty = 1)),
            false,
        ),
        (
            "fewer items",
            variant(|r| {
                edit_items(r, |items| {
                    items.pop();
                })
            }),
            false,
        ),
        (
            "more items",
            variant(|r| edit_items(r, |items| items.push(item("s", 1)))),
            false,
        ),
        ("no user", variant(|r| r.user = None), false),
        (
            "other user",
            variant(|r| r.user = Some(user_id("u2"))),
            false,
        ),
        ("confirm", variant(|r| r.confirm = true), false),
    ];
    for pool in ["p", "q", "r", "s"] {
        t.run(put_pool(pool, 10), T0).ok();
    }
    let first = t.run(original.clone(), T0).ok();
    assert!(created(first.outcome()));
    let stored = hold_view(first.outcome()).clone();
    let pools_before = all_pools(t, T0);
    for (name, command, replay) in cases {
        let done = t.run(command, T0 + 10);
        if replay {
            assert_eq!(
                done.outcome(),
                &Ok(Reply::Hold {
                    hold: stored.clone(),
                    created: false
                }),
                "{name}"
            );
        } else {
            assert_eq!(
                done.outcome(),
                &Err(Error::HoldIdConflict {
                    hold_id: hold_id("h")
                }),
                "{name}"
            );
        }
        assert!(done.events.is_empty(), "{name}: nothing changes");
        assert_eq!(
            all_pools(t, T0 + 10),
            pools_before,
            "{name}: nothing changes"
        );
    }

    // Validation still comes first, before the idempotency lookup.
    let invalid = variant(|r| edit_items(r, |items| items[0].qty = 0));
    assert_eq!(
        t.run(invalid, T0 + 10).error_code(),
        Some("invalid_request")
    );

    // A replay answers with the hold's current state, whatever it is now.
    t.run(confirm("h"), T0 + 20).ok();
    let replay = t.run(original, T0 + 30);
    assert_eq!(status(replay.outcome()), HoldStatus::Confirmed);
    assert!(!created(replay.outcome()));
    assert_eq!(hold_view(replay.outcome()).items, stored.items);
    assert!(replay.events.is_empty());
}

fn a_failed_reserve_is_not_remembered(t: &mut Driver) {
    t.run(put_pool("p", 1), T0).ok();
    let refused = t.run(reserve("h", &[("p", 2)]), T0);
    assert_eq!(refused.outcome(), &insufficient("p", 1, 2));
    assert!(refused.events.is_empty());
    assert_eq!(t.available("p"), 1);
    assert_eq!(
        t.run(get_hold("h"), T0).error_code(),
        Some("hold_not_found")
    );
    t.run(restock("p", 1), T0).ok();
    let retried = t.run(reserve("h", &[("p", 2)]), T0).ok();
    assert!(created(retried.outcome()));
}

fn low_stock_fires_on_each_crossing_and_on_upserts_at_or_below(t: &mut Driver) {
    let spec = |total| PoolSpec {
        total,
        low_stock_threshold: Some(3),
        ..PoolSpec::default()
    };
    let low = EventKind::LowStock;
    // (command, event kinds, available after); step n runs at T0 + n.
    let steps: Vec<(Command, Vec<EventKind>, u64)> = vec![
        (
            put_pool_with("p", spec(10)),
            vec![EventKind::PoolUpserted],
            10,
        ),
        (reserve("a", &[("p", 6)]), vec![EventKind::Held], 4),
        (reserve("b", &[("p", 1)]), vec![EventKind::Held, low], 3),
        (reserve("c", &[("p", 1)]), vec![EventKind::Held], 2),
        (confirm("c"), vec![EventKind::Confirmed], 2),
        (release("b"), vec![EventKind::Released], 3),
        (release("a"), vec![EventKind::Released], 9),
        (restock("p", -6), vec![EventKind::Restocked, low], 3),
        (restock("p", 1), vec![EventKind::Restocked], 4),
        // Updated at or below: fires even when nothing crossed.
        (
            put_pool_with("p", spec(4)),
            vec![EventKind::PoolUpserted, low],
            3,
        ),
        (
            put_pool_with("p", spec(4)),
            vec![EventKind::PoolUpserted, low],
            3,
        ),
        (
            put_pool_with(
                "p",
                PoolSpec {
                    total: 4,
                    ..PoolSpec::default()
                },
            ),
            vec![EventKind::PoolUpserted],
            3,
        ),
        (
            put_pool_with("q", spec(0)),
            vec![EventKind::PoolUpserted, low],
            0,
        ),
        (put_pool_if_absent("q", spec(0)), vec![], 0),
        (
            put_pool_with("p", spec(20)),
            vec![EventKind::PoolUpserted],
            19,
        ),
        // confirm=true gives held then confirmed; the crossing follows the event that caused it.
        (
            with_confirm(reserve("d", &[("p", 16)])),
            vec![EventKind::Held, low, EventKind::Confirmed],
            3,
        ),
        (refund("d"), vec![EventKind::Refunded], 19),
    ];
    let mut last_seq = std::collections::BTreeMap::new();
    for (index, (command, expected, available_after)) in steps.into_iter().enumerate() {
        let name = format!("step {index}: {command:?}");
        let target = match &command {
            Command::PutPool { pool, .. } if pool.as_str() == "q" => "q",
            _ => "p",
        };
        let at_ms = T0 + index as u64;
        let done = t.run(command, at_ms);
        assert!(done.outcome().is_ok(), "{name}: {:?}", done.outcome());
        assert_eq!(done.kinds(), expected, "{name}");
        assert_eq!(t.available(target), available_after, "{name}");
        for event in &done.events {
            // Seqs are per partition (p and q may be in two): they increase per pool.
            let pool = event
                .pool
                .clone()
                .or_else(|| Some(event.items.as_ref()?.first()?.pool.clone()))
                .expect("every event here names a pool");
            let last = last_seq.insert(pool, event.seq).unwrap_or(0);
            assert!(event.seq > last, "{name}: seqs increase");
            assert_eq!(event.at_ms, at_ms, "{name}");
            if event.kind == low {
                assert_eq!(event.pool, Some(pool_id(target)), "{name}");
                assert_eq!(event.available, Some(available_after), "{name}");
                assert_eq!(event.low_stock_threshold, Some(3), "{name}");
            }
        }
    }
}

fn hold_events_carry_hold_user_and_items(t: &mut Driver) {
    t.run(put_pool("p", 5), T0).ok();
    t.run(put_pool("q", 5), T0).ok();
    let done = t
        .run(
            with_user(with_confirm(reserve("h", &[("q", 2), ("p", 1)])), "u"),
            T0,
        )
        .ok();
    assert_eq!(done.kinds(), [EventKind::Held, EventKind::Confirmed]);
    let items = [item("q", 2), item("p", 1)];
    for event in &done.events {
        assert_eq!(event.hold_id, Some(hold_id("h")), "{event:?}");
        assert_eq!(event.user, Some(user_id("u")), "{event:?}");
        assert_eq!(event.items.as_deref(), Some(&items[..]), "{event:?}");
    }
}

fn held_events_carry_the_holds_created_at_ms_and_no_other_does(t: &mut Driver) {
    t.run(put_pool("p", 5), T0).ok();
    let done = t.run(reserve("h", &[("p", 1)]), T0 + 7).ok();
    assert_eq!(done.kinds(), [EventKind::Held]);
    let created_at_ms = hold_view(done.outcome()).created_at_ms;
    assert_eq!(created_at_ms, T0 + 7);
    assert_eq!(done.events[0].created_at_ms, Some(created_at_ms));
    let shown = hold_view(t.run(get_hold("h"), T0 + 8).ok().outcome()).created_at_ms;
    assert_eq!(shown, created_at_ms);
    let done = t.run(release("h"), T0 + 9).ok();
    assert_eq!(done.kinds(), [EventKind::Released]);
    assert_eq!(done.events[0].created_at_ms, None);
    // confirm: true: held then confirmed, the field on the first only.
    let done = t.run(with_confirm(reserve("c", &[("p", 1)])), T0 + 10).ok();
    assert_eq!(done.kinds(), [EventKind::Held, EventKind::Confirmed]);
    assert_eq!(done.events[0].created_at_ms, Some(T0 + 10));
    assert_eq!(done.events[1].created_at_ms, None);
}

fn sale_window_is_half_open_and_checks_come_item_by_item(t: &mut Driver) {
    fn window(starts_at_ms: Option<u64>, ends_at_ms: Option<u64>) -> PoolSpec {
        PoolSpec {
            total: 5,
            starts_at_ms,
            ends_at_ms,
            ..PoolSpec::default()
        }
    }
    // (window around the case's edge `e`, when it reserves (0 is `e - 1`, 1 is `e`, ...),
    // expected error code or None for success); each case has a pool of its own, put at `e - 1`.
    type Case = (fn(u64) -> PoolSpec, u64, Option<&'static str>);
    let cases: [Case; 7] = [
        (|e| window(Some(e), None), 0, Some("sale_not_started")),
        (|e| window(Some(e), None), 1, None),
        (|e| window(None, Some(e)), 0, None),
        (|e| window(None, Some(e)), 1, Some("sale_ended")),
        (|e| window(Some(e), Some(e + 10)), 10, None),
        (|e| window(Some(e), Some(e + 10)), 11, Some("sale_ended")),
        // A window that can never open.
        (
            |e| window(Some(e + 10), Some(e)),
            6,
            Some("sale_not_started"),
        ),
    ];
    let mut start = T0;
    for (case, (spec, offset, expected)) in cases.into_iter().enumerate() {
        let spec = spec(start + 1);
        let pool = format!("p{case}");
        let at_ms = start + offset;
        let name = format!("{spec:?} at {at_ms}");
        t.run(put_pool_with(&pool, spec), start).ok();
        let done = t.run(reserve(&format!("h{case}"), &[(&pool, 1)]), at_ms);
        assert_eq!(done.error_code(), expected, "{name}");
        start += 100;
    }

    // Item by item, first failure wins: the second item's failure is reported only when the
    // first item passes every check.
    let ended_at_ms = start;
    t.run(put_pool("open", 1), start).ok();
    t.run(
        put_pool_with("closed", window(None, Some(ended_at_ms))),
        start,
    )
    .ok();
    let limited = PoolSpec {
        total: 5,
        per_user_limit: Some(1),
        ..PoolSpec::default()
    };
    t.run(put_pool_with("limited", limited), start).ok();
    let cases: [(&[(&str, u64)], Error); 4] = [
        (
            &[("open", 2), ("closed", 1)],
            Error::InsufficientStock {
                pool: pool_id("open"),
                available: 1,
                requested: 2,
            },
        ),
        (
            &[("closed", 1), ("open", 2)],
            Error::SaleEnded {
                pool: pool_id("closed"),
                ends_at_ms: ended_at_ms,
            },
        ),
        (
            &[("open", 1), ("limited", 1)],
            Error::UserRequired {
                pool: pool_id("limited"),
            },
        ),
        (
            &[("missing", 1), ("limited", 1)],
            Error::PoolNotFound {
                pool: pool_id("missing"),
            },
        ),
    ];
    for (items, expected) in cases {
        let done = t.run(reserve("h", items), ended_at_ms);
        assert_eq!(done.outcome(), &Err(expected), "{items:?}");
        assert!(done.events.is_empty(), "{items:?}");
    }
    assert_eq!(t.available("open"), 1, "a failed reserve changes nothing");
    assert_eq!(
        t.available("limited"),
        5,
        "a failed reserve changes nothing"
    );
}

/// Every range of the contract, at its edge and one past it. A refused command changes nothing.
fn limits_are_enforced_at_their_edges(t: &mut Driver) {
    let spec = |total| PoolSpec {
        total,
        ..PoolSpec::default()
    };
    let many_items = |n: usize| {
        let items: Vec<(String, u64)> = (0..n).map(|i| (format!("m{i}"), 1)).collect();
        let items: Vec<(&str, u64)> = items.iter().map(|(p, q)| (p.as_str(), *q)).collect();
        reserve("many", &items)
    };
    let edge = |change: fn(&mut stockd_core::ReserveRequest)| {
        edit_reserve(reserve("edge", &[("big", 1)]), change)
    };
    // (command, accepted?)
    let cases: Vec<(Command, bool)> = vec![
        (put_pool_with("t", spec(TOTAL_MAX)), true),
        (put_pool_with("t", spec(TOTAL_MAX + 1)), false),
        (
            put_pool_with(
                "t",
                PoolSpec {
                    per_user_limit: Some(0),
                    ..spec(1)
                },
            ),
            false,
        ),
        (
            put_pool_with(
                "t",
                PoolSpec {
                    per_user_limit: Some(PER_USER_LIMIT_MAX),
                    ..spec(1)
                },
            ),
            true,
        ),
        (
            put_pool_with(
                "t",
                PoolSpec {
                    per_user_limit: Some(PER_USER_LIMIT_MAX + 1),
                    ..spec(1)
                },
            ),
            false,
        ),
        (
            put_pool_with(
                "t",
                PoolSpec {
                    low_stock_threshold: Some(0),
                    ..spec(1)
                },
            ),
            true,
        ),
        (
            put_pool_with(
                "t",
                PoolSpec {
                    starts_at_ms: Some(TIME_MS_MAX),
                    ..spec(1)
                },
            ),
            true,
        ),
        (
            put_pool_with(
                "t",
                PoolSpec {
                    ends_at_ms: Some(TIME_MS_MAX + 1),
                    ..spec(1)
                },
            ),
            false,
        ),
        (put_pool_with("t", spec(0)), true),
        (restock("t", 0), false),
        (restock("t", TOTAL_MAX as i64), true),
        (restock("t", 1), false),
        (restock("t", -(TOTAL_MAX as i64) - 1), false),
        (restock("t", -(TOTAL_MAX as i64)), true),
        (many_items(HOLD_ITEMS_MAX), true),
        (many_items(HOLD_ITEMS_MAX + 1), false),
        (many_items(0), false),
        (
            edge(|r| edit_items(r, |items| items[0].qty = QTY_MAX)),
            true,
        ),
        (
            edge(|r| edit_items(r, |items| items[0].qty = QTY_MAX + 1)),
            false,
        ),
        (edge(|r| edit_items(r, |items| items[0].qty = 0)), false),
        (edge(|r| r.ttl_ms = HOLD_TTL_MS_MIN - 1), false),
        (edge(|r| r.ttl_ms = HOLD_TTL_MS_MAX + 1), false),
        (edge(|r| r.wait_ms = WAIT_MS_MAX + 1), false),
        (
            edge(|r| {
                r.ttl_ms = HOLD_TTL_MS_MAX;
                r.wait_ms = WAIT_MS_MAX;
                r.hold_id = hold_id("edge2");
            }),
            true,
        ),
        (extend("edge", HOLD_TTL_MS_MIN), true),
        (extend("edge", HOLD_TTL_MS_MIN - 1), false),
        (extend("edge", HOLD_TTL_MS_MAX + 1), false),
        (lock_acquire("l", "o", LOCK_TTL_MS_MIN - 1, 0), false),
        (lock_acquire("l", "o", LOCK_TTL_MS_MAX + 1, 0), false),
        (
            lock_acquire("l", "o", LOCK_TTL_MS_MAX, WAIT_MS_MAX + 1),
            false,
        ),
        (lock_acquire("l", "o", LOCK_TTL_MS_MIN, WAIT_MS_MAX), true),
        (lock_renew("l", "o", 1, LOCK_TTL_MS_MAX + 1), false),
        (list_pools("", None, 0), false),
        (list_pools("", None, POOL_LIST_LIMIT_MAX), true),
        (list_pools("", None, POOL_LIST_LIMIT_MAX + 1), false),
        (list_pools("a/b", None, 1), false),
        (list_pools("", Some("-x"), 1), false),
        (list_pools("", Some("m1"), 1), true),
        // Validation comes before any lookup.
        (extend("missing", 1), false),
        (restock("missing", 0), false),
        (reserve("missing", &[("nope", 0)]), false),
    ];
    for i in 0..=HOLD_ITEMS_MAX {
        t.run(put_pool(&format!("m{i}"), 1), T0).ok();
    }
    t.run(put_pool("big", QTY_MAX * 3), T0).ok();
    assert_eq!(all_pools(t, T0).len(), HOLD_ITEMS_MAX + 2);
    for (command, accepted) in cases {
        let name = format!("{command:?}");
        let name = &name[..name.len().min(160)];
        let before = all_pools(t, T0);
        let done = t.run(command, T0);
        if accepted {
            assert!(done.outcome().is_ok(), "{name}: {:?}", done.outcome());
        } else {
            assert_eq!(done.error_code(), Some("invalid_request"), "{name}");
            assert!(done.events.is_empty(), "{name}");
            assert_eq!(all_pools(t, T0), before, "{name}: nothing changes");
        }
    }
}
