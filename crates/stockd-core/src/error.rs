//! Every way a command can be refused, with the details a client needs to act on it: the
//! contract's one table of core errors.
//!
//! Each row of the `errors!` table below declares a variant of [`Error`] (its fields are its
//! details, named as on the wire), its code (an [`ErrorCode`] of the contract crate, whose string
//! is the `error` field of the HTTP body), its HTTP status as a plain number (a contract fact;
//! this crate knows nothing of HTTP libraries) and what it means. Everything else is derived
//! from the table: [`Error::code`], [`Error::spec`], [`Error::details`] (what the server writes
//! next to `error` and `message`), [`ERRORS`] (what the OpenAPI document lists) and
//! [`Error::from_details`] (how the Redis backend reads back a refusal its Lua library wrote).
//! A new variant is one row, and it cannot exist without its code, status and details. The Lua
//! library writes the same codes and details on its side (`S.error`); the model and the history
//! checker keep their own copies on purpose, as independent oracles of the contract.

use std::fmt;

use serde::{Serialize, Serializer};
use stockd_api::ErrorCode;

use crate::ids::{HoldId, PoolId, RequestId};

/// One error code of the contract: its code, HTTP status, detail fields and meaning. The server
/// declares its own errors (malformed JSON, auth, ...) with the same type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorSpec {
    /// The `error` field of the body, stable snake_case: an [`ErrorCode`]'s string.
    pub code: &'static str,
    /// The HTTP status the contract gives it (4xx or 503).
    pub status: u16,
    /// Every field of the variant, in order (the message of `invalid_request` included: see
    /// [`ErrorSpec::details`] for the fields written next to `error` and `message`).
    pub fields: &'static [DetailField],
    /// What it means, in a few words.
    pub meaning: &'static str,
}

impl ErrorSpec {
    /// The detail fields the body carries next to `error` and `message`: every field but the
    /// message, which is the body's `message` itself.
    pub fn details(&self) -> impl Iterator<Item = &'static DetailField> {
        self.fields
            .iter()
            .filter(|field| field.kind != DetailKind::Message)
    }
}

/// A field of an error: its wire name and type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetailField {
    pub name: &'static str,
    pub kind: DetailKind,
}

/// The type of an error's field on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetailKind {
    /// The error's text: the body's `message`, not a detail of its own.
    Message,
    /// An identifier (pool, hold, request id).
    Id,
    /// An integer `>= min`.
    Int { min: u64 },
    /// A restock delta: a non-zero integer within `-TOTAL_MAX..=TOTAL_MAX`.
    Delta,
}

/// The value of an error's field, borrowed from the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetailValue<'a> {
    /// An identifier or a message.
    Text(&'a str),
    Unsigned(u64),
    Signed(i64),
}

impl Serialize for DetailValue<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match *self {
            DetailValue::Text(text) => serializer.serialize_str(text),
            DetailValue::Unsigned(value) => serializer.serialize_u64(value),
            DetailValue::Signed(value) => serializer.serialize_i64(value),
        }
    }
}

/// A type an error's field may have: its wire kind, and the way to and from a [`DetailValue`].
pub trait DetailType: Sized {
    const KIND: DetailKind;
    fn to_detail(&self) -> DetailValue<'_>;
    fn from_detail(value: DetailValue<'_>) -> Option<Self>;
}

impl DetailType for String {
    const KIND: DetailKind = DetailKind::Message;
    fn to_detail(&self) -> DetailValue<'_> {
        DetailValue::Text(self)
    }
    fn from_detail(value: DetailValue<'_>) -> Option<Self> {
        match value {
            DetailValue::Text(text) => Some(text.to_string()),
            _ => None,
        }
    }
}

impl DetailType for u64 {
    const KIND: DetailKind = DetailKind::Int { min: 0 };
    fn to_detail(&self) -> DetailValue<'_> {
        DetailValue::Unsigned(*self)
    }
    fn from_detail(value: DetailValue<'_>) -> Option<Self> {
        match value {
            DetailValue::Unsigned(value) => Some(value),
            _ => None,
        }
    }
}

impl DetailType for i64 {
    const KIND: DetailKind = DetailKind::Delta;
    fn to_detail(&self) -> DetailValue<'_> {
        DetailValue::Signed(*self)
    }
    fn from_detail(value: DetailValue<'_>) -> Option<Self> {
        match value {
            DetailValue::Signed(value) => Some(value),
            DetailValue::Unsigned(value) => i64::try_from(value).ok(),
            DetailValue::Text(_) => None,
        }
    }
}

macro_rules! id_detail {
    ($($id:ty),*) => {$(
        impl DetailType for $id {
            const KIND: DetailKind = DetailKind::Id;
            fn to_detail(&self) -> DetailValue<'_> {
                DetailValue::Text(self.as_str())
            }
            fn from_detail(value: DetailValue<'_>) -> Option<Self> {
                match value {
                    DetailValue::Text(text) => Self::parse(text).ok(),
                    _ => None,
                }
            }
        }
    )*};
}

