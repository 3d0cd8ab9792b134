//! `/v1/locks/{name}`: acquire, renew, release lease locks with fencing tokens.
//!
//! Each handler parses its request into one `Command`, executes it and encodes the reply; it must
//! never decide who owns a lock.

use stockd_core::{Command, LockName, LockRequest};

use super::paths;
use crate::dto::{LockAcquireBody, LockReleaseBody, LockRenewBody};
use crate::json::JsonBody;
use crate::wire::{LockGrant, LockReleased};

command_handler! {
    post LOCK_ACQUIRE, tag = "locks", summary = "Acquire a lease", [request_body = LockAcquireBody],
    fn acquire_lock(name: LockName = ("name", "Lock name"),
        JsonBody(body): JsonBody<LockAcquireBody>) -> (200, "Acquired", LockGrant)
    => Command::LockAcquire(LockRequest {
        name,
        owner: body.owner,
        ttl_ms: body.ttl_ms,
        wait_ms: body.wait_ms.unwrap_or(0),
    })
}

command_handler! {
    post LOCK_RENEW, tag = "locks", summary = "Renew a lease one holds",
    [request_body = LockRenewBody],
    fn renew_lock(name: LockName = ("name", "Lock name"), JsonBody(body): JsonBody<LockRenewBody>)
    -> (200, "Renewed", LockGrant)
    => Command::LockRenew { name, owner: body.owner, token: body.token, ttl_ms: body.ttl_ms }
}

command_handler! {
    post LOCK_RELEASE, tag = "locks", summary = "Release a lease one holds",
    [request_body = LockReleaseBody],
    fn release_lock(name: LockName = ("name", "Lock name"),
        JsonBody(body): JsonBody<LockReleaseBody>) -> (200, "Released", LockReleased)
    => Command::LockRelease { name, owner: body.owner, token: body.token }
}
