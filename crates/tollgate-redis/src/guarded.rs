//! [`GuardedStore`]: a per-call timeout and a failure policy around a store.
//!
//! Redis down, slow or restarting must never panic or hang a caller: every
//! call is bounded by a timeout, and when the store fails with a transient
//! error (or times out), the failure policy answers instead, visibly
//! ([`PlanDecision::decided_by`]) and counted ([`GuardedStore::counts`]).
//! Permanent errors (an argument out of range, a misconfiguration) are
//! returned as they are: no failure policy can make them right. A caller
//! that answers failures itself uses the same guard through [`TimeoutOnly`]:
//! the timeout without the policy. Recovery
//! needs no restart: the next call goes to the store again, whose connection
//! reconnects by itself.
//!
//! A call that timed out had already been sent: Redis may still run it later
//! (a paused or slow Redis does), so the request may have been counted even
//! though the failure policy answered it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::error::Elapsed;

use tollgate::{
    check_plan, DecidedBy, Decision, LimitDecision, MemoryBackend, Plan, PlanDecision, Policy,
    Store, StoreError, StoreFuture,
};

use crate::RedisStoreError;

/// What to answer when the store cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Let requests in, answered as for a client with no history (every limit
    /// at its full quota): a request whose cost exceeds a limit can never pass
    /// and is still rejected, with `retry_after_ms: None`.
    FailOpen,
    /// Reject every request, with `retry_after_ms` set to the given wait (a
    /// hint for the client, e.g. 1,000 ms).
    FailClosed {
        /// The wait suggested to rejected clients, in ms.
        retry_after_ms: u64,
    },
    /// Decide with a local in-memory limiter (per process: each server then
    /// enforces the limits alone, so the total across servers may exceed them
    /// while the store is down). Its state starts empty and is kept for the
    /// next outage.
    LocalFallback,
}

/// How many calls each path answered, since the store was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FailureCounts {
    /// Decided by the store.
    pub store: u64,
    /// Answered by fail-open.
    pub fail_open: u64,
    /// Answered by fail-closed.
    pub fail_closed: u64,
    /// Answered by the local in-memory limiter.
    pub local_fallback: u64,
    /// Calls that hit the timeout (each also counted in one answer path,
    /// except calls through [`TimeoutOnly`], which return the error).
    pub timeouts: u64,
    /// Calls that failed with a transient error (each also counted in one
    /// answer path, except calls through [`TimeoutOnly`]).
    pub transient_errors: u64,
    /// Calls that failed with a permanent error, returned to the caller.
    pub permanent_errors: u64,
}

#[derive(Default)]
struct Counters {
    store: AtomicU64,
    fail_open: AtomicU64,
    fail_closed: AtomicU64,
    local_fallback: AtomicU64,
    timeouts: AtomicU64,
    transient_errors: AtomicU64,
    permanent_errors: AtomicU64,
}

/// A store behind a per-call timeout and a [`FailurePolicy`].
pub struct GuardedStore<S> {
    inner: S,
    timeout: Duration,
    policy: FailurePolicy,
    fallback: MemoryBackend,
    counters: Counters,
}

impl<S: Store> GuardedStore<S> {
    /// Wraps `inner`: each call waits at most `timeout`, and transient
    /// failures are answered by `policy`.
    pub fn new(inner: S, timeout: Duration, policy: FailurePolicy) -> Self {
        Self {
            inner,
            timeout,
            policy,
            fallback: MemoryBackend::new(),
            counters: Counters::default(),
        }
    }

    /// The same guard with `fallback` as the local in-memory limiter of
    /// [`FailurePolicy::LocalFallback`] (e.g. one capped on tracked clients).
    pub fn with_fallback(mut self, fallback: MemoryBackend) -> Self {
        self.fallback = fallback;
        self
    }

