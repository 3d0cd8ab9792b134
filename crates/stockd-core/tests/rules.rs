//! Deterministic rule tests of the core state machine: what the model test (`model.rs`) does not
//! reach: retention, lazy expiry, fencing tokens, refunds of deleted pools, idempotent replays,
//! low-stock crossings and sale-window edges, each checked against the contract (the API
//! contract, CONTRACT.md) with time passed in as a number. Waiters (pool and lock) are
//! stockd-model's `rules` scenarios, run here (`rule_scenarios.rs`) and on the engine and Redis
//! alike.

mod common;

use stockd_core::{
    Change, Command, Error, EventKind, HoldItem, HoldStatus, HoldView, Outcome, PoolSpec, PoolView,
    Reply, RequestId, ReserveRequest, Snapshot, State, StateConfig,
};

use common::*;

const T0: u64 = 1_000_000;
const HOLD_RETENTION_MS: u64 = 10_000;
const CONFIRMED_RETENTION_MS: u64 = 50_000;

fn new_state() -> State {
    State::new(StateConfig {
        hold_retention_ms: HOLD_RETENTION_MS,
        confirmed_retention_ms: CONFIRMED_RETENTION_MS,
    })
}

fn hold_view(outcome: &Outcome) -> &HoldView {
    match outcome {
        Ok(Reply::Hold { hold, .. }) => hold,
        other => panic!("expected a hold, got {other:?}"),
    }
}

fn created(outcome: &Outcome) -> bool {
    match outcome {
        Ok(Reply::Hold { created, .. }) => *created,
        other => panic!("expected a hold, got {other:?}"),
    }
}

fn status(outcome: &Outcome) -> HoldStatus {
    hold_view(outcome).status
}

fn lock_token(outcome: &Outcome) -> u64 {
    match outcome {
        Ok(Reply::Lock { token, .. }) => *token,
        other => panic!("expected a lock, got {other:?}"),
    }
}

fn pool(state: &State, id: &str) -> PoolView {
    state.pool(&pool_id(id)).expect("pool exists")
}

fn available(state: &State, id: &str) -> u64 {
    pool(state, id).available
}

fn kinds(done: &Done) -> Vec<EventKind> {
    done.events.iter().map(|e| e.kind).collect()
}

fn ok(done: Done) -> Done {
    assert!(
        done.outcome().is_ok(),
        "expected success: {:?}",
        done.outcome()
    );
    done
}

fn insufficient(pool: &str, available: u64, requested: u64) -> Outcome {
    Err(Error::InsufficientStock {
        pool: pool_id(pool),
        available,
        requested,
    })
}

fn with_user(command: Command, user: &str) -> Command {
    match command {
        Command::Reserve(request) => Command::Reserve(ReserveRequest {
            user: Some(user_id(user)),
            ..request
        }),
        other => other,
    }
}

fn with_confirm(command: Command) -> Command {
    match command {
        Command::Reserve(request) => Command::Reserve(ReserveRequest {
            confirm: true,
            ..request
        }),
        other => other,
    }
}

fn with_ttl(command: Command, ttl_ms: u64) -> Command {
    match command {
        Command::Reserve(request) => Command::Reserve(ReserveRequest { ttl_ms, ..request }),
        other => other,
    }
}

// ------------------------------------------------------------------------------------ records

/// What the log gets (the rules themselves are stockd-model's scenarios): an expiry by a command
/// is logged; a step that changes nothing (a replayed restock, a conflicting one, forgetting past
/// retention, a refund of a forgotten hold) logs nothing.
#[test]
fn only_changes_are_logged() {
    let mut state = new_state();
    ok(run(&mut state, put_pool("p", 10), T0));
    let first = ok(run(&mut state, restock_once("p", 5, "r1"), T0));
    assert_eq!(
        first.records.iter().map(|r| &r.change).collect::<Vec<_>>(),
        vec![&Change::RestockedWithRequestId {
            pool: pool_id("p"),
            delta: 5,
            request_id: RequestId::parse("r1").unwrap(),
        }]
    );
    assert!(run(&mut state, restock_once("p", 5, "r1"), T0 + 1)
        .records
        .is_empty());
    assert!(run(&mut state, restock_once("p", 4, "r1"), T0 + 1)
        .records
        .is_empty());
    ok(run(&mut state, with_confirm(reserve("c", &[("p", 1)])), T0));
    ok(run(
        &mut state,
        with_ttl(reserve("h", &[("p", 1)]), 1_000),
        T0,
    ));
    let expired = run(&mut state, get_hold("h"), T0 + 1_000);
    assert_eq!(expired.records.len(), 1, "the expiry is logged");
    let forgotten = tick(&mut state, T0 + 1_000 + HOLD_RETENTION_MS);
    assert!(forgotten.records.is_empty() && forgotten.events.is_empty());
    let late = run(&mut state, refund("c"), T0 + CONFIRMED_RETENTION_MS);
    assert_eq!(late.error_code(), Some("hold_not_found"));
    assert!(late.records.is_empty(), "no record about a forgotten hold");
}

