//! The Lua function library: the second implementation of stockd-core's rules, loaded into every
//! Redis primary as library `stockd_v2`.
//!
//! The files under `lua/` mirror `stockd-core/src/state/` file for file (`state.lua`,
//! `apply.lua`, `waiters.lua`, `tick.lua`, `cmd/<command>.lua`); `cross.lua` (the cross-partition
//! protocol) and `main.lua` (entry points) are Redis's own. They are concatenated here in a fixed
//! order into one library, since a Redis function library is one source. This module only assembles and names it; it decides nothing.

/// The library name and the layout version it speaks. A server refuses a dataset whose marker
/// names a layout it does not know; the next version ships `stockd_v2` beside this one, so servers
/// of both versions can run side by side during a rolling upgrade.
pub const LIBRARY_NAME: &str = "stockd_v2";
pub const LAYOUT_VERSION: &str = "1";

pub const FN_CALL: &str = "stockd_v2_call";
pub const FN_EVENTS: &str = "stockd_v2_events";
pub const FN_INIT: &str = "stockd_v2_init";
pub const FN_ACCEPT: &str = "stockd_v2_accept";

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

/// The whole library as `FUNCTION LOAD` takes it.
pub fn source() -> String {
    let mut text = format!("#!lua name={LIBRARY_NAME}\n");
    for (name, body) in SOURCES {
        text.push_str(&format!("-- ==== {name}\n"));
        text.push_str(body);
        text.push('\n');
    }
    text
}
