//! Waiting requests (a reserve or a lock acquire with `wait_ms`): who is served when units come
//! back (arrival order, skipping a waiter that still cannot be satisfied), what a wait's deadline
//! answers, retries of a waiting reserve, pool deletion, the bound on a queue, lock waiters.
//!
//! Error codes are written out on purpose: these rules are an independent oracle of the contract.

use stockd_core::limits::WAITERS_PER_KEY_MAX;
use stockd_core::{Error, EventKind, HoldStatus, Reply};

use super::commands::*;
use super::{Driver, Scenario, T0};

/// The scenario of waiters over several pools; on a Cluster, pools in several partitions: such a
/// reserve does not queue there (it retries), so arrival order is not promised for it.
pub const WAITERS_ACROSS_POOLS: &str = "waiters across pools are served in arrival order";

/// The scenario of a wait over two pools that ends short of one (on a Cluster, as above).
pub const WAIT_DEADLINE_ACROSS_POOLS: &str =
    "a wait's deadline answers the first failure of the final attempt";

/// The scenario that fills a pool's wait queue (10,000 parked requests).
pub const WAIT_QUEUE_BOUNDED: &str = "a pool's wait queue is bounded";

/// The waiting scenarios, by name.
pub const SCENARIOS: &[(&str, Scenario)] = &[
    (
        "a waiting reserve parks, then is served in arrival order",
        parks_then_served_in_arrival_order,
    ),
    (
        "a retry of a waiting reserve is answered when the hold is created",
        a_retry_is_answered_when_the_hold_is_created,
    ),
    (
        "a waiter that still cannot be satisfied is skipped",
        a_waiter_that_cannot_be_satisfied_is_skipped,
    ),
    (
        WAITERS_ACROSS_POOLS,
        waiters_across_pools_are_served_in_arrival_order,
    ),
    (
        "every return of units serves a waiter",
        every_return_of_units_serves_a_waiter,
    ),
    (
        "a wait's deadline gives success when stock came back at that tick",
        deadline_gives_success_when_stock_came_back,
    ),
    (
        WAIT_DEADLINE_ACROSS_POOLS,
        deadline_answers_the_first_failure,
    ),
    (
        "deleting a pool answers its waiters with pool_not_found",
        pool_deletion_answers_its_waiters,
    ),
    ("only a shortage parks a reserve", only_a_shortage_parks),
    (WAIT_QUEUE_BOUNDED, the_wait_queue_is_bounded),
    (
        "lock waiters get the lock on release or lapse, in arrival order",
        lock_waiters_in_arrival_order,
    ),
];

fn parks_then_served_in_arrival_order(t: &mut Driver) {
    t.run(put_pool("p", 2), T0).ok();
    t.run(reserve("a", &[("p", 2)]), T0).ok();

    let first = t.run(reserve_waiting("w1", &[("p", 2)], 5_000), T0);
    let w1 = first.waiter();
    assert!(first.events.is_empty(), "a parked request writes nothing");
    let w2 = t
        .run(reserve_waiting("w2", &[("p", 1)], 5_000), T0 + 1)
        .waiter();
    assert_eq!(t.parked(), 2);
    // A parked request is not a hold yet.
    assert_eq!(
        t.run(get_hold("w1"), T0 + 2).error_code(),
        Some("hold_not_found")
    );

    // Both units come back: the first waiter asked for both and gets them.
    let released = t.run(release("a"), T0 + 10).ok();
    assert_eq!(tickets(&released.woken), [w1], "{:?}", released.woken);
    let hold = hold_view(&released.woken[0].1);
    assert_eq!(
        (hold.status, hold.created_at_ms),
        (HoldStatus::Held, T0 + 10)
    );
    assert!(created(&released.woken[0].1));
    assert_eq!(
        released.kinds(),
        [EventKind::Released, EventKind::Held],
        "the waiter's hold follows the release that fed it"
    );
    assert_eq!(t.available("p"), 0);
    assert_eq!(t.parked(), 1);

    // The second waiter's deadline: nothing came back, so the final answer is the shortage.
    assert!(t.tick(T0 + 1 + 4_999).woken.is_empty());
    let timed_out = t.tick(T0 + 1 + 5_000);
    assert_eq!(timed_out.woken, [(w2, insufficient("p", 0, 1))]);
    assert_eq!(t.parked(), 0);
    assert!(timed_out.events.is_empty());
}