// ------------------------------------------------------------------------------ restock requests

#[test]
fn replayed_records_remember_request_ids_and_forget_them_at_retention() {
    let mut state = new_state();
    let mut records = Vec::new();
    for (command, at) in [
        (put_pool("p", 10), T0),
        (restock_once("p", 5, "old"), T0),
        (restock_once("p", 2, "new"), T0 + HOLD_RETENTION_MS),
    ] {
        records.extend(ok(run(&mut state, command, at)).records);
    }
    let mut rebuilt = new_state();
    let mut events = Vec::new();
    for record in &records {
        rebuilt.apply_record(record, &mut events);
    }
    rebuilt.forget_past_retention(T0 + HOLD_RETENTION_MS);
    assert_eq!(
        events
            .last()
            .unwrap()
            .request_id
            .as_ref()
            .map(RequestId::as_str),
        Some("new")
    );
    assert_eq!(
        run(
            &mut rebuilt,
            restock_once("p", 3, "new"),
            T0 + HOLD_RETENTION_MS
        )
        .error_code(),
        Some("request_id_conflict")
    );
    // "old" was forgotten as the live state forgets it: a restock with it is new.
    let again = ok(run(
        &mut rebuilt,
        restock_once("p", 3, "old"),
        T0 + HOLD_RETENTION_MS,
    ));
    assert_eq!(again.records.len(), 1);
    assert_eq!(pool(&rebuilt, "p").total, 20);
}

#[test]
fn a_request_id_is_validated_as_an_identifier() {
    assert!(RequestId::parse("r-1.a_b:c").is_ok());
    assert!(RequestId::parse("").is_err());
    assert!(RequestId::parse("-r").is_err());
    assert!(RequestId::parse(&"r".repeat(129)).is_err());
}

// ------------------------------------------------------------------------------------ expiry

/// A state restored from a snapshot expires the same holds in the same order as the live one
/// (the order itself is a rule scenario of stockd-model's).
#[test]
fn a_restored_state_expires_as_the_live_one() {
    let mut state = new_state();
    ok(run(&mut state, put_pool("p", 10), T0));
    // "a" first had the earliest deadline, then was extended past "b"'s.
    ok(run(
        &mut state,
        with_ttl(reserve("a", &[("p", 1)]), 1_000),
        T0,
    ));
    ok(run(
        &mut state,
        with_ttl(reserve("b", &[("p", 1)]), 1_500),
        T0,
    ));
    ok(run(&mut state, extend("a", 1_000), T0 + 900));
    let restored_from = postcard::to_allocvec(state.snapshot()).unwrap();
    let mut restored = State::from_snapshot(
        state.config(),
        postcard::from_bytes::<Snapshot>(&restored_from).unwrap(),
    );
    let live = tick(&mut state, T0 + 3_000).events;
    let again = tick(&mut restored, T0 + 3_000).events;
    assert_eq!(live.len(), 2);
    assert_eq!(live, again);
}

// ------------------------------------------------------------------------------------ locks

/// Acquires `name` and checks the token is above every earlier one of that name.
fn acquire_fenced(state: &mut State, name: &str, owner: &str, at_ms: u64, seen: &mut Vec<u64>) {
    let token = lock_token(run(state, lock_acquire(name, owner, 1_000, 0), at_ms).outcome());
    if let Some(last) = seen.last() {
        assert!(token > *last, "token {token} after {last}");
    }
    seen.push(token);
}

