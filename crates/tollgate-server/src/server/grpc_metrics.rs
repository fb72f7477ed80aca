//! The gRPC rate limit service's decisions in `/metrics`: a
//! [`DecisionObserver`] that counts them as [`super::Server::decide`] counts
//! HTTP decisions (per plan and limit, who decided, latency).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tollgate::{Plan, PlanDecision, StoreError};
use tollgate_envoy::DecisionObserver;

use super::{Active, Observed};
use crate::metrics::{Frontend, Metrics, PlanMetrics};

/// Counts the gRPC service's decisions in the server's metrics.
pub(super) struct GrpcMetrics {
    active: Arc<ArcSwap<Active>>,
    metrics: Arc<Metrics>,
    /// The dashboard's counters, if on (gRPC requests carry no client id:
    /// they count in `/v1/stats`, not in `/v1/top`).
    observed: Option<Arc<Observed>>,
}

impl GrpcMetrics {
    pub(super) fn new(
        active: Arc<ArcSwap<Active>>,
        metrics: Arc<Metrics>,
        observed: Option<Arc<Observed>>,
    ) -> Self {
        Self {
            active,
            metrics,
            observed,
        }
    }
}

/// The counters of `plan` in the active config. The Envoy rules' plans are
/// copies of the config's, found by name; during a reload the rules may
/// briefly be a config ahead of or behind the counters, and a plan whose
/// limits differ is then not counted per limit rather than counted under
/// the wrong limit's name.
fn counters<'a>(active: &'a Active, plan: &Plan) -> Option<&'a PlanMetrics> {
    let index = active.config.plan_index(plan.name())?;
    let same = active.config.plans()[index]
        .limits()
        .iter()
        .map(|l| l.name())
        .eq(plan.limits().iter().map(|l| l.name()));
    same.then(|| &active.metrics[index])
}

impl DecisionObserver for GrpcMetrics {
    fn decided(&self, plan: &Plan, client: &str, cost: u32, decision: &PlanDecision) {
        let active = self.active.load();
        if let Some(observed) = &self.observed {
            observed.decided(observed.now_ms(), client, plan.name(), cost, decision);
        }
        self.metrics
            .record_decision(counters(&active, plan), cost, decision, Frontend::Grpc);
    }

    // Store failures are counted and logged (rate-limited) by the guarded
    // store that handed them back; the dashboard counts them per second.
    fn store_failed(&self, _plan: &Plan, _error: &StoreError) {
        if let Some(observed) = &self.observed {
            observed.stats.record_store_error(observed.now_ms());
        }
    }

    fn timed(&self, elapsed: Duration) {
        self.metrics.record_latency(elapsed);
        if let Some(observed) = &self.observed {
            observed.timed(observed.now_ms(), 1, elapsed);
        }
    }
}
