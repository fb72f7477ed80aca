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
//!   cost; 0 counts as 1;
//! - every descriptor gets a `DescriptorStatus` (code, `current_limit` named
//!   `PLAN-LIMIT` in the closest unit, `limit_remaining`,
//!   `duration_until_reset`); descriptors no rule matches are `OK`;
//!   `overall_code` is `OVER_LIMIT` if any descriptor is;
//! - `response_headers_to_add` carries the IETF `RateLimit-Policy`,
//!   `RateLimit` and (when rejected) `Retry-After` headers;
//! - a rejected request consumes nothing from any of its descriptors (see
//!   [`service`] for how, and the one race between processes);
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

pub use config::{RulesHandle, ServiceConfig};
pub use error::Error;
pub use observer::DecisionObserver;
pub use rules::{EntryConfig, RuleConfig, Rules, RulesConfig};
pub use server::{default_workers, router, run, run_workers};
pub use service::RlsService;

/// The generated Envoy and gRPC types this crate speaks (from `envoy-types`),
/// for clients and tests.
pub use envoy_types::pb;
