//! [`GuardedStore`]: a per-call timeout and one [`FailurePolicy`] for every
//! store error, around any [`Store`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate::{
    Clock, FailurePolicy, GivenBack, Inspection, MemoryBackend, Plan, PlanDecision, Receipt,
    Returnable, Store, StoreError, StoreFuture, SystemClock,
};

use crate::answer::{self, LocalUse};
use crate::breaker::{Admission, BreakerConfig, Outcome, ProbeGuard};
use crate::breakers::Breakers;
use crate::log::{ErrorKind, ErrorLog};

/// How long fail-closed asks rejected clients to wait, in ms, unless set
/// with [`GuardedStore::with_fail_closed_retry_after`]: the store may be
/// back by then.
pub const DEFAULT_FAIL_CLOSED_RETRY_AFTER_MS: u64 = 1_000;

/// How many calls each path answered, since the guard was built.
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
    /// Handed back as an error ([`FailurePolicy::Unavailable`]).
    pub unavailable: u64,
    /// Calls that hit the timeout (each also counted in one answer path).
    pub timeouts: u64,
    /// Calls that failed with a transient error (each also counted in one
    /// answer path).
    pub transient_errors: u64,
    /// Calls that failed with a permanent error (each also counted in one
    /// answer path).
    pub permanent_errors: u64,
    /// Calls answered without calling the store because its circuit was
    /// open (each also counted in one answer path). Shared by sibling guards.
    pub short_circuited: u64,
    /// Whether the circuit is open now (a probe in flight included): on a
    /// store of parts that fail apart, any part's circuit.
    pub circuit_open: bool,
}

#[derive(Default)]
struct Counters {
    store: AtomicU64,
    fail_open: AtomicU64,
    fail_closed: AtomicU64,
    local_fallback: AtomicU64,
    unavailable: AtomicU64,
    timeouts: AtomicU64,
    transient_errors: AtomicU64,
    permanent_errors: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A store behind a per-call timeout and a [`FailurePolicy`] that answers
/// every failure: a timeout, a transient error and a permanent one alike.
pub struct GuardedStore<S> {
    inner: S,
    timeout: Duration,
    policy: FailurePolicy,
    fail_closed_retry_after_ms: u64,
    fallback: Arc<MemoryBackend>,
    clock: Arc<dyn Clock>,
    breakers: Arc<Breakers>,
    log: Arc<ErrorLog>,
    counters: Counters,
}

impl<S: Store> GuardedStore<S> {
    /// Wraps `inner`: each call waits at most `timeout`, every failure is
    /// answered by `policy`, and the circuit breaker has its defaults
    /// ([`BreakerConfig::default`]: opens after 5 consecutive transient
    /// failures, probes every 500 ms).
    pub fn new(inner: S, timeout: Duration, policy: FailurePolicy) -> Self {
        Self {
            inner,
            timeout,
            policy,
            fail_closed_retry_after_ms: DEFAULT_FAIL_CLOSED_RETRY_AFTER_MS,
            fallback: Arc::new(MemoryBackend::new()),
            clock: Arc::new(SystemClock),
            breakers: Arc::new(Breakers::new(BreakerConfig::default())),
            log: Arc::new(ErrorLog::default()),
            counters: Counters::default(),
        }
    }

    /// The same guard with `fallback` as the local in-memory limiter of
    /// [`FailurePolicy::LocalFallback`] (e.g. one capped on tracked clients).
    #[must_use]
    pub fn with_fallback(mut self, fallback: MemoryBackend) -> Self {
        self.fallback = Arc::new(fallback);
        self
    }

    /// The same guard with a circuit breaker configured by `config`.
    #[must_use]
    pub fn with_breaker(mut self, config: BreakerConfig) -> Self {
        self.breakers = Arc::new(Breakers::new(config));
        self
    }

    /// A second guard over the same store (a clone of `inner`: the same
    /// connection) with `policy` instead: the same timeout, clock, circuit
    /// breaker, log and local fallback, counted apart. For a front end that
    /// answers failures differently (e.g. gRPC `UNAVAILABLE` for Envoy)
    /// while sharing one view of the store's health.
    pub fn sibling(&self, policy: FailurePolicy) -> Self
    where
        S: Clone,
    {
        Self {
            inner: self.inner.clone(),
            timeout: self.timeout,
            policy,
            fail_closed_retry_after_ms: self.fail_closed_retry_after_ms,
            fallback: self.fallback.clone(),
            clock: self.clock.clone(),
            breakers: self.breakers.clone(),
            log: self.log.clone(),
            counters: Counters::default(),
        }
    }

