//! The one error type of the client: the server said no ([`ClientError::Api`]), the server could
//! not be reached ([`ClientError::Transport`]), or it answered something this client cannot read
//! ([`ClientError::Decode`]).
//!
//! The split matters to callers: an `Api` error is an answer (the request was processed and
//! refused, nothing changed), while a `Transport` error leaves the outcome unknown, so a retry
//! must reuse the same `hold_id` to stay idempotent.

use stockd_api::ErrorCode;

/// Why a request did not produce the value asked for.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a non-2xx status. `code` and `message` are the `error` and
    /// `message` fields of the contract's error body; `body` is the whole body, details included
    /// (for example `pool`, `available`, `requested` of `insufficient_stock`).
    ///
    /// A non-2xx answer that is not a contract error body (a proxy's HTML page, say) still lands
    /// here, with `code` `http_<status>` and the start of the body text as `message`.
    /// `raw_body` is the body exactly as received, for callers that show it unchanged.
    #[error("{code}: {message} (HTTP {status})")]
    Api {
        status: u16,
        code: String,
        message: String,
        body: serde_json::Value,
        raw_body: Vec<u8>,
    },
    /// The request could not be sent or its answer not received: bad base URL, connection
    /// refused, timeout, connection reset. The server may or may not have applied it.
    #[error("transport: {0}")]
    Transport(#[from] reqwest::Error),
    /// A 2xx answer whose body is not the JSON this endpoint promises.
    #[error("cannot decode the answer: {0}")]
    Decode(#[from] serde_json::Error),
}

impl ClientError {
    /// The HTTP status of an `Api` error.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The contract's error code (`insufficient_stock`, `hold_not_found`, ...) of an `Api` error.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The code of an `Api` error as one of the contract's [`ErrorCode`]s; `None` for a code
    /// the contract does not have (`http_<status>`, a newer server's).
    pub fn error_code(&self) -> Option<ErrorCode> {
        self.code().and_then(ErrorCode::parse)
    }

    /// A detail field of an `Api` error body, such as `available` or `expires_at_ms`.
    pub fn detail(&self, field: &str) -> Option<&serde_json::Value> {
        match self {
            ClientError::Api { body, .. } => body.get(field),
            _ => None,
        }
    }
}

/// What [`crate::Client`] methods return.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;
