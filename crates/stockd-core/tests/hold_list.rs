//! `list_holds` and the hold index it walks: order, filters, paging, the examination bound,
//! holds forgotten after retention, and an index rebuilt from a snapshot answering the same.

mod common;

use common::*;
use stockd_core::limits::{HOLD_LIST_EXAMINED_MAX, HOLD_RETENTION_MS_DEFAULT};
use stockd_core::{Command, HoldStatus, Reply, State, StateConfig};

const T0: u64 = 1_000_000;

fn list(
    state: &mut State,
    pool: Option<&str>,
    user: Option<&str>,
    status: Option<HoldStatus>,
    after: Option<&str>,
    limit: usize,
    now_ms: u64,
) -> (Vec<(String, HoldStatus)>, Option<String>) {
    let command = Command::ListHolds {
        pool: pool.map(pool_id),
        user: user.map(user_id),
        status,
        after: after.map(str::to_string),
        limit,
    };
    let done = run(state, command, now_ms);
    assert!(done.records.is_empty(), "a list writes nothing");
    match done.outcome() {
        Ok(Reply::HoldList { holds, next }) => (
            holds
                .iter()
                .map(|h| (h.hold_id.to_string(), h.status))
                .collect(),
            next.as_ref().map(|n| n.to_string()),
        ),
        other => panic!("expected a hold list, got {other:?}"),
    }
}

/// pool, user, status, after, limit.
type Query = (
    Option<&'static str>,
    Option<&'static str>,
    Option<HoldStatus>,
    Option<&'static str>,
    usize,
);

fn ids(page: &(Vec<(String, HoldStatus)>, Option<String>)) -> Vec<&str> {
    page.0.iter().map(|(id, _)| id.as_str()).collect()
}

/// The ids of every hold (up to 100) on `pool`, of `user` and in `status`, if given, in order.
fn all_ids(
    state: &mut State,
    pool: Option<&str>,
    user: Option<&str>,
    status: Option<HoldStatus>,
    now_ms: u64,
) -> Vec<String> {
    let page = list(state, pool, user, status, None, 100, now_ms);
    ids(&page).into_iter().map(str::to_string).collect()
}

fn reserve_as(hold: &str, user: Option<&str>, items: &[(&str, u64)]) -> Command {
    let mut request = reserve_request(hold, items);
    request.user = user.map(user_id);
    Command::Reserve(request)
}

/// p1 and p2; h3 (u1, p1), h1 (u2, p1+p2), h2 (no user, p2), h4 (u1, p2) made out of order;
/// h2 confirmed, h4 released.
fn four_holds() -> State {
    let mut state = State::new(StateConfig::default());
    for pool in ["p1", "p2"] {
        run(&mut state, put_pool(pool, 100), T0);
    }
    run(&mut state, reserve_as("h3", Some("u1"), &[("p1", 1)]), T0);
    run(
        &mut state,
        reserve_as("h1", Some("u2"), &[("p1", 1), ("p2", 1)]),
        T0,
    );
    run(&mut state, reserve_as("h2", None, &[("p2", 1)]), T0);
    run(&mut state, reserve_as("h4", Some("u1"), &[("p2", 1)]), T0);
    run(&mut state, confirm("h2"), T0);
    run(&mut state, release("h4"), T0);
    state
}

#[test]
fn holds_are_listed_in_id_order_and_filtered() {
    let mut state = four_holds();
    let all = list(&mut state, None, None, None, None, 100, T0);
    assert_eq!(ids(&all), ["h1", "h2", "h3", "h4"]);
    assert_eq!(all.1, None);
    let p1 = list(&mut state, Some("p1"), None, None, None, 100, T0);
    assert_eq!(ids(&p1), ["h1", "h3"]);
    let p2 = list(&mut state, Some("p2"), None, None, None, 100, T0);
    assert_eq!(ids(&p2), ["h1", "h2", "h4"]);
    let u1 = list(&mut state, None, Some("u1"), None, None, 100, T0);
    assert_eq!(ids(&u1), ["h3", "h4"]);
    let u1_p2 = list(&mut state, Some("p2"), Some("u1"), None, None, 100, T0);
    assert_eq!(ids(&u1_p2), ["h4"]);
    assert_eq!(
        all_ids(&mut state, None, None, Some(HoldStatus::Held), T0),
        ["h1", "h3"]
    );
    assert_eq!(
        all_ids(&mut state, Some("p2"), None, Some(HoldStatus::Released), T0),
        ["h4"]
    );
    let nobody = list(&mut state, None, Some("u9"), None, None, 100, T0);
    assert_eq!(nobody, (vec![], None));
    let no_pool = list(&mut state, Some("p9"), None, None, None, 100, T0);
    assert_eq!(no_pool, (vec![], None));
}