    /// The same guard asking clients rejected by fail-closed to retry after
    /// `retry_after_ms` (default [`DEFAULT_FAIL_CLOSED_RETRY_AFTER_MS`]).
    #[must_use]
    pub fn with_fail_closed_retry_after(mut self, retry_after_ms: u64) -> Self {
        self.fail_closed_retry_after_ms = retry_after_ms;
        self
    }

    /// The same guard reading its own time (the circuit breaker's probe
    /// interval, and the rate limit of its log lines) from `clock` instead
    /// of the system clock. Decisions keep the caller's `now_ms`.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
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

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A snapshot of the counters (for metrics).
    pub fn counts(&self) -> FailureCounts {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let now_ms = self.clock.now_ms();
        FailureCounts {
            store: get(&c.store),
            fail_open: get(&c.fail_open),
            fail_closed: get(&c.fail_closed),
            local_fallback: get(&c.local_fallback),
            unavailable: get(&c.unavailable),
            timeouts: get(&c.timeouts),
            transient_errors: get(&c.transient_errors),
            permanent_errors: get(&c.permanent_errors),
            short_circuited: self.breakers.short_circuited(now_ms),
            circuit_open: self.breakers.any_open(now_ms),
        }
    }

    /// Each part of a store that fails apart (a Redis Cluster's masters,
    /// see [`Store::failure_domain`]) called in the last
    /// [`IDLE_PART_MS`](crate::IDLE_PART_MS), by name, and whether its
    /// circuit is open now; empty for a store that fails as one. Shared by
    /// sibling guards.
    pub fn part_circuits(&self) -> Vec<(Arc<str>, bool)> {
        self.breakers.part_states(self.clock.now_ms())
    }

    /// The inner store's answer within the timeout; a timeout is a
    /// transient error. Failures are counted by kind.
    /// With `keep`, the inner store's [`Store::check_returnable`].
    async fn timed_check(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
        keep: bool,
    ) -> Result<Returnable, (ErrorKind, StoreError)> {
        let answer = if keep {
            let call = self.inner.check_returnable(plan, client, now_ms, cost);
            tokio::time::timeout(self.timeout, call).await
        } else {
            let call = self.inner.check(plan, client, now_ms, cost);
            (tokio::time::timeout(self.timeout, call).await).map(|answer| answer.map(Into::into))
        };
        let answer = match answer {
            Ok(Ok(returnable)) => Ok(returnable),
            Ok(Err(error)) => Err((ErrorKind::of(&error), error)),
            Err(_) => Err((
                ErrorKind::Timeout,
                StoreError::transient(format!(
                    "the store did not answer within {:?}",
                    self.timeout
                )),
            )),
        };
        bump(match &answer {
            Ok(_) => &self.counters.store,
            Err((ErrorKind::Timeout, _)) => &self.counters.timeouts,
            Err((ErrorKind::Transient, _)) => &self.counters.transient_errors,
            Err((ErrorKind::Permanent, _)) => &self.counters.permanent_errors,
        });
        answer
    }

    /// The inner store's answer, or the failure policy's (which has
    /// nothing to give back); with `keep`, a receipt when the store gives
    /// one.
    async fn guarded_check(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
        keep: bool,
    ) -> Result<Returnable, StoreError> {
        let called_ms = self.clock.now_ms();
        let breaker = self
            .breakers
            .of(self.inner.failure_domain(client), called_ms);
        let admission = breaker.admit(called_ms);
        if admission == Admission::ShortCircuit {
            let error = StoreError::transient(
                "the store failed repeatedly and was not called (circuit open)",
            );
            return self.answer_failure(plan, client, now_ms, cost, keep, error);
        }
        let probe = ProbeGuard::new(&breaker, &*self.clock, admission);
        let answered_before = breaker.answered();
        let answer = self.timed_check(plan, client, now_ms, cost, keep).await;
        let outcome = match &answer {
            Ok(_) | Err((ErrorKind::Permanent, _)) => Outcome::Reached,
            // The part answered about this client alone (its slot moving):
            // its other clients are served, so its circuit stays closed.
            Err((ErrorKind::Transient, error)) if error.is_client_only() => Outcome::Reached,
            Err((ErrorKind::Timeout, _)) if breaker.answered() != answered_before => {
                Outcome::Overtaken
            }
            Err(_) => Outcome::Unreached,
        };
        let now = self.clock.now_ms();
        breaker.record(admission, outcome, now);
        probe.done();
        let (kind, error) = match answer {
            Ok(returnable) => return Ok(returnable),
            Err(failure) => failure,
        };
        self.log
            .log(kind, now, &error.message, self.policy.as_str());
        self.answer_failure(plan, client, now_ms, cost, keep, error)
    }

