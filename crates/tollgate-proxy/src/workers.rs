//! Thread-per-core serving: several threads, each with its own
//! single-threaded runtime, its own listening socket on the same address
//! (`SO_REUSEPORT`, the kernel spreads new connections over them) and its
//! own pool of upstream connections, so that a request is read, decided,
//! forwarded and answered on one thread. A work-stealing runtime would
//! instead hand the request between threads at every wake-up (the client
//! connection's task, the upstream connection's task): on a loaded 2-core
//! machine that cost a third of the proxy's throughput (BENCHMARKS.md).
//!
//! The workers share the rate-limit state (the store and the plans live
//! behind `Arc`s in the [`ProxyConfig`]), so a client's budget is one budget
//! whichever thread its connection lands on.

use std::future::Future;
use std::net::SocketAddr;
use std::num::NonZeroUsize;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::watch;

use tollgate_connections::Slots;

use crate::{serve_with_slots, Error, Placement, ProxyConfig};

/// How many connections may wait to be accepted on each listener.
const BACKLOG: i32 = 1024;

/// Binds `workers` listening sockets on `addr` with `SO_REUSEPORT`. With
/// port 0 the first socket picks a free port and the others join it, so
/// all of them listen on the address returned.
///
/// # Errors
/// [`Error::Io`] when the address cannot be bound.
pub fn bind_workers(
    addr: SocketAddr,
    workers: NonZeroUsize,
) -> Result<(SocketAddr, Vec<std::net::TcpListener>), Error> {
    let first = bind_one(addr)?;
    let addr = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..workers.get() {
        listeners.push(bind_one(addr)?);
    }
    Ok((addr, listeners))
}

fn bind_one(addr: SocketAddr) -> Result<std::net::TcpListener, Error> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Serves the proxy on `listeners` (from [`bind_workers`]), one thread
/// each, placed as `placement` says, until `shutdown` completes; then every
/// worker lets its requests in flight finish, and this returns when all
/// have.
///
/// # Errors
/// The first worker's error: [`Error::Io`] when a runtime cannot start or a
/// server fails, [`Error::Pinning`] when a worker cannot be moved to its
/// CPU (it then serves nothing, and the others stop).
pub async fn run_workers(
    listeners: Vec<std::net::TcpListener>,
    config: ProxyConfig,
    placement: Placement,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let (stop, stopped) = watch::channel(false);
    let (done, mut finished) = tokio::sync::mpsc::channel(listeners.len().max(1));
    // One cap for the address, whichever worker accepts a connection.
    let slots = Slots::new(config.connections().max_connections);
    let mut workers = Vec::with_capacity(listeners.len());
    for (index, listener) in listeners.into_iter().enumerate() {
        let config = config.clone();
        let slots = slots.clone();
        let mut stopped = stopped.clone();
        let done = done.clone();
        let placement = placement.clone();
        let worker = std::thread::Builder::new()
            // Under Linux's 15 bytes for a thread's name, so that `top -H`
            // and /proc tell the workers apart.
            .name(format!("proxy-worker-{index}"))
            .spawn(move || {
                let served = placement.apply(index).and_then(|()| {
                    serve_one(listener, config, slots, async move {
                        let _ = stopped.wait_for(|stop| *stop).await;
                    })
                });
                let _ = done.blocking_send(());
                served
            })?;
        workers.push(worker);
    }
    drop(done);
    // Until shutdown, or until a worker ends by itself (it failed): then
    // the others are stopped too.
    tokio::select! {
        () = shutdown => {}
        _ = finished.recv() => {}
    }
    let _ = stop.send(true);
    while finished.recv().await.is_some() {}
    let mut result = Ok(());
    for worker in workers {
        let served = worker
            .join()
            .unwrap_or_else(|_| Err(Error::Io(std::io::Error::other("a proxy worker panicked"))));
        if result.is_ok() {
            result = served;
        }
    }
    result
}

/// One worker: a single-threaded runtime serving one listener.
fn serve_one(
    listener: std::net::TcpListener,
    config: ProxyConfig,
    slots: Slots,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        serve_with_slots(listener, config, slots, shutdown).await;
        Ok(())
    })
}
