//! The Lua function library: the second implementation of stockd-core's rules, loaded into every
//! Redis primary as library `stockd_v4` (`LIBRARY_NAME`).
//!
//! The files under `lua/` mirror `stockd-core/src/state/` file for file (`state.lua`,
//! `apply.lua`, `waiters.lua`, `tick.lua`, `cmd/<command>.lua`); `cross.lua` (the cross-partition
//! protocol) and `main.lua` (entry points) are Redis's own. They are concatenated here in a fixed
//! order into one library, since a Redis function library is one source. This module only assembles and names it; it decides nothing.

/// The library's name, which every function name carries. A server refuses a dataset whose
/// marker names a layout it does not know. A release that changes any line of the Lua ships it
/// under a new name (and `RELEASED` below records the source each name stands for), so servers
/// of the old and the new version run side by side during a rolling upgrade, each calling its own
/// functions: a `FUNCTION LOAD REPLACE` of one name never changes the code under a running server
/// of another version.
macro_rules! library_name {
    () => {
        "stockd_v4"
    };
}

pub const LIBRARY_NAME: &str = library_name!();
pub const LAYOUT_VERSION: &str = "1";

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
];

/// The library's source files, in load order: the state and its transitions first (they
/// define the tables the others add to), then one file per command, mirroring
/// `stockd-core/src/state/` file for file, then the Redis-only protocol and entry points.
pub const SOURCES: [(&str, &str); 18] = [
    ("state.lua", include_str!("../lua/state.lua")),
    ("apply.lua", include_str!("../lua/apply.lua")),
    ("waiters.lua", include_str!("../lua/waiters.lua")),
    ("tick.lua", include_str!("../lua/tick.lua")),
    ("cmd/put_pool.lua", include_str!("../lua/cmd/put_pool.lua")),
    ("cmd/restock.lua", include_str!("../lua/cmd/restock.lua")),
    (
        "cmd/delete_pool.lua",
        include_str!("../lua/cmd/delete_pool.lua"),
    ),
    ("cmd/reads.lua", include_str!("../lua/cmd/reads.lua")),
    ("cmd/reserve.lua", include_str!("../lua/cmd/reserve.lua")),
    ("cmd/confirm.lua", include_str!("../lua/cmd/confirm.lua")),
    ("cmd/release.lua", include_str!("../lua/cmd/release.lua")),
    ("cmd/refund.lua", include_str!("../lua/cmd/refund.lua")),
    ("cmd/extend.lua", include_str!("../lua/cmd/extend.lua")),
    (
        "cmd/lock_acquire.lua",
        include_str!("../lua/cmd/lock_acquire.lua"),
    ),
    (
        "cmd/lock_renew.lua",
        include_str!("../lua/cmd/lock_renew.lua"),
    ),
    (
        "cmd/lock_release.lua",
        include_str!("../lua/cmd/lock_release.lua"),
    ),
    ("cross.lua", include_str!("../lua/cross.lua")),
    ("main.lua", include_str!("../lua/main.lua")),
];

/// What the library defines before its files: its name (every function is named from it), the
/// two tables every file adds to, and the limits it shares with stockd-core, written from
/// `stockd_core::limits` so that each is declared once.
fn prelude() -> String {
    use stockd_core::limits;
    format!(
        "#!lua name={LIBRARY_NAME}\n\
         local LIBRARY = '{LIBRARY_NAME}'\n\
         local S = {{}}\n\
         local C = {{}}\n\
         S.TOTAL_MAX = {}\n\
         S.WAITERS_PER_KEY_MAX = {}\n\
         S.HOLD_LIST_EXAMINED_MAX = {}\n\
         S.SEQ_LIMIT = {}\n",
        limits::TOTAL_MAX,
        limits::WAITERS_PER_KEY_MAX,
        limits::HOLD_LIST_EXAMINED_MAX,
        // Every counter (event seqs, lock tokens, attempts) stays below 2^53, where Lua's
        // doubles hold integers exactly: one past the largest time the API takes.
        limits::TIME_MS_MAX + 1,
    )
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

    #[test]
    fn the_shared_limits_are_declared_once_from_the_core() {
        let prelude = prelude();
        for line in prelude.lines().filter(|line| line.starts_with("S.")) {
            let (name, value) = line.split_once(" = ").expect("S.NAME = VALUE");
            assert!(value.parse::<u64>().is_ok(), "{line}");
            for (file, body) in SOURCES {
                assert!(
                    !body.contains(&format!("{name} =")),
                    "{file} declares {name} again; it comes from stockd_core::limits"
                );
            }
        }
        assert!(prelude.contains(&format!("S.TOTAL_MAX = {}", stockd_core::limits::TOTAL_MAX)));
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