    /// The inner store's inspection within the timeout. Never answered by
    /// the failure policy (an invented state would be a lie about the
    /// client): a failure, a timeout or an open circuit is an error. Not
    /// counted and not seen by a closed circuit breaker, which judge
    /// decisions; an open circuit fails it at once rather than wait for a
    /// store known to be down, until its probe is due: then the inspection
    /// is the probe, so that a circuit closes once the store is back even
    /// when no decision comes (an operator looking at `/v1/clients` after
    /// an outage).
    async fn guarded_inspect(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
    ) -> Result<Inspection, StoreError> {
        let called_ms = self.clock.now_ms();
        let breaker = (self.breakers).of(self.inner.failure_domain(client), called_ms);
        let admission = breaker.admit_look(called_ms);
        if admission == Admission::ShortCircuit {
            return Err(StoreError::transient(
                "the store failed repeatedly and was not called (circuit open)",
            ));
        }
        let probe = ProbeGuard::new(&breaker, &*self.clock, admission);
        let call = self.inner.inspect(plan, client, now_ms);
        let answer = tokio::time::timeout(self.timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::transient(format!(
                    "the store did not answer within {:?}",
                    self.timeout
                )))
            });
        if admission == Admission::Probe {
            // Only an answer shows the store is back (a decision, or the
            // part refusing this client alone): a store that cannot
            // inspect fails every inspection at once, up or down.
            let outcome = match &answer {
                Ok(_) => Outcome::Reached,
                Err(error) if error.is_client_only() => Outcome::Reached,
                Err(_) => Outcome::Unreached,
            };
            breaker.record(admission, outcome, self.clock.now_ms());
        }
        probe.done();
        answer
    }

    /// The failure policy's answer (or the error, for
    /// [`FailurePolicy::Unavailable`]), counted; with `keep`, the local
    /// fallback's receipt.
    fn answer_failure(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
        keep: bool,
        error: StoreError,
    ) -> Result<Returnable, StoreError> {
        let c = &self.counters;
        match self.policy {
            FailurePolicy::FailOpen => {
                bump(&c.fail_open);
                Ok(answer::fail_open(plan, now_ms, cost).into())
            }
            FailurePolicy::FailClosed => {
                bump(&c.fail_closed);
                Ok(answer::fail_closed(plan, cost, self.fail_closed_retry_after_ms).into())
            }
            FailurePolicy::LocalFallback => {
                bump(&c.local_fallback);
                let fallback = &self.fallback;
                Ok(answer::local_fallback(
                    fallback, plan, client, now_ms, cost, keep,
                ))
            }
            FailurePolicy::Unavailable => {
                bump(&c.unavailable);
                Err(error)
            }
        }
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
        StoreFuture::new(async move {
            let returnable = self.guarded_check(plan, client, now_ms, cost, false);
            returnable.await.map(|returnable| returnable.decision)
        })
    }

    /// A receipt for the store's own answers, and for the local
    /// fallback's use of the local limiter; fail-open and fail-closed
    /// consumed nothing.
    fn check_returnable<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, Returnable> {
        StoreFuture::new(self.guarded_check(plan, client, now_ms, cost, true))
    }

    /// The inner store's, which says in the log what it could not settle.
    fn settle(&self, within: Duration) -> StoreFuture<'_, ()> {
        StoreFuture::new(async move {
            let settled = self.inner.settle(within).await;
            if let Err(error) = &settled {
                tracing::warn!(%error, "the store did not settle before shutting down");
            }
            settled
        })
    }

    /// The inner store's, within the timeout; not seen by the circuit
    /// breaker, which judges decisions. A receipt of the local fallback
    /// goes back to the local limiter.
    fn give_back(&self, receipt: Receipt) -> StoreFuture<'_, GivenBack> {
        let receipt = match receipt.into_inner::<LocalUse>() {
            Ok(LocalUse(local)) => return self.fallback.give_back(local),
            Err(receipt) => receipt,
        };
        StoreFuture::new(async move {
            let call = self.inner.give_back(receipt);
            tokio::time::timeout(self.timeout, call)
                .await
                .unwrap_or_else(|_| {
                    Err(StoreError::transient(format!(
                        "the store did not give back within {:?}",
                        self.timeout
                    )))
                })
        })
    }

    fn inspect<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Inspection> {
        StoreFuture::new(self.guarded_inspect(plan, client, now_ms))
    }

    fn failure_domain(&self, client: &str) -> Option<Arc<str>> {
        self.inner.failure_domain(client)
    }
}
