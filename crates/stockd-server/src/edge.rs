//! The layer every request passes through after routing: it names the route (from axum's
//! `MatchedPath`), checks the bearer token, and counts and times the request. A server without
//! tokens that is sent one says, in [`TOKEN_UNCHECKED`], that it did not check it: a client
//! that believes it is authenticating can tell the server lets anyone in.
//!
//! One hand-written service instead of several `from_fn` middlewares because this runs on every
//! request of a benchmarked hot path: no boxed future, no cloned inner service, one `Instant`.
//! It must never look at bodies or decide anything beyond "may this token call this route".

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{header, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use tower::{Layer, Service};

use crate::auth::{Auth, Target};
use crate::metrics::{method_slot, ErrorCode, Metrics};
use crate::routes::RouteId;

/// `Stockd-Auth: none` on the answer to a request that carried `Authorization` when the server
/// has no tokens: the token was not checked (anyone may call). docs/api.md, "Auth".
pub(crate) const TOKEN_UNCHECKED: (HeaderName, HeaderValue) = (
    HeaderName::from_static("stockd-auth"),
    HeaderValue::from_static("none"),
);

#[derive(Clone)]
pub(crate) struct EdgeLayer {
    auth: Arc<Auth>,
    metrics: Arc<Metrics>,
}

impl EdgeLayer {
    pub(crate) fn new(auth: Arc<Auth>, metrics: Arc<Metrics>) -> Self {
        EdgeLayer { auth, metrics }
    }
}

impl<S> Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Edge<S> {
        Edge {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Edge<S> {
    inner: S,
    layer: EdgeLayer,
}

impl<S> Service<Request> for Edge<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = Infallible;
    type Future = EdgeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let started = Instant::now();
        let matched = request.extensions().get::<MatchedPath>();
        let route = matched.and_then(|matched| RouteId::from_path(matched.as_str()));
        let target = match (matched, route) {
            (None, _) => Target::Unrouted,
            (Some(_), Some(route)) => Target::Route(route),
            (Some(_), None) => Target::Unlisted,
        };
        let method = method_slot(request.method());
        let token_unchecked = !self.layer.auth.checks_tokens()
            && request.headers().contains_key(header::AUTHORIZATION);
        let state = match self
            .layer
            .auth
            .check(target, request.method(), request.headers())
        {
            Ok(()) => State::Inner(self.inner.call(request)),
            Err(denied) => State::Denied(Some(denied.into_response())),
        };
        EdgeFuture {
            state,
            metrics: Arc::clone(&self.layer.metrics),
            route,
            method,
            started,
            token_unchecked,
        }
    }
}

enum State<F> {
    Inner(F),
    Denied(Option<Response>),
}

pub(crate) struct EdgeFuture<F> {
    state: State<F>,
    metrics: Arc<Metrics>,
    route: Option<RouteId>,
    method: usize,
    started: Instant,
    token_unchecked: bool,
}

impl<F> Future for EdgeFuture<F>
where
    F: Future<Output = Result<Response, Infallible>> + Unpin,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut response = match &mut this.state {
            State::Inner(future) => ready!(Pin::new(future).poll(cx))?,
            State::Denied(response) => response.take().unwrap_or_default(),
        };
        if this.token_unchecked {
            let (name, value) = TOKEN_UNCHECKED;
            response.headers_mut().insert(name, value);
        }
        this.metrics.record(
            this.route,
            this.method,
            response.status(),
            response.extensions().get::<ErrorCode>().copied(),
            this.started.elapsed(),
        );
        Poll::Ready(Ok(response))
    }
}
