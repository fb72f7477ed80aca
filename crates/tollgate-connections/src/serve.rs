//! The accept loop: a slot, then a connection, then a task serving it under
//! the limits until it ends, times out or the server shuts down.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::serve::Listener;
use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tower::{Service, ServiceExt};

use crate::activity::{Activity, ActivityIo};
use crate::head_timer::HeadTimer;
use crate::poll_again::PollAgain;
use crate::{Limits, Slots};

/// What [`serve`] answers a connection's requests with: a service cloned
/// per request, whose future can move between threads (an axum `Router`,
/// or a front end's own service).
pub trait AnswerRequests<B>:
    Service<Request<Incoming>, Response = Response<B>, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + 'static
{
}

impl<S, B> AnswerRequests<B> for S where
    S: Service<
            Request<Incoming>,
            Response = Response<B>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

/// A response body [`serve`] can write (hyper's own requirements).
pub trait ResponseBody:
    Body<Data: Send, Error: Into<Box<dyn std::error::Error + Send + Sync>>> + Send + 'static
{
}

impl<B> ResponseBody for B where
    B: Body<Data: Send, Error: Into<Box<dyn std::error::Error + Send + Sync>>> + Send + 'static
{
}

/// Serves each connection accepted on `listener` with the service that
/// `service_for` makes for its peer's address (an axum `Router`, or any
/// service that answers every request, cloned per request) under `limits`,
/// holding one of `slots` per open connection, until `shutdown` completes;
/// then stops accepting, asks every open connection to close once its
/// request in flight is answered, and returns when all are closed, or
/// once `limits.idle_timeout` has passed, closing those still open then
/// (their requests in flight are abandoned, as by a client that hung up).
///
/// The peer's address goes to `service_for` once per connection, and not
/// into each request's extensions (axum's `ConnectInfo`, which cost three
/// allocations per request): a front end that keys by the peer keeps it in
/// its connection's service (the proxy), one that does not pays nothing.
/// Accept errors are handled as `axum::serve` does: a failed handshake is
/// skipped, a lack of file descriptors waits and retries.
pub async fn serve<S, B>(
    mut listener: TcpListener,
    service_for: impl Fn(SocketAddr) -> S + Send,
    limits: Limits,
    slots: Slots,
    shutdown: impl Future<Output = ()> + Send,
) where
    S: AnswerRequests<B>,
    B: ResponseBody,
{
    let graceful = GracefulShutdown::new();
    // When the shutdown's drain ends, set as it begins: every connection
    // still open closes then.
    let drain_ends = Arc::new(OnceLock::new());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = Listener::accept(&mut listener) => accepted,
            () = &mut shutdown => break,
        };
        // Past the cap, this connection waits unserved for a slot, and the
        // loop accepts no other: the rest wait in the kernel's backlog.
        // (Accepting first keeps listeners that share one pool, the proxy's
        // workers, from holding a slot while waiting on an empty socket.)
        let slot = tokio::select! {
            slot = slots.acquire() => slot,
            () = &mut shutdown => break,
        };
        let Some(slot) = slot else { break };
        let connection = Connection {
            service: service_for(peer),
            limits,
            peer,
            slot,
            drain_ends: drain_ends.clone(),
        };
        tokio::spawn(PollAgain::new(connection.serve(stream, graceful.watcher())));
    }
    drop(listener);
    // The idle timeout alone does not bound the drain: a client sending a
    // body a byte at a time is never idle. Each connection's idle timer
    // closes it at this time, so that the wait below ends by then.
    let _ = drain_ends.set(tokio::time::Instant::now() + limits.idle_timeout);
    graceful.shutdown().await;
}

/// One accepted connection and what it needs.
struct Connection<S> {
    service: S,
    limits: Limits,
    peer: SocketAddr,
    /// Released when the connection closes.
    slot: OwnedSemaphorePermit,
    /// When the shutdown's drain ends, once it has begun.
    drain_ends: Arc<OnceLock<tokio::time::Instant>>,
}

impl<S> Connection<S> {
    async fn serve<B>(self, stream: TcpStream, watcher: Watcher)
    where
        S: AnswerRequests<B>,
        B: ResponseBody,
    {
        // Decisions are small answers on keep-alive connections: send them
        // at once rather than waiting for more to coalesce.
        let _ = stream.set_nodelay(true);
        let activity = Activity::new();
        let io = TokioIo::new(ActivityIo::new(stream, activity.clone()));
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(HeadTimer::new(
                activity.clone(),
                self.limits.header_read_timeout,
            ))
            .header_read_timeout(self.limits.header_read_timeout)
            .max_buf_size(crate::limits::MAX_HEAD_BYTES);
        let (inner, counter) = (self.service, activity.clone());
        // Each request is counted as a complete head.
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            counter.request_started();
            inner.clone().oneshot(request)
        });
        let connection = builder
            .serve_connection_with_upgrades(io, service)
            .into_owned();
        let limits = self.limits;
        let expired = activity.expired(
            limits.idle_timeout,
            limits.header_read_timeout,
            &self.drain_ends,
        );
        tokio::select! {
            served = watcher.watch(connection) => {
                if let Err(error) = served {
                    tracing::debug!(peer = %self.peer, %error, "connection ended with an error");
                }
            }
            // At the end of a shutdown's drain, a request in flight is
            // abandoned, as by a client that hung up (a decision not yet
            // taken is never taken).
            () = expired => {
                tracing::debug!(
                    peer = %self.peer,
                    "connection closed: header-read or idle timeout, or the shutdown's drain is over"
                );
            }
        }
        drop(self.slot);
    }
}