#[test]
fn pages_follow_next_to_the_end_and_only_null_ends() {
    let mut state = four_holds();
    let first = list(&mut state, None, None, None, None, 2, T0);
    assert_eq!(ids(&first), ["h1", "h2"]);
    assert_eq!(first.1.as_deref(), Some("h2"));
    let second = list(&mut state, None, None, None, first.1.as_deref(), 2, T0);
    assert_eq!(ids(&second), ["h3", "h4"]);
    // Exactly at the end: nothing follows, so no next.
    assert_eq!(second.1, None);
    let last = list(&mut state, None, None, None, Some("h3"), 2, T0);
    assert_eq!(ids(&last), ["h4"]);
    assert_eq!(last.1, None);
    // A cursor need not be a hold id that exists.
    let between = list(&mut state, None, None, None, Some("h10"), 100, T0);
    assert_eq!(ids(&between), ["h2", "h3", "h4"]);
}

#[test]
fn limits_out_of_range_are_refused() {
    let mut state = four_holds();
    for limit in [0, 1001] {
        let command = Command::ListHolds {
            pool: None,
            user: None,
            status: None,
            after: None,
            limit,
        };
        assert_eq!(
            run(&mut state, command, T0).error_code(),
            Some("invalid_request")
        );
    }
    let bad_after = Command::ListHolds {
        pool: None,
        user: None,
        status: None,
        after: Some("not an id".to_string()),
        limit: 10,
    };
    assert_eq!(
        run(&mut state, bad_after, T0).error_code(),
        Some("invalid_request")
    );
}

#[test]
fn an_overdue_hold_is_listed_as_expired_before_any_sweep() {
    let mut state = four_holds();
    let late = T0 + 600_000;
    assert_eq!(
        all_ids(&mut state, None, None, Some(HoldStatus::Expired), late),
        ["h1", "h3"]
    );
    let held = list(
        &mut state,
        None,
        None,
        Some(HoldStatus::Held),
        None,
        100,
        late,
    );
    assert_eq!(held, (vec![], None));
    // As get_hold shows it, finished at its deadline.
    let command = Command::ListHolds {
        pool: Some(pool_id("p1")),
        user: Some(user_id("u1")),
        status: None,
        after: None,
        limit: 1,
    };
    let Ok(Reply::HoldList { holds, .. }) = run(&mut state, command, late).outcome().clone() else {
        panic!("a list");
    };
    let Ok(Reply::Hold { hold, .. }) = run(&mut state, get_hold("h3"), late).outcome().clone()
    else {
        panic!("a hold");
    };
    assert_eq!(holds, vec![hold]);
}

#[test]
fn holds_forgotten_after_retention_leave_every_index() {
    let mut state = four_holds();
    // h4 (released at T0) is past retention: gone before any sweep, then from the index too.
    let after_retention = T0 + HOLD_RETENTION_MS_DEFAULT;
    let all = list(&mut state, None, None, None, None, 100, after_retention);
    assert_eq!(ids(&all), ["h1", "h2", "h3"]);
    assert_eq!(
        all_ids(&mut state, None, Some("u1"), None, after_retention),
        ["h3"]
    );
    let count = state.hold_count();
    tick(&mut state, after_retention);
    assert!(state.hold_count() < count, "the sweep forgot something");
    assert_eq!(
        all_ids(&mut state, Some("p2"), None, None, after_retention),
        ["h1", "h2"]
    );
    // The id made again on another pool and user: listed there only.
    run(
        &mut state,
        reserve_as("h4", Some("u2"), &[("p1", 1)]),
        after_retention,
    );
    assert_eq!(
        all_ids(&mut state, Some("p1"), None, None, after_retention),
        ["h1", "h3", "h4"]
    );
    assert_eq!(
        all_ids(&mut state, Some("p2"), None, None, after_retention),
        ["h1", "h2"]
    );
    assert_eq!(
        all_ids(&mut state, None, Some("u1"), None, after_retention),
        ["h3"]
    );
}

