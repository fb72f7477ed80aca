//! # tollgate-tower
//!
//! tollgate as [tower] middleware: a [`RateLimitLayer`] in front of any
//! `Service<http::Request<B>>` (an axum `Router`, a hyper service, a proxy)
//! decides every request against a [`tollgate::Plan`] for the client named by
//! a [`KeyExtractor`] (the peer IP, a header, an API key, or a closure).
//!
//! - Allowed requests go to the inner service; their responses carry the IETF
//!   `RateLimit-Policy` / `RateLimit` headers (configurable).
//! - Rejected requests are answered by the layer: `429 Too Many Requests`
//!   with the same headers, `Retry-After`, and a body you can customise.
//! - Every clone of the layer and of its service shares one budget: the
//!   state lives in the `Arc<dyn tollgate::Store>` (memory or Redis).
//! - When the store fails, the layer does not decide itself: put the store
//!   behind `tollgate_guard::GuardedStore`, whose failure policy answers
//!   (fail-open, fail-closed, local fallback); an error it hands back (policy
//!   `unavailable`, or an unguarded store) is a `503`.
//!
//! ```
//! use std::sync::Arc;
//! use tollgate::{AnyPolicy, Limit, MemoryBackend, Plan, SystemClock};
//! use tollgate_tower::{PeerIp, RateLimitConfig, RateLimitLayer};
//!
//! let plan = Plan::new(
//!     "api",
//!     vec![Limit::new("1s", AnyPolicy::from_name("sliding-window", 10, 1_000)?, false)],
//! )?;
//! let config = RateLimitConfig::new(plan, Arc::new(MemoryBackend::new()), Arc::new(SystemClock));
//! let layer = RateLimitLayer::new(config, PeerIp::direct());
//! // axum: Router::new().route(...).layer(layer)
//! # let _ = layer;
//! # Ok::<(), tollgate::Error>(())
//! ```
//!
//! The crate is split like tower's own `limit::rate`: [`config`] (what to
//! decide and how to answer), [`layer`], [`service`], and [`key`] (who the
//! client is), [`plans`] (which plan a key is on, replaceable while serving).
//! Headers are written and header / API keys read by `tollgate_http`, the
//! same code as `tollgate serve`'s.

pub mod config;
pub mod key;
pub mod layer;
pub mod plans;
pub mod service;

pub use config::{Cost, MissingKey, RateLimitConfig, Refusal, RefusalBody};
pub use key::{ApiKey, HeaderKey, KeyExtractor, NoKey, PeerIp};
pub use layer::RateLimitLayer;
pub use plans::{Plans, PlansHandle};
pub use service::{RateLimit, ResponseBody, ResponseFuture};
