//! The accept loop: a slot, then a connection, then a task serving it under
//! the limits until it ends, times out or the server shuts down.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;

use axum::serve::Listener;
use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit};
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
    // Set at the end of the shutdown's drain: every connection still open
    // closes then.
    let (drain_over, drain_over_seen) = watch::channel(false);
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
            drain_over: drain_over_seen.clone(),
        };
        tokio::spawn(PollAgain::new(connection.serve(stream, graceful.watcher())));
    }
    drop(listener);
    // The idle timeout alone does not bound the drain: a client sending a
    // body a byte at a time is never idle.
    if tokio::time::timeout(limits.idle_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            drain = ?limits.idle_timeout,
            "connections still open after the shutdown's drain (the idle timeout): closed"
        );
        let _ = drain_over.send(true);
    }
}

/// One accepted connection and what it needs.
struct Connection<S> {
    service: S,
    limits: Limits,
    peer: SocketAddr,
    /// Released when the connection closes.
    slot: OwnedSemaphorePermit,
    /// True once the shutdown's drain is over.
    drain_over: watch::Receiver<bool>,
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
            .header_read_timeout(self.limits.header_read_timeout);
        let (inner, counter) = (self.service, activity.clone());
        // Each request is counted as a complete head.
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            counter.request_started();
            inner.clone().oneshot(request)
        });
        let connection = builder
            .serve_connection_with_upgrades(io, service)
            .into_owned();
        let expired = activity.expired(self.limits.idle_timeout, self.limits.header_read_timeout);
        let mut drain_over = self.drain_over;
        tokio::select! {
            served = watcher.watch(connection) => {
                if let Err(error) = served {
                    tracing::debug!(peer = %self.peer, %error, "connection ended with an error");
                }
            }
            () = expired => {
                tracing::debug!(peer = %self.peer, "connection closed: header-read or idle timeout");
            }
            // Closed with the request in flight: abandoned, as by a client
            // that hung up (a decision not yet taken is never taken).
            _ = drain_over.wait_for(|over| *over) => {
                tracing::debug!(peer = %self.peer, "connection closed: the shutdown's drain is over");
            }
        }
        drop(self.slot);
    }
}
