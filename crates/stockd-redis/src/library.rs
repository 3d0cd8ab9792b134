//! The Lua function library: the second implementation of stockd-core's rules, loaded into every
//! Redis primary as the library named `LIBRARY_NAME`.
//!
//! The files under `lua/` mirror `stockd-core/src/state/` file for file (`state.lua`,
//! `apply.lua`, `waiters.lua`, `tick.lua`, `cmd/<command>.lua`); `cross.lua` (the cross-partition
//! protocol) and `main.lua` (entry points) are Redis's own. They are concatenated here in a fixed
//! order into one library, since a Redis function library is one source, after a prelude that
//! writes every number the library is written with (`constants`: the limits it shares with
//! stockd-core, from `stockd_core::limits`, and its own bounds and timings, declared here so that
//! tests read the same values). This module only assembles and names it; it decides nothing.

/// The library's name, which every function name carries. A server refuses a dataset whose
/// marker names a layout it does not know. A release that changes any line of the Lua ships it
/// under a new name (and `RELEASED` below records the source each name stands for), so servers
/// of the old and the new version run side by side during a rolling upgrade, each calling its own
/// functions: a `FUNCTION LOAD REPLACE` of one name never changes the code under a running server
/// of another version.
macro_rules! library_name {
    () => {
        "stockd_v11"
    };
}

pub const LIBRARY_NAME: &str = library_name!();
/// The key layouts this library reads and writes (a dataset keeps the one it was made in), and
/// the one a new dataset is made in (`S.NEW_LAYOUT` in main.lua). Layout 2 writes a call's
/// events as one stream entry.
pub const LAYOUTS: &[&str] = &["1", "2"];

pub const FN_CALL: &str = concat!(library_name!(), "_call");
pub const FN_EVENTS: &str = concat!(library_name!(), "_events");
pub const FN_INIT: &str = concat!(library_name!(), "_init");
pub const FN_ACCEPT: &str = concat!(library_name!(), "_accept");

/// Every library name released, with the FNV-1a 64 hash of the source it stands for
/// (`source_hash`). Append-only once a name has landed on main (and so may run in a fleet): a
/// test holds the source to the hash of its name, so a changed Lua without a new name fails the
/// build's tests. `stockd_v1` and `stockd_v2` predate the hash.
pub const RELEASED: &[(&str, u64)] = &[
    ("stockd_v3", 16873764098804715861),
    ("stockd_v4", 486842820378311793),
    ("stockd_v5", 12826422988549671740),
    ("stockd_v6", 10549540710608719138),
    ("stockd_v7", 4524167667604329455),
    ("stockd_v8", 15751764587899780863),
    ("stockd_v9", 1510726880974697431),
    ("stockd_v10", 16204500529167765093),
    ("stockd_v11", 13269682818845349821),
];

/// `(name, text)` of each file under `lua/`, the text compiled in.
macro_rules! lua_sources {
    ($($file:literal),* $(,)?) => {
        [$(($file, include_str!(concat!("../lua/", $file)))),*]
    };
}

/// The library's source files, in load order: the state and its transitions first (they
/// define the tables the others add to), then one file per command, mirroring
/// `stockd-core/src/state/` file for file, then the Redis-only protocol and entry points.
pub const SOURCES: [(&str, &str); 19] = lua_sources![
    "state.lua",
    "apply.lua",
    "waiters.lua",
    "tick.lua",
    "cmd/put_pool.lua",
    "cmd/restock.lua",
    "cmd/delete_pool.lua",
    "cmd/reads.lua",
    "cmd/reserve.lua",
    "cmd/confirm.lua",
    "cmd/release.lua",
    "cmd/refund.lua",
    "cmd/extend.lua",
    "cmd/lock_acquire.lua",
    "cmd/lock_renew.lua",
    "cmd/lock_release.lua",
    "cross.lua",
    "segments.lua",
    "main.lua",
];

// The library's own bounds and timings: no other part of stockd has them, but tests (the
// simulation moves its clock past them) must know them, so they are declared here and written
// into the library like the limits it shares with the core (`prelude`).

