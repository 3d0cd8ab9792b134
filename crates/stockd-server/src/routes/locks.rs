//! `/v1/locks/{name}`: acquire, renew, release lease locks with fencing tokens.
//!
//! Each handler parses its request into one `Command`, executes it and encodes the reply; it must
//! never decide who owns a lock.

use axum::extract::State;
use axum::response::Response;
use stockd_core::{Command, LockName, LockRequest};

use super::{paths, App};
use crate::dto::{LockAcquireBody, LockReleaseBody, LockRenewBody};
use crate::json::{JsonBody, NoQuery, PathId};
use crate::wire::{LockGrant, LockReleased};

#[utoipa::path(
    post,
    path = paths::LOCK_ACQUIRE,
    tag = "locks",
    summary = "Acquire a lease",
    params(("name" = String, Path, description = "Lock name")),
    request_body = LockAcquireBody,
    responses(
        (status = 200, description = "Acquired", body = LockGrant),
    )
)]
pub(crate) async fn acquire_lock(
    State(app): State<App>,
    PathId(name): PathId<LockName>,
    _: NoQuery,
    JsonBody(body): JsonBody<LockAcquireBody>,
) -> Response {
    app.execute(Command::LockAcquire(LockRequest {
        name,
        owner: body.owner,
        ttl_ms: body.ttl_ms,
        wait_ms: body.wait_ms.unwrap_or(0),
    }))
    .await
}

#[utoipa::path(
    post,
    path = paths::LOCK_RENEW,
    tag = "locks",
    summary = "Renew a lease one holds",
    params(("name" = String, Path, description = "Lock name")),
    request_body = LockRenewBody,
    responses(
        (status = 200, description = "Renewed", body = LockGrant),
    )
)]
pub(crate) async fn renew_lock(
    State(app): State<App>,
    PathId(name): PathId<LockName>,
    _: NoQuery,
    JsonBody(body): JsonBody<LockRenewBody>,
) -> Response {
    app.execute(Command::LockRenew {
        name,
        owner: body.owner,
        token: body.token,
        ttl_ms: body.ttl_ms,
    })
    .await
}

#[utoipa::path(
    post,
    path = paths::LOCK_RELEASE,
    tag = "locks",
    summary = "Release a lease one holds",
    params(("name" = String, Path, description = "Lock name")),
    request_body = LockReleaseBody,
    responses(
        (status = 200, description = "Released", body = LockReleased),
    )
)]
pub(crate) async fn release_lock(
    State(app): State<App>,
    PathId(name): PathId<LockName>,
    _: NoQuery,
    JsonBody(body): JsonBody<LockReleaseBody>,
) -> Response {
    app.execute(Command::LockRelease {
        name,
        owner: body.owner,
        token: body.token,
    })
    .await
}
