//! `GET /v1/events`: the ordered feed of state changes, with long-polling.
//!
//! Owns the feed's wire shape: each event is rendered with the fields that apply to its type and
//! the others omitted (the core's `Event` carries every field as an `Option`). Paging bounds are
//! checked here because the feed is not a `Command`. This handler must never filter, reorder or
//! invent events.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use stockd_core::limits::{EVENT_LIMIT_DEFAULT, EVENT_LIMIT_MAX, WAIT_MS_MAX};
use stockd_core::{Event, EventKind, EventPage, HoldId, HoldItemView, PoolId, UserId};

use super::{paths, App};
use crate::dto::EventsQuery;
use crate::error::ApiError;
use crate::json::QueryParams;
use crate::openapi::schemas::{ErrorBody, EventPage as EventPageSchema};
use crate::reply;

#[utoipa::path(
    get,
    path = paths::EVENTS,
    tag = "events",
    summary = "Events with seq > after, in order",
    description = "`next_after` is the seq of the last event returned, or `after` when none is. \
                   With `wait_ms`, waits that long for a first event.",
    params(EventsQuery),
    responses(
        (status = 200, description = "One page", body = EventPageSchema),
        (status = 422, description = "`invalid_request`", body = ErrorBody),
    )
)]
pub(crate) async fn events(
    State(app): State<App>,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Response {
    let after = query.after.unwrap_or(0);
    let limit = query.limit.unwrap_or(EVENT_LIMIT_DEFAULT);
    if !(1..=EVENT_LIMIT_MAX).contains(&limit) {
        return ApiError::invalid(format!(
            "limit must be in 1..={EVENT_LIMIT_MAX}, got {limit}"
        ))
        .into_response();
    }
    let wait_ms = query.wait_ms.unwrap_or(0);
    if wait_ms > WAIT_MS_MAX {
        return ApiError::invalid(format!(
            "wait_ms must be in 0..={WAIT_MS_MAX}, got {wait_ms}"
        ))
        .into_response();
    }
    match app.backend.events(after, limit, wait_ms).await {
        Ok(page) => reply::json(StatusCode::OK, &PageJson(&page)),
        Err(error) => ApiError::from(error).into_response(),
    }
}

struct PageJson<'a>(&'a EventPage);

impl Serialize for PageJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("events", &EventsJson(&self.0.events))?;
        map.serialize_entry("next_after", &self.0.next_after)?;
        map.end()
    }
}

struct EventsJson<'a>(&'a [Event]);

impl Serialize for EventsJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(EventJson::from))
    }
}

/// One event as the feed shows it: fields that are `None` are left out.
#[derive(Serialize)]
struct EventJson<'a> {
    seq: u64,
    at_ms: u64,
    #[serde(rename = "type")]
    kind: EventKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pool: Option<&'a PoolId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hold_id: Option<&'a HoldId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a UserId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    items: Option<&'a [HoldItemView]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    available: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delta: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    low_stock_threshold: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at_ms: Option<u64>,
}

impl<'a> From<&'a Event> for EventJson<'a> {
    fn from(event: &'a Event) -> Self {
        // Destructured so that a field added to `Event` fails to compile until it is rendered.
        let Event {
            seq,
            at_ms,
            kind,
            pool,
            hold_id,
            user,
            items,
            available,
            total,
            delta,
            low_stock_threshold,
            expires_at_ms,
        } = event;
        EventJson {
            seq: *seq,
            at_ms: *at_ms,
            kind: *kind,
            pool: pool.as_ref(),
            hold_id: hold_id.as_ref(),
            user: user.as_ref(),
            items: items.as_deref(),
            available: *available,
            total: *total,
            delta: *delta,
            low_stock_threshold: *low_stock_threshold,
            expires_at_ms: *expires_at_ms,
        }
    }
}
