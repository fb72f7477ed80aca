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

pub mod activity;
mod error;
pub mod head_timer;
mod limits;
mod poll_again;
mod serve;

pub use error::Error;
pub use limits::{
    Limits, Slots, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    HEADER_READ_TIMEOUT_BOUNDS, IDLE_TIMEOUT_BOUNDS, MAX_CONNECTIONS_BOUNDS,
};
pub use serve::{serve, AnswerRequests, ResponseBody};
