//! # tollgate-envoy
//!
//! tollgate as an Envoy rate limit service: implements
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` over gRPC
//! (plus `grpc.health.v1.Health`), so that Envoy, Istio, Envoy Gateway or
//! Gloo ask tollgate for every request, with tollgate's sliding windows,
//! token buckets and GCRA and its multi-limit plans.
//!
//! - [`Rules`] map the request's `domain` and descriptor entries to a plan
//!   and a client key (see [`rules`] for the format);
//! - `hits_addend` (request level, or descriptor level when set) is the
//!   cost; 0 counts as 1; the descriptors of one client add up, never
//!   capped, and past [`ServiceConfig::max_cost`] (default `u32::MAX`, past
//!   which no limit could grant it) the request is `OVER_LIMIT` for ever
//!   (no `Retry-After`) and consumes nothing: not an error status, which
//!   Envoy's failure mode would by default let through;
//! - every descriptor gets a `DescriptorStatus` (code, `current_limit` named
//!   `PLAN-LIMIT` in the closest unit, `limit_remaining`,
//!   `duration_until_reset`); descriptors no rule matches are `OK`;
//!   `overall_code` is `OVER_LIMIT` if any descriptor is;
//! - `response_headers_to_add` carries the IETF `RateLimit-Policy`,
//!   `RateLimit` and (when rejected) `Retry-After` headers;
//! - a rejected request consumes nothing from any of its descriptors (see
//!   [`service`] for how, and the one race between processes);
//! - a request that is not one well-formed gRPC call of one message (a
//!   method other than `POST`, a content type other than `application/grpc`
//!   or `application/grpc+proto`, a second message in a unary call) is
//!   refused before it is decided, as grpc-go refuses it (HTTP 405, HTTP
//!   415, gRPC `UNIMPLEMENTED`), and charges nothing;
//! - a store failure is answered by the store's failure policy when the
//!   store is a `tollgate_guard::GuardedStore` (fail-open, fail-closed,
//!   local fallback, with the numbers of that answer); an error the store
//!   hands back is gRPC `UNAVAILABLE`, and Envoy's `failure_mode_deny`
//!   decides;
//! - a [`DecisionObserver`] set with [`ServiceConfig::observer`] is told
//!   every decision and store failure (for metrics).
//!
//! ```no_run
//! # async fn demo() -> Result<(), tollgate_envoy::Error> {
//! use std::sync::Arc;
//! use tollgate::{AnyPolicy, Limit, MemoryBackend, Plan, SystemClock};
//! use tollgate_envoy::{Rules, RulesConfig, ServiceConfig};
//!
//! let plan = Plan::new(
//!     "per-ip",
//!     vec![Limit::new("1s", AnyPolicy::from_name("sliding-window", 10, 1_000).unwrap(), false)],
//! )
//! .unwrap();
//! let rules = RulesConfig::from_toml(
//!     r#"
//!     [[rules]]
//!     domain = "edge"
//!     descriptor = [{ key = "remote_address" }]
//!     plan = "per-ip"
//!     "#,
//! )?;
//! let config = ServiceConfig::new(
//!     Rules::new(rules, &[plan])?,
//!     Arc::new(MemoryBackend::new()),
//!     Arc::new(SystemClock),
//! );
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8081").await.unwrap();
//! tollgate_envoy::run(listener, config, std::future::pending()).await
//! # }
//! ```

mod config;
mod error;
mod observer;
pub mod rules;
mod server;
pub mod service;
mod status;
mod taken;
mod undecodable;
mod well_formed;

pub use config::{RulesHandle, ServiceConfig, DEFAULT_DRAIN_WITHIN};
pub use error::Error;
pub use observer::DecisionObserver;
pub use rules::{EntryConfig, RuleConfig, Rules, RulesConfig};
pub use server::{default_workers, router, run, run_workers};
pub use service::RlsService;

/// The generated Envoy and gRPC types this crate speaks (from `envoy-types`),
/// for clients and tests.
pub use envoy_types::pb;