/// A client that retries a waiting reserve (the same hold id and body, while the first is still
/// parked) is answered the moment the hold exists, with the replay, not at its own deadline; a
/// different request with that id gets the conflict at the same moment.
fn a_retry_is_answered_when_the_hold_is_created(t: &mut Driver) {
    t.run(put_pool("p", 1), T0).ok();
    t.run(reserve("a", &[("p", 1)]), T0).ok();
    let first = t.run(reserve_waiting("w", &[("p", 1)], 5_000), T0).waiter();
    let retry = t
        .run(reserve_waiting("w", &[("p", 1)], 5_000), T0 + 1)
        .waiter();
    let other = t
        .run(reserve_waiting("w", &[("p", 2)], 5_000), T0 + 2)
        .waiter();
    assert_eq!(t.parked(), 3);

    let released = t.run(release("a"), T0 + 10).ok();
    assert_eq!(
        tickets(&released.woken),
        [first, retry, other],
        "{:?}",
        released.woken
    );
    assert!(created(&released.woken[0].1));
    assert!(!created(&released.woken[1].1), "the retry is a replay");
    assert_eq!(
        hold_view(&released.woken[1].1),
        hold_view(&released.woken[0].1)
    );
    assert_eq!(
        released.woken[2].1.as_ref().unwrap_err().code(),
        "hold_id_conflict"
    );
    assert_eq!(t.parked(), 0);
    // Nothing is left to time out.
    assert!(t.tick(T0 + 5_002).woken.is_empty());
}

fn a_waiter_that_cannot_be_satisfied_is_skipped(t: &mut Driver) {
    t.run(put_pool("p", 3), T0).ok();
    t.run(reserve("a", &[("p", 2)]), T0).ok();
    t.run(reserve("b", &[("p", 1)]), T0).ok();
    let big = t
        .run(reserve_waiting("big", &[("p", 3)], 5_000), T0)
        .waiter();
    let small = t
        .run(reserve_waiting("small", &[("p", 1)], 5_000), T0)
        .waiter();

    // One unit back: the first waiter needs three, so it is skipped; the second is served.
    let released = t.run(release("b"), T0 + 1).ok();
    assert_eq!(tickets(&released.woken), [small]);
    assert_eq!(status(&released.woken[0].1), HoldStatus::Held);
    assert_eq!(t.parked(), 1);

    // Nothing is left for a request that does not wait.
    let late = t.run(reserve("late", &[("p", 1)]), T0 + 2);
    assert_eq!(late.outcome(), &insufficient("p", 0, 1));

    // Two more back: still not enough for the big waiter, so a non-waiting request gets them.
    let released = t.run(release("a"), T0 + 3).ok();
    assert!(released.woken.is_empty(), "{:?}", released.woken);
    assert_eq!(t.available("p"), 2);
    t.run(reserve("late", &[("p", 2)]), T0 + 4).ok();

    let timed_out = t.tick(T0 + 5_000);
    assert_eq!(timed_out.woken, [(big, insufficient("p", 0, 3))]);
}

/// Units that come back go to waiters in arrival order, also when the released hold spans
/// several pools and the waiters each want a different subset of them. The cases run one after
/// the other on one target, each on pools of its own.
fn waiters_across_pools_are_served_in_arrival_order(t: &mut Driver) {
    // (the first waiter's items, the second waiter's items), by pool: 0 is p, 1 is q.
    type Items = &'static [(usize, u64)];
    let cases: [(Items, Items); 4] = [
        (&[(0, 1)], &[(0, 1), (1, 1)]),
        (&[(1, 1)], &[(0, 1), (1, 1)]),
        (&[(0, 1)], &[(1, 1), (0, 1)]),
        (&[(1, 1)], &[(1, 1), (0, 1)]),
    ];
    let mut now = T0;
    for (case, (first_items, second_items)) in cases.into_iter().enumerate() {
        let pools = [format!("p{case}"), format!("q{case}")];
        let items = |picked: Items| -> Vec<(&str, u64)> {
            picked
                .iter()
                .map(|(pool, qty)| (pools[*pool].as_str(), *qty))
                .collect()
        };
        let hold = |name: &str| format!("{name}{case}");
        t.run(put_pool(&pools[0], 1), now).ok();
        t.run(put_pool(&pools[1], 1), now).ok();
        t.run(reserve(&hold("a"), &items(&[(0, 1), (1, 1)])), now)
            .ok();
        let first = t
            .run(
                reserve_waiting(&hold("w1"), &items(first_items), 5_000),
                now,
            )
            .waiter();
        let second = t
            .run(
                reserve_waiting(&hold("w2"), &items(second_items), 5_000),
                now,
            )
            .waiter();

        let released = t.run(release(&hold("a")), now + 1).ok();
        assert_eq!(
            tickets(&released.woken),
            [first],
            "first waiter {first_items:?} arrived before {second_items:?} and can be satisfied"
        );
        assert!(released.woken[0].1.is_ok());
        assert_eq!(t.parked(), 1);
        let timed_out = t.tick(now + 5_000);
        assert_eq!(tickets(&timed_out.woken), [second]);
        assert_eq!(
            timed_out.woken[0].1.as_ref().unwrap_err().code(),
            "insufficient_stock"
        );
        now += 5_001;
    }
}