#[test]
fn fencing_tokens_strictly_increase_per_name_across_everything() {
    let mut state = new_state();
    let mut seen = Vec::new();
    acquire_fenced(&mut state, "l", "o1", T0, &mut seen);
    // Another name's acquisitions do not get in the way.
    lock_token(run(&mut state, lock_acquire("other", "o1", 1_000, 0), T0).outcome());
    assert_eq!(
        run(&mut state, lock_acquire("l", "o1", 1_000, 0), T0 + 1).error_code(),
        Some("lock_held"),
        "acquiring a lock one holds is lock_held"
    );
    ok(run(&mut state, lock_release("l", "o1", seen[0]), T0 + 2));
    acquire_fenced(&mut state, "l", "o1", T0 + 3, &mut seen);
    // Lapsed without any tick: free by the clock, and a new token.
    acquire_fenced(&mut state, "l", "o2", T0 + 1_003, &mut seen);
    // Lapsed and swept.
    tick(&mut state, T0 + 2_003);
    acquire_fenced(&mut state, "l", "o1", T0 + 2_003, &mut seen);

    // Restart from a snapshot: tokens keep increasing.
    let bytes = postcard::to_allocvec(state.snapshot()).unwrap();
    let snapshot: Snapshot = postcard::from_bytes(&bytes).unwrap();
    let mut restored = State::from_snapshot(state.config(), snapshot);
    acquire_fenced(&mut restored, "l", "o3", T0 + 5_000, &mut seen.clone());

    // Restart from the log: the same.
    let mut replayed = new_state();
    let mut events = Vec::new();
    let mut live = new_state();
    let mut live_seen = Vec::new();
    let mut log = Vec::new();
    for (owner, at_ms) in [("o1", T0), ("o2", T0 + 1_000), ("o1", T0 + 2_000)] {
        let done = run(&mut live, lock_acquire("l", owner, 1_000, 0), at_ms);
        live_seen.push(lock_token(done.outcome()));
        log.extend(done.records);
    }
    for record in &log {
        replayed.apply_record(record, &mut events);
    }
    assert!(events.is_empty(), "locks give no events");
    acquire_fenced(&mut replayed, "l", "o2", T0 + 3_000, &mut live_seen);
}

#[test]
fn lock_renew_and_release_need_owner_and_token() {
    let mut state = new_state();
    let token = lock_token(run(&mut state, lock_acquire("l", "o1", 1_000, 0), T0).outcome());
    let cases = [
        (lock_renew("l", "o2", token, 1_000), T0 + 1),
        (lock_renew("l", "o1", token + 1, 1_000), T0 + 1),
        (lock_release("l", "o2", token), T0 + 1),
        (lock_release("l", "o1", token - 1), T0 + 1),
        (lock_release("nope", "o1", token), T0 + 1),
        // At the end of the lease it is free: the old owner cannot act on it.
        (lock_renew("l", "o1", token, 1_000), T0 + 1_000),
        (lock_release("l", "o1", token), T0 + 1_000),
    ];
    for (command, at_ms) in cases {
        let name = format!("{command:?}");
        assert_eq!(
            run(&mut state, command, at_ms).outcome(),
            &Err(Error::NotLockOwner),
            "{name}"
        );
    }
    let renewed = run(&mut state, lock_renew("l", "o1", token, 2_000), T0 + 999);
    assert_eq!(
        renewed.outcome(),
        &Ok(Reply::Lock {
            token,
            expires_at_ms: T0 + 2_999
        })
    );
}

// ------------------------------------------------------------------------------------ refunds

