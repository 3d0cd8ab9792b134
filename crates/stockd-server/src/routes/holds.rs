//! `/v1/holds`: reserve, list, read, confirm, release, extend, refund.
//!
//! Each handler parses its request into one `Command` (filling the contract's defaults for
//! `ttl_ms`, `confirm` and `wait_ms`), executes it and encodes the reply; it must never decide a
//! transition itself.

use axum::extract::State;
use axum::response::Response;
use stockd_core::{Command, HoldId};

use super::{paths, App};
use crate::dto::{ExtendBody, HoldBody, ListHoldsQuery, RefundBody};
use crate::json::{EmptyBody, JsonBody, NoQuery, OptionalBody, PathId, QueryParams};
use crate::wire::{EmptyObject, HoldList, HoldObject};

#[utoipa::path(
    post,
    path = paths::HOLDS,
    tag = "holds",
    summary = "Reserve units from one or more pools, all or nothing",
    description = "Same `hold_id` with the same request answers 200 with the hold's current \
                   state; with a different request, 409 `hold_id_conflict`.",
    request_body = HoldBody,
    responses(
        (status = 201, description = "Reserved (or reserved and confirmed)", body = HoldObject),
        (status = 200, description = "Replay of an earlier reserve", body = HoldObject),
    )
)]
pub(crate) async fn reserve(
    State(app): State<App>,
    _: NoQuery,
    JsonBody(body): JsonBody<HoldBody>,
) -> Response {
    app.execute(body.into_command()).await
}

#[utoipa::path(
    get,
    path = paths::HOLDS,
    tag = "holds",
    summary = "List the retained holds by id",
    description = "Every hold not yet forgotten after retention, in any status, ordered by \
                   `hold_id`; each filter optional (`pool`: one of the hold's items is in it). \
                   A hold past its deadline shows as `expired`. A page may hold fewer than \
                   `limit` holds when the filters are selective: only `next: null` means the \
                   end.",
    params(ListHoldsQuery),
    responses(
        (status = 200, description = "One page", body = HoldList),
    )
)]
pub(crate) async fn list_holds(
    State(app): State<App>,
    QueryParams(query): QueryParams<ListHoldsQuery>,
) -> Response {
    app.execute(query.into_command()).await
}

#[utoipa::path(
    get,
    path = paths::HOLD,
    tag = "holds",
    summary = "Read a hold",
    params(("hold_id" = String, Path, description = "Hold id")),
    responses(
        (status = 200, description = "The hold", body = HoldObject),
    )
)]
pub(crate) async fn get_hold(
    State(app): State<App>,
    PathId(hold_id): PathId<HoldId>,
    _: NoQuery,
) -> Response {
    app.execute(Command::GetHold { hold_id }).await
}

#[utoipa::path(
    post,
    path = paths::HOLD_CONFIRM,
    tag = "holds",
    summary = "Confirm a held hold (paid)",
    params(("hold_id" = String, Path, description = "Hold id")),
    request_body(content = Option<EmptyObject>, description = "Empty, or `{}`"),
    responses(
        (status = 200, description = "Confirmed (repeating is a no-op)", body = HoldObject),
    )
)]
pub(crate) async fn confirm_hold(
    State(app): State<App>,
    PathId(hold_id): PathId<HoldId>,
    _: NoQuery,
    _: EmptyBody,
) -> Response {
    app.execute(Command::Confirm { hold_id }).await
}

#[utoipa::path(
    post,
    path = paths::HOLD_RELEASE,
    tag = "holds",
    summary = "Release a held hold (cancelled)",
    params(("hold_id" = String, Path, description = "Hold id")),
    request_body(content = Option<EmptyObject>, description = "Empty, or `{}`"),
    responses(
        (status = 200, description = "Released, or already expired", body = HoldObject),
    )
)]
pub(crate) async fn release_hold(
    State(app): State<App>,
    PathId(hold_id): PathId<HoldId>,
    _: NoQuery,
    _: EmptyBody,
) -> Response {
    app.execute(Command::Release { hold_id }).await
}

#[utoipa::path(
    post,
    path = paths::HOLD_EXTEND,
    tag = "holds",
    summary = "Move a held hold's deadline to now + ttl_ms",
    params(("hold_id" = String, Path, description = "Hold id")),
    request_body = ExtendBody,
    responses(
        (status = 200, description = "Extended", body = HoldObject),
    )
)]
pub(crate) async fn extend_hold(
    State(app): State<App>,
    PathId(hold_id): PathId<HoldId>,
    _: NoQuery,
    JsonBody(body): JsonBody<ExtendBody>,
) -> Response {
    app.execute(Command::Extend {
        hold_id,
        ttl_ms: body.ttl_ms,
    })
    .await
}

#[utoipa::path(
    post,
    path = paths::HOLD_REFUND,
    tag = "holds",
    summary = "Refund a confirmed hold: sold units go back to available, or leave the pool",
    description = "With `restock: false` the sold units leave the pool (sold and total both \
                   shrink) instead of going back to available. Repeating a refund answers 200 \
                   with the hold unchanged, whatever `restock` the repeat says.",
    params(("hold_id" = String, Path, description = "Hold id")),
    request_body(content = Option<RefundBody>, description = "Empty, `null`, or \
                 `{\"restock\": bool}` (default true)"),
    responses(
        (status = 200, description = "Refunded (repeating is a no-op)", body = HoldObject),
    )
)]
pub(crate) async fn refund_hold(
    State(app): State<App>,
    PathId(hold_id): PathId<HoldId>,
    _: NoQuery,
    OptionalBody(body): OptionalBody<RefundBody>,
) -> Response {
    app.execute(body.into_command(hold_id)).await
}
