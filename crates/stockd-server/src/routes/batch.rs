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
use crate::json::{JsonBody, NoQuery};
use crate::reply::{self, ReplyBody};
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
    JsonBody(body): JsonBody<BatchBody>,
) -> Response {
    match run(&app, body.ops).await {
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
            // Bytes the body's own parse let through but that are not JSON all the same (a
            // number out of range, a lone surrogate in a string): the body is refused whole,
            // 400, as a single endpoint refuses it.
            Err(ApiError::InvalidJson(why)) => return Err(ApiError::InvalidJson(why)),
            Err(error) => parse_errors.push(Some(in_op(index, error))),
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

/// A refusal of op `index`, worded as its single endpoint's, behind `ops[index]: `. The body
/// parsed as JSON as a whole, so an op can only be of the wrong shape: a 422.
fn in_op(index: usize, error: ApiError) -> ApiError {
    let message = match error {
        ApiError::Core(stockd_core::Error::InvalidRequest { message }) => message,
        other => other.to_string(),
    };
    ApiError::invalid(format!("ops[{index}]: {message}"))
}
