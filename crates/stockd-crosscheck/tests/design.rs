//! The design of docs/redis.md ("Holds over several partitions"), explored exhaustively in each
//! configuration of `stockd_crosscheck::configs`: no invariant may fail. Each test prints its
//! report (states, transitions, ends, depth, time): `cargo test -p stockd-crosscheck -- --nocapture`.
//!
//! Also the one hole this model found in the design as first written (`late_begin`), fixed
//! since: the tests show the checker finds it with the fix taken out.

use stockd_crosscheck::{check, configs, Config, Invariant, Rules};

fn assert_no_violation(config: Config) {
    let report = check(config);
    println!("{report}");
    assert!(report.complete(), "{report}");
    assert!(report.ends > 0, "no end was reached: {report}");
}

#[test]
fn elsewhere_duplicate() {
    assert_no_violation(configs::elsewhere_duplicate());
}

#[test]
fn elsewhere_death() {
    assert_no_violation(configs::elsewhere_death());
}

#[test]
fn elsewhere_retry_after_death() {
    assert_no_violation(configs::elsewhere_retry_after_death());
}

#[test]
fn home_duplicate() {
    assert_no_violation(configs::home_duplicate());
}

#[test]
fn home_death() {
    assert_no_violation(configs::home_death());
}

#[test]
fn release_duplicate() {
    assert_no_violation(configs::release_duplicate());
}

#[test]
fn release_death() {
    assert_no_violation(configs::release_death());
}

#[test]
fn confirm_refund_duplicate() {
    assert_no_violation(configs::confirm_refund_duplicate());
}

#[test]
fn confirmed_writeoff_death() {
    assert_no_violation(configs::confirmed_writeoff_death());
}

#[test]
fn three_partitions_duplicate() {
    assert_no_violation(configs::three_partitions_duplicate());
}

#[test]
fn three_partitions_death() {
    assert_no_violation(configs::three_partitions_death());
}

/// The long configurations, when `STOCKD_CROSSCHECK_LONG` is set (minutes in a release build):
/// `STOCKD_CROSSCHECK_LONG=1 cargo test -p stockd-crosscheck --release --test design long -- --nocapture`
#[test]
fn long() {
    if std::env::var_os("STOCKD_CROSSCHECK_LONG").is_none() {
        return;
    }
    let mut failed = Vec::new();
    for config in configs::long() {
        let report = check(config);
        println!("{report}");
        if !report.complete() || report.ends == 0 {
            failed.push(report.name);
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
}

/// The hole this model found in the design as first written (`Rules::FIRST_DESIGN`), kept as a
/// regression test: the checker finds it when `x_forget(A)` does not mark A dead.
///
/// When the hold id hashes to another partition than home, `x_begin(A)` carries its attempt
/// number, and on an absent record it makes `pending(A)` whatever A is, unless `xdead` (which
/// only the orphan sweep writes) forbids it. So a duplicate of `x_begin(A)` delivered after A
/// was rolled back and forgotten makes `pending(A)` again, and a late `x_commit(A)` of the copy
/// that was still running commits it: a held hold whose every part was returned, its units on
/// sale again. Two copies of one request and one duplicated step suffice; no server dies, no
/// sweeper runs. The fix, now in the design (`Rules::DESIGN`, explored by every configuration
/// above) and in lua/cross.lua: `x_forget(A)` writes `xdead = A` too.
#[test]
fn late_begin_revives_a_rolled_back_attempt_in_the_design_as_written() {
    let config = configs::copies_only(
        "first design, hold id elsewhere, copies only, 1 duplicate",
        Rules::FIRST_DESIGN,
    );
    let report = check(config);
    println!("{report}");
    let trace = report
        .counterexample()
        .expect("the first design lets a late x_begin revive a rolled-back attempt");
    assert_eq!(trace.breach.invariant, Invariant::CommittedParts);
    let begin = trace
        .step_index(
            0,
            "x_begin(1) at P0 -> begun(1) [and delivered once more, later]",
        )
        .expect("x_begin(1) duplicated");
    let forget = trace
        .step_index(begin, "x_forget(1) at P0")
        .expect("attempt 1 rolled back and forgotten");
    let revived = trace
        .step_index(forget, "network: x_begin(1) at P0 -> begun(1)")
        .expect("the duplicate makes pending(1) again");
    let last = trace.steps.last().expect("a trace has steps");
    assert!(revived < trace.steps.len() - 1);
    assert!(
        last.label.contains("x_commit(1) at P0 -> committed"),
        "{}",
        last.label
    );

    // With the fix, the same world has no violation.
    let fixed = configs::copies_only(
        "fixed, hold id elsewhere, copies only, 1 duplicate",
        Rules::DESIGN,
    );
    let report = check(fixed);
    println!("{report}");
    assert!(report.complete(), "{report}");
}

/// The same hole with a sweeper (and everything else of `elsewhere_duplicate`): the sweeper's
/// roll back does what the second copy did.
#[test]
fn late_begin_is_found_in_the_full_configuration_too() {
    let mut config = configs::elsewhere_duplicate();
    config.rules = Rules::FIRST_DESIGN;
    let report = check(config);
    println!("{report}");
    let trace = report.counterexample().expect("the hole is found");
    assert_eq!(trace.breach.invariant, Invariant::CommittedParts);
    assert!(trace.has_step("network: x_begin(1) at P0 -> begun(1)"));
}
