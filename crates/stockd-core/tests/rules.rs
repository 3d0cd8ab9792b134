//! Deterministic tests of what only the core has: the log (which steps write records), a state
//! rebuilt from records or restored from a snapshot (request ids, fencing tokens, expiry order),
//! the bound on a tick's work and forgetting past retention, each checked with time passed in as
//! a number. The rules of the contract themselves (waiting, retention, expiry, request ids,
//! fencing, refunds, replays, events, sale windows, limits) are stockd-model's `rules`
//! scenarios, run here (`rule_scenarios.rs`) and on the engine and Redis alike.

mod common;

use stockd_core::{
    Change, Command, EventKind, Outcome, PoolView, Record, Reply, RequestId, ReserveRequest,
    Snapshot, State, StateConfig,
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

fn ok(done: Done) -> Done {
    assert!(
        done.outcome().is_ok(),
        "expected success: {:?}",
        done.outcome()
    );
    done
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
/// is logged, and a refund without restock as such; a step that changes nothing (a replayed or
/// conflicting restock or reserve, a refused command, a repeated refund, forgetting past
/// retention, a refund of a forgotten hold) logs nothing.
#[test]
fn only_changes_are_logged() {
    let mut state = new_state();
    ok(run(&mut state, put_pool("p", 10), T0));
    let first = ok(run(&mut state, restock_once("p", 5, "r1"), T0));
    assert_eq!(
        changes(&first),
        [&Change::RestockedWithRequestId {
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

    // A refund without restock is its own change: replayed, the units must leave the pool.
    ok(run(
        &mut state,
        with_confirm(reserve("r", &[("p", 2)])),
        T0 + 1,
    ));
    let refunded = ok(run(&mut state, refund_without_restock("r"), T0 + 2));
    assert_eq!(
        changes(&refunded),
        [&Change::RefundedWithoutRestock {
            hold_id: hold_id("r")
        }]
    );
    ok(run(&mut state, put_pool("q", 1), T0 + 2));
    ok(run(&mut state, reserve("held", &[("q", 1)]), T0 + 2));
    ok(run(&mut state, put_pool("d", 1), T0 + 2));
    ok(run(
        &mut state,
        with_confirm(reserve("gone", &[("d", 1)])),
        T0 + 2,
    ));
    ok(run(&mut state, delete_pool("d"), T0 + 2));
    for command in [
        refund("r"),
        refund_without_restock("r"),
        reserve("held", &[("q", 1)]),
        reserve("held", &[("q", 2)]),
        reserve("x", &[("q", 1)]),
        reserve("x", &[("q", 0)]),
        refund_without_restock("held"),
        refund("gone"),
    ] {
        let name = format!("{command:?}");
        let done = run(&mut state, command, T0 + 3);
        assert!(done.records.is_empty(), "{name}: {:?}", done.outcome());
    }

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

fn changes(done: &Done) -> Vec<&Change> {
    done.records.iter().map(|r| &r.change).collect()
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

/// A state rebuilt from records refunds without restock as the live one did: the units left the
/// pool, and the event says so.
#[test]
fn replayed_records_refund_without_restock_as_the_live_state() {
    let mut live = new_state();
    let mut records = Vec::new();
    for (command, at) in [
        (put_pool("p", 10), T0),
        (put_pool("q", 10), T0),
        (with_confirm(reserve("h", &[("p", 3), ("q", 2)])), T0),
        (refund_without_restock("h"), T0 + 1),
    ] {
        records.extend(ok(run(&mut live, command, at)).records);
    }
    let mut rebuilt = new_state();
    let mut events = Vec::new();
    for record in &records {
        rebuilt.apply_record(record, &mut events);
    }
    assert_eq!(pool(&rebuilt, "p"), pool(&live, "p"));
    assert_eq!(pool(&rebuilt, "q"), pool(&live, "q"));
    assert_eq!(pool(&rebuilt, "p").total, 7);
    let refunded = events.last().unwrap();
    assert_eq!(
        (refunded.kind, refunded.restock),
        (EventKind::Refunded, Some(false))
    );
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

/// Acquires lock `l` for `owner`, checks its token is above `above`, logs its records in `log`
/// and returns the token.
fn acquire_above(
    state: &mut State,
    owner: &str,
    at_ms: u64,
    above: u64,
    log: &mut Vec<Record>,
) -> u64 {
    let done = run(state, lock_acquire("l", owner, 1_000, 0), at_ms);
    let token = lock_token(done.outcome());
    assert!(token > above, "token {token} after {above}");
    log.extend(done.records);
    token
}

/// A state restored from a snapshot, or rebuilt from the log, goes on giving fencing tokens above
/// every one the live state gave, whatever freed the lock (that tokens increase on a live state
/// is a rule scenario of stockd-model's).
#[test]
fn a_restored_or_replayed_state_keeps_fencing_tokens_increasing() {
    let mut live = new_state();
    let mut log = Vec::new();
    let first = acquire_above(&mut live, "o1", T0, 0, &mut log);
    // Another name's acquisitions are logged too and do not get in the way.
    log.extend(run(&mut live, lock_acquire("other", "o1", 1_000, 0), T0).records);
    log.extend(ok(run(&mut live, lock_release("l", "o1", first), T0 + 1)).records);
    let mut last = acquire_above(&mut live, "o1", T0 + 2, first, &mut log);
    // Lapsed without a tick, then lapsed and swept.
    last = acquire_above(&mut live, "o2", T0 + 1_002, last, &mut log);
    log.extend(tick(&mut live, T0 + 2_002).records);
    last = acquire_above(&mut live, "o1", T0 + 2_002, last, &mut log);

    let bytes = postcard::to_allocvec(live.snapshot()).unwrap();
    let snapshot: Snapshot = postcard::from_bytes(&bytes).unwrap();
    let mut restored = State::from_snapshot(live.config(), snapshot);
    acquire_above(&mut restored, "o3", T0 + 5_000, last, &mut Vec::new());

    let mut replayed = new_state();
    let mut events = Vec::new();
    for record in &log {
        replayed.apply_record(record, &mut events);
    }
    assert!(events.is_empty(), "locks give no events");
    acquire_above(&mut replayed, "o3", T0 + 5_000, last, &mut Vec::new());
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
