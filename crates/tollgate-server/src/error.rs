//! The one error type of the server crate.

use std::net::SocketAddr;

/// Why the server could not start or keep serving, or could not decide a
/// request.
///
/// Bad HTTP requests are answered with a 4xx by [`crate::http`] before
/// anything is decided. The decision itself ([`crate::Server::decide`])
/// answers in domain terms ([`Error::UnknownPlan`],
/// [`Error::CostOverMaximum`], [`Error::Store`]); each front end maps those
/// to its own protocol (the HTTP API: 400, 400 and 503);
/// [`crate::Server::inspect`] fails with [`Error::Inspect`] (503).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The config could not be read, checked or wired to its store.
    #[error(transparent)]
    Config(#[from] tollgate_config::Error),
    /// A request named a plan the config does not have.
    #[error("unknown plan {name:?}: known plans are {known}")]
    UnknownPlan {
        /// The plan asked for.
        name: String,
        /// The plans there are, comma-separated.
        known: String,
    },
    /// A request asked for more than the config's `max_cost`.
    #[error("cost {cost} is over the maximum of {max_cost} per request")]
    CostOverMaximum {
        /// The cost asked for.
        cost: u32,
        /// The config's `max_cost`.
        max_cost: u32,
    },
    /// The store failed and the failure policy `unavailable` handed the
    /// error back; nothing was decided.
    #[error("the store cannot decide this request: {}", .0.message)]
    Store(tollgate::StoreError),
    /// The store could not be read to inspect a client (down, timed out,
    /// its circuit open); no failure policy stands in for an inspection.
    /// Its words are the log's (a Redis error may name a script's SHA and
    /// Lua line), not the answer's.
    #[error(
        "the store cannot be read to inspect this client: {} (its error is in the log)",
        if .0.is_transient() { "it is unavailable" } else { "it failed" }
    )]
    Inspect(tollgate::StoreError),
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Serving connections failed.
    #[error("serving HTTP failed: {0}")]
    Serve(#[source] std::io::Error),
    /// Serving gRPC (Envoy's rate limit service) failed.
    #[error("serving gRPC failed: {0}")]
    Grpc(#[source] tollgate_envoy::Error),
    /// No config file is set, so there is nothing to reload from.
    #[error("no config file to reload: the server runs on the embedded default")]
    NoConfigFile,
}
