//! Prometheus metrics, kept and encoded by the Prometheus project's Rust
//! client (`prometheus-client`): its counters, label families, histogram and
//! its text encoder (format 0.0.4). Every metric is named `tollgate_*` (the
//! registry's prefix); the list is in the README ("Metrics (all
//! `tollgate_*`)"), and a test reads each one back from `/metrics`.
//!
//! The hot path only increments counters it already holds: each plan and
//! limit of the active config carries its counters, taken from the label
//! families once when the config is loaded (gRPC decisions find their plan's
//! by name: one hash lookup, no allocation). A family keeps a counter per
//! label set for good, so counters never go backwards across reloads (a
//! removed limit keeps its last values).

mod store_gauges;

use std::time::Duration;

use prometheus_client::encoding::{prometheus_text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tollgate::{DecidedBy, FailurePolicy, Plan, PlanDecision};

pub use store_gauges::{Circuit, Gauges, StoreCalls, StoreErrors};

/// The prefix of every metric name.
const PREFIX: &str = "tollgate";

/// Upper bounds of the latency buckets, in seconds: 10 µs to 1 s, spaced so
/// that the 2 ms p99 target falls between two bounds.
const LATENCY_BOUNDS: [f64; 13] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.05,
    0.25, 1.0,
];

/// The labels of `tollgate_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlanOutcome {
    plan: String,
    outcome: &'static str,
}

/// The labels of `tollgate_limit_decisions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitOutcome {
    plan: String,
    limit: String,
    outcome: &'static str,
}

/// The labels of `tollgate_shadow_rejections_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlanLimit {
    plan: String,
    limit: String,
}

/// One label with a value from a fixed list, for the small families.
type OneLabel = [(&'static str, &'static str); 1];

/// Registers a counter family of one label and creates one counter per
/// value, so that every value is exposed (at zero) from the start; returns
/// the counters in the order of `values`.
fn labelled<const N: usize>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    label: &'static str,
    values: [&'static str; N],
) -> [Counter; N] {
    let family = Family::<OneLabel, Counter>::default();
    registry.register(name, help, family.clone());
    values.map(|value| family.get_or_create_owned(&[(label, value)]))
}

/// Counters of one plan.
#[derive(Debug, Clone)]
struct PlanCounters {
    allowed: Counter,
    rejected: Counter,
}

/// Counters of one limit of one plan.
#[derive(Debug, Clone)]
struct LimitCounters {
    allowed: Counter,
    rejected: Counter,
    shadow_rejected: Counter,
}

/// The counters of one plan of the active config, in the plan's limit order.
#[derive(Debug, Clone)]
pub struct PlanMetrics {
    plan: PlanCounters,
    limits: Vec<LimitCounters>,
}

impl PlanMetrics {
    /// Counts one decision (not a peek) taken against this plan: for the
    /// plan as it was answered, and for each limit as that limit decided.
    /// A fail-open or fail-closed answer was decided by no limit (it says
    /// every limit allowed, or rejected, whatever their state), so it is
    /// counted for the plan only, lest an outage read as limits reached;
    /// the local fallback's limits did decide, and are counted.
    pub fn record(&self, decision: &PlanDecision) {
        let counter = if decision.allowed {
            &self.plan.allowed
        } else {
            &self.plan.rejected
        };
        counter.inc();
        if matches!(
            decision.decided_by,
            DecidedBy::Failure(FailurePolicy::FailOpen | FailurePolicy::FailClosed)
        ) {
            return;
        }
        for (counters, limit) in self.limits.iter().zip(&decision.limits) {
            let counter = match (limit.decision.allowed, limit.shadow) {
                (true, _) => &counters.allowed,
                (false, false) => &counters.rejected,
                (false, true) => &counters.shadow_rejected,
            };
            counter.inc();
        }
    }
}

/// Which front end a decision came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frontend {
    /// The HTTP API (`/v1/check`, `/v1/auth`).
    Http,
    /// Envoy's rate limit service (gRPC `ShouldRateLimit`).
    Grpc,
}

