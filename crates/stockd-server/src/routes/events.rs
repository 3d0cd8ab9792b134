//! `GET /v1/events` and `GET /v1/events/partitions`: the ordered feed of state changes, one
//! partition per call, with long-polling.
//!
//! Owns the feed's wire shape: each event is rendered with the fields that apply to its type and
//! the others omitted (the core's `Event` carries every field as an `Option`). Paging bounds and
//! the partition number are checked here because the feed is not a `Command`. This handler must
//! never filter, reorder or invent events, and never guess a partition when there are several.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use stockd_core::limits::{EVENT_LIMIT_DEFAULT, EVENT_LIMIT_MAX, WAIT_MS_MAX};
use stockd_core::{EventPage, EventsRequest};

use super::{paths, App, AppState};
use crate::dto::EventsQuery;
use crate::error::ApiError;
use crate::json::{NoQuery, QueryParams};
use crate::reply;
use crate::wire::{self, EventPage as WireEventPage, EventPartitions};

/// How much of a refused `partition` value is echoed in the message.
const ECHO_CHARS_MAX: usize = 32;

#[utoipa::path(
    get,
    path = paths::EVENTS,
    tag = "events",
    summary = "Events of one partition with seq > after, in order",
    description = "`next_after` is the seq of the last event returned, or `after` when none is. \
                   With `wait_ms`, waits that long for a first event. Seqs and `next_after` are \
                   per partition. When some event after `after` is no longer kept, the answer \
                   is 410 `events_expired` with `oldest_seq`: repair your copy, then resume from \
                   `after = oldest_seq - 1`.",
    params(EventsQuery),
    responses(
        (status = 200, description = "One page", body = WireEventPage),
    )
)]
pub(crate) async fn events(
    State(app): State<App>,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Response {
    match read_page(&app, query).await {
        Ok(page) => reply::json(StatusCode::OK, &wire::event_page(&page)),
        Err(error) => error.into_response(),
    }
}

async fn read_page(app: &AppState, query: EventsQuery) -> Result<EventPage, ApiError> {
    let after = query.after.unwrap_or(0);
    let limit = query.limit.unwrap_or(EVENT_LIMIT_DEFAULT);
    if !(1..=EVENT_LIMIT_MAX).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "limit must be from 1 to {EVENT_LIMIT_MAX}, got {limit}"
        )));
    }
    let wait_ms = query.wait_ms.unwrap_or(0);
    if wait_ms > WAIT_MS_MAX {
        return Err(ApiError::invalid(format!(
            "wait_ms must be from 0 to {WAIT_MS_MAX}, got {wait_ms}"
        )));
    }
    let partition = partition_to_read(query.partition.as_deref(), app.backend.partitions())?;
    let request = EventsRequest {
        partition,
        after,
        limit,
        wait_ms,
    };
    Ok(app.backend.events(request).await??)
}

/// The partition a call reads: the one named, or 0 when the feed has only one. With several,
/// naming none is `partition_required`, so that no consumer reads one and silently misses the
/// others.
fn partition_to_read(given: Option<&str>, partitions: u32) -> Result<u32, ApiError> {
    if partitions == 0 {
        // A backend without partitions cannot be asked anything meaningful.
        return Err(ApiError::BackendUnavailable(
            "the backend reports an event feed with no partitions".into(),
        ));
    }
    let Some(text) = given else {
        return match partitions {
            1 => Ok(0),
            _ => Err(ApiError::PartitionRequired { partitions }),
        };
    };
    match text.parse::<u32>() {
        Ok(partition) if partition < partitions => Ok(partition),
        _ => {
            let shown: String = text.chars().take(ECHO_CHARS_MAX).collect();
            let ellipsis = if shown.len() < text.len() { "..." } else { "" };
            let plural = if partitions == 1 { "" } else { "s" };
            Err(ApiError::invalid(format!(
                "partition must be an integer from 0 to {} (this feed has {partitions} \
                 partition{plural}), got {shown:?}{ellipsis}",
                partitions - 1
            )))
        }
    }
}

#[utoipa::path(
    get,
    path = paths::EVENT_PARTITIONS,
    tag = "events",
    summary = "How many partitions the event feed has",
    description = "P >= 1: 1 on the embedded engine and on a single Redis, P on a Redis \
                   Cluster. Read each partition 0..P-1 with `GET /v1/events?partition=K`; every \
                   event is in exactly one.",
    responses(
        (status = 200, description = "The partition count", body = EventPartitions,
         example = json!({"partitions": 1})),
    )
)]
pub(crate) async fn partitions(State(app): State<App>, _: NoQuery) -> Response {
    let partitions = app.backend.partitions();
    reply::json(StatusCode::OK, &EventPartitions { partitions })
}