/// Replay meets a reused id while the first hold of that id is still in the table (live, it
/// had been forgotten): the new hold replaces it in the table and in every index.
#[test]
fn a_log_replayed_over_a_reused_id_lists_the_new_hold_only() {
    let mut live = State::new(StateConfig::default());
    let after_retention = T0 + HOLD_RETENTION_MS_DEFAULT;
    let steps = [
        (put_pool("p1", 100), T0),
        (put_pool("p2", 100), T0),
        (reserve_as("h1", Some("u1"), &[("p1", 1)]), T0),
        (reserve_as("h4", Some("u1"), &[("p2", 1)]), T0),
        (release("h4"), T0),
        (reserve_as("h4", Some("u2"), &[("p1", 2)]), after_retention),
    ];
    let mut log = Vec::new();
    for (command, at_ms) in steps {
        log.extend(run(&mut live, command, at_ms).records);
    }
    let mut replayed = State::new(StateConfig::default());
    let mut events = Vec::new();
    for record in &log {
        replayed.apply_record(record, &mut events);
    }
    replayed
        .check_invariants()
        .expect("the index follows the replaced hold");
    let queries: [Query; 5] = [
        (None, None, None, None, 100),
        (Some("p1"), None, None, None, 100),
        (Some("p2"), None, None, None, 100),
        (None, Some("u1"), None, None, 100),
        (None, Some("u2"), None, None, 100),
    ];
    for (pool, user, status, after, limit) in queries {
        assert_eq!(
            list(&mut live, pool, user, status, after, limit, after_retention),
            list(
                &mut replayed,
                pool,
                user,
                status,
                after,
                limit,
                after_retention
            ),
            "{pool:?} {user:?}"
        );
    }
    assert_eq!(
        all_ids(&mut replayed, Some("p2"), None, None, after_retention),
        Vec::<&str>::new()
    );
    assert_eq!(
        all_ids(&mut replayed, None, Some("u2"), None, after_retention),
        ["h4"]
    );
}

#[test]
fn an_index_rebuilt_from_a_snapshot_answers_the_same() {
    let mut state = four_holds();
    let mut loaded = State::from_snapshot(state.config(), state.snapshot().clone());
    loaded.check_invariants().expect("rebuilt index is exact");
    let queries: [Query; 6] = [
        (None, None, None, None, 100),
        (None, None, None, Some("h1"), 2),
        (Some("p1"), None, None, None, 100),
        (Some("p2"), Some("u1"), None, None, 100),
        (None, Some("u2"), Some(HoldStatus::Held), None, 100),
        (None, None, Some(HoldStatus::Confirmed), None, 1),
    ];
    for (pool, user, status, after, limit) in queries {
        assert_eq!(
            list(&mut state, pool, user, status, after, limit, T0),
            list(&mut loaded, pool, user, status, after, limit, T0),
            "{pool:?} {user:?} {status:?} {after:?} {limit}"
        );
    }
}

#[test]
fn a_page_examines_a_bounded_number_of_holds() {
    let mut state = State::new(StateConfig::default());
    run(&mut state, put_pool("p", 1_000_000), T0);
    let count = HOLD_LIST_EXAMINED_MAX + 5;
    let mut effects = stockd_core::Effects::default();
    for n in 0..count {
        let hold = format!("h{n:06}");
        state.execute(reserve(&hold, &[("p", 1)]), T0, &mut effects);
    }
    let last = format!("h{:06}", count - 1);
    run(&mut state, confirm(&last), T0);
    // The one confirmed hold is past the bound: the first page is empty, with a next.
    let first = list(
        &mut state,
        Some("p"),
        None,
        Some(HoldStatus::Confirmed),
        None,
        10,
        T0,
    );
    assert!(first.0.is_empty());
    let bound = format!("h{:06}", HOLD_LIST_EXAMINED_MAX - 1);
    assert_eq!(first.1.as_deref(), Some(bound.as_str()));
    let second = list(
        &mut state,
        Some("p"),
        None,
        Some(HoldStatus::Confirmed),
        first.1.as_deref(),
        10,
        T0,
    );
    assert_eq!(ids(&second), [last.as_str()]);
    assert_eq!(second.1, None);
}
