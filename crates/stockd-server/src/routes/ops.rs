//! Operational endpoints: liveness, readiness, Prometheus metrics, the OpenAPI document.
//!
//! None of them needs a token. `/readyz` asks the backend; the others never touch it (the
//! metrics scrape only reads its stats). They must stay cheap: probes run often.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{paths, App};
use crate::error::ApiError;
use crate::exposition::negotiate;
use crate::json::NoQuery;
use crate::reply;
use crate::wire::{ReadyBody, StatusBody};

#[utoipa::path(
    get,
    path = paths::HEALTHZ,
    tag = "ops",
    summary = "The process is up",
    security(()),
    responses((status = 200, description = "Up", body = StatusBody, example = json!({"status": "ok"})))
)]
pub(crate) async fn healthz(_: NoQuery) -> Response {
    reply::json(StatusCode::OK, &StatusBody { status: "ok" })
}

#[utoipa::path(
    get,
    path = paths::READYZ,
    tag = "ops",
    summary = "The backend is reachable and can serve writes",
    security(()),
    responses(
        (status = 200, description = "Ready, with warnings about the backend's set-up", body = ReadyBody,
         example = json!({"status": "ready", "warnings": []})),
    )
)]
pub(crate) async fn readyz(State(app): State<App>, _: NoQuery) -> Response {
    match app.backend.ready().await {
        Ok(()) => reply::json(
            StatusCode::OK,
            &ReadyBody {
                status: "ready",
                warnings: app.backend.warnings(),
            },
        ),
        Err(error) => ApiError::from(error).into_response(),
    }
}

/// How long a scrape waits for the backend's readiness check before it says not ready.
const READY_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

#[utoipa::path(
    get,
    path = paths::METRICS,
    tag = "ops",
    summary = "Prometheus metrics",
    security(()),
    responses((status = 200,
               description = "The classic Prometheus text format (0.0.4) by default; \
                              OpenMetrics 1.0.0 when `Accept` prefers it",
               content((String = "text/plain"), (String = "application/openmetrics-text"))))
)]
pub(crate) async fn metrics(
    State(app): State<App>,
    _: NoQuery,
    headers: axum::http::HeaderMap,
) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok());
    let format = negotiate(accept);
    // What /readyz would answer now, bounded so that a stuck backend cannot stall the scrape.
    let ready = tokio::time::timeout(READY_CHECK_TIMEOUT, app.backend.ready()).await;
    app.metrics.set_ready(matches!(ready, Ok(Ok(()))));
    let mut response = Response::new(Body::from(app.metrics.render(format)));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    headers.insert(header::VARY, HeaderValue::from_static("accept"));
    response
}

#[utoipa::path(
    get,
    path = paths::OPENAPI,
    tag = "ops",
    summary = "This API as an OpenAPI 3 document",
    security(()),
    responses((status = 200, description = "The document", body = Object,
               content_type = "application/json"))
)]
pub(crate) async fn openapi_json(State(app): State<App>, _: NoQuery) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        app.openapi_json.clone(),
    )
        .into_response()
}