    /// The local in-memory limiter of [`FailurePolicy::LocalFallback`] (its
    /// owner sweeps idle clients from it).
    pub fn fallback(&self) -> &MemoryBackend {
        &self.fallback
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The failure policy in force.
    pub fn policy(&self) -> FailurePolicy {
        self.policy
    }

    /// A snapshot of the counters (for metrics).
    pub fn counts(&self) -> FailureCounts {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FailureCounts {
            store: get(&c.store),
            fail_open: get(&c.fail_open),
            fail_closed: get(&c.fail_closed),
            local_fallback: get(&c.local_fallback),
            timeouts: get(&c.timeouts),
            transient_errors: get(&c.transient_errors),
            permanent_errors: get(&c.permanent_errors),
        }
    }

    /// The inner store's answer within the timeout (`Err` when it timed
    /// out), counted.
    async fn timed_check(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
    ) -> Result<Result<PlanDecision, StoreError>, Elapsed> {
        let answer =
            tokio::time::timeout(self.timeout, self.inner.check(plan, client, now_ms, cost)).await;
        let counter = match &answer {
            Ok(Ok(_)) => &self.counters.store,
            Ok(Err(e)) if e.transient => &self.counters.transient_errors,
            Ok(Err(_)) => &self.counters.permanent_errors,
            Err(_) => &self.counters.timeouts,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        answer
    }

    async fn guarded_check(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
    ) -> Result<PlanDecision, StoreError> {
        match self.timed_check(plan, client, now_ms, cost).await {
            Ok(Ok(decision)) => Ok(decision),
            Ok(Err(e)) if !e.transient => Err(e),
            Ok(Err(_)) | Err(_) => Ok(self.answer_failure(plan, client, now_ms, cost)),
        }
    }

    /// The failure policy's answer, counted.
    fn answer_failure(&self, plan: &Plan, client: &str, now_ms: u64, cost: u32) -> PlanDecision {
        let bump = |a: &AtomicU64| {
            a.fetch_add(1, Ordering::Relaxed);
        };
        match self.policy {
            FailurePolicy::FailOpen => {
                bump(&self.counters.fail_open);
                let mut decision = check_plan(plan, &mut Vec::new(), now_ms, cost);
                decision.decided_by = DecidedBy::FailOpen;
                decision
            }
            FailurePolicy::FailClosed { retry_after_ms } => {
                bump(&self.counters.fail_closed);
                fail_closed(plan, retry_after_ms)
            }
            FailurePolicy::LocalFallback => {
                bump(&self.counters.local_fallback);
                let mut decision = self.fallback.limiter().check(plan, client, now_ms, cost);
                decision.decided_by = DecidedBy::LocalFallback;
                decision
            }
        }
    }
}

/// Every limit rejects, nothing remains, retry after the hint.
fn fail_closed(plan: &Plan, retry_after_ms: u64) -> PlanDecision {
    let limits = plan
        .limits()
        .iter()
        .map(|limit| LimitDecision {
            name: limit.name().into(),
            policy: limit.policy().name(),
            window_ms: limit.policy().window_ms(),
            shadow: limit.is_shadow(),
            decision: Decision {
                allowed: false,
                limit: limit.policy().limit(),
                remaining: 0,
                retry_after_ms: Some(retry_after_ms),
                reset_after_ms: retry_after_ms,
            },
        })
        .collect();
    PlanDecision {
        allowed: false,
        retry_after_ms: Some(retry_after_ms),
        limits,
        decided_by: DecidedBy::FailClosed,
    }
}

impl<S: Store> Store for GuardedStore<S> {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        Box::pin(self.guarded_check(plan, client, now_ms, cost))
    }
}

/// A [`GuardedStore`] seen without its failure policy: the same store,
/// timeout and counters, but a transient failure or a timeout comes back as
/// an `Err` (a timeout as a transient [`RedisStoreError::Timeout`]) for the
/// caller to answer. For a front end whose own answer to a store failure is
/// the operator's choice, e.g. gRPC `UNAVAILABLE` so that Envoy's
/// `failure_mode_deny` decides, while other front ends on the same guard
/// keep the failure policy.
///
/// Its calls count in [`GuardedStore::counts`] as `store`, `timeouts`,
/// `transient_errors` or `permanent_errors`, never in an answer path.
pub struct TimeoutOnly<S> {
    guard: Arc<GuardedStore<S>>,
}

impl<S> TimeoutOnly<S> {
    /// `guard`'s store and timeout, without its failure policy.
    pub fn new(guard: Arc<GuardedStore<S>>) -> Self {
        Self { guard }
    }