#[test]
fn refund_without_restock_takes_the_units_out_of_the_pool() {
    let mut state = new_state();
    ok(run(&mut state, put_pool("p", 10), T0));
    ok(run(&mut state, put_pool("q", 10), T0));
    let mut request = reserve_request("h", &[("p", 3), ("q", 2)]);
    request.user = Some(user_id("u"));
    ok(run(&mut state, with_confirm(Command::Reserve(request)), T0));
    let done = ok(run(&mut state, refund_without_restock("h"), T0 + 1));
    assert_eq!(
        done.records.iter().map(|r| &r.change).collect::<Vec<_>>(),
        vec![&Change::RefundedWithoutRestock {
            hold_id: hold_id("h")
        }]
    );
    assert_eq!(done.events.len(), 1);
    assert_eq!(done.events[0].kind, EventKind::Refunded);
    assert_eq!(done.events[0].restock, Some(false));
    let p = pool(&state, "p");
    assert_eq!((p.total, p.available, p.held, p.sold), (7, 7, 0, 0));
    let q = pool(&state, "q");
    assert_eq!((q.total, q.available, q.held, q.sold), (8, 8, 0, 0));
    assert_eq!(
        state.hold_view(&hold_id("h")).unwrap().status,
        HoldStatus::Refunded
    );
    // A repeat, with or without restock, answers the hold and changes nothing.
    for again in [refund("h"), refund_without_restock("h")] {
        let repeat = ok(run(&mut state, again, T0 + 2));
        assert!(repeat.records.is_empty() && repeat.events.is_empty());
        assert_eq!(pool(&state, "p").total, 7);
    }
    // Replayed from its records, the state is the same.
    let mut replayed = new_state();
    let mut events = Vec::new();
    let mut all = Vec::new();
    for (command, at) in [
        (put_pool("p", 10), T0),
        (put_pool("q", 10), T0),
        (with_confirm(reserve("h", &[("p", 3), ("q", 2)])), T0),
        (refund_without_restock("h"), T0 + 1),
    ] {
        all.extend(run(&mut replayed, command, at).records);
    }
    let mut rebuilt = new_state();
    for record in &all {
        rebuilt.apply_record(record, &mut events);
    }
    assert_eq!(pool(&rebuilt, "p").total, 7);
    assert_eq!(events.last().unwrap().restock, Some(false));
}

#[test]
fn refund_with_restock_puts_the_units_back_and_says_so() {
    let mut state = new_state();
    ok(run(&mut state, put_pool("p", 10), T0));
    ok(run(&mut state, with_confirm(reserve("h", &[("p", 3)])), T0));
    let done = run(&mut state, refund("h"), T0 + 1);
    assert_eq!(done.events[0].restock, Some(true));
    let p = pool(&state, "p");
    assert_eq!((p.total, p.available, p.sold), (10, 10, 0));
}

#[test]
fn refund_without_restock_of_a_hold_not_confirmed_changes_nothing() {
    let mut state = new_state();
    ok(run(&mut state, put_pool("p", 10), T0));
    ok(run(&mut state, reserve("h", &[("p", 3)]), T0));
    let done = run(&mut state, refund_without_restock("h"), T0 + 1);
    assert_eq!(done.error_code(), Some("hold_not_confirmed"));
    assert!(done.records.is_empty());
    assert_eq!(pool(&state, "p").total, 10);
}

#[test]
fn refund_after_pool_delete_and_recreate_is_pool_deleted() {
    let mut state = new_state();
    ok(run(&mut state, put_pool("p", 5), T0));
    ok(run(&mut state, put_pool("q", 5), T0));
    ok(run(
        &mut state,
        with_confirm(reserve("h", &[("q", 1), ("p", 2)])),
        T0,
    ));
    ok(run(&mut state, delete_pool("p"), T0 + 1));
    let expected = Err(Error::PoolDeleted { pool: pool_id("p") });
    assert_eq!(run(&mut state, refund("h"), T0 + 2).outcome(), &expected);
    ok(run(&mut state, put_pool("p", 5), T0 + 3));
    let refused = run(&mut state, refund("h"), T0 + 4);
    assert_eq!(
        refused.outcome(),
        &expected,
        "a pool created again is a new pool"
    );
    assert!(refused.records.is_empty() && refused.events.is_empty());
    let p = pool(&state, "p");
    assert_eq!((p.total, p.available, p.sold), (5, 5, 0));
    let q = pool(&state, "q");
    assert_eq!((q.available, q.sold), (4, 1), "nothing changes anywhere");
    assert_eq!(
        state.hold_view(&hold_id("h")).unwrap().status,
        HoldStatus::Confirmed
    );
    // Confirming again is still the idempotent answer.
    assert_eq!(
        status(run(&mut state, confirm("h"), T0 + 5).outcome()),
        HoldStatus::Confirmed
    );
}

