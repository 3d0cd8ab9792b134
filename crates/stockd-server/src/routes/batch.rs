//! `POST /v1/batch`: many hold operations in one request and one backend call.
//!
//! Each op is parsed on its own, so a malformed op gets its own 422 result while the valid ones
//! run; the valid ops go to the backend in ONE `execute` call, which applies them in order. Each
//! result is exactly what the single endpoint would answer. This handler must never reorder ops
//! or decide an outcome itself.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use stockd_core::limits::BATCH_OPS_MAX;
use stockd_core::{Outcome, Reply};

use super::{paths, App};
use crate::dto::{decode_op, BatchBody};
use crate::error::ApiError;
use crate::json::{JsonWithBytes, NoQuery};
use crate::reply::{self, ReplyBody};
use crate::syntax;
use crate::wire::{BatchResponse, ErrorBody};

#[utoipa::path(
    post,
    path = paths::BATCH,
    tag = "batch",
    summary = "Apply hold operations in order, each independently",
    description = "1..=1000 ops. Each result carries the status and body the single endpoint \
                   would have answered; one failing op does not stop the others.",
    request_body = BatchBody,
    responses(
        (status = 200, description = "One result per op, in order", body = BatchResponse),
        (status = 422, description = "`invalid_request`: not 1..=1000 ops", body = ErrorBody),
    )
)]
pub(crate) async fn batch(
    State(app): State<App>,
    _: NoQuery,
    JsonWithBytes(body, bytes): JsonWithBytes<BatchBody>,
) -> Response {
    match run(&app, body.ops, &bytes).await {
        Ok(results) => reply::json(StatusCode::OK, &Results(&results)),
        Err(error) => error.into_response(),
    }
}

/// The result of one op.
enum OpResult {
    Reply(Reply),
    Error(ApiError),
}

async fn run(
    app: &App,
    ops: Vec<Box<serde_json::value::RawValue>>,
    body: &[u8],
) -> Result<Vec<OpResult>, ApiError> {
    if ops.is_empty() || ops.len() > BATCH_OPS_MAX {
        return Err(ApiError::invalid(format!(
            "ops must have from 1 to {BATCH_OPS_MAX} entries, got {}",
            ops.len()
        )));
    }
    // `None` marks an op that parsed and went to the backend; its outcome fills the slot later.
    let mut parse_errors: Vec<Option<ApiError>> = Vec::with_capacity(ops.len());
    let mut commands = Vec::with_capacity(ops.len());
    for (index, op) in ops.into_iter().enumerate() {
        // Decoded as its single endpoint's request is: an op written as an array is refused,
        // not read positionally, and a refusal is worded as the endpoint's is.
        match decode_op(&op) {
            Ok(command) => {
                commands.push(command);
                parse_errors.push(None);
            }
            Err(error) => parse_errors.push(Some(in_op(index, error))),
        }
    }
    // The body's own reading skips over the ops' text, where bytes that are not JSON can hide
    // (a lone surrogate in a string, nesting too deep): when an op is refused, the whole body is
    // checked, and if it is not JSON it is refused whole, 400, as a single endpoint refuses the
    // same bytes. An op that decodes was read whole, so a batch of good ops needs no check.
    if parse_errors.iter().any(Option::is_some) {
        if let Err(not_json) = syntax::check(body) {
            return Err(ApiError::InvalidJson(not_json.to_string()));
        }
    }
    let sent = commands.len();
    let outcomes: Vec<Outcome> = if sent == 0 {
        Vec::new()
    } else {
        app.backend.execute(commands).await?
    };
    if outcomes.len() != sent {
        return Err(ApiError::BackendUnavailable(
            "backend answered with the wrong number of outcomes".into(),
        ));
    }
    let mut outcomes = outcomes.into_iter();
    Ok(parse_errors
        .into_iter()
        .map(|parse_error| match parse_error {
            Some(error) => OpResult::Error(error),
            None => match outcomes.next() {
                Some(Ok(reply)) => OpResult::Reply(reply),
                Some(Err(error)) => OpResult::Error(ApiError::Core(error)),
                // Counted above: every parsed op has an outcome.
                None => OpResult::Error(ApiError::BackendUnavailable(
                    "backend answered with the wrong number of outcomes".into(),
                )),
            },
        })
        .collect())
}

impl Serialize for OpResult {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        match self {
            OpResult::Reply(reply) => {
                map.serialize_entry("status", &reply::status(reply).as_u16())?;
                map.serialize_entry("body", &ReplyBody(reply))?;
            }
            OpResult::Error(error) => {
                map.serialize_entry("status", &error.status().as_u16())?;
                map.serialize_entry("body", error)?;
            }
        }
        map.end()
    }
}

struct Results<'a>(&'a [OpResult]);

impl Serialize for Results<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("results", self.0)?;
        map.end()
    }
}

/// A refusal of op `index`, worded as its single endpoint's, behind `ops[index]: `. A 422: the
/// body is JSON (checked before the results are sent), so an op can only be of the wrong shape
/// or value.
fn in_op(index: usize, error: ApiError) -> ApiError {
    let message = match error {
        ApiError::Core(stockd_core::Error::InvalidRequest { message }) => message,
        other => other.to_string(),
    };
    ApiError::invalid(format!("ops[{index}]: {message}"))
}
