//! The busiest routes answered before the router.
//!
//! Every API gateway in front of `serve` calls `POST /v1/check` or
//! `GET /v1/auth` once per request of its own, and load balancers poll
//! `GET /healthz`. Through axum's `Router` each of them paid for the route
//! lookup, its layers of boxed futures and a boxed body (about 4,400 of a
//! check's 31,800 CPU instructions; BENCHMARKS.md, "A fast path for the
//! busiest routes"). [`HotRoutes`] matches these three by method and path and calls
//! the same functions the router's handlers call, so the answers are the
//! router's, byte for byte; every other request, including these paths with
//! another method, goes to the router.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Bytes, HttpBody};
use axum::http::{Method, Request};
use axum::response::Response;
use axum::{BoxError, Router};
use tower::{Service, ServiceExt};

use super::router;
use crate::http::{answer_auth, answer_check, healthz_response, query_utf8, refuse};
use crate::server::Server;

/// `serve`'s HTTP service: the hot routes, then [`router`] for the rest.
#[derive(Clone)]
pub struct HotRoutes {
    server: Server,
    router: Router,
}

impl HotRoutes {
    /// The hot routes of `server`, and its router for everything else.
    pub fn new(server: Server) -> Self {
        Self {
            router: router(server.clone()),
            server,
        }
    }
}

/// What [`HotRoutes`] answers with: one boxed future per request.
type Answer = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl<B> Service<Request<B>> for HotRoutes
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Answer {
        // As the router's layer does: a query that is not UTF-8 is refused
        // before any route reads it (a request without one pays a look).
        if let Err(rejection) = query_utf8(request.uri()) {
            return Box::pin(std::future::ready(Ok(refuse(&self.server, rejection))));
        }
        match (request.method(), request.uri().path()) {
            (&Method::POST, "/v1/check") => {
                let server = self.server.clone();
                Box::pin(async move {
                    let (parts, body) = request.into_parts();
                    Ok(answer_check(&server, &parts.uri, &parts.headers, body).await)
                })
            }
            (&Method::GET, "/v1/auth") => {
                let server = self.server.clone();
                Box::pin(
                    async move { Ok(answer_auth(&server, request.uri(), request.headers()).await) },
                )
            }
            (&Method::GET, "/healthz") => Box::pin(std::future::ready(Ok(healthz_response()))),
            _ => Box::pin(self.router.clone().oneshot(request)),
        }
    }
}
