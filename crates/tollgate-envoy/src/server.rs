//! Serving the rate limit service (and gRPC health checking) over gRPC,
//! thread per core.
//!
//! One task accepts connections on the listener and hands them out in
//! turn to the workers: threads with a single-threaded runtime each,
//! serving the same routes (one service, one set of client locks, one
//! store). A call is then read, decided and answered on the thread of its
//! connection; a work-stealing runtime would hand it between threads at
//! every wake-up (the connection's task, the stream's task). Handing
//! connections out in turn, rather than one `SO_REUSEPORT` socket per
//! worker, spreads even a few long-lived connections (Envoy keeps a
//! handful) evenly.

use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tollgate::{Store, SETTLE_WITHIN};
use tonic::service::Routes;
use tonic::transport::Server;
use tower::Layer;

use crate::config::ServiceConfig;
use crate::service::RlsService;
use crate::well_formed::WellFormedLayer;
use crate::Error;

/// The gRPC routes: `envoy.service.ratelimit.v3.RateLimitService` and
/// `grpc.health.v1.Health` (reporting `SERVING` for the server, `""`, and
/// for the rate limit service by name). Mount them in a tonic server, or
/// turn them into an axum router with `Routes::into_axum_router`.
///
/// Each service sees only well-formed gRPC calls of one request message: a
/// request with another method or content type, or with a second message,
/// is refused before it is decided (so it charges nothing), as grpc-go
/// refuses it: HTTP 405, HTTP 415, gRPC `UNIMPLEMENTED`.
pub async fn router(config: ServiceConfig) -> Routes {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<RateLimitServiceServer<RlsService>>()
        .await;
    let service = RateLimitServiceServer::new(RlsService::new(config));
    Routes::new(WellFormedLayer.layer(service)).add_service(WellFormedLayer.layer(health))
}

/// The default number of workers: one per core.
pub fn default_workers() -> NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
}

/// Serves the rate limit service on `listener` with one worker per core
/// ([`default_workers`]) until `shutdown` completes, then finishes the
/// calls in flight.
///
/// # Errors
/// See [`run_workers`].
pub async fn run(
    listener: TcpListener,
    config: ServiceConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    run_workers(listener, config, default_workers(), shutdown).await
}

/// Serves the rate limit service on `listener` with `workers` threads (see
/// the module docs) until `shutdown` completes, then stops accepting and
/// lets every worker finish the calls in flight.
///
/// # Errors
/// [`Error::Io`] when a worker cannot start; [`Error::Transport`] when a
/// worker's server fails (the others are then stopped too).
pub async fn run_workers(
    listener: TcpListener,
    config: ServiceConfig,
    workers: NonZeroUsize,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let store = config.store.clone();
    let (drain_within, drain_ended) = (config.drain_within, config.drain_ended.clone());
    let routes = router(config).await;
    let mut inboxes = Vec::with_capacity(workers.get());
    let mut finished = Vec::with_capacity(workers.get());
    for index in 0..workers.get() {
        let (inbox, connections) = mpsc::unbounded_channel();
        let (done, ended) = oneshot::channel();
        let routes = routes.clone();
        let store = store.clone();
        let drain = Drain {
            within: drain_within,
            ended: drain_ended.clone(),
        };
        std::thread::Builder::new()
            .name(format!("tollgate-grpc-{index}"))
            .spawn(move || {
                let _ = done.send(serve_worker(routes, connections, &*store, &drain));
            })?;
        inboxes.push(inbox);
        finished.push(ended);
    }
    // The listener is closed when `accept` returns: new clients are refused
    // at once rather than left waiting while the workers finish.
    accept(listener, &inboxes, shutdown).await;
    // Closing the inboxes ends every worker's connection stream: each stops
    // serving, gracefully (its calls in flight are answered).
    drop(inboxes);
    let mut result = Ok(());
    for ended in finished {
        let served = ended
            .await
            .unwrap_or_else(|_| Err(Error::Io(std::io::Error::other("a gRPC worker panicked"))));
        if result.is_ok() {
            result = served;
        }
    }
    result
}

/// Accepts connections and hands them to the workers in turn, until
/// `shutdown` completes or a worker has stopped.
async fn accept(
    listener: TcpListener,
    inboxes: &[mpsc::UnboundedSender<std::net::TcpStream>],
    shutdown: impl Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut next = 0;
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        // A failed accept (the peer gave up, no descriptors left) ends only
        // that connection, as in tonic's own accept loop.
        let Ok((stream, _)) = accepted else { continue };
        // No Nagle: a decision is a small write that must leave at once.
        let _ = stream.set_nodelay(true);
        // Registered again with the worker's own runtime.
        let Ok(stream) = stream.into_std() else {
            continue;
        };
        // A worker whose server failed has dropped its inbox: then stop
        // accepting, and so stop the others.
        if inboxes[next].send(stream).is_err() {
            return;
        }
        next = (next + 1) % inboxes.len();
    }
}

/// How long a worker's shutdown waits for calls in flight, and the flag
/// that says its wait is over.
struct Drain {
    within: Duration,
    ended: Arc<AtomicBool>,
}

/// One worker: a single-threaded runtime serving the connections it is
/// handed until their stream ends, and their calls in flight for at most
/// `drain_within` more, then letting `store` settle ([`Store::settle`])
/// before the runtime, with whatever the store or a connection still runs
/// on it, ends (the connections still open are closed then).
fn serve_worker(
    routes: Routes,
    connections: mpsc::UnboundedReceiver<std::net::TcpStream>,
    store: &dyn Store,
    drain: &Drain,
) -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        // `ended` resolves when the stream of connections has ended (its
        // sender, kept in the stream's state, is dropped with it).
        let (ended_tx, ended) = oneshot::channel::<()>();
        let incoming = futures_util::stream::unfold(
            (connections, ended_tx),
            |(mut connections, ended_tx)| async move {
                let stream = connections.recv().await?;
                Some((TcpStream::from_std(stream), (connections, ended_tx)))
            },
        );
        // The shutdown is the end of `incoming`; `pending` only makes the
        // server drain its connections gracefully then.
        let served = Server::builder()
            .add_routes(routes)
            .serve_with_incoming_shutdown(incoming, std::future::pending());
        let drained = async {
            let _ = ended.await;
            tokio::time::sleep(drain.within).await;
        };
        tokio::select! {
            served = served => served?,
            () = drained => {
                // Shared by the workers: every one decides nothing more.
                drain.ended.store(true, Ordering::Relaxed);
                tracing::warn!(
                    drain_within = ?drain.within,
                    "gRPC calls still open after the shutdown's drain: their connections are closed"
                );
            }
        }
        // What is left unsettled stays counted; a guarded store logs it.
        let _ = store.settle(SETTLE_WITHIN).await;
        Ok(())
    })
}