/// Holds one sweep call expires at most (the core's tick has its own, larger bound: one Redis
/// call must stay short, since nothing else runs on that primary meanwhile).
pub const EXPIRIES_PER_SWEEP_MAX: u64 = 1_000;
/// Hold records forgotten past retention per sweep call.
pub const FORGETS_PER_SWEEP_MAX: u64 = 1_000;
/// How long after its retention a forgotten hold's key still takes memory (its expiry, a
/// duration, so that it does not depend on which clock `now` came from).
pub const FORGOTTEN_KEY_MARGIN_MS: u64 = 3_600_000;
/// How much longer than the longer retention a hold's directory entry lives: the hold's longest
/// lifetime before it finishes (`HOLD_TTL_MS_MAX`, an extend goes through the entry too) and an
/// hour more.
pub const DIR_EXTRA_MS: u64 = stockd_core::limits::HOLD_TTL_MS_MAX + 3_600_000;
/// How long a call's answer is kept under its call id, so that a Cluster client sending the call
/// twice gets the first answer instead of running it twice.
pub const CALL_MEMORY_MS: u64 = 60_000;
/// How long after its deadline a parked waiter's record is kept (its server may be collecting
/// the answer; one whose server died is forgotten then).
pub const WAITER_GRACE_MS: u64 = 60_000;
/// A cross-partition reserve still `pending` (or `aborting`) this long is rolled back by a
/// sweeper: its server died or lost its way.
pub const PENDING_TIMEOUT_MS: u64 = 10_000;
/// A decided cross-partition transition not yet applied to every part this long is rolled
/// forward by a sweeper.
pub const APPLY_GRACE_MS: u64 = 2_000;
/// How long after a part takes units, and then how often, its home is asked whether it still
/// owns it (the orphan sweep: only a home that lost data can fail that).
pub const PART_CHECK_MS: u64 = 60_000;
/// How long a deleted segment of a spread pool keeps its fence (the newest pool op it saw), so
/// that a late step of an older op changes nothing there: far longer than any step is delayed.
pub const SEGMENT_TOMBSTONE_MS: u64 = 3_600_000;
/// Parts checked, and roll-forwards and roll-backs reported, per sweep call.
pub const CROSS_DUE_MAX: u64 = 100;

