//! The peer's address in each request, for the front ends that read it.

use std::net::SocketAddr;
use std::task::{Context, Poll};

use axum::extract::ConnectInfo;
use hyper::Request;
use tower::Service;

/// For [`crate::serve`]: makes, per connection, a copy of `service` that
/// finds the peer's address in each request's extensions as axum's
/// `ConnectInfo<SocketAddr>`, where `into_make_service_with_connect_info`
/// would put it (and where a key taken from the peer reads it).
pub fn with_connect_info<S: Clone>(service: S) -> impl Fn(SocketAddr) -> WithConnectInfo<S> {
    move |peer| WithConnectInfo {
        inner: service.clone(),
        peer,
    }
}

/// A service that puts its connection's peer address into every request
/// before `inner` sees it (see [`with_connect_info`]).
#[derive(Debug, Clone)]
pub struct WithConnectInfo<S> {
    inner: S,
    peer: SocketAddr,
}

impl<S, B> Service<Request<B>> for WithConnectInfo<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        request.extensions_mut().insert(ConnectInfo(self.peer));
        self.inner.call(request)
    }
}
