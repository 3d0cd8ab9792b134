//! Refunds and pool deletion: a refund with restock puts the units back, one without takes them
//! out of the pool; only a confirmed hold is refunded, and only while its pools are the ones it
//! sold from (a pool deleted and created again is a new pool); a pool with held units cannot be
//! deleted, one with sold units can; pool events carry what a consumer needs to keep a pool's
//! numbers from the feed alone.
//!
//! Error codes are written out on purpose: these rules are an independent oracle of the contract.

use stockd_core::{Error, Event, EventKind, HoldStatus, PoolView, Reply};

use super::commands::*;
use super::{Done, Driver, Scenario, T0};

/// The refund and pool scenarios, by name.
pub const SCENARIOS: &[(&str, Scenario)] = &[
    (
        "a refund without restock takes the units out of the pool",
        refund_without_restock_takes_the_units_out_of_the_pool,
    ),
    (
        "a refund with restock puts the units back and says so",
        refund_with_restock_puts_the_units_back_and_says_so,
    ),
    (
        "a refund of a hold not confirmed changes nothing",
        refund_of_a_hold_not_confirmed_changes_nothing,
    ),
    (
        "a refund after its pool was deleted and created again is pool_deleted",
        refund_after_pool_delete_and_recreate_is_pool_deleted,
    ),
    (
        "a pool with held units cannot be deleted, one with sold units can",
        pool_with_held_units_cannot_be_deleted_but_one_with_sold_units_can,
    ),
    (
        "pool events carry deltas and a deleted pool its last numbers",
        pool_events_carry_deltas_and_a_deleted_pool_its_last_numbers,
    ),
];

fn numbers(pool: &PoolView) -> (u64, u64, u64, u64) {
    (pool.total, pool.available, pool.held, pool.sold)
}

fn hold_status(t: &mut Driver, hold: &str, now_ms: u64) -> HoldStatus {
    status(t.run(get_hold(hold), now_ms).outcome())
}

fn refund_without_restock_takes_the_units_out_of_the_pool(t: &mut Driver) {
    t.run(put_pool("p", 10), T0).ok();
    t.run(put_pool("q", 10), T0).ok();
    let sold = with_user(with_confirm(reserve("h", &[("p", 3), ("q", 2)])), "u");
    t.run(sold, T0).ok();
    let done = t.run(refund_without_restock("h"), T0 + 1).ok();
    assert_eq!(status(done.outcome()), HoldStatus::Refunded);
    assert_eq!(done.kinds(), [EventKind::Refunded]);
    assert_eq!(done.events[0].restock, Some(false));
    assert_eq!(numbers(&t.pool("p")), (7, 7, 0, 0));
    assert_eq!(numbers(&t.pool("q")), (8, 8, 0, 0));
    assert_eq!(hold_status(t, "h", T0 + 1), HoldStatus::Refunded);
    // A repeat, with or without restock, answers the hold and changes nothing.
    for again in [refund("h"), refund_without_restock("h")] {
        let name = format!("{again:?}");
        let repeat = t.run(again, T0 + 2).ok();
        assert_eq!(status(repeat.outcome()), HoldStatus::Refunded, "{name}");
        assert!(repeat.events.is_empty(), "{name}");
        assert_eq!(numbers(&t.pool("p")), (7, 7, 0, 0), "{name}");
        assert_eq!(numbers(&t.pool("q")), (8, 8, 0, 0), "{name}");
    }
}

fn refund_with_restock_puts_the_units_back_and_says_so(t: &mut Driver) {
    t.run(put_pool("p", 10), T0).ok();
    t.run(with_confirm(reserve("h", &[("p", 3)])), T0).ok();
    let done = t.run(refund("h"), T0 + 1).ok();
    assert_eq!(done.kinds(), [EventKind::Refunded]);
    assert_eq!(done.events[0].restock, Some(true));
    assert_eq!(numbers(&t.pool("p")), (10, 10, 0, 0));
}

fn refund_of_a_hold_not_confirmed_changes_nothing(t: &mut Driver) {
    t.run(put_pool("p", 10), T0).ok();
    t.run(reserve("h", &[("p", 3)]), T0).ok();
    for command in [refund_without_restock("h"), refund("h")] {
        let name = format!("{command:?}");
        let done = t.run(command, T0 + 1);
        assert_eq!(done.error_code(), Some("hold_not_confirmed"), "{name}");
        assert!(done.events.is_empty(), "{name}");
        assert_eq!(numbers(&t.pool("p")), (10, 7, 3, 0), "{name}");
        assert_eq!(hold_status(t, "h", T0 + 1), HoldStatus::Held, "{name}");
    }
}

