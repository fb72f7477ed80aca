//! The failure policy's answers: pure functions of the plan (and, for the
//! local fallback, of a local limiter), so that every front end gets the
//! same numbers for the same policy.

use tollgate::{
    check_plan, DecidedBy, Decision, FailurePolicy, LimitDecision, MemoryBackend, Plan,
    PlanDecision, Policy, Receipt, Returnable,
};

/// Fail-open: the answer for a client with no history (every limit at its
/// full quota). A cost over a limit is still rejected, with no retry.
pub(crate) fn fail_open(plan: &Plan, now_ms: u64, cost: u32) -> PlanDecision {
    let mut decision = check_plan(plan, &mut Vec::new(), now_ms, cost);
    decision.decided_by = DecidedBy::Failure(FailurePolicy::FailOpen);
    decision
}

/// Fail-closed: every limit rejects, nothing remains, retry after the hint;
/// a limit the cost is over gives no retry (no wait lets it through, as
/// the store and fail-open answer it), nor does the plan when such a limit
/// is enforced.
pub(crate) fn fail_closed(plan: &Plan, cost: u32, retry_after_ms: u64) -> PlanDecision {
    let limits: Vec<LimitDecision> = plan
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
                retry_after_ms: Some(retry_after_ms).filter(|_| cost <= limit.policy().limit()),
                reset_after_ms: retry_after_ms,
            },
        })
        .collect();
    let never = (limits.iter()).any(|l| !l.shadow && l.decision.retry_after_ms.is_none());
    PlanDecision {
        allowed: false,
        retry_after_ms: Some(retry_after_ms).filter(|_| !never),
        limits,
        decided_by: DecidedBy::Failure(FailurePolicy::FailClosed),
    }
}

/// What `policy` answers a request of `cost` under `plan` at `now_ms`
/// without asking the store: for a front end that already holds the
/// policy's answer to a look at the same client (the store failing for
/// it) and must not wait out the store's timeout a second time to use it
/// (the Envoy service deciding several clients of one request). `None` for
/// the local fallback, whose use must count in its local limiter, and for
/// [`FailurePolicy::Unavailable`], which answers nothing.
pub fn failure_answer(
    policy: FailurePolicy,
    plan: &Plan,
    now_ms: u64,
    cost: u32,
    fail_closed_retry_after_ms: u64,
) -> Option<PlanDecision> {
    match policy {
        FailurePolicy::FailOpen => Some(fail_open(plan, now_ms, cost)),
        FailurePolicy::FailClosed => Some(fail_closed(plan, cost, fail_closed_retry_after_ms)),
        FailurePolicy::LocalFallback | FailurePolicy::Unavailable => None,
    }
}

/// Local fallback: the local in-memory limiter decides (and keeps its
/// state for the rest of the outage and the next one); with `keep`, with a
/// receipt of what it used, marked [`LocalUse`] so that the guard gives it
/// back to the local limiter rather than to the store.
pub(crate) fn local_fallback(
    fallback: &MemoryBackend,
    plan: &Plan,
    client: &str,
    now_ms: u64,
    cost: u32,
    keep: bool,
) -> Returnable {
    let limiter = fallback.limiter();
    let mut answer = if keep {
        limiter.check_returnable(plan, client, now_ms, cost)
    } else {
        limiter.check(plan, client, now_ms, cost).into()
    };
    answer.decision.decided_by = DecidedBy::Failure(FailurePolicy::LocalFallback);
    answer.receipt = answer
        .receipt
        .map(|receipt| Receipt::new(LocalUse(receipt)));
    answer
}

/// A receipt of the local fallback's limiter, not of the guarded store.
pub(crate) struct LocalUse(pub(crate) Receipt);
