//! # tollgate-guard
//!
//! What a service answers when its store cannot: [`GuardedStore`] wraps any
//! [`tollgate::Store`] (Redis, or a store of your own) with
//!
//! - a per-call timeout, so that a slow or paused store never hangs a
//!   caller;
//! - one [`tollgate::FailurePolicy`] for every failure (a timeout, a
//!   transient error such as a lost connection or an out-of-memory Redis,
//!   a permanent one such as a script Redis refuses to run): fail-open, fail-closed, a
//!   local in-memory limiter, or `unavailable` (the error goes back and the
//!   front end answers HTTP `503` / gRPC `UNAVAILABLE`). The answer says who
//!   decided ([`tollgate::PlanDecision::decided_by`]) and is counted
//!   ([`GuardedStore::counts`]: transient and permanent errors apart);
//! - a circuit breaker ([`BreakerConfig`]): after 5 consecutive transient
//!   failures (by default) the failure policy answers at once without
//!   calling the store, and every 500 ms one call at a time probes it; the
//!   first success closes the circuit. During an outage callers wait for
//!   nothing instead of a timeout each. A store made of parts that fail
//!   apart (a Redis Cluster's masters) names each client's part
//!   ([`tollgate::Store::failure_domain`]), and each part has a circuit of
//!   its own, so one dead master does not open the circuit for the others'
//!   clients; an error a part answers about one client alone (its slot
//!   being moved: [`tollgate::StoreErrorKind::TransientClientOnly`]) is answered by the
//!   failure policy but does not count against the part;
//! - store errors in the log rather than in answers, at most one line per
//!   second per kind of error, with the number suppressed in between.
//!
//! Recovery needs no restart: the next call (or the next probe, while the
//! circuit is open) goes to the store again.
//!
//! A call that timed out had already been sent: the store may still run it
//! later, so a request may have been counted even though the failure policy
//! answered it (the Redis store bounds that with a deadline of its own).
//!
//! This crate knows no store and no server (tokio's timer is its only
//! runtime need), so a new store crate gets the same failure handling as
//! Redis by depending on it.
//!
//! ```
//! # async fn demo() -> Result<(), tollgate::StoreError> {
//! use std::time::Duration;
//! use tollgate::testing::FailingStore;
//! use tollgate::{AnyPolicy, DecidedBy, FailurePolicy, Limit, Plan, Store};
//! use tollgate_guard::GuardedStore;
//!
//! let plan = Plan::new("free", vec![
//!     Limit::new("per-second", AnyPolicy::from_name("sliding-window", 10, 1_000).unwrap(), false),
//! ]).unwrap();
//! let store = GuardedStore::new(FailingStore::down(), Duration::from_millis(50), FailurePolicy::FailOpen);
//! let decision = store.check(&plan, "app-42", 0, 1).await?;
//! assert!(decision.allowed);
//! assert_eq!(decision.decided_by, DecidedBy::Failure(FailurePolicy::FailOpen));
//! # Ok(())
//! # }
//! ```

mod answer;
mod breaker;
mod breakers;
mod guarded;
mod log;

pub use answer::failure_answer;
pub use breaker::{BreakerConfig, DEFAULT_BREAKER_FAILURES, DEFAULT_BREAKER_PROBE_INTERVAL_MS};
pub use breakers::IDLE_PART_MS;
pub use guarded::{FailureCounts, GuardedStore, DEFAULT_FAIL_CLOSED_RETRY_AFTER_MS};
pub use log::LOG_INTERVAL_MS;
