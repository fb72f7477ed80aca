//! [`DecisionObserver`]: a hook to count what the service decides (e.g.
//! `tollgate serve`'s Prometheus metrics), without this crate knowing how.

use std::time::Duration;

use tollgate::{Plan, PlanDecision, StoreError};

/// Told what the service decides, for metrics. Called on the request path:
/// an implementation should only bump counters (no I/O, no waiting).
///
/// What counts as a decision: every store answer for a request's cost, one
/// per client of the request. The zero-cost looks of the two-step path for
/// requests with several clients (see [`crate::service`]) are not
/// decisions and are not reported; nor is a client that had room but was
/// left untouched because another client of the same request was over its
/// limit (nothing was decided or consumed for it), nor one whose use was
/// given back because another client refused after it. A client whose
/// cost is over [`crate::ServiceConfig::max_cost`] is reported refused,
/// though the store was not asked for that cost (at its cost, or
/// `u32::MAX` when larger), so that a dashboard sees who is refused.
pub trait DecisionObserver: Send + Sync {
    /// The store (or its own failure policy, see
    /// [`PlanDecision::decided_by`]) decided a request of `cost` (at least 1)
    /// of `client` against `plan`. The client is the key the store keeps
    /// the descriptors' client under, as `edge|remote_address=10.0.0.1`.
    fn decided(&self, plan: &Plan, client: &str, cost: u32, decision: &PlanDecision);

    /// The store failed (returned an error, looks included); the service
    /// answers gRPC `UNAVAILABLE`, except to a request refused for its cost
    /// (still `OVER_LIMIT`, without the numbers the look would have given).
    fn store_failed(&self, plan: &Plan, error: &StoreError) {
        let _ = (plan, error);
    }

    /// One `ShouldRateLimit` request that asked the store took `elapsed`,
    /// from taking its client locks to its last store answer, whether it
    /// was answered or failed (requests no rule limits are not timed).
    fn timed(&self, elapsed: Duration) {
        let _ = elapsed;
    }
}