#[test]
fn pool_with_held_units_cannot_be_deleted_but_one_with_sold_units_can() {
    let mut state = new_state();
    ok(run(&mut state, put_pool("p", 5), T0));
    ok(run(&mut state, reserve("h", &[("p", 2)]), T0));
    assert_eq!(
        run(&mut state, delete_pool("p"), T0).outcome(),
        &Err(Error::PoolHasActiveHolds {
            pool: pool_id("p"),
            held: 2
        })
    );
    ok(run(&mut state, confirm("h"), T0));
    let deleted = ok(run(&mut state, delete_pool("p"), T0));
    assert_eq!(kinds(&deleted), [EventKind::PoolDeleted]);
    assert_eq!(
        run(&mut state, get_pool("p"), T0).outcome(),
        &Err(Error::PoolNotFound { pool: pool_id("p") })
    );
}

/// `pool_upserted` carries the change of total (`delta`) and `pool_deleted` the pool's last total
/// and available, so that a consumer can keep a pool's numbers by adding deltas alone.
#[test]
fn pool_events_carry_deltas_and_a_deleted_pool_its_last_numbers() {
    fn pool_event(done: &Done, kind: EventKind) -> (Option<i64>, Option<u64>, Option<u64>) {
        let event = &done.events[0];
        assert_eq!(event.kind, kind);
        assert_eq!(event.pool, Some(pool_id("p")));
        (event.delta, event.total, event.available)
    }
    let upserted = EventKind::PoolUpserted;
    let mut state = new_state();
    // A create moves total from nothing: the delta is the total.
    let created = ok(run(&mut state, put_pool("p", 5), T0));
    assert_eq!(pool_event(&created, upserted), (Some(5), Some(5), Some(5)));
    ok(run(&mut state, with_confirm(reserve("h", &[("p", 2)])), T0));
    let raised = ok(run(&mut state, put_pool("p", 8), T0 + 1));
    assert_eq!(pool_event(&raised, upserted), (Some(3), Some(8), Some(6)));
    let lowered = ok(run(&mut state, put_pool("p", 4), T0 + 2));
    assert_eq!(pool_event(&lowered, upserted), (Some(-4), Some(4), Some(2)));
    let same = ok(run(&mut state, put_pool("p", 4), T0 + 3));
    assert_eq!(pool_event(&same, upserted), (Some(0), Some(4), Some(2)));
    // Deleted with 2 units sold: its last total and available, no delta.
    let deleted = ok(run(&mut state, delete_pool("p"), T0 + 4));
    assert_eq!(
        pool_event(&deleted, EventKind::PoolDeleted),
        (None, Some(4), Some(2))
    );
    // Created again, it starts from nothing: the deleted pool's total is not the old one.
    let again = ok(run(&mut state, put_pool("p", 3), T0 + 5));
    assert_eq!(pool_event(&again, upserted), (Some(3), Some(3), Some(3)));
}

// ------------------------------------------------------------------------------------ replays

#[test]
fn same_request_in_any_item_order_replays_and_anything_else_conflicts() {
    let original = ReserveRequest {
        user: Some(user_id("u1")),
        ttl_ms: 60_000,
        ..reserve_request("h", &[("p", 1), ("q", 2), ("r", 3)])
    };
    let variant = |change: fn(&mut ReserveRequest)| {
        let mut request = original.clone();
        change(&mut request);
        Command::Reserve(request)
    };
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
    let mut state = new_state();
    for pool in ["p", "q", "r", "s"] {
        ok(run(&mut state, put_pool(pool, 10), T0));
    }
    let first = ok(run(&mut state, Command::Reserve(original.clone()), T0));
    assert!(created(first.outcome()));
    let stored = hold_view(first.outcome()).clone();
    let pools_before: Vec<PoolView> = state.pools().collect();
    for (name, command, replay) in cases {
        let done = run(&mut state, command, T0 + 10);
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
        assert!(
            done.records.is_empty() && done.events.is_empty(),
            "{name}: nothing changes"
        );
    }
    assert_eq!(state.pools().collect::<Vec<_>>(), pools_before);

    // Validation still comes first, before the idempotency lookup.
    let invalid = variant(|r| edit_items(r, |items| items[0].qty = 0));
    assert_eq!(
        run(&mut state, invalid, T0 + 10).error_code(),
        Some("invalid_request")
    );

    // A replay answers with the hold's current state, whatever it is now.
    ok(run(&mut state, confirm("h"), T0 + 20));
    let replay = run(&mut state, Command::Reserve(original.clone()), T0 + 30);
    assert_eq!(status(replay.outcome()), HoldStatus::Confirmed);
    assert!(!created(replay.outcome()));
    assert_eq!(hold_view(replay.outcome()).items, stored.items);
}

