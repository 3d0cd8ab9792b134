//! `/v1/pools`: create or replace, restock, read (the pool, its segments), list, delete.
//!
//! Each handler parses its request into one `Command`, executes it and encodes the reply; it must
//! never compute stock itself (available, deltas, limits all come back from the backend).

use axum::extract::State;
use axum::response::Response;
use stockd_core::{Command, PoolId};

use super::{paths, App};
use crate::dto::{ListPoolsQuery, PoolBody, PutPoolQuery, RestockBody};
use crate::json::{JsonBody, NoQuery, PathId, QueryParams};
use crate::wire::{PoolList, PoolObject, SegmentList};

#[utoipa::path(
    put,
    path = paths::POOL,
    tag = "pools",
    summary = "Create or replace a pool (admin)",
    description = "Creates the pool (201) or replaces its total and rules (200). A rule left out \
                   is unset. Changing `total` moves `available` by the same delta. `segments` \
                   is fixed when the pool is created: a PUT naming another count is 409 \
                   `segments_fixed`, and one naming none keeps it.",
    params(("pool" = String, Path, description = "Pool id"), PutPoolQuery),
    request_body = PoolBody,
    responses(
        (status = 201, description = "Created", body = PoolObject),
        (status = 200, description = "Replaced, or present with `if_absent=true`", body = PoolObject),
    )
)]
pub(crate) async fn put_pool(
    State(app): State<App>,
    PathId(pool): PathId<PoolId>,
    QueryParams(query): QueryParams<PutPoolQuery>,
    JsonBody(body): JsonBody<PoolBody>,
) -> Response {
    let segments = body.segments;
    app.execute(Command::PutPool {
        pool,
        spec: body.into_spec(),
        segments,
        if_absent: query.if_absent.unwrap_or(false),
    })
    .await
}

#[utoipa::path(
    post,
    path = paths::POOL_RESTOCK,
    tag = "pools",
    summary = "Change total and available by a delta (admin)",
    description = "With a `request_id`, a retry (the same id, pool and delta) changes nothing \
                   and answers 200 with the pool as it is now, like the first run, plus the \
                   header `Stockd-Replayed: true`, which only a retry carries; the id with \
                   another delta or pool is 409 `request_id_conflict`. Ids are remembered for \
                   the hold retention from the restock; a refused restock is not remembered.",
    params(("pool" = String, Path, description = "Pool id")),
    request_body = RestockBody,
    responses(
        (status = 200, description = "Restocked, or a retry of a request id (a no-op, with \
                                      `Stockd-Replayed: true`)", body = PoolObject,
            headers(("Stockd-Replayed" = String, description = "`true` when this call was a \
                     retry of a restock an earlier call with the same `request_id` applied: \
                     nothing changed. Absent when this call applied the delta."))),
    )
)]
pub(crate) async fn restock_pool(
    State(app): State<App>,
    PathId(pool): PathId<PoolId>,
    _: NoQuery,
    JsonBody(body): JsonBody<RestockBody>,
) -> Response {
    app.execute(body.into_command(pool)).await
}

command_handler! {
    get POOL, tag = "pools", summary = "Read a pool",
    fn get_pool(pool: PoolId = ("pool", "Pool id")) -> (200, "The pool", PoolObject)
    => Command::GetPool { pool }
}

command_handler! {
    get POOL_SEGMENTS, tag = "pools", summary = "Read a pool's segments",
    description = "Each segment with its counts, in segment order. On a Redis Cluster the \
                   segments of a segmented pool live in partitions of their own; the embedded \
                   engine and a single Redis keep a pool as one segment, 0.",
    fn get_pool_segments(pool: PoolId = ("pool", "Pool id")) -> (200, "The pool's segments", SegmentList)
    => Command::GetSegments { pool }
}

#[utoipa::path(
    get,
    path = paths::POOLS,
    tag = "pools",
    summary = "List pools by id",
    params(ListPoolsQuery),
    responses(
        (status = 200, description = "One page", body = PoolList),
    )
)]
pub(crate) async fn list_pools(
    State(app): State<App>,
    QueryParams(query): QueryParams<ListPoolsQuery>,
) -> Response {
    app.execute(query.into_command()).await
}

command_handler! {
    delete POOL, tag = "pools", summary = "Delete a pool (admin)",
    description = "Ends the pool: its holds can no longer be refunded, even if a pool with the \
                   same id is created later.",
    fn delete_pool(pool: PoolId = ("pool", "Pool id")) -> (204, "Deleted")
    => Command::DeletePool { pool }
}
