//! What the dashboard and the inspection endpoints read from the running
//! server: its counters ([`Observed`]), its clock, the state of a client
//! in the memory store, the store's health. Nothing here decides or
//! consumes.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tollgate::{Clock, DecidedBy, PlanDecision, PlanStates};

use super::Server;
use crate::config::StoreKind;
use crate::stats::Stats;
use crate::top::TopClients;

/// The dashboard's counters: decisions per second ([`Stats`]) and the
/// heaviest clients of the last minute ([`TopClients`]), timed by the
/// server's clock.
pub struct Observed {
    clock: Arc<dyn Clock>,
    /// Per-second counters for `/v1/stats`.
    pub stats: Stats,
    /// Heavy hitters for `/v1/top`.
    pub top: TopClients,
}

impl Observed {
    /// Empty counters reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            stats: Stats::new(),
            top: TopClients::default(),
        }
    }

    /// The clock's time.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Counts a decision of `cost` for `client` (looks, of cost 0, are not
    /// decisions; one a failure policy answered is counted as the store
    /// error it stands for). A gRPC client is the store's key of its
    /// descriptors.
    pub fn decided(
        &self,
        now_ms: u64,
        client: &str,
        plan: &str,
        cost: u32,
        decision: &PlanDecision,
    ) {
        if cost == 0 {
            if let DecidedBy::Failure(_) = decision.decided_by {
                self.stats.record_store_error(now_ms);
            }
            return;
        }
        self.stats.record_decision(now_ms, plan, decision);
        self.top.record(now_ms, client, plan, limited_by(decision));
    }

    /// Counts the latency of a decision of `cost` (looks are not counted).
    pub fn timed(&self, now_ms: u64, cost: u32, elapsed: Duration) {
        if cost > 0 {
            self.stats.record_latency(now_ms, elapsed);
        }
    }
}

/// What refused `decision`, for the top limited clients: the failure
/// policy that answered for the store, or the limit that held it back
/// longest; `None` when it was allowed.
fn limited_by(decision: &PlanDecision) -> Option<&str> {
    if decision.allowed {
        return None;
    }
    match decision.decided_by {
        DecidedBy::Failure(policy) => Some(policy.as_str()),
        // Every refusal the store makes names a limit; "" should one not.
        DecidedBy::Store | DecidedBy::Cache => Some(decision.refused_by().map_or("", |l| &*l.name)),
    }
}

/// The store's health as the dashboard shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StoreHealth {
    /// `"memory"` or `"redis"`.
    pub kind: &'static str,
    /// `"ok"`, or `"failing"` when the store failed in the last 10 seconds.
    pub status: &'static str,
    /// Store failures in the last 10 seconds (answered by the failure
    /// policy or not); `null` when the dashboard's counters are off.
    pub errors_last_10s: Option<u64>,
    /// Clients tracked in memory (memory store only).
    pub tracked_clients: Option<usize>,
    /// Since start (shared stores only): calls the store decided, calls the
    /// failure policy answered, timeouts and errors.
    pub calls: Option<StoreCalls>,
    /// On a Redis Cluster, each master called in the last 10 s and whether its
    /// circuit is open (its clients answered by the failure policy without
    /// a call); empty for one node or memory.
    pub circuits: Vec<PartCircuit>,
    /// Since start (Redis only): calls Redis ran and counted whose reply came
    /// after their caller had given up, or never came, or that their caller
    /// gave back (an Envoy request another of whose clients refused), by
    /// what became of their refund.
    pub refunds: Option<StoreRefunds>,
}

/// What became of the refunds of calls whose reply came too late, or that
/// were given back (`tollgate_redis::call::refund`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StoreRefunds {
    /// Taken back: the client's state is as if the call had been refused.
    pub restored: u64,
    /// Kept: the client was used since, or the master reached does not
    /// hold the call's write (a failover): towards admitting less.
    pub stale: u64,
    /// Kept: the refund failed or got no answer.
    pub failed: u64,
    /// Calls whose reply never came (the connection dropped, or no reply
    /// within `tollgate_redis::RESPONSE_TIMEOUT`; on a cluster, any call
    /// that failed), each looked up by its receipt: those that had consumed
    /// are counted above as well.
    pub replies_lost: u64,
    /// Refunds not ended yet: queued, being sent, or sent again while
    /// Redis cannot be reached (for up to 60 s); each ends as one of the
    /// first three.
    pub pending: u64,
    /// Calls that consumed but that fewer replicas than `[store]
    /// replicas_to_ack` acknowledged in time: answered by the failure
    /// policy, and refunded (counted above as well).
    pub not_replicated: u64,
}