#[test]
fn a_failed_reserve_is_not_remembered() {
    let mut state = new_state();
    ok(run(&mut state, put_pool("p", 1), T0));
    let refused = run(&mut state, reserve("h", &[("p", 2)]), T0);
    assert_eq!(refused.outcome(), &insufficient("p", 1, 2));
    assert!(refused.records.is_empty() && refused.events.is_empty());
    ok(run(&mut state, restock("p", 1), T0));
    let retried = ok(run(&mut state, reserve("h", &[("p", 2)]), T0));
    assert!(created(retried.outcome()));
}

fn item(pool: &str, qty: u64) -> HoldItem {
    HoldItem {
        pool: pool_id(pool),
        qty,
    }
}

// ------------------------------------------------------------------------------------ events

#[test]
fn low_stock_fires_on_each_crossing_and_on_upserts_at_or_below() {
    let mut state = new_state();
    let spec = |total| PoolSpec {
        total,
        low_stock_threshold: Some(3),
        ..PoolSpec::default()
    };
    let low = EventKind::LowStock;
    // (command, at, event kinds, available after)
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
        (
            Command::PutPool {
                pool: pool_id("q"),
                spec: spec(0),
                if_absent: true,
            },
            vec![],
            0,
        ),
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
    let mut last_seq = 0;
    for (index, (command, expected, available_after)) in steps.into_iter().enumerate() {
        let name = format!("step {index}: {command:?}");
        let target = match &command {
            Command::PutPool { pool, .. } if pool.as_str() == "q" => "q",
            _ => "p",
        };
        let done = run(&mut state, command, T0 + index as u64);
        assert_eq!(kinds(&done), expected, "{name}");
        assert_eq!(available(&state, target), available_after, "{name}");
        for event in &done.events {
            assert_eq!(
                event.seq,
                last_seq + 1,
                "{name}: seq starts at 1 and has no gaps"
            );
            last_seq = event.seq;
            assert_eq!(event.at_ms, T0 + index as u64);
            if event.kind == low {
                assert_eq!(event.pool, Some(pool_id(target)));
                assert_eq!(event.available, Some(available_after));
                assert_eq!(event.low_stock_threshold, Some(3));
            }
        }
    }
}

#[test]
fn hold_events_carry_hold_user_and_items() {
    let mut state = new_state();
    ok(run(&mut state, put_pool("p", 5), T0));
    ok(run(&mut state, put_pool("q", 5), T0));
    let done = ok(run(
        &mut state,
        with_user(with_confirm(reserve("h", &[("q", 2), ("p", 1)])), "u"),
        T0,
    ));
    assert_eq!(kinds(&done), [EventKind::Held, EventKind::Confirmed]);
    let items = [
        HoldItem {
            pool: pool_id("q"),
            qty: 2,
        },
        HoldItem {
            pool: pool_id("p"),
            qty: 1,
        },
    ];
    for event in &done.events {
        assert_eq!(event.hold_id, Some(hold_id("h")));
        assert_eq!(event.user, Some(user_id("u")));
        assert_eq!(event.items.as_deref(), Some(&items[..]));
    }
}