    /// The guard whose store and timeout this uses.
    pub fn guard(&self) -> &Arc<GuardedStore<S>> {
        &self.guard
    }
}

impl<S: Store> TimeoutOnly<S> {
    async fn timed_check(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
    ) -> Result<PlanDecision, StoreError> {
        match self.guard.timed_check(plan, client, now_ms, cost).await {
            Ok(answer) => answer,
            Err(_) => Err(RedisStoreError::Timeout(self.guard.timeout).into()),
        }
    }
}

impl<S: Store> Store for TimeoutOnly<S> {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        Box::pin(self.timed_check(plan, client, now_ms, cost))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::testing::{FailingStore, HangingStore};
    use tollgate::{AnyPolicy, Limit};

    fn plan() -> Plan {
        let policy = AnyPolicy::from_name("sliding-window", 2, 1_000).unwrap();
        Plan::new("p", vec![Limit::new("l", policy, false)]).unwrap()
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn permanent_errors_pass_through_untouched() {
        let store = GuardedStore::new(
            FailingStore::new(StoreError::permanent("bad argument")),
            Duration::from_secs(1),
            FailurePolicy::FailOpen,
        );
        let error = block_on(store.check(&plan(), "c", 0, 1)).unwrap_err();
        assert_eq!(error.message, "bad argument");
        assert_eq!(store.counts().permanent_errors, 1);
        assert_eq!(store.counts().fail_open, 0);
    }

    #[test]
    fn fail_open_answers_as_for_a_new_client() {
        let store = GuardedStore::new(
            FailingStore::new(StoreError::transient("down")),
            Duration::from_secs(1),
            FailurePolicy::FailOpen,
        );
        let plan = plan();
        for _ in 0..3 {
            let d = block_on(store.check(&plan, "c", 0, 1)).unwrap();
            assert!(d.allowed);
            assert_eq!(d.decided_by, DecidedBy::FailOpen);
            assert_eq!(d.limits[0].decision.remaining, 1);
        }
        // A cost above the limit can never pass, store or no store.
        let d = block_on(store.check(&plan, "c", 0, 3)).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms, None);
        let counts = store.counts();
        assert_eq!((counts.fail_open, counts.transient_errors), (4, 4));
    }

    #[test]
    fn a_hanging_store_times_out_into_fail_closed() {
        let store = GuardedStore::new(
            HangingStore,
            Duration::from_millis(20),
            FailurePolicy::FailClosed {
                retry_after_ms: 750,
            },
        );
        let d = block_on(store.check(&plan(), "c", 0, 1)).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.decided_by, DecidedBy::FailClosed);
        assert_eq!(d.retry_after_ms, Some(750));
        assert_eq!(d.limits[0].decision.remaining, 0);
        assert_eq!(store.counts().timeouts, 1);
    }

    #[test]
    fn timeout_only_returns_failures_for_the_caller_to_answer() {
        let guard = Arc::new(GuardedStore::new(
            HangingStore,
            Duration::from_millis(20),
            FailurePolicy::FailOpen,
        ));
        let store = TimeoutOnly::new(guard.clone());
        let error = block_on(store.check(&plan(), "c", 0, 1)).unwrap_err();
        assert!(error.transient, "{error}");
        assert!(error.message.contains("20ms"), "{error}");
        // The guard itself still answers by its policy.
        let d = block_on(guard.check(&plan(), "c", 0, 1)).unwrap();
        assert_eq!(d.decided_by, DecidedBy::FailOpen);
        let counts = guard.counts();
        assert_eq!((counts.timeouts, counts.fail_open), (2, 1));

        let guard = Arc::new(GuardedStore::new(
            FailingStore::new(StoreError::transient("down")),
            Duration::from_secs(1),
            FailurePolicy::LocalFallback,
        ));
        let error =
            block_on(TimeoutOnly::new(guard.clone()).check(&plan(), "c", 0, 1)).unwrap_err();
        assert_eq!(error, StoreError::transient("down"));
        let counts = guard.counts();
        assert_eq!((counts.transient_errors, counts.local_fallback), (1, 0));
    }

    #[test]
    fn local_fallback_keeps_its_own_state() {
        let store = GuardedStore::new(
            FailingStore::new(StoreError::transient("down")),
            Duration::from_secs(1),
            FailurePolicy::LocalFallback,
        );
        let plan = plan();
        let allowed: Vec<bool> = (0..3)
            .map(|t| block_on(store.check(&plan, "c", t, 1)).unwrap().allowed)
            .collect();
        assert_eq!(allowed, [true, true, false]);
        assert_eq!(store.counts().local_fallback, 3);
    }
}
