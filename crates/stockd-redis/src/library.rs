//! The Lua function library: the second implementation of stockd-core's rules, loaded into every
//! Redis primary as library `stockd_v1`.
//!
//! The files under `lua/` mirror the core's commands file for file; they are concatenated here in
//! a fixed order (helpers first, entry points last) into one library, since a Redis function
//! library is one source. This module only assembles and names it; it decides nothing.

/// The library name and the layout version it speaks. A server refuses a dataset whose marker
/// names a layout it does not know; the next version ships `stockd_v2` beside this one, so servers
/// of both versions can run side by side during a rolling upgrade.
pub const LIBRARY_NAME: &str = "stockd_v1";
pub const LAYOUT_VERSION: &str = "1";

pub const FN_CALL: &str = "stockd_v1_call";
pub const FN_EVENTS: &str = "stockd_v1_events";
pub const FN_INIT: &str = "stockd_v1_init";
pub const FN_ACCEPT: &str = "stockd_v1_accept";

/// The library's source files, in load order.
pub const SOURCES: [(&str, &str); 9] = [
    ("common.lua", include_str!("../lua/common.lua")),
    ("pools.lua", include_str!("../lua/pools.lua")),
    ("reserve.lua", include_str!("../lua/reserve.lua")),
    ("holds.lua", include_str!("../lua/holds.lua")),
    ("waiters.lua", include_str!("../lua/waiters.lua")),
    ("locks.lua", include_str!("../lua/locks.lua")),
    ("sweep.lua", include_str!("../lua/sweep.lua")),
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
