//! `POST /v1/batch`: many hold operations in one request and one backend call.
//!
//! Each op is parsed on its own, so a malformed op gets its own 422 result while the valid ones
//! run; the valid ops go to the backend in ONE `execute` call, which applies them in order. Each
//! result is exactly what the single endpoint would answer. This handler must never reorder ops
//! or decide an outcome itself.
//!
//! A body of good ops, the usual case, is read in one pass and its answer written into one
//! buffer sized for it; only a body with a bad op is read again, op by op, with the field paths
//! its refusals name (`dto::decode_batch`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use stockd_core::limits::BATCH_OPS_MAX;
use stockd_core::{Outcome, Reply};

use super::{paths, App};
use crate::dto::{decode_batch, decode_op, BatchBody, BatchOps};
use crate::error::ApiError;
use crate::json::{BodyBytes, NoQuery};
use crate::reply::{self, ReplyBody};
use crate::syntax;
use crate::wire::BatchResponse;

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
    )
)]
pub(crate) async fn batch(
    State(app): State<App>,
    _: NoQuery,
    BodyBytes(body): BodyBytes,
) -> Response {
    match run(&app, &body).await {
        Ok(results) => {
            let capacity = results.len().saturating_mul(RESULT_CAPACITY_BYTES);
            reply::json_with_capacity(StatusCode::OK, &results, capacity)
        }
        Err(error) => error.into_response(),
    }
}

/// Room for one result in the answer's buffer: a hold object with one item and ids of some
/// twenty bytes takes about 250, so that a batch's answer is written without growing its buffer.
const RESULT_CAPACITY_BYTES: usize = 320;

/// The results of a batch: the backend's outcomes of the ops that decoded, in order, and the
/// refusals of the ops that did not, each with its op's index, in order.
struct Results {
    outcomes: Vec<Outcome>,
    refusals: Vec<(usize, ApiError)>,
}

impl Results {
    fn len(&self) -> usize {
        self.outcomes.len() + self.refusals.len()
    }
}

async fn run(app: &App, body: &[u8]) -> Result<Results, ApiError> {
    let ops = decode_batch(body)?;
    if ops.len() == 0 || ops.len() > BATCH_OPS_MAX {
        return Err(ApiError::invalid(format!(
            "ops must have from 1 to {BATCH_OPS_MAX} entries, got {}",
            ops.len()
        )));
    }
    let (commands, refusals) = match ops {
        BatchOps::Decoded(commands) => (commands, Vec::new()),
        BatchOps::Raw(ops) => {
            let mut commands = Vec::with_capacity(ops.len());
            let mut refusals = Vec::new();
            for (index, op) in ops.iter().enumerate() {
                // Decoded as its single endpoint's request is: an op written as an array is
                // refused, not read positionally, and a refusal is worded as the endpoint's is.
                match decode_op(op) {
                    Ok(command) => commands.push(command),
                    Err(error) => refusals.push((index, in_op(index, error))),
                }
            }
            // The body's own reading skips over the ops' text, where bytes that are not JSON
            // can hide (a lone surrogate in a string, nesting too deep): when an op is refused,
            // the whole body is checked, and if it is not JSON it is refused whole, 400, as a
            // single endpoint refuses the same bytes. An op that decodes was read whole, so a
            // batch of good ops needs no check.
            if !refusals.is_empty() {
                if let Err(not_json) = syntax::check(body) {
                    return Err(ApiError::InvalidJson(not_json.to_string()));
                }
            }
            (commands, refusals)
        }
    };
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
    Ok(Results { outcomes, refusals })
}

/// The result of one op.
enum OpResult<'a> {
    Reply(&'a Reply),
    Error(&'a ApiError),
}

impl Serialize for OpResult<'_> {
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

impl Serialize for Results {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("results", &InOrder(self))?;
        map.end()
    }
}

/// One result per op, in the ops' order: each refused op's refusal at its index, and the
/// outcomes, in order, in the other places.
struct InOrder<'a>(&'a Results);

impl Serialize for InOrder<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        let mut refusals = self.0.refusals.iter().peekable();
        let mut outcomes = self.0.outcomes.iter();
        for index in 0..self.0.len() {
            if let Some((_, refusal)) = refusals.next_if(|(at, _)| *at == index) {
                seq.serialize_element(&OpResult::Error(refusal))?;
                continue;
            }
            match outcomes.next() {
                Some(Ok(reply)) => seq.serialize_element(&OpResult::Reply(reply))?,
                Some(Err(error)) => {
                    seq.serialize_element(&OpResult::Error(&ApiError::Core(error.clone())))?
                }
                // Counted by `run`: every op that was not refused has an outcome.
                None => break,
            }
        }
        seq.end()
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
