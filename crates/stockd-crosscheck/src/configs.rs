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

/// Two partitions, the hold id hashing to another partition than home (`x_attempt`), one
/// duplicate delivery, one sweeper.
pub fn elsewhere_duplicate() -> Config {
    fixed("hold id elsewhere, 1 duplicate", |c| {
        c.deaths_max = 0;
        c.sweepers = 1;
    })
}

/// The same, one death instead of the duplicate, two sweepers.
pub fn elsewhere_death() -> Config {
    fixed("hold id elsewhere, 1 death, 2 sweepers", |c| {
        c.duplicates_max = 0;
        c.restocks_max = 2;
    })
}

/// The same, one death, and the client retries once a copy died (connection closed).
pub fn elsewhere_retry_after_death() -> Config {
    fixed("hold id elsewhere, retry after a death", |c| {
        c.duplicates_max = 0;
        c.sweepers = 1;
        c.retry_after_death = true;
    })
}

/// Two partitions, the hold id hashing to home (`x_begin` numbers the attempt), one duplicate.
pub fn home_duplicate() -> Config {
    fixed("hold id at home, 1 duplicate", |c| {
        c.counter_at_home = true;
        c.deaths_max = 0;
        c.sweepers = 1;
    })
}

/// The same, one death instead of the duplicate, two sweepers.
pub fn home_death() -> Config {
    fixed("hold id at home, 1 death, 2 sweepers", |c| {
        c.counter_at_home = true;
        c.duplicates_max = 0;
        c.restocks_max = 2;
    })
}

/// A committed hold released by the client or expired by a sweeper, one duplicate.
pub fn release_duplicate() -> Config {
    fixed("release or expiry, 1 duplicate", |c| {
        c.decisions = &[Decision::Release];
        c.expiry = true;
        c.deaths_max = 0;
        c.sweepers = 1;
        c.restocks_max = 2;
    })
}

/// The same, one death instead of the duplicate.
pub fn release_death() -> Config {
    fixed("release or expiry, 1 death", |c| {
        c.decisions = &[Decision::Release];
        c.expiry = true;
        c.duplicates_max = 0;
        c.sweepers = 1;
        c.restocks_max = 2;
    })
}

/// A committed hold confirmed, then refunded, one duplicate.
pub fn confirm_refund_duplicate() -> Config {
    fixed("confirm then refund, 1 duplicate", |c| {
        c.decisions = &[Decision::Confirm, Decision::Refund];
        c.deaths_max = 0;
        c.sweepers = 1;
        c.restocks_max = 2;
    })
}

/// A `confirm: true` reserve, then refunded without restock (`writeoff`), one death.
pub fn confirmed_writeoff_death() -> Config {
    fixed("confirm: true, refund without restock, 1 death", |c| {
        c.confirm_on_commit = true;
        c.decisions = &[Decision::RefundWithoutRestock];
        c.duplicates_max = 0;
        c.sweepers = 1;
        c.restocks_max = 2;
    })
}

/// Three partitions (items A, B, C), one duplicate.
pub fn three_partitions_duplicate() -> Config {
    fixed("3 partitions, 1 duplicate", |c| {
        c.partitions = 3;
        c.deaths_max = 0;
        c.sweepers = 1;
        c.restocks_max = 2;
    })
}

/// Three partitions, one death.
pub fn three_partitions_death() -> Config {
    fixed("3 partitions, 1 death", |c| {
        c.partitions = 3;
        c.duplicates_max = 0;
        c.sweepers = 1;
        c.restocks_max = 2;
    })
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
        fixed("long: release or expiry", |c| {
            c.decisions = &[Decision::Release];
            c.expiry = true;
            c.restocks_max = 2;
        }),
        fixed("long: confirm then refund, 1 sweeper", |c| {
            c.decisions = &[Decision::Confirm, Decision::Refund];
            c.restocks_max = 2;
            c.sweepers = 1;
        }),
        fixed("long: 3 partitions, 1 sweeper", |c| {
            c.partitions = 3;
            c.restocks_max = 2;
            c.sweepers = 1;
        }),
    ]
}
