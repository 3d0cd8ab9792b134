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
use crate::json::{EmptyBody, JsonBody, NoQuery, OptionalBody, QueryParams};
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

command_handler! {
    get HOLD, tag = "holds", summary = "Read a hold",
    fn get_hold(hold_id: HoldId = ("hold_id", "Hold id")) -> (200, "The hold", HoldObject)
    => Command::GetHold { hold_id }
}

command_handler! {
    post HOLD_CONFIRM, tag = "holds", summary = "Confirm a held hold (paid)", empty body,
    fn confirm_hold(hold_id: HoldId = ("hold_id", "Hold id"), EmptyBody: EmptyBody)
    -> (200, "Confirmed (repeating is a no-op)", HoldObject) => Command::Confirm { hold_id }
}

command_handler! {
    post HOLD_RELEASE, tag = "holds", summary = "Release a held hold (cancelled)", empty body,
    fn release_hold(hold_id: HoldId = ("hold_id", "Hold id"), EmptyBody: EmptyBody)
    -> (200, "Released, or already expired", HoldObject) => Command::Release { hold_id }
}

command_handler! {
    post HOLD_EXTEND, tag = "holds", summary = "Move a held hold's deadline to now + ttl_ms",
    [request_body = ExtendBody],
    fn extend_hold(hold_id: HoldId = ("hold_id", "Hold id"), JsonBody(body): JsonBody<ExtendBody>)
    -> (200, "Extended", HoldObject) => Command::Extend { hold_id, ttl_ms: body.ttl_ms }
}

command_handler! {
    post HOLD_REFUND, tag = "holds",
    summary = "Refund a confirmed hold: sold units go back to available, or leave the pool",
    description = "With `restock: false` the sold units leave the pool (sold and total both \
                   shrink) instead of going back to available. Repeating a refund answers 200 \
                   with the hold unchanged, whatever `restock` the repeat says.",
    [request_body(content = Option<RefundBody>, description = "Empty, `null`, or \
                 `{\"restock\": bool}` (default true)")],
    fn refund_hold(hold_id: HoldId = ("hold_id", "Hold id"),
        OptionalBody(body): OptionalBody<RefundBody>)
    -> (200, "Refunded (repeating is a no-op)", HoldObject) => body.into_command(hold_id)
}
