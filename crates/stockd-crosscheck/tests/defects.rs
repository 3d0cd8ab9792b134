//! The checker finds the defects the design's rules prevent: with a rule switched off, it
//! reports a violation and prints the trace as readable steps.

use stockd_crosscheck::{check, configs, Invariant, Rules};

/// `part_apply(return, A)` that returns a held part of any attempt, as the library did before
/// attempts were fences: the outside run's oversell. Two copies of one request share attempt 1,
/// both are refused by pool B and both roll it back; the first finishes and answers, the
/// client's retry takes pool A's unit under a newer attempt, the second copy's late return of
/// attempt 1 gives that unit back, and the retry commits a hold whose part is returned.
#[test]
fn return_of_any_attempt_is_the_outside_runs_oversell() {
    let mut config = configs::copies_only(
        "part_apply(return) without its attempt check, copies only",
        Rules {
            return_checks_attempt: false,
            ..Rules::DESIGN
        },
    );
    config.duplicates_max = 0;
    // Invariant 3 would stop the trace at the late return itself: let it run to the commit.
    config.unchecked = &[Invariant::AttemptFence];
    let report = check(config);
    println!("{report}");
    let trace = report.counterexample().expect("the oversell is found");
    assert_eq!(trace.breach.invariant, Invariant::CommittedParts);
    let first_abort = trace
        .step_index(0, "x_abort(1) at P0 -> aborting(1)")
        .expect("a copy rolls back attempt 1");
    let second_abort = trace
        .step_index(first_abort + 1, "x_abort(1) at P0 -> aborting(1)")
        .expect("the other copy rolls back attempt 1 too");
    assert_ne!(
        trace.steps[first_abort].label[..2],
        trace.steps[second_abort].label[..2],
        "two different copies roll back"
    );
    let retry_takes = trace
        .step_index(second_abort, "R3 (retry): part_reserve(3) in P0 -> ok")
        .expect("the retry's newer attempt takes pool A's unit");
    let late_return = trace
        .step_index(retry_takes, "part_apply(return, 1) in P0")
        .expect("the late roller returns it");
    assert!(trace.steps[late_return]
        .state
        .contains("P0 part returned(3)"));
    let last = trace.steps.last().expect("a trace has steps");
    assert!(
        last.label
            .starts_with("R3 (retry): x_commit(3) at P0 -> committed"),
        "{}",
        last.label
    );
}

/// The same switch in a full configuration (a sweeper, a duplicate, every invariant): found.
#[test]
fn return_of_any_attempt_is_found_with_every_invariant() {
    let mut config = configs::elsewhere_duplicate();
    config.rules.return_checks_attempt = false;
    let report = check(config);
    println!("{report}");
    let trace = report.counterexample().expect("a violation is found");
    assert!(
        trace.breach.what.contains("returned the units of attempt"),
        "{}",
        trace.breach
    );
}

/// `part_reserve(A)` without its `hi` check: a late `part_reserve` of an old attempt replaces
/// the finished part of a newer attempt (the tombstone its roll back left, or the returned part
/// of its released or expired hold) and takes units for an attempt rolled back long ago: an
/// orphan that only the orphan sweep would give back.
#[test]
fn reserve_without_highest_replaces_a_newer_attempts_part() {
    let mut config = configs::release_duplicate();
    config.rules.reserve_checks_highest = false;
    // Without the quiescence check the trace ends at the violating step itself, not in the
    // sweepers' run from a state just before it.
    config.check_quiescence = false;
    let report = check(config);
    println!("{report}");
    let trace = report.counterexample().expect("a violation is found");
    assert_eq!(trace.breach.invariant, Invariant::Orphan);
    assert!(
        trace.breach.what.contains("held by attempt 1"),
        "{}",
        trace.breach
    );
    let last = trace.steps.last().expect("a trace has steps");
    assert!(
        last.label.contains("part_reserve(1) in P") && last.label.ends_with("-> ok"),
        "{}",
        last.label
    );
    let before = &trace.steps[trace.steps.len() - 2].state;
    assert!(
        before.contains("part returned(2)") || before.contains("part returned(3)"),
        "the part taken over was a newer attempt's: {before}"
    );
}