#[test]
fn held_events_carry_the_holds_created_at_ms_and_no_other_does() {
    let mut state = new_state();
    ok(run(&mut state, put_pool("p", 5), T0));
    let done = ok(run(&mut state, reserve("h", &[("p", 1)]), T0 + 7));
    assert_eq!(kinds(&done), [EventKind::Held]);
    let created_at_ms = hold_view(done.outcome()).created_at_ms;
    assert_eq!(created_at_ms, T0 + 7);
    assert_eq!(done.events[0].created_at_ms, Some(created_at_ms));
    let shown = hold_view(ok(run(&mut state, get_hold("h"), T0 + 8)).outcome()).created_at_ms;
    assert_eq!(done.events[0].created_at_ms, Some(shown));
    let done = ok(run(&mut state, release("h"), T0 + 9));
    assert_eq!(kinds(&done), [EventKind::Released]);
    assert_eq!(done.events[0].created_at_ms, None);
    // confirm: true: held then confirmed, the field on the first only.
    let done = ok(run(
        &mut state,
        with_confirm(reserve("c", &[("p", 1)])),
        T0 + 10,
    ));
    assert_eq!(kinds(&done), [EventKind::Held, EventKind::Confirmed]);
    assert_eq!(done.events[0].created_at_ms, Some(T0 + 10));
    assert_eq!(done.events[1].created_at_ms, None);
}

// ------------------------------------------------------------------------------------ windows

#[test]
fn sale_window_is_half_open_and_checks_come_item_by_item() {
    let window = |starts_at_ms, ends_at_ms| PoolSpec {
        total: 5,
        starts_at_ms,
        ends_at_ms,
        ..PoolSpec::default()
    };
    // (window, reserve time, expected error code or None for success)
    let cases: [(PoolSpec, u64, Option<&str>); 7] = [
        (window(Some(T0), None), T0 - 1, Some("sale_not_started")),
        (window(Some(T0), None), T0, None),
        (window(None, Some(T0)), T0 - 1, None),
        (window(None, Some(T0)), T0, Some("sale_ended")),
        (window(Some(T0), Some(T0 + 10)), T0 + 9, None),
        (window(Some(T0), Some(T0 + 10)), T0 + 10, Some("sale_ended")),
        // A window that can never open.
        (
            window(Some(T0 + 10), Some(T0)),
            T0 + 5,
            Some("sale_not_started"),
        ),
    ];
    for (spec, at_ms, expected) in cases {
        let name = format!("{spec:?} at {at_ms}");
        let mut state = new_state();
        ok(run(&mut state, put_pool_with("p", spec), 0));
        let done = run(&mut state, reserve("h", &[("p", 1)]), at_ms);
        assert_eq!(done.error_code(), expected, "{name}");
    }

    // Item by item, first failure wins: the second item's failure is reported only when the
    // first item passes every check.
    let mut state = new_state();
    ok(run(&mut state, put_pool("open", 1), 0));
    ok(run(
        &mut state,
        put_pool_with("closed", window(None, Some(T0))),
        0,
    ));
    ok(run(
        &mut state,
        put_pool_with(
            "limited",
            PoolSpec {
                total: 5,
                per_user_limit: Some(1),
                ..PoolSpec::default()
            },
        ),
        0,
    ));
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
                ends_at_ms: T0,
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
        let done = run(&mut state, reserve("h", items), T0);
        assert_eq!(done.outcome(), &Err(expected), "{items:?}");
    }
    assert_eq!(
        available(&state, "open"),
        1,
        "a failed reserve changes nothing"
    );
}

// ------------------------------------------------------------------------------------ limits