/// Every way units come back serves a parked reserve at once. The cases run one after the other
/// on one target, each on a pool and holds of its own.
fn every_return_of_units_serves_a_waiter(t: &mut Driver) {
    let cases = [
        "release",
        "restock",
        "put pool with a larger total",
        "refund",
        // Past its deadline, the hold expires on the first command that touches it.
        "lazy expiry through a read",
    ];
    let mut now = T0;
    for (case, name) in cases.into_iter().enumerate() {
        let (pool, hold, waiter) = (format!("p{case}"), format!("a{case}"), format!("w{case}"));
        t.run(put_pool(&pool, 2), now).ok();
        t.run(reserve_with(&hold, &[(&pool, 2)], 10_000, 0), now)
            .ok();
        if name == "refund" {
            t.run(confirm(&hold), now).ok();
        }
        let ticket = t
            .run(reserve_waiting(&waiter, &[(&pool, 1)], 30_000), now)
            .waiter();
        let (command, at_ms) = match name {
            "release" => (release(&hold), now + 1),
            "restock" => (restock(&pool, 1), now + 1),
            "put pool with a larger total" => (put_pool(&pool, 3), now + 1),
            "refund" => (refund(&hold), now + 1),
            _ => (get_hold(&hold), now + 10_000),
        };
        let done = t.run(command, at_ms).ok();
        assert_eq!(tickets(&done.woken), [ticket], "{name}: {:?}", done.woken);
        assert_eq!(status(&done.woken[0].1), HoldStatus::Held, "{name}");
        assert_eq!(t.parked(), 0, "{name}");
        now = at_ms + 1;
    }
}

fn deadline_gives_success_when_stock_came_back(t: &mut Driver) {
    // (hold ttl, waiter arrives after, tick after): the hold's deadline is at or before the tick
    // that ends the wait, and the expiry runs before the waiter's final attempt. Times are from
    // the case's start; each case has a pool of its own.
    let mut start = T0;
    for (case, (ttl_ms, waits_from_ms, tick_ms)) in
        [(1_000, 0, 1_000), (1_200, 0, 1_500), (1_000, 100, 1_100)]
            .into_iter()
            .enumerate()
    {
        let (pool, hold, waiter) = (format!("p{case}"), format!("a{case}"), format!("w{case}"));
        t.run(put_pool(&pool, 1), start).ok();
        t.run(reserve_with(&hold, &[(&pool, 1)], ttl_ms, 0), start)
            .ok();
        let ticket = t
            .run(
                reserve_waiting(&waiter, &[(&pool, 1)], 1_000),
                start + waits_from_ms,
            )
            .waiter();
        let done = t.tick(start + tick_ms);
        assert_eq!(tickets(&done.woken), [ticket], "case {case}");
        assert_eq!(status(&done.woken[0].1), HoldStatus::Held, "case {case}");
        assert_eq!(
            done.kinds(),
            [EventKind::Expired, EventKind::Held],
            "case {case}"
        );
        assert_eq!(t.pool(&pool).held, 1, "case {case}");
        start += tick_ms + 1;
    }
}

fn deadline_answers_the_first_failure(t: &mut Driver) {
    t.run(put_pool("p", 1), T0).ok();
    t.run(put_pool("q", 1), T0).ok();
    t.run(reserve("a", &[("p", 1)]), T0).ok();
    t.run(reserve("b", &[("q", 1)]), T0).ok();
    let waiter = t
        .run(reserve_waiting("w", &[("p", 1), ("q", 1)], 2_000), T0)
        .waiter();
    // p comes back but q is still short: the waiter keeps waiting.
    let released = t.run(release("a"), T0 + 1).ok();
    assert!(released.woken.is_empty());
    assert_eq!(t.available("p"), 1);
    let done = t.tick(T0 + 2_000);
    assert_eq!(done.woken, [(waiter, insufficient("q", 0, 1))]);
    assert_eq!(t.available("p"), 1, "a failed attempt changes nothing");
}