impl Frontend {
    /// Every front end, in the order of [`Frontend::index`].
    const ALL: [Frontend; 2] = [Frontend::Http, Frontend::Grpc];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Frontend::Http => "http",
            Frontend::Grpc => "grpc",
        }
    }

    fn index(self) -> usize {
        match self {
            Frontend::Http => 0,
            Frontend::Grpc => 1,
        }
    }
}

/// Which bad requests are counted apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadRequest {
    /// 400: a request the API cannot take (malformed, missing, out of range).
    Invalid,
    /// 413: a body over the size limit.
    TooLarge,
    /// 403: a `POST /v1/check` a browser sent from a page of another origin.
    CrossOrigin,
    /// 408: a body that did not arrive whole within its bound.
    TooSlow,
}

/// `d`'s place in [`DecidedBy::ALL`].
fn decided_by_index(d: DecidedBy) -> usize {
    DecidedBy::ALL.iter().position(|x| *x == d).unwrap_or(0)
}

/// Every metric of the server, in one registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<PlanOutcome, Counter>,
    limit_decisions: Family<LimitOutcome, Counter>,
    shadow_rejections: Family<PlanLimit, Counter>,
    frontends: [Counter; 2],
    decided_by: [Counter; DecidedBy::ALL.len()],
    latency: Histogram,
    /// 400, then 413, then 403, then 408.
    bad_requests: [Counter; 4],
    /// Applied, then refused.
    reloads: [Counter; 2],
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric at zero.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let requests = Family::default();
        registry.register(
            "requests",
            "Decisions on requests (not peeks) per plan: allowed or rejected",
            requests.clone(),
        );
        let limit_decisions = Family::default();
        registry.register("limit_decisions", "Decisions per plan and limit: allowed or rejected (shadow limits' rejections are counted in tollgate_shadow_rejections_total)", limit_decisions.clone());
        let shadow_rejections = Family::default();
        registry.register(
            "shadow_rejections",
            "Requests a shadow limit would have rejected (they were not rejected for it)",
            shadow_rejections.clone(),
        );
        let frontends = labelled(&mut registry, "frontend_decisions", "Decisions on requests (not peeks) per front end: http (the HTTP API) or grpc (Envoy's rate limit service)", "frontend", Frontend::ALL.map(Frontend::as_str));
        let decided_by = labelled(
            &mut registry,
            "decisions_by",
            "Who decided: the store, this instance's rejection cache (repeating a rejection of the store), or the failure policy standing in for the store",
            "decided_by",
            DecidedBy::ALL.map(DecidedBy::as_str),
        );
        let latency = Histogram::new(LATENCY_BOUNDS);
        registry.register(
            "decision_duration_seconds",
            "Time to decide one request, from decoded request to answer",
            latency.clone(),
        );
        let bad_requests = labelled(
            &mut registry,
            "bad_requests",
            "Requests refused as invalid (400), too large (413), sent by a browser from a page of another origin (403) or with a body too slow to arrive (408)",
            "status",
            ["400", "413", "403", "408"],
        );
        let reloads = labelled(
            &mut registry,
            "config_reloads",
            "Config reloads: applied (ok) or refused (error)",
            "result",
            ["ok", "error"],
        );
        Self {
            registry,
            requests,
            limit_decisions,
            shadow_rejections,
            frontends,
            decided_by,
            latency,
            bad_requests,
            reloads,
        }
    }

    /// The counters for `plan`, created on first sight and shared with any
    /// earlier config that had the same plan and limit names.
    pub fn for_plan(&self, plan: &Plan) -> PlanMetrics {
        let name = plan.name();
        let per_plan = |outcome| {
            self.requests.get_or_create_owned(&PlanOutcome {
                plan: name.to_owned(),
                outcome,
            })
        };
        let per_limit = |limit: &str, outcome| {
            self.limit_decisions.get_or_create_owned(&LimitOutcome {
                plan: name.to_owned(),
                limit: limit.to_owned(),
                outcome,
            })
        };
        let limits = plan
            .limits()
            .iter()
            .map(|limit| LimitCounters {
                allowed: per_limit(limit.name(), "allowed"),
                rejected: per_limit(limit.name(), "rejected"),
                shadow_rejected: self.shadow_rejections.get_or_create_owned(&PlanLimit {
                    plan: name.to_owned(),
                    limit: limit.name().to_owned(),
                }),
            })
            .collect();
        PlanMetrics {
            plan: PlanCounters {
                allowed: per_plan("allowed"),
                rejected: per_plan("rejected"),
            },
            limits,
        }
    }

    /// Counts one answer of the store (or of its failure policy standing in
    /// for it), the same way for every front end: who decided; and, for a
    /// request (`cost` > 0, not a look), the decision per front end and,
    /// when `plan` is given, per plan and limit. (Store errors are counted
    /// by the guarded store: see [`Gauges::store_errors`].)
    pub fn record_decision(
        &self,
        plan: Option<&PlanMetrics>,
        cost: u32,
        decision: &PlanDecision,
        frontend: Frontend,
    ) {
        self.record_decided_by(decision.decided_by);
        if cost > 0 {
            self.frontends[frontend.index()].inc();
            if let Some(plan) = plan {
                plan.record(decision);
            }
        }
    }

    /// Counts who decided (the store or the failure policy).
    pub fn record_decided_by(&self, decided_by: DecidedBy) {
        self.decided_by[decided_by_index(decided_by)].inc();
    }

    /// Records how long one decision took, from parsed request to answer.
    pub fn record_latency(&self, elapsed: Duration) {
        self.latency.observe(elapsed.as_secs_f64());
    }

    /// Counts a refused request.
    pub fn record_bad_request(&self, kind: BadRequest) {
        let index = match kind {
            BadRequest::Invalid => 0,
            BadRequest::TooLarge => 1,
            BadRequest::CrossOrigin => 2,
            BadRequest::TooSlow => 3,
        };
        self.bad_requests[index].inc();
    }

    /// Counts a config reload attempt.
    pub fn record_reload(&self, ok: bool) {
        self.reloads[usize::from(!ok)].inc();
    }

    /// The metrics in Prometheus text format (version 0.0.4): this registry,
    /// then the store's `gauges` read at scrape time.
    pub fn render(&self, gauges: Gauges) -> String {
        let mut out = String::with_capacity(8192);
        // Writing into a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &self.registry);
        let _ = prometheus_text::encode(&mut out, &gauges.registry(PREFIX));
        out
    }
}

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let metrics = Metrics::new();
        let limit = tollgate::Limit::new(
            "1s",
            tollgate::AnyPolicy::from_name("gcra", 1, 1_000).unwrap(),
            false,
        );
        let plan = Plan::new("a\"b\\c\nd", vec![limit]).unwrap();
        metrics.for_plan(&plan);
        let text = metrics.render(Gauges::default());
        assert!(
            text.contains(r#"tollgate_requests_total{plan="a\"b\\c\nd",outcome="allowed"} 0"#),
            "{text}"
        );
    }

    #[test]
    fn latency_buckets_are_cumulative_and_bounds_inclusive() {
        let metrics = Metrics::new();
        for elapsed in [
            Duration::from_micros(10),
            Duration::from_micros(11),
            Duration::from_secs(5),
        ] {
            metrics.record_latency(elapsed);
        }
        let text = metrics.render(Gauges::default());
        let name = "tollgate_decision_duration_seconds";
        for line in [
            format!("{name}_bucket{{le=\"1e-05\"}} 1\n"),
            format!("{name}_bucket{{le=\"2.5e-05\"}} 2\n"),
            format!("{name}_bucket{{le=\"1\"}} 2\n"),
            format!("{name}_bucket{{le=\"+Inf\"}} 3\n"),
            format!("{name}_count 3\n"),
        ] {
            assert!(text.contains(&line), "{line} not in\n{text}");
        }
    }
}