id_detail!(PoolId, HoldId, RequestId);

/// Why [`Error::from_details`] could not rebuild an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromDetailsError {
    /// No error of the table has this code.
    UnknownCode(String),
    /// The field is absent, or not of its kind.
    BadField {
        code: &'static str,
        field: &'static str,
    },
}

impl fmt::Display for FromDetailsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FromDetailsError::UnknownCode(code) => write!(f, "unknown error code {code}"),
            FromDetailsError::BadField { code, field } => {
                write!(f, "error {code} without a valid {field}")
            }
        }
    }
}

/// Reads field `name` of `code` through `get`.
fn field<'a, T: DetailType>(
    code: &'static str,
    name: &'static str,
    get: &mut impl FnMut(&'static str, DetailKind) -> Option<DetailValue<'a>>,
) -> Result<T, FromDetailsError> {
    get(name, T::KIND)
        .and_then(T::from_detail)
        .ok_or(FromDetailsError::BadField { code, field: name })
}

/// Declares [`Error`] and everything derived from it, from one row per variant:
/// `Variant { field: Type, ... } = (ErrorCode::Code, status, "meaning")` (a unit variant has no
/// braces). A row's field names are the detail names on the wire; its code is named, its string
/// is [`ErrorCode`]'s.
macro_rules! errors {
    ($(
        $(#[$attribute:meta])*
        $variant:ident $({ $($field:ident: $type:ty),* $(,)? })? = ($code:path, $status:literal, $meaning:literal),
    )+) => {
        #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
        pub enum Error {
            $(
                $(#[$attribute])*
                $variant $({ $($field: $type),* })?,
            )+
        }

        /// The fieldless twin of [`Error`]: one per row of the table, to name an error without
        /// its details (the OpenAPI document's lists of errors per operation).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorKind {
            $($variant,)+
        }

        /// Every core error, in the table's order ([`ErrorKind`] as `usize` is the index).
        pub const ERRORS: &[ErrorSpec] = &[
            $(ErrorSpec {
                code: $code.as_str(),
                status: $status,
                fields: &[$($(DetailField {
                    name: stringify!($field),
                    kind: <$type as DetailType>::KIND,
                }),*)?],
                meaning: $meaning,
            },)+
        ];

        impl Error {
            /// Which error of the table this is.
            pub fn kind(&self) -> ErrorKind {
                match self {
                    $(Error::$variant { .. } => ErrorKind::$variant,)+
                }
            }

            /// The error's fields with their values, in the table's order (the message of
            /// `invalid_request` included; [`Error::details`] leaves it out).
            pub fn fields(&self) -> Vec<(&'static DetailField, DetailValue<'_>)> {
                let values: Vec<DetailValue<'_>> = match self {
                    $(Error::$variant $({ $($field),* })? => {
                        vec![$($(DetailType::to_detail($field)),*)?]
                    })+
                };
                self.spec().fields.iter().zip(values).collect()
            }

            /// The error rebuilt from its code and its fields, each read by `get` (given the
            /// field's name and kind): how a backend that answers in the contract's words (the
            /// Redis library's JSON) is read back.
            pub fn from_details<'a>(
                code: &str,
                mut get: impl FnMut(&'static str, DetailKind) -> Option<DetailValue<'a>>,
            ) -> Result<Error, FromDetailsError> {
                let unknown = || FromDetailsError::UnknownCode(code.to_string());
                match ErrorCode::parse(code).ok_or_else(unknown)? {
                    $($code => Ok(Error::$variant $({ $(
                        $field: field::<$type>($code.as_str(), stringify!($field), &mut get)?
                    ),* })?),)+
                    _ => Err(unknown()),
                }
            }
        }
    };
}