/// Every number the library is written with, as `S.NAME = value` before its files: the limits
/// it shares with stockd-core, from `stockd_core::limits`, and its own bounds above, so that
/// each is declared once.
fn constants() -> [(&'static str, u64); 15] {
    use stockd_core::limits;
    [
        ("TOTAL_MAX", limits::TOTAL_MAX),
        ("WAITERS_PER_KEY_MAX", limits::WAITERS_PER_KEY_MAX as u64),
        (
            "HOLD_LIST_EXAMINED_MAX",
            limits::HOLD_LIST_EXAMINED_MAX as u64,
        ),
        // Every counter (event seqs, lock tokens, attempts) stays below 2^53, where Lua's
        // doubles hold integers exactly: one past the largest time the API takes.
        ("SEQ_LIMIT", limits::TIME_MS_MAX + 1),
        ("EXPIRIES_PER_SWEEP_MAX", EXPIRIES_PER_SWEEP_MAX),
        ("FORGETS_PER_SWEEP_MAX", FORGETS_PER_SWEEP_MAX),
        ("FORGOTTEN_KEY_MARGIN_MS", FORGOTTEN_KEY_MARGIN_MS),
        ("DIR_EXTRA_MS", DIR_EXTRA_MS),
        ("CALL_MEMORY_MS", CALL_MEMORY_MS),
        ("WAITER_GRACE_MS", WAITER_GRACE_MS),
        ("PENDING_TIMEOUT_MS", PENDING_TIMEOUT_MS),
        ("APPLY_GRACE_MS", APPLY_GRACE_MS),
        ("PART_CHECK_MS", PART_CHECK_MS),
        ("CROSS_DUE_MAX", CROSS_DUE_MAX),
        ("SEGMENT_TOMBSTONE_MS", SEGMENT_TOMBSTONE_MS),
    ]
}

/// What the library defines before its files: its name (every function is named from it), the
/// two tables every file adds to, and every number it is written with (`constants`).
fn prelude() -> String {
    let mut text = format!(
        "#!lua name={LIBRARY_NAME}\n\
         local LIBRARY = '{LIBRARY_NAME}'\n\
         local S = {{}}\n\
         local C = {{}}\n"
    );
    for (name, value) in constants() {
        text.push_str(&format!("S.{name} = {value}\n"));
    }
    text
}

/// The whole library as `FUNCTION LOAD` takes it.
pub fn source() -> String {
    let mut text = prelude();
    for (name, body) in SOURCES {
        text.push_str(&format!("-- ==== {name}\n"));
        text.push_str(body);
        text.push('\n');
    }
    text
}

/// FNV-1a, 64 bits, of the library's source: stable across Rust versions and machines (unlike
/// `std`'s hasher), for `RELEASED`.
pub fn source_hash() -> u64 {
    source().bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_is_the_one_its_name_was_released_with() {
        let released: Vec<_> = RELEASED
            .iter()
            .filter(|(name, _)| *name == LIBRARY_NAME)
            .collect();
        assert_eq!(
            released.len(),
            1,
            "{LIBRARY_NAME} must be in RELEASED exactly once"
        );
        assert_eq!(
            released[0].1,
            source_hash(),
            "the Lua of {LIBRARY_NAME} changed: a running fleet would load it under servers of \
             the old code. Give the library a new name (library_name!) and append it to RELEASED \
             with this hash; never change a released entry"
        );
    }

    /// The values the library is written with, by name, as its prelude sets them.
    fn injected() -> std::collections::HashMap<String, u64> {
        prelude()
            .lines()
            .filter_map(|line| line.strip_prefix("S."))
            .map(|line| {
                let (name, value) = line.split_once(" = ").expect("S.NAME = VALUE");
                (name.to_string(), value.parse().expect("an integer"))
            })
            .collect()
    }

    #[test]
    fn every_constant_is_declared_once_outside_the_lua() {
        let injected = injected();
        assert_eq!(injected.len(), constants().len(), "a name twice");
        for name in injected.keys() {
            for (file, body) in SOURCES {
                assert!(
                    !body.contains(&format!("S.{name} =")),
                    "{file} declares S.{name} again; it comes from library.rs"
                );
            }
        }
    }

    #[test]
    fn the_injected_values_are_the_rust_constants() {
        use stockd_core::limits;
        let injected = injected();
        let constants = constants();
        assert_eq!(injected.len(), constants.len());
        for (name, value) in constants {
            assert_eq!(injected.get(name), Some(&value), "S.{name}");
        }
        // The ones from the core, by name (the rest are this file's own constants above).
        assert_eq!(injected["TOTAL_MAX"], limits::TOTAL_MAX);
        assert_eq!(
            injected["WAITERS_PER_KEY_MAX"],
            limits::WAITERS_PER_KEY_MAX as u64
        );
        assert_eq!(
            injected["HOLD_LIST_EXAMINED_MAX"],
            limits::HOLD_LIST_EXAMINED_MAX as u64
        );
        assert_eq!(injected["SEQ_LIMIT"], 1 << 53);
        assert_eq!(injected["PENDING_TIMEOUT_MS"], PENDING_TIMEOUT_MS);
        // The library refers to each by name.
        let source = source();
        for name in injected.keys() {
            let body = &source[source.find("-- ==== ").expect("the files")..];
            assert!(body.contains(&format!("S.{name}")), "S.{name} unused");
        }
    }

    #[test]
    fn released_names_are_unique_and_functions_carry_the_name() {
        for (i, (name, _)) in RELEASED.iter().enumerate() {
            assert!(
                RELEASED[i + 1..].iter().all(|(other, _)| other != name),
                "{name} twice"
            );
        }
        for function in [FN_CALL, FN_EVENTS, FN_INIT, FN_ACCEPT] {
            assert!(function.starts_with(LIBRARY_NAME), "{function}");
            let suffix = &function[LIBRARY_NAME.len()..];
            assert!(
                source().contains(&format!("LIBRARY .. '{suffix}'")),
                "{function} is registered under the library's name"
            );
        }
    }
}