/// Every range of the contract, at its edge and one past it. A refused command changes nothing.
#[test]
fn limits_are_enforced_at_their_edges() {
    use stockd_core::limits::*;

    let spec = |total| PoolSpec {
        total,
        ..PoolSpec::default()
    };
    let many_items = |n: usize| {
        let items: Vec<(String, u64)> = (0..n).map(|i| (format!("m{i}"), 1)).collect();
        let items: Vec<(&str, u64)> = items.iter().map(|(p, q)| (p.as_str(), *q)).collect();
        reserve("many", &items)
    };
    let reserve_with = |change: fn(&mut ReserveRequest)| {
        let mut request = reserve_request("edge", &[("big", 1)]);
        change(&mut request);
        Command::Reserve(request)
    };
    let list = |prefix: &str, after: Option<&str>, limit| Command::ListPools {
        prefix: prefix.to_string(),
        after: after.map(str::to_string),
        limit,
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
            reserve_with(|r| edit_items(r, |items| items[0].qty = QTY_MAX)),
            true,
        ),
        (
            reserve_with(|r| edit_items(r, |items| items[0].qty = QTY_MAX + 1)),
            false,
        ),
        (
            reserve_with(|r| edit_items(r, |items| items[0].qty = 0)),
            false,
        ),
        (reserve_with(|r| r.ttl_ms = HOLD_TTL_MS_MIN - 1), false),
        (reserve_with(|r| r.ttl_ms = HOLD_TTL_MS_MAX + 1), false),
        (reserve_with(|r| r.wait_ms = WAIT_MS_MAX + 1), false),
        (
            reserve_with(|r| {
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
        (list("", None, 0), false),
        (list("", None, POOL_LIST_LIMIT_MAX), true),
        (list("", None, POOL_LIST_LIMIT_MAX + 1), false),
        (list("a/b", None, 1), false),
        (list("", Some("-x"), 1), false),
        (list("", Some("m1"), 1), true),
        // Validation comes before any lookup.
        (extend("missing", 1), false),
        (restock("missing", 0), false),
        (reserve("missing", &[("nope", 0)]), false),
    ];
    let mut state = new_state();
    for i in 0..=HOLD_ITEMS_MAX {
        ok(run(&mut state, put_pool(&format!("m{i}"), 1), T0));
    }
    ok(run(&mut state, put_pool("big", QTY_MAX * 3), T0));
    for (command, accepted) in cases {
        let name = format!("{command:?}");
        let name = &name[..name.len().min(160)];
        let done = run(&mut state, command, T0);
        if accepted {
            assert!(done.outcome().is_ok(), "{name}: {:?}", done.outcome());
        } else {
            assert_eq!(done.error_code(), Some("invalid_request"), "{name}");
            assert!(done.records.is_empty() && done.events.is_empty(), "{name}");
        }
    }
}

#[test]
fn a_crowd_of_lapsed_holds_expires_over_several_bounded_ticks() {
    use stockd_core::limits::EXPIRIES_PER_TICK_MAX;
    let holds = EXPIRIES_PER_TICK_MAX * 2 + 500;
    let mut state = new_state();
    let mut effects = stockd_core::Effects::default();
    state.execute(put_pool("p", holds as u64), T0, &mut effects);
    for n in 0..holds {
        state.execute(
            with_ttl(reserve(&format!("h{n}"), &[("p", 1)]), 1_000),
            T0,
            &mut effects,
        );
    }
    let later = T0 + 60_000;
    // Each tick expires at most the bound; what is left is still due at once.
    let expected = [EXPIRIES_PER_TICK_MAX, EXPIRIES_PER_TICK_MAX, 500, 0];
    for (round, expected) in expected.into_iter().enumerate() {
        let done = tick(&mut state, later);
        assert_eq!(done.records.len(), expected, "tick {round}");
        if expected == EXPIRIES_PER_TICK_MAX {
            assert!(state.next_deadline_ms().is_some_and(|t| t <= later));
        }
    }
    assert_eq!(available(&state, "p"), holds as u64);
    // Commands never waited for the sweep: lazy expiry already saw them as expired.
}

#[test]
fn forgetting_past_retention_drops_finished_holds_and_lapsed_leases() {
    let mut state = new_state();
    run(&mut state, put_pool("p", 10), T0);
    run(&mut state, reserve("h1", &[("p", 1)]), T0);
    run(&mut state, release("h1"), T0);
    run(&mut state, reserve("h2", &[("p", 1)]), T0);
    let token = lock_token(run(&mut state, lock_acquire("l", "o", 1_000, 0), T0).outcome());
    state.forget_past_retention(T0 + HOLD_RETENTION_MS);
    assert_eq!(state.hold_count(), 1, "only the held hold is left");
    assert_eq!(
        run(&mut state, get_hold("h1"), T0 + HOLD_RETENTION_MS).error_code(),
        Some("hold_not_found")
    );
    // The lapsed lease is gone: its old owner no longer holds it, a newcomer gets a new token.
    let again = run(
        &mut state,
        lock_acquire("l", "o2", 1_000, 0),
        T0 + HOLD_RETENTION_MS,
    );
    assert!(lock_token(again.outcome()) > token);
}

/// Changes a request's items (shared, so edited as a copy).
fn edit_items(request: &mut ReserveRequest, edit: impl FnOnce(&mut Vec<HoldItem>)) {
    let mut items = request.items.to_vec();
    edit(&mut items);
    request.items = items.into();
}