errors! {
    /// The message is the error's text (`Display`); it is not repeated as a detail field.
    #[error("{message}")]
    InvalidRequest { message: String } = (ErrorCode::InvalidRequest, 422,
        "a path id, query parameter (unknown ones included) or body field is invalid or out of range"),
    #[error("pool {pool} does not exist")]
    PoolNotFound { pool: PoolId } = (ErrorCode::PoolNotFound, 404, "no such pool"),
    #[error("pool {pool} has a per-user limit; the request must name a user")]
    UserRequired { pool: PoolId } = (ErrorCode::UserRequired, 422,
        "the pool has a per-user limit and the request names no user"),
    #[error("the sale of pool {pool} has not started")]
    SaleNotStarted { pool: PoolId, starts_at_ms: u64 } = (ErrorCode::SaleNotStarted, 409,
        "the pool's sale has not started"),
    #[error("the sale of pool {pool} has ended")]
    SaleEnded { pool: PoolId, ends_at_ms: u64 } =
        (ErrorCode::SaleEnded, 409, "the pool's sale has ended"),
    #[error("pool {pool} has {available} available, {requested} requested")]
    InsufficientStock { pool: PoolId, available: u64, requested: u64 } =
        (ErrorCode::InsufficientStock, 409, "not enough available"),
    #[error("user limit of pool {pool} is {limit}: {used} used, {requested} requested")]
    UserLimitExceeded { pool: PoolId, limit: u64, used: u64, requested: u64 } =
        (ErrorCode::UserLimitExceeded, 409, "the user's per-user limit would be exceeded"),
    #[error("pool {pool}: new total {total} is below held + sold = {committed}")]
    TotalBelowCommitted { pool: PoolId, total: u64, committed: u64 } =
        (ErrorCode::TotalBelowCommitted, 409, "the new total is below held + sold"),
    /// `segments` is the pool's count; `requested` the PUT's.
    #[error("pool {pool} has {segments} segments, fixed when it was created; {requested} requested")]
    SegmentsFixed { pool: PoolId, segments: u64, requested: u64 } = (ErrorCode::SegmentsFixed, 409,
        "the pool exists with another segment count, which is fixed when a pool is created"),
    #[error("pool {pool} has {held} units held by active holds")]
    PoolHasActiveHolds { pool: PoolId, held: u64 } = (ErrorCode::PoolHasActiveHolds, 409,
        "units of the pool are held"),
    #[error("pool {pool} of this hold was deleted")]
    PoolDeleted { pool: PoolId } = (ErrorCode::PoolDeleted, 409, "a pool of the hold was deleted"),
    #[error("hold {hold_id} does not exist")]
    HoldNotFound { hold_id: HoldId } = (ErrorCode::HoldNotFound, 404,
        "no such hold (or forgotten after retention)"),
    #[error("hold {hold_id} exists with a different request")]
    HoldIdConflict { hold_id: HoldId } = (ErrorCode::HoldIdConflict, 409,
        "the hold_id exists with a different request"),
    #[error("hold {hold_id} has expired")]
    HoldExpired { hold_id: HoldId } = (ErrorCode::HoldExpired, 409, "the hold has expired"),
    #[error("hold {hold_id} was released")]
    HoldReleased { hold_id: HoldId } = (ErrorCode::HoldReleased, 409, "the hold was released"),
    #[error("hold {hold_id} is confirmed")]
    HoldConfirmed { hold_id: HoldId } = (ErrorCode::HoldConfirmed, 409, "the hold is confirmed"),
    #[error("hold {hold_id} was refunded")]
    HoldRefunded { hold_id: HoldId } = (ErrorCode::HoldRefunded, 409, "the hold was refunded"),
    #[error("hold {hold_id} is not confirmed")]
    HoldNotConfirmed { hold_id: HoldId } =
        (ErrorCode::HoldNotConfirmed, 409, "the hold is not confirmed"),
    /// `pool` and `delta` are the first request's: what the id is remembered for.
    #[error("request_id {request_id} was used by a restock of pool {pool} by {delta}")]
    RequestIdConflict { request_id: RequestId, pool: PoolId, delta: i64 } = (ErrorCode::RequestIdConflict,
        409, "the request_id names an earlier restock of another pool or delta (its pool and delta are given); nothing changed"),
    #[error("the lock is held until {expires_at_ms}")]
    LockHeld { expires_at_ms: u64 } = (ErrorCode::LockHeld, 409,
        "the lock is held (by another owner or by this one)"),
    #[error("not the current owner and token of this lock")]
    NotLockOwner =
        (ErrorCode::NotLockOwner, 409, "not the current owner and token, or the lease lapsed"),
    /// The feed no longer keeps some event after `after`: reading on would skip it silently.
    /// `oldest_seq` >= `after` + 2 whenever this is returned, so the resume point is >= 1.
    /// The consumer's position is gone for good: 410, not a retryable conflict.
    #[error(
        "events after {after} are no longer kept; the oldest kept is {oldest_seq}: repair your \
         copy (for example with a reconcile), then resume from after={}",
        .oldest_seq.saturating_sub(1)
    )]
    EventsExpired { after: u64, oldest_seq: u64 } = (ErrorCode::EventsExpired, 410,
        "some event after `after` is no longer kept: repair your copy, then resume from oldest_seq - 1"),
}

impl ErrorKind {
    /// This error's row of the table.
    pub const fn spec(self) -> &'static ErrorSpec {
        &ERRORS[self as usize]
    }
}

