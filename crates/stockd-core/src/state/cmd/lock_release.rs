//! `lock_release`: frees a lease its owner still holds, so the next waiter can take it.
//!
//! It decides ownership through `owns_lock` (same owner, same token, not lapsed); it must never
//! free a lease someone else holds.
//!
//! Its Lua twin is `crates/stockd-redis/lua/cmd/lock_release.lua`.

use crate::command::{Outcome, Reply};
use crate::error::Error;
use crate::ids::{LockName, OwnerId};
use crate::record::Change;
use crate::state::{Effects, State};

impl State {
    pub(in crate::state) fn lock_release(
        &mut self,
        name: LockName,
        owner: OwnerId,
        token: u64,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        if !self.owns_lock(&name, &owner, token, now_ms) {
            return Err(Error::NotLockOwner);
        }
        self.commit(now_ms, Change::LockReleased { name }, effects);
        Ok(Reply::LockReleased)
    }
}
