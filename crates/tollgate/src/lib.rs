//! # tollgate
//!
//! Exact per-client rate limiting. For every request, tollgate answers: let it
//! in, or reject it? Every client has its own limit under a policy chosen by
//! name:
//!
//! - `"sliding-window"`: a log of allowed request times; a request at `now` is
//!   allowed when fewer than `limit` were allowed at times `t > now - window_ms`.
//! - `"token-bucket"`: `limit` tokens, starting full, one token dripping back
//!   every `window_ms / limit` ms counted from the client's first call.
//! - `"gcra"`: the generic cell rate algorithm, a token bucket refilled
//!   continuously rather than in whole drips.
//!
//! Time is passed in (`now_ms`), so answers are exact and repeatable; a server
//! reads it from one [`Clock`]. This crate has no async code and no network;
//! the Redis store, the HTTP service and the middleware live in sibling crates.
//!
//! ```
//! use tollgate::RateLimiter;
//!
//! // Two requests per second per client, one token back every 500 ms.
//! let limiter = RateLimiter::new("token-bucket", 2, 1_000)?;
//! assert!(limiter.allow("app", 0));
//! assert!(limiter.allow("app", 10));
//! assert!(!limiter.allow("app", 20));
//!
//! // The numbers that rate-limit headers need.
//! let decision = limiter.check("app", 20, 1);
//! assert!(!decision.allowed);
//! assert_eq!(decision.retry_after_ms, Some(480)); // the drip at 500
//! assert_eq!(decision.reset_after_ms, 980); // full again at 1000
//! assert_eq!(limiter.remaining("app", 499), 0);
//! assert_eq!(limiter.remaining("app", 500), 1);
//! # Ok::<(), tollgate::Error>(())
//! ```
//!
//! The pieces: a [`Policy`] is pure arithmetic on one client's state; a
//! [`MemoryStore`] keeps every client's state in a sharded map; a [`Limiter`]
//! puts the two together ([`RateLimiter`] with the policy chosen by name);
//! a [`Plan`] checks several limits at once, all or nothing; [`Store`] is the
//! async boundary that the Redis store and the services share, and
//! [`inspect_plan`] reads a client's state under a plan for every store.

mod async_store;
mod clock;
mod decision;
mod duration;
mod error;
mod eviction;
mod failure;
pub mod headers;
pub mod inspect;
mod limiter;
mod plan;
mod plan_limiter;
pub mod policy;
pub mod receipt;
mod same_id;
mod store;
#[cfg(feature = "testing")]
pub mod testing;

/// The longest client id tollgate's HTTP front ends (`serve`'s API, the
/// tower layer and so the proxy) and its config's `[clients]` accept, in
/// bytes. A client's id is kept with its state, in memory and in
/// Redis keys, so the cap bounds what one client can cost; the library
/// itself takes ids of any length.
pub const MAX_CLIENT_BYTES: usize = 256;

pub use async_store::{
    MemoryBackend, Store, StoreError, StoreErrorKind, StoreFuture, SETTLE_WITHIN,
};
pub use clock::{Clock, ManualClock, MonotonicClock, SystemClock, SystemMonotonicClock};
pub use decision::Decision;
pub use duration::{format_duration, parse_duration};
pub use error::Error;
pub use failure::{FailurePolicy, UnknownFailurePolicy};
pub use headers::RateLimitHeaders;
pub use inspect::{inspect_plan, Inspection, LimitState, LogRun};
pub use limiter::{Limiter, RateLimiter};
pub use plan::{
    DecidedBy, Limit, LimitDecision, Plan, PlanDecision, PlanStates, MAX_LIMITS_PER_PLAN,
};
pub use plan_limiter::{check_plan, PlanLimiter};
pub use policy::{AnyPolicy, AnyState, Policy, Reclaim, POLICY_NAMES};
pub use receipt::{GivenBack, Receipt, Returnable};
pub use store::{
    Access, Entry, Eviction, LeastRecentlySeen, Lineage, MemoryStore, SameEntry, RECLAIM_BEHIND_MS,
};
