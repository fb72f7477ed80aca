//! Prometheus metrics: a small registry of atomic counters, rendered in the
//! text exposition format. Every metric is named `tollgate_*`.
//!
//! The hot path only increments atomics it already holds: each plan and
//! limit of the active config carries its counters, looked up once when the
//! config is loaded (gRPC decisions find their plan's by name: one hash
//! lookup, no allocation). Counters are kept by plan and limit name across reloads,
//! so they never go backwards (a removed limit keeps its last values).

mod histogram;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tollgate::{DecidedBy, Plan, PlanDecision};

pub use histogram::Histogram;

/// Counters of one plan.
#[derive(Debug, Default)]
pub struct PlanCounters {
    allowed: AtomicU64,
    rejected: AtomicU64,
}

/// Counters of one limit of one plan.
#[derive(Debug, Default)]
pub struct LimitCounters {
    allowed: AtomicU64,
    rejected: AtomicU64,
    shadow_rejected: AtomicU64,
}

/// The counters of one plan of the active config, in the plan's limit order.
#[derive(Debug, Clone)]
pub struct PlanMetrics {
    plan: Arc<PlanCounters>,
    limits: Vec<Arc<LimitCounters>>,
}

impl PlanMetrics {
    /// Counts one decision (not a peek) taken against this plan.
    pub fn record(&self, decision: &PlanDecision) {
        let counter = if decision.allowed {
            &self.plan.allowed
        } else {
            &self.plan.rejected
        };
        counter.fetch_add(1, Ordering::Relaxed);
        for (counters, limit) in self.limits.iter().zip(&decision.limits) {
            let counter = match (limit.decision.allowed, limit.shadow) {
                (true, _) => &counters.allowed,
                (false, false) => &counters.rejected,
                (false, true) => &counters.shadow_rejected,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Values read at render time from elsewhere (the store).
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    /// Clients with state in the memory store, if the store is in memory.
    pub tracked_clients: Option<usize>,
    /// The cap on tracked clients.
    pub max_clients: Option<usize>,
    /// Clients evicted to make room (their state still mattered).
    pub evicted: u64,
    /// Clients dropped to make room because their state no longer mattered.
    pub reclaimed: u64,
    /// Clients dropped by the periodic sweep.
    pub swept: u64,
    /// Store errors counted by the guarded stores: transient (timeouts
    /// included) and permanent. Only a shared store fails.
    pub store_errors: StoreErrors,
    /// The shared store's circuit breaker, if the store is shared.
    pub circuit: Option<Circuit>,
}

/// The state of a guarded store's circuit breaker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Circuit {
    /// Whether the circuit is open now.
    pub open: bool,
    /// Calls answered without calling the store so far.
    pub short_circuited: u64,
}

/// Store errors by kind, as the guarded stores counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreErrors {
    /// Errors that may go away by themselves, and timeouts.
    pub transient: u64,
    /// Errors that retrying cannot fix.
    pub permanent: u64,
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
}

/// Every metric of the server.
#[derive(Debug, Default)]
pub struct Metrics {
    plans: Mutex<BTreeMap<String, Arc<PlanCounters>>>,
    limits: Mutex<BTreeMap<(String, String), Arc<LimitCounters>>>,
    decided_by: [AtomicU64; DecidedBy::ALL.len()],
    frontends: [AtomicU64; 2],
    latency: Histogram,
    bad_invalid: AtomicU64,
    bad_too_large: AtomicU64,
    reloads_ok: AtomicU64,
    reloads_failed: AtomicU64,
}

fn decided_by_index(d: DecidedBy) -> usize {
    DecidedBy::ALL.iter().position(|x| *x == d).unwrap_or(0)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Counters stay meaningful even if a thread panicked mid-update.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Metrics {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counters for `plan`, created on first sight and shared with any
    /// earlier config that had the same plan and limit names.
    pub fn for_plan(&self, plan: &Plan) -> PlanMetrics {
        let plan_counters = lock(&self.plans)
            .entry(plan.name().to_owned())
            .or_default()
            .clone();
        let mut limits = lock(&self.limits);
        let limits = plan
            .limits()
            .iter()
            .map(|limit| {
                limits
                    .entry((plan.name().to_owned(), limit.name().to_owned()))
                    .or_default()
                    .clone()
            })
            .collect();
        PlanMetrics {
            plan: plan_counters,
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
            self.frontends[frontend.index()].fetch_add(1, Ordering::Relaxed);
            if let Some(plan) = plan {
                plan.record(decision);
            }
        }
    }

    /// Counts who decided (the store or the failure policy).
    pub fn record_decided_by(&self, decided_by: DecidedBy) {
        self.decided_by[decided_by_index(decided_by)].fetch_add(1, Ordering::Relaxed);
    }

    /// Records how long one decision took, from parsed request to answer.
    pub fn record_latency(&self, elapsed: Duration) {
        self.latency.observe(elapsed);
    }

    /// Counts a refused request.
    pub fn record_bad_request(&self, kind: BadRequest) {
        let counter = match kind {
            BadRequest::Invalid => &self.bad_invalid,
            BadRequest::TooLarge => &self.bad_too_large,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a config reload attempt.
    pub fn record_reload(&self, ok: bool) {
        let counter = if ok {
            &self.reloads_ok
        } else {
            &self.reloads_failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The metrics in Prometheus text format (version 0.0.4).
    pub fn render(&self, gauges: Gauges) -> String {
        let mut out = String::with_capacity(4096);
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);

        header(
            &mut out,
            "tollgate_requests_total",
            "counter",
            "Decisions on requests (not peeks) per plan: allowed or rejected.",
        );
        for (plan, c) in lock(&self.plans).iter() {
            for (outcome, v) in [
                ("allowed", load(&c.allowed)),
                ("rejected", load(&c.rejected)),
            ] {
                let _ = writeln!(
                    out,
                    "tollgate_requests_total{{plan=\"{}\",outcome=\"{outcome}\"}} {v}",
                    escape(plan)
                );
            }
        }
        let limits = lock(&self.limits);
        header(&mut out, "tollgate_limit_decisions_total", "counter", "Decisions per plan and limit: allowed or rejected (shadow limits' rejections are counted in tollgate_shadow_rejections_total).");
        for ((plan, limit), c) in limits.iter() {
            for (outcome, v) in [
                ("allowed", load(&c.allowed)),
                ("rejected", load(&c.rejected)),
            ] {
                let _ = writeln!(out, "tollgate_limit_decisions_total{{plan=\"{}\",limit=\"{}\",outcome=\"{outcome}\"}} {v}", escape(plan), escape(limit));
            }
        }
        header(
            &mut out,
            "tollgate_shadow_rejections_total",
            "counter",
            "Requests a shadow limit would have rejected (they were not rejected for it).",
        );
        for ((plan, limit), c) in limits.iter() {
            let _ = writeln!(
                out,
                "tollgate_shadow_rejections_total{{plan=\"{}\",limit=\"{}\"}} {}",
                escape(plan),
                escape(limit),
                load(&c.shadow_rejected)
            );
        }
        drop(limits);
        header(
            &mut out,
            "tollgate_frontend_decisions_total",
            "counter",
            "Decisions on requests (not peeks) per front end: http (the HTTP API) or grpc (Envoy's rate limit service).",
        );
        for f in Frontend::ALL {
            let _ = writeln!(
                out,
                "tollgate_frontend_decisions_total{{frontend=\"{}\"}} {}",
                f.as_str(),
                load(&self.frontends[f.index()])
            );
        }
        header(
            &mut out,
            "tollgate_store_errors_total",
            "counter",
            "Store errors, by whether retrying may help.",
        );
        let _ = writeln!(
            out,
            "tollgate_store_errors_total{{kind=\"transient\"}} {}",
            gauges.store_errors.transient
        );
        let _ = writeln!(
            out,
            "tollgate_store_errors_total{{kind=\"permanent\"}} {}",
            gauges.store_errors.permanent
        );
        if let Some(circuit) = gauges.circuit {
            render_circuit(&mut out, circuit);
        }
        header(
            &mut out,
            "tollgate_decisions_by_total",
            "counter",
            "Who decided: the store, or the failure policy standing in for it.",
        );
        for d in DecidedBy::ALL {
            let _ = writeln!(
                out,
                "tollgate_decisions_by_total{{decided_by=\"{}\"}} {}",
                d.as_str(),
                load(&self.decided_by[decided_by_index(d)])
            );
        }
        header(
            &mut out,
            "tollgate_decision_duration_seconds",
            "histogram",
            "Time to decide one request, from decoded request to answer.",
        );
        self.latency
            .render(&mut out, "tollgate_decision_duration_seconds");
        header(
            &mut out,
            "tollgate_bad_requests_total",
            "counter",
            "Requests refused as invalid (400) or too large (413).",
        );
        let _ = writeln!(
            out,
            "tollgate_bad_requests_total{{status=\"400\"}} {}",
            load(&self.bad_invalid)
        );
        let _ = writeln!(
            out,
            "tollgate_bad_requests_total{{status=\"413\"}} {}",
            load(&self.bad_too_large)
        );
        header(
            &mut out,
            "tollgate_config_reloads_total",
            "counter",
            "Config reloads: applied (ok) or refused (error).",
        );
        let _ = writeln!(
            out,
            "tollgate_config_reloads_total{{result=\"ok\"}} {}",
            load(&self.reloads_ok)
        );
        let _ = writeln!(
            out,
            "tollgate_config_reloads_total{{result=\"error\"}} {}",
            load(&self.reloads_failed)
        );
        if let Some(clients) = gauges.tracked_clients {
            header(
                &mut out,
                "tollgate_tracked_clients",
                "gauge",
                "Clients with state in the memory store.",
            );
            let _ = writeln!(out, "tollgate_tracked_clients {clients}");
        }
        if let Some(max) = gauges.max_clients {
            header(
                &mut out,
                "tollgate_tracked_clients_max",
                "gauge",
                "The cap on clients tracked in memory.",
            );
            let _ = writeln!(out, "tollgate_tracked_clients_max {max}");
        }
        header(&mut out, "tollgate_clients_dropped_total", "counter", "Clients dropped from memory: evicted (least recently seen, at the cap), reclaimed (at the cap, state no longer mattered) or swept (idle, by the periodic sweep).");
        let _ = writeln!(
            out,
            "tollgate_clients_dropped_total{{reason=\"evicted\"}} {}",
            gauges.evicted
        );
        let _ = writeln!(
            out,
            "tollgate_clients_dropped_total{{reason=\"reclaimed\"}} {}",
            gauges.reclaimed
        );
        let _ = writeln!(
            out,
            "tollgate_clients_dropped_total{{reason=\"swept\"}} {}",
            gauges.swept
        );
        out
    }
}

fn render_circuit(out: &mut String, circuit: Circuit) {
    header(
        out,
        "tollgate_store_circuit_open",
        "gauge",
        "1 while the shared store's circuit is open (the failure policy answers without calling it).",
    );
    let _ = writeln!(
        out,
        "tollgate_store_circuit_open {}",
        u8::from(circuit.open)
    );
    header(
        out,
        "tollgate_store_short_circuited_total",
        "counter",
        "Calls answered by the failure policy without calling the store, its circuit being open.",
    );
    let _ = writeln!(
        out,
        "tollgate_store_short_circuited_total {}",
        circuit.short_circuited
    );
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value escaped for the text format.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