impl Error {
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidRequest {
            message: message.into(),
        }
    }

    /// This error's row of the table.
    pub fn spec(&self) -> &'static ErrorSpec {
        self.kind().spec()
    }

    /// The stable machine-readable code of this error.
    pub fn code(&self) -> &'static str {
        self.spec().code
    }

    /// The HTTP status the contract gives this error.
    pub fn status(&self) -> u16 {
        self.spec().status
    }

    /// The detail fields written next to `error` and `message`, with their values, in the
    /// table's order.
    pub fn details(&self) -> impl Iterator<Item = (&'static DetailField, DetailValue<'_>)> {
        self.fields()
            .into_iter()
            .filter(|(field, _)| field.kind != DetailKind::Message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value of `kind` for the tests: an id that parses, a count above the minimum.
    fn example(kind: DetailKind) -> DetailValue<'static> {
        match kind {
            DetailKind::Message => DetailValue::Text("bad"),
            DetailKind::Id => DetailValue::Text("sku-1"),
            DetailKind::Int { min } => DetailValue::Unsigned(min + 4),
            DetailKind::Delta => DetailValue::Signed(-3),
        }
    }

    /// One error of each row of the table.
    fn one_of_each() -> Vec<Error> {
        let build =
            |spec: &ErrorSpec| Error::from_details(spec.code, |_, kind| Some(example(kind)));
        ERRORS.iter().map(|spec| build(spec).unwrap()).collect()
    }

    #[test]
    fn every_error_has_one_row_with_a_distinct_snake_case_code() {
        let all = one_of_each();
        assert_eq!(all.len(), ERRORS.len());
        for (index, error) in all.iter().enumerate() {
            assert_eq!(
                error.kind() as usize,
                index,
                "{error:?} out of the table's order"
            );
            assert_eq!(error.spec(), &ERRORS[index]);
            let code = error.code();
            assert!(
                code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{code}"
            );
            assert!((400..500).contains(&error.status()), "{code}");
            assert!(!error.spec().meaning.is_empty(), "{code}");
            for other in &all[index + 1..] {
                assert_ne!(code, other.code());
            }
        }
    }

    /// The statuses the contract gives: fixed here so that a change to the table is a change to
    /// this test too.
    #[test]
    fn statuses_are_the_contracts() {
        for error in one_of_each() {
            let expected = match error.kind() {
                ErrorKind::InvalidRequest | ErrorKind::UserRequired => 422,
                ErrorKind::PoolNotFound | ErrorKind::HoldNotFound => 404,
                ErrorKind::EventsExpired => 410,
                _ => 409,
            };
            assert_eq!(error.status(), expected, "{}", error.code());
        }
    }

    #[test]
    fn details_are_every_field_but_the_message_with_its_value_and_kind() {
        for error in one_of_each() {
            let fields = error.fields();
            assert_eq!(fields.len(), error.spec().fields.len(), "{}", error.code());
            let details: Vec<&str> = error.details().map(|(field, _)| field.name).collect();
            let named: Vec<&str> = error.spec().details().map(|field| field.name).collect();
            assert_eq!(details, named, "{}", error.code());
            for (field, value) in fields {
                let fits = matches!(
                    (field.kind, value),
                    (DetailKind::Message | DetailKind::Id, DetailValue::Text(_))
                        | (DetailKind::Int { .. }, DetailValue::Unsigned(_))
                        | (DetailKind::Delta, DetailValue::Signed(_))
                );
                assert!(fits, "{} {}: {value:?}", error.code(), field.name);
            }
        }
        let expected: &[&str] = &["pool", "limit", "used", "requested"];
        let error = &one_of_each()[ErrorKind::UserLimitExceeded as usize];
        let names: Vec<&str> = error.details().map(|(field, _)| field.name).collect();
        assert_eq!(names, expected);
        assert_eq!(Error::invalid("x").details().count(), 0);
    }

    #[test]
    fn every_error_is_rebuilt_from_its_code_and_fields() {
        for error in one_of_each() {
            let fields = error.fields();
            let rebuilt = Error::from_details(error.code(), |name, kind| {
                let (field, value) = fields.iter().find(|(field, _)| field.name == name)?;
                assert_eq!(field.kind, kind);
                Some(*value)
            });
            assert_eq!(rebuilt.as_ref(), Ok(&error));
        }
        assert_eq!(
            Error::from_details("nope", |_, _| None),
            Err(FromDetailsError::UnknownCode("nope".into()))
        );
        assert_eq!(
            Error::from_details(ErrorKind::PoolNotFound.spec().code, |_, _| {
                Some(DetailValue::Text("-bad"))
            }),
            Err(FromDetailsError::BadField {
                code: ErrorKind::PoolNotFound.spec().code,
                field: "pool"
            })
        );
        assert_eq!(
            Error::from_details(ErrorKind::LockHeld.spec().code, |_, _| None),
            Err(FromDetailsError::BadField {
                code: ErrorKind::LockHeld.spec().code,
                field: "expires_at_ms"
            })
        );
    }
}