fn refund_after_pool_delete_and_recreate_is_pool_deleted(t: &mut Driver) {
    t.run(put_pool("p", 5), T0).ok();
    t.run(put_pool("q", 5), T0).ok();
    t.run(with_confirm(reserve("h", &[("q", 1), ("p", 2)])), T0)
        .ok();
    t.run(delete_pool("p"), T0 + 1).ok();
    let expected = Err(Error::PoolDeleted { pool: pool_id("p") });
    let refused = t.run(refund("h"), T0 + 2);
    assert_eq!(refused.outcome(), &expected);
    assert!(refused.events.is_empty());
    t.run(put_pool("p", 5), T0 + 3).ok();
    for command in [refund("h"), refund_without_restock("h")] {
        let name = format!("{command:?}");
        let refused = t.run(command, T0 + 4);
        assert_eq!(
            refused.outcome(),
            &expected,
            "{name}: a pool created again is a new pool"
        );
        assert!(refused.events.is_empty(), "{name}");
        assert_eq!(numbers(&t.pool("p")), (5, 5, 0, 0), "{name}");
        assert_eq!(
            numbers(&t.pool("q")),
            (5, 4, 0, 1),
            "{name}: nothing changes anywhere"
        );
        assert_eq!(hold_status(t, "h", T0 + 4), HoldStatus::Confirmed, "{name}");
    }
    // Confirming again is still the idempotent answer.
    let again = t.run(confirm("h"), T0 + 5);
    assert_eq!(status(again.outcome()), HoldStatus::Confirmed);
    assert!(again.events.is_empty());
}

fn pool_with_held_units_cannot_be_deleted_but_one_with_sold_units_can(t: &mut Driver) {
    t.run(put_pool("p", 5), T0).ok();
    t.run(reserve("h", &[("p", 2)]), T0).ok();
    let refused = t.run(delete_pool("p"), T0);
    assert_eq!(
        refused.outcome(),
        &Err(Error::PoolHasActiveHolds {
            pool: pool_id("p"),
            held: 2
        })
    );
    assert!(refused.events.is_empty());
    assert_eq!(numbers(&t.pool("p")), (5, 3, 2, 0));
    t.run(confirm("h"), T0).ok();
    let deleted = t.run(delete_pool("p"), T0).ok();
    assert_eq!(deleted.outcome(), &Ok(Reply::PoolDeleted));
    assert_eq!(deleted.kinds(), [EventKind::PoolDeleted]);
    assert_eq!(
        t.run(get_pool("p"), T0).outcome(),
        &Err(Error::PoolNotFound { pool: pool_id("p") })
    );
}

/// `pool_upserted` carries the change of total (`delta`) and `pool_deleted` the pool's last total
/// and available, so that a consumer can keep a pool's numbers by adding deltas alone.
fn pool_events_carry_deltas_and_a_deleted_pool_its_last_numbers(t: &mut Driver) {
    fn pool_event(done: &Done, kind: EventKind) -> (Option<i64>, Option<u64>, Option<u64>) {
        let [event]: &[Event; 1] = done
            .events
            .as_slice()
            .try_into()
            .unwrap_or_else(|_| panic!("one event, got {:?}", done.events));
        assert_eq!(event.kind, kind);
        assert_eq!(event.pool, Some(pool_id("p")));
        (event.delta, event.total, event.available)
    }
    let upserted = EventKind::PoolUpserted;
    // A create moves total from nothing: the delta is the total.
    let created = t.run(put_pool("p", 5), T0).ok();
    assert_eq!(pool_event(&created, upserted), (Some(5), Some(5), Some(5)));
    t.run(with_confirm(reserve("h", &[("p", 2)])), T0).ok();
    let raised = t.run(put_pool("p", 8), T0 + 1).ok();
    assert_eq!(pool_event(&raised, upserted), (Some(3), Some(8), Some(6)));
    let lowered = t.run(put_pool("p", 4), T0 + 2).ok();
    assert_eq!(pool_event(&lowered, upserted), (Some(-4), Some(4), Some(2)));
    let same = t.run(put_pool("p", 4), T0 + 3).ok();
    assert_eq!(pool_event(&same, upserted), (Some(0), Some(4), Some(2)));
    // Deleted with 2 units sold: its last total and available, no delta.
    let deleted = t.run(delete_pool("p"), T0 + 4).ok();
    assert_eq!(
        pool_event(&deleted, EventKind::PoolDeleted),
        (None, Some(4), Some(2))
    );
    // Created again, it starts from nothing: the deleted pool's total is not the old one.
    let again = t.run(put_pool("p", 3), T0 + 5).ok();
    assert_eq!(pool_event(&again, upserted), (Some(3), Some(3), Some(3)));
}
