//! # tollgate-connections
//!
//! The one accept loop of tollgate's HTTP listeners, used by `tollgate
//! serve` and `tollgate proxy` alike, with the limits that keep slow or
//! idle clients from holding the server's memory and file descriptors:
//!
//! - a **header-read timeout**: a request head must arrive in full within
//!   it, counted from the connection's start for its first request and
//!   from the first byte of each later one ([`head_timer`]);
//! - an **idle timeout**: a connection on which no byte moves either way
//!   for that long is closed, whether it waits between keep-alive requests
//!   or stalls in the middle of one ([`activity`]);
//! - a **cap on open connections** per listen address: past it, each
//!   listener holds the one connection it accepted last, unserved, until
//!   a slot frees, and accepts no other, so the rest wait in the kernel's
//!   listen backlog ([`Slots`]).
//!
//! [`serve`] runs an axum router (or any service answering every request) under these [`Limits`] until a shutdown
//! future completes, then lets the requests in flight finish, as
//! `axum::serve` with graceful shutdown does. Each connection's service is
//! made for its peer's address, so a front end that keys by the peer knows
//! it without reading it from every request. Each connection's task
//! answers a wake that arrives while it is polled by polling again at once
//! (`poll_again.rs`: hyper wakes a connection whenever its service reads a
//! request body, which would otherwise send it to the back of Tokio's
//! queue).
//!
//! ```
//! use axum::{routing::get, Router};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! use tokio::net::{TcpListener, TcpStream};
//! use tollgate_connections::{serve, Limits, Slots};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let listener = TcpListener::bind("127.0.0.1:0").await?;
//! let address = listener.local_addr()?;
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! // A router made for each connection's peer, under the default limits
//! // and at most 64 connections open at once.
//! let service_for = |peer| Router::new().route("/", get(move || async move { format!("{peer}") }));
//! let server = tokio::spawn(serve(listener, service_for, Limits::default(), Slots::new(64), async {
//!     let _ = stopped.await;
//! }));
//!
//! let mut client = TcpStream::connect(address).await?;
//! let me = client.local_addr()?;
//! client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await?;
//! let mut answer = String::new();
//! client.read_to_string(&mut answer).await?;
//! assert!(answer.starts_with("HTTP/1.1 200 OK"));
//! assert!(answer.ends_with(&me.to_string()), "the service knew its peer");
//!
//! let _ = stop.send(());
//! server.await?; // returns once the requests in flight are done
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod activity;
mod error;
pub mod head_timer;
mod limits;
mod poll_again;
mod serve;

pub use error::Error;
pub use limits::{
    Limits, Slots, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    HEADER_READ_TIMEOUT_BOUNDS, IDLE_TIMEOUT_BOUNDS, MAX_CONNECTIONS_BOUNDS, MAX_HEAD_BYTES,
};
pub use serve::{serve, AnswerRequests, ResponseBody};