fn pool_deletion_answers_its_waiters(t: &mut Driver) {
    t.run(put_pool("p", 1), T0).ok();
    // Sold out (confirmed), so nothing is held and the pool may be deleted.
    t.run(with_confirm(reserve("a", &[("p", 1)])), T0).ok();
    let waiter = t.run(reserve_waiting("w", &[("p", 1)], 5_000), T0).waiter();
    let deleted = t.run(delete_pool("p"), T0 + 1).ok();
    assert_eq!(
        deleted.woken,
        [(waiter, Err(Error::PoolNotFound { pool: pool_id("p") }))]
    );
    assert_eq!(t.parked(), 0);
    assert!(t.tick(T0 + 5_000).woken.is_empty());
}

fn only_a_shortage_parks(t: &mut Driver) {
    t.run(put_pool("p", 1), T0).ok();
    let cases = [
        (
            reserve_waiting("w", &[("nope", 1)], 5_000),
            "pool_not_found",
        ),
        (reserve_waiting("w", &[("p", 0)], 5_000), "invalid_request"),
        (reserve_waiting("w", &[("p", 1)], 30_001), "invalid_request"),
    ];
    for (command, code) in cases {
        assert_eq!(t.run(command, T0).error_code(), Some(code));
    }
    // Enough stock: a waiting reserve is answered at once.
    let done = t.run(reserve_waiting("w", &[("p", 1)], 5_000), T0);
    assert!(created(done.outcome()));
    assert_eq!(t.parked(), 0);
}

fn the_wait_queue_is_bounded(t: &mut Driver) {
    t.run(put_pool("p", 0), T0).ok();
    let first = t
        .run(reserve_waiting("w0", &[("p", 1)], 5_000), T0)
        .waiter();
    for i in 1..WAITERS_PER_KEY_MAX {
        t.run(reserve_waiting(&format!("w{i}"), &[("p", 1)], 5_000), T0)
            .waiter();
    }
    let refused = t.run(reserve_waiting("over", &[("p", 1)], 5_000), T0);
    assert_eq!(refused.outcome(), &insufficient("p", 0, 1));
    // Arrival order still holds with a full queue: one unit goes to the first waiter.
    let restocked = t.run(restock("p", 1), T0 + 1).ok();
    assert_eq!(tickets(&restocked.woken), [first]);
    assert_eq!(hold_view(&restocked.woken[0].1).hold_id, hold_id("w0"));
}

fn lock_waiters_in_arrival_order(t: &mut Driver) {
    let first = t.run(lock_acquire("l", "o1", 1_000, 0), T0);
    let token1 = lock_token(first.outcome());
    assert!(first.events.is_empty(), "locks give no events");

    let w2 = t
        .run(lock_acquire("l", "o2", 2_000, 5_000), T0 + 1)
        .waiter();
    let w3 = t.run(lock_acquire("l", "o3", 500, 5_000), T0 + 2).waiter();

    // Released: the first waiter gets it, with a new, larger token; the second keeps waiting.
    let released = t.run(lock_release("l", "o1", token1), T0 + 10);
    assert_eq!(released.outcome(), &Ok(Reply::LockReleased));
    assert_eq!(tickets(&released.woken), [w2]);
    let token2 = lock_token(&released.woken[0].1);
    assert!(token2 > token1);
    assert_eq!(
        released.woken[0].1,
        Ok(Reply::Lock {
            token: token2,
            expires_at_ms: T0 + 10 + 2_000
        })
    );

    // The old owner lost it for good.
    let stale = t.run(lock_renew("l", "o1", token1, 1_000), T0 + 11);
    assert_eq!(stale.outcome(), &Err(Error::NotLockOwner));

    // o2's lease lapses: the next waiter gets the lock at that tick.
    assert!(t.tick(T0 + 10 + 1_999).woken.is_empty());
    let lapsed = t.tick(T0 + 10 + 2_000);
    assert_eq!(tickets(&lapsed.woken), [w3]);
    let token3 = lock_token(&lapsed.woken[0].1);
    assert!(token3 > token2);
    assert_eq!(
        t.run(lock_release("l", "o2", token2), T0 + 2_011).outcome(),
        &Err(Error::NotLockOwner)
    );

    // A waiter whose wait ends while the lock is still held gets `lock_held`.
    let w4 = t
        .run(lock_acquire("l", "o4", 1_000, 100), T0 + 2_100)
        .waiter();
    let renewed = t.run(lock_renew("l", "o3", token3, 60_000), T0 + 2_150);
    assert_eq!(
        renewed.outcome(),
        &Ok(Reply::Lock {
            token: token3,
            expires_at_ms: T0 + 2_150 + 60_000
        })
    );
    let timed_out = t.tick(T0 + 2_200);
    assert_eq!(
        timed_out.woken,
        [(
            w4,
            Err(Error::LockHeld {
                expires_at_ms: T0 + 2_150 + 60_000
            })
        )]
    );
}
