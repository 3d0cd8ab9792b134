//! The pool-op protocol of segmented pools (`stockd_crosscheck::poolop`), explored
//! exhaustively: no invariant may fail with the design's rules, and each rule taken out breaks
//! one, so that each is shown to be needed.

use stockd_crosscheck::explore;
use stockd_crosscheck::poolop::{Config, PoolOps, Rules};

const STATE_LIMIT: usize = 5_000_000;

fn config(name: &'static str, rules: Rules) -> Config {
    Config {
        name,
        rules,
        available: [1, 1],
        duplicates: 1,
        deaths: 1,
        reserves: 1,
        releases: 1,
        shrink: true,
        sweeps: 1,
    }
}

#[test]
fn a_rebalance_and_a_total_decrease_with_a_duplicate_and_a_death() {
    let report = explore(
        &PoolOps::new(config("design", Rules::DESIGN)),
        "design",
        STATE_LIMIT,
    );
    println!("{report}");
    assert!(report.complete(), "{report}");
    assert!(report.ends > 0, "no end was reached: {report}");
}

#[test]
fn reserves_under_a_freeze_would_break_a_plan() {
    let rules = Rules {
        freeze_blocks_reserves: false,
        ..Rules::DESIGN
    };
    let report = explore(
        &PoolOps::new(config("no freeze", rules)),
        "no freeze",
        STATE_LIMIT,
    );
    let found = report
        .counterexample()
        .unwrap_or_else(|| panic!("{report}"));
    println!("{found}");
    assert_eq!(found.breach.invariant, "no count negative", "{found}");
}

#[test]
fn steps_not_fenced_by_op_apply_twice() {
    let rules = Rules {
        fence_by_op: false,
        ..Rules::DESIGN
    };
    let report = explore(
        &PoolOps::new(config("no fence", rules)),
        "no fence",
        STATE_LIMIT,
    );
    let found = report
        .counterexample()
        .unwrap_or_else(|| panic!("{report}"));
    println!("{found}");
    assert_eq!(found.breach.invariant, "applied once", "{found}");
}