/// One master's circuit breaker, as the dashboard shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PartCircuit {
    /// The master, `host:port`.
    pub part: String,
    /// Whether its circuit is open now.
    pub open: bool,
}

/// A shared store's call counts since start.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct StoreCalls {
    /// Decided by the store.
    pub store: u64,
    /// Answered by fail-open.
    pub fail_open: u64,
    /// Answered by fail-closed.
    pub fail_closed: u64,
    /// Answered by the local in-memory limiter.
    pub local_fallback: u64,
    /// Calls that timed out.
    pub timeouts: u64,
    /// Calls that failed with a transient error.
    pub transient_errors: u64,
    /// Calls that failed with a permanent error.
    pub permanent_errors: u64,
}

/// The window over which [`StoreHealth::status`] looks.
const HEALTH_SECONDS: u64 = 10;

impl Server {
    /// The dashboard's counters, unless `[dashboard] enabled = false`.
    pub fn observed(&self) -> Option<&Observed> {
        self.inner.observed.as_deref()
    }

    /// The time of the server's clock.
    pub fn now_ms(&self) -> u64 {
        self.inner.clock.now_ms()
    }

    /// A copy of `client`'s limit states in the memory store, with the
    /// latest time the store has seen for it (`None` for an unknown client
    /// or a shared store). Reads only: for tests and debugging;
    /// [`Server::inspect`] answers for every store.
    pub fn memory_state(&self, client: &str) -> Option<(u64, PlanStates)> {
        let memory = self.inner.memory.as_ref()?;
        let entry = memory.limiter().store().get(client)?;
        Some((entry.last_seen, entry.state))
    }

    /// The store's kind, recent failures and call counts.
    pub fn store_health(&self) -> StoreHealth {
        let kind = match self.config().store.kind {
            StoreKind::Memory => "memory",
            StoreKind::Redis { .. } => "redis",
            StoreKind::RedisCluster { .. } => "redis-cluster",
        };
        let errors = self
            .observed()
            .map(|o| o.stats.recent_store_errors(self.now_ms(), HEALTH_SECONDS));
        // Both guards' calls: the gRPC service has its own with
        // `on_store_error = "unavailable"`, as `/metrics` counts them.
        let calls = self.inner.guarded.as_ref().map(|_| {
            let mut calls = StoreCalls::default();
            for c in self.guards().map(|g| g.counts()) {
                calls.store += c.store;
                calls.fail_open += c.fail_open;
                calls.fail_closed += c.fail_closed;
                calls.local_fallback += c.local_fallback;
                calls.timeouts += c.timeouts;
                calls.transient_errors += c.transient_errors;
                calls.permanent_errors += c.permanent_errors;
            }
            calls
        });
        StoreHealth {
            kind,
            status: if errors.unwrap_or(0) > 0 {
                "failing"
            } else {
                "ok"
            },
            errors_last_10s: errors,
            tracked_clients: self
                .inner
                .memory
                .as_ref()
                .map(|m| m.limiter().store().len()),
            calls,
            refunds: self.inner.redis.as_ref().map(|redis| {
                let c = redis.call_counts();
                StoreRefunds {
                    restored: c.refunded,
                    stale: c.refunds_stale,
                    failed: c.refunds_failed,
                    replies_lost: c.replies_lost,
                    pending: c.refunds_pending,
                    not_replicated: c.not_replicated,
                }
            }),
            circuits: self.inner.guarded.as_ref().map_or_else(Vec::new, |g| {
                g.part_circuits()
                    .into_iter()
                    .map(|(part, open)| PartCircuit {
                        part: part.to_string(),
                        open,
                    })
                    .collect()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use tollgate::{AnyPolicy, FailurePolicy, Limit, Plan, PlanLimiter};

    use super::*;

    #[test]
    fn a_rejection_is_put_down_to_its_limit_or_to_the_failure_policy() {
        let limit = |name: &str, n| {
            let policy = AnyPolicy::from_name("sliding-window", n, 1_000).expect("policy");
            Limit::new(name, policy, false)
        };
        let plan = Plan::new("p", vec![limit("wide", 5), limit("narrow", 1)]).expect("plan");
        let limiter = PlanLimiter::new();
        let allowed = limiter.check(&plan, "c", 0, 1);
        assert_eq!(limited_by(&allowed), None);
        let mut refused = limiter.check(&plan, "c", 0, 1);
        assert_eq!(limited_by(&refused), Some("narrow"));
        refused.decided_by = DecidedBy::Failure(FailurePolicy::FailClosed);
        assert_eq!(limited_by(&refused), Some("fail-closed"));
    }
}
