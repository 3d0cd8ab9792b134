//! Locks without waiting (waiters are in `waits.rs`): fencing tokens strictly increase per name,
//! whatever freed the lock (a release, a lease lapsed with or without a sweep); renew and release
//! need the owner and the token of the live lease.
//!
//! Error codes are written out on purpose: these rules are an independent oracle of the contract.

use stockd_core::{Error, Reply};

use super::commands::*;
use super::{Driver, Scenario, T0};

/// The lock scenarios, by name.
pub const SCENARIOS: &[(&str, Scenario)] = &[
    (
        "fencing tokens strictly increase per name across releases and lapses",
        fencing_tokens_strictly_increase_per_name,
    ),
    (
        "lock renew and release need the owner and the token",
        lock_renew_and_release_need_owner_and_token,
    ),
];

/// Acquires `name` and checks its token is above every earlier one of that name.
fn acquire_fenced(t: &mut Driver, name: &str, owner: &str, at_ms: u64, seen: &mut Vec<u64>) {
    let done = t.run(lock_acquire(name, owner, 1_000, 0), at_ms);
    let token = lock_token(done.outcome());
    if let Some(last) = seen.last() {
        assert!(token > *last, "token {token} after {last}");
    }
    seen.push(token);
    assert!(done.events.is_empty(), "locks give no events");
}

fn fencing_tokens_strictly_increase_per_name(t: &mut Driver) {
    let mut seen = Vec::new();
    acquire_fenced(t, "l", "o1", T0, &mut seen);
    // Another name's acquisitions do not get in the way.
    lock_token(t.run(lock_acquire("other", "o1", 1_000, 0), T0).outcome());
    assert_eq!(
        t.run(lock_acquire("l", "o1", 1_000, 0), T0 + 1)
            .error_code(),
        Some("lock_held"),
        "acquiring a lock one holds is lock_held"
    );
    t.run(lock_release("l", "o1", seen[0]), T0 + 2).ok();
    acquire_fenced(t, "l", "o1", T0 + 3, &mut seen);
    // Lapsed without any sweep: free by the clock, and a new token.
    acquire_fenced(t, "l", "o2", T0 + 1_003, &mut seen);
    // Lapsed and swept.
    t.tick(T0 + 2_003);
    acquire_fenced(t, "l", "o1", T0 + 2_003, &mut seen);
}

fn lock_renew_and_release_need_owner_and_token(t: &mut Driver) {
    let token = lock_token(t.run(lock_acquire("l", "o1", 1_000, 0), T0).outcome());
    let refused = [
        (lock_renew("l", "o2", token, 1_000), T0 + 1),
        (lock_renew("l", "o1", token + 1, 1_000), T0 + 1),
        (lock_release("l", "o2", token), T0 + 1),
        (lock_release("l", "o1", token - 1), T0 + 1),
        (lock_release("nope", "o1", token), T0 + 1),
    ];
    for (command, at_ms) in refused {
        let name = format!("{command:?}");
        assert_eq!(
            t.run(command, at_ms).outcome(),
            &Err(Error::NotLockOwner),
            "{name}"
        );
    }
    // The refusals changed nothing: the owner renews with its token just before the end.
    let renewed = t.run(lock_renew("l", "o1", token, 2_000), T0 + 999);
    assert_eq!(
        renewed.outcome(),
        &Ok(Reply::Lock {
            token,
            expires_at_ms: T0 + 2_999
        })
    );
    // At the end of the lease it is free: the old owner cannot act on it.
    for command in [
        lock_renew("l", "o1", token, 1_000),
        lock_release("l", "o1", token),
    ] {
        let name = format!("{command:?}");
        assert_eq!(
            t.run(command, T0 + 2_999).outcome(),
            &Err(Error::NotLockOwner),
            "{name}"
        );
    }
}
