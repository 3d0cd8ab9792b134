//! One file per command decision, each an `impl State` block of the same shape: settle or look
//! up what the command touches, check every rule against the state, then `commit` the records
//! (or answer with an error and change nothing).
//!
//! Each file has a Lua twin of the same name in `crates/stockd-redis/lua/cmd/`, so a reviewer can
//! hold the two implementations side by side; a rule changed here must change there too, and
//! the conformance suite holds both to it. A decision must never change pools, holds or locks
//! except through `commit` (that is, `apply_record`; forgetting a hold past retention, which
//! writes no record, is `settle`'s), never serve waiters itself (`execute` does once the command
//! is done), and never read a clock.

mod confirm;
mod delete_pool;
mod extend;
mod lock_acquire;
mod lock_release;
mod lock_renew;
mod put_pool;
pub(super) mod reads;
mod refund;
mod release;
mod reserve;
mod restock;
