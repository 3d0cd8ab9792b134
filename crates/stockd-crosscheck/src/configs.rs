//! The configurations the crate's tests explore, as data: which actors, which decisions, which
//! fault budgets. Every one has R1, R2 and the retry R3, the restocker and at least one
//! sweeper. [`bounded`] runs in every `cargo test` (each under a million states);
//! [`long`] (a death and a duplicate together: minutes each, in a release build) when
//! `STOCKD_CROSSCHECK_LONG` is set.

use crate::system::Config;
use crate::world::{Decision, Rules};

/// The base configuration with the design's rules, changed by `change`.
fn fixed(name: &'static str, change: impl FnOnce(&mut Config)) -> Config {
    let mut config = Config::base(name);
    config.rules = Rules::DESIGN;
    change(&mut config);
    config
}

/// The fault budget of one duplicate delivery (no death), with one sweeper.
fn one_duplicate(c: &mut Config) {
    c.deaths_max = 0;
    c.sweepers = 1;
}

/// The fault budget of one death (no duplicate).
fn one_death(c: &mut Config) {
    c.duplicates_max = 0;
}

/// A committed hold released by the client or expired by a sweeper, two flickers of pool B.
fn release_or_expiry(c: &mut Config) {
    c.decisions = &[Decision::Release];
    c.expiry = true;
    c.restocks_max = 2;
}

/// A committed hold confirmed, then refunded, two flickers of pool B.
fn confirm_then_refund(c: &mut Config) {
    c.decisions = &[Decision::Confirm, Decision::Refund];
    c.restocks_max = 2;
}

/// Three partitions (items A, B, C), two flickers of pool B.
fn three_partitions(c: &mut Config) {
    c.partitions = 3;
    c.restocks_max = 2;
}

/// Two partitions, the hold id hashing to another partition than home (`x_attempt`), one
/// duplicate delivery, one sweeper.
pub fn elsewhere_duplicate() -> Config {
    fixed("hold id elsewhere, 1 duplicate", one_duplicate)
}

/// The same, one death instead of the duplicate, two sweepers.
pub fn elsewhere_death() -> Config {
    fixed("hold id elsewhere, 1 death, 2 sweepers", |c| {
        one_death(c);
        c.restocks_max = 2;
    })
}

/// The same, one death, and the client retries once a copy died (connection closed).
pub fn elsewhere_retry_after_death() -> Config {
    fixed("hold id elsewhere, retry after a death", |c| {
        one_death(c);
        c.retry_after_death = true;
        c.sweepers = 1;
        c.restocks_max = 2;
    })
}

/// Two partitions, the hold id hashing to home (`x_begin` numbers the attempt), one duplicate.
pub fn home_duplicate() -> Config {
    fixed("hold id at home, 1 duplicate", |c| {
        c.counter_at_home = true;
        one_duplicate(c);
    })
}

/// The same, one death instead of the duplicate, two sweepers.
pub fn home_death() -> Config {
    fixed("hold id at home, 1 death, 2 sweepers", |c| {
        c.counter_at_home = true;
        one_death(c);
        c.restocks_max = 2;
    })
}

/// A committed hold released by the client or expired by a sweeper, one duplicate.
pub fn release_duplicate() -> Config {
    fixed("release or expiry, 1 duplicate", |c| {
        release_or_expiry(c);
        one_duplicate(c);
    })
}

/// The same, one death instead of the duplicate.
pub fn release_death() -> Config {
    fixed("release or expiry, 1 death", |c| {
        release_or_expiry(c);
        one_death(c);
        c.sweepers = 1;
    })
}

/// A committed hold confirmed, then refunded, one duplicate.
pub fn confirm_refund_duplicate() -> Config {
    fixed("confirm then refund, 1 duplicate", |c| {
        confirm_then_refund(c);
        one_duplicate(c);
    })
}

/// A `confirm: true` reserve, then refunded without restock (`writeoff`), one death.
pub fn confirmed_writeoff_death() -> Config {
    fixed("confirm: true, refund without restock, 1 death", |c| {
        c.confirm_on_commit = true;
        c.decisions = &[Decision::RefundWithoutRestock];
        one_death(c);
        c.sweepers = 1;
        c.restocks_max = 2;
    })
}

/// Three partitions (items A, B, C), one duplicate.
pub fn three_partitions_duplicate() -> Config {
    fixed("3 partitions, 1 duplicate", |c| {
        three_partitions(c);
        one_duplicate(c);
    })
}

/// Three partitions, one death.
pub fn three_partitions_death() -> Config {
    fixed("3 partitions, 1 death", |c| {
        three_partitions(c);
        one_death(c);
        c.sweepers = 1;
    })
}

/// Two partitions, the hold id elsewhere, under `rules`, with the copies of the request alone: no
/// sweeper, no death, and no quiescence check (with no sweeper, nothing would finish what a
/// copy left). For the tests that show a rule's defect with as little as can show it.
pub fn copies_only(name: &'static str, rules: Rules) -> Config {
    let mut config = Config::base(name);
    config.rules = rules;
    config.sweepers = 0;
    config.check_quiescence = false;
    config.deaths_max = 0;
    config
}

/// Every configuration of `cargo test`.
pub fn bounded() -> Vec<Config> {
    vec![
        elsewhere_duplicate(),
        elsewhere_death(),
        elsewhere_retry_after_death(),
        home_duplicate(),
        home_death(),
        release_duplicate(),
        release_death(),
        confirm_refund_duplicate(),
        confirmed_writeoff_death(),
        three_partitions_duplicate(),
        three_partitions_death(),
    ]
}

/// A death and a duplicate together: two sweepers and three flickers of pool B, or one of
/// them fewer where that would pass 20 million states.
pub fn long() -> Vec<Config> {
    vec![
        fixed("long: hold id elsewhere", |_| {}),
        fixed("long: hold id at home", |c| {
            c.counter_at_home = true;
        }),
        fixed("long: release or expiry", release_or_expiry),
        fixed("long: confirm then refund, 1 sweeper", |c| {
            confirm_then_refund(c);
            c.sweepers = 1;
        }),
        fixed("long: 3 partitions, 1 sweeper", |c| {
            three_partitions(c);
            c.sweepers = 1;
        }),
    ]
}
