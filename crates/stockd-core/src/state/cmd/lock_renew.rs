//! `lock_renew`: moves the deadline of a lease its owner still holds, and `owns_lock`, the
//! ownership check that renew and release share.
//!
//! It decides ownership: the same owner, the same token, and a lease not yet lapsed at
//! `now_ms`. A lapsed lease is never revived, even by its last owner: it is free by the clock,
//! and another client may already hold it with a newer token.
//!
//! Its Lua twin is `crates/stockd-redis/lua/cmd/lock_renew.lua`.

use crate::command::{Outcome, Reply};
use crate::error::Error;
use crate::ids::{LockName, OwnerId};
use crate::record::Change;
use crate::state::{Effects, State};

impl State {
    /// Whether `owner` with `token` holds the unexpired lease on `name`.
    pub(super) fn owns_lock(
        &self,
        name: &LockName,
        owner: &OwnerId,
        token: u64,
        now_ms: u64,
    ) -> bool {
        self.data.locks.get(name).is_some_and(|lock| {
            now_ms < lock.expires_at_ms && lock.owner == *owner && lock.token == token
        })
    }

    pub(in crate::state) fn lock_renew(
        &mut self,
        name: LockName,
        owner: OwnerId,
        token: u64,
        ttl_ms: u64,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        if !self.owns_lock(&name, &owner, token, now_ms) {
            return Err(Error::NotLockOwner);
        }
        let expires_at_ms = now_ms + ttl_ms;
        self.commit(
            now_ms,
            Change::LockRenewed {
                name,
                expires_at_ms,
            },
            effects,
        );
        Ok(Reply::Lock {
            token,
            expires_at_ms,
        })
    }
}
