//! Every failure (timeout, transient error, permanent error) is answered by
//! the failure policy, and counted by kind.

use std::time::Duration;

use tollgate::testing::{FailingStore, HangingStore};
use tollgate::{AnyPolicy, DecidedBy, FailurePolicy, GivenBack, Limit, Plan, Store, StoreError};
use tollgate_guard::GuardedStore;

fn plan() -> Plan {
    let policy = AnyPolicy::from_name("sliding-window", 2, 1_000).unwrap();
    Plan::new("p", vec![Limit::new("l", policy, false)]).unwrap()
}

fn failing(error: StoreError, policy: FailurePolicy) -> GuardedStore<FailingStore> {
    GuardedStore::new(FailingStore::new(error), Duration::from_secs(1), policy)
}

#[tokio::test]
async fn a_permanent_error_is_answered_by_the_policy_and_counted_apart() {
    let store = failing(
        StoreError::permanent("OOM command not allowed (script f00d)"),
        FailurePolicy::FailOpen,
    );
    let d = store.check(&plan(), "c", 0, 1).await.unwrap();
    assert!(d.allowed);
    assert_eq!(d.decided_by, DecidedBy::Failure(FailurePolicy::FailOpen));
    let counts = store.counts();
    assert_eq!(
        (
            counts.permanent_errors,
            counts.transient_errors,
            counts.fail_open
        ),
        (1, 0, 1)
    );
}

#[tokio::test]
async fn fail_open_answers_as_for_a_new_client() {
    let store = failing(StoreError::transient("down"), FailurePolicy::FailOpen);
    let plan = plan();
    for _ in 0..3 {
        let d = store.check(&plan, "c", 0, 1).await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.decided_by.as_str(), "fail-open");
        assert_eq!(d.limits[0].decision.remaining, 1);
    }
    // A cost above the limit can never pass, store or no store.
    let d = store.check(&plan, "c", 0, 3).await.unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after_ms, None);
    let counts = store.counts();
    assert_eq!((counts.fail_open, counts.transient_errors), (4, 4));
}

#[tokio::test]
async fn a_hanging_store_times_out_into_fail_closed() {
    let store = GuardedStore::new(
        HangingStore,
        Duration::from_millis(20),
        FailurePolicy::FailClosed,
    )
    .with_fail_closed_retry_after(750);
    let d = store.check(&plan(), "c", 0, 1).await.unwrap();
    assert!(!d.allowed);
    assert_eq!(d.decided_by.as_str(), "fail-closed");
    assert_eq!(d.retry_after_ms, Some(750));
    assert_eq!(d.limits[0].decision.remaining, 0);
    assert_eq!(store.counts().timeouts, 1);
}

#[tokio::test]
async fn fail_closed_asks_for_a_second_by_default() {
    let store = failing(StoreError::permanent("broken"), FailurePolicy::FailClosed);
    let d = store.check(&plan(), "c", 0, 1).await.unwrap();
    assert_eq!(d.retry_after_ms, Some(1_000));
    assert_eq!(store.counts().fail_closed, 1);
}

#[tokio::test]
async fn fail_closed_gives_no_retry_to_a_cost_over_the_limit() {
    // As fail-open and the store answer it: no wait lets 3 of 2 through.
    let store = failing(StoreError::transient("down"), FailurePolicy::FailClosed);
    let d = store.check(&plan(), "c", 0, 3).await.unwrap();
    assert!(!d.allowed);
    assert_eq!(d.decided_by.as_str(), "fail-closed");
    assert_eq!(d.retry_after_ms, None);
    assert_eq!(d.limits[0].decision.retry_after_ms, None);
    let within = store.check(&plan(), "c", 0, 2).await.unwrap();
    assert_eq!(within.retry_after_ms, Some(1_000));
}

#[tokio::test]
async fn unavailable_hands_every_failure_back() {
    let store = GuardedStore::new(
        HangingStore,
        Duration::from_millis(20),
        FailurePolicy::Unavailable,
    );
    let error = store.check(&plan(), "c", 0, 1).await.unwrap_err();
    assert!(error.is_transient(), "{error}");
    assert!(error.message.contains("20ms"), "{error}");

    let store = failing(StoreError::permanent("broken"), FailurePolicy::Unavailable);
    let error = store.check(&plan(), "c", 0, 1).await.unwrap_err();
    assert_eq!(error, StoreError::permanent("broken"));
    let counts = store.counts();
    assert_eq!((counts.permanent_errors, counts.unavailable), (1, 1));
}

#[tokio::test]
async fn local_fallback_keeps_its_own_state() {
    let store = failing(StoreError::transient("down"), FailurePolicy::LocalFallback);
    let plan = plan();
    let mut allowed = Vec::new();
    for t in 0..3 {
        let d = store.check(&plan, "c", t, 1).await.unwrap();
        assert_eq!(d.decided_by.as_str(), "local-fallback");
        allowed.push(d.allowed);
    }
    assert_eq!(allowed, [true, true, false]);
    assert_eq!(store.counts().local_fallback, 3);
}

/// A request of two clients during an outage (the Envoy service's), whose
/// second client the local fallback refuses: the first one's use of the
/// local limiter is given back to it, not to the failed store.
#[tokio::test]
async fn local_fallback_gives_back_to_the_local_limiter() {
    let store = failing(StoreError::transient("down"), FailurePolicy::LocalFallback);
    let plan = plan();
    let used = store.check_returnable(&plan, "c", 0, 2).await.unwrap();
    assert_eq!(used.decision.decided_by.as_str(), "local-fallback");
    let receipt = used.receipt.expect("a receipt of the local use");
    assert!(
        !store.check(&plan, "c", 0, 1).await.unwrap().allowed,
        "used up"
    );
    assert_eq!(store.give_back(receipt).await, Ok(GivenBack::Restored));
    let after = store.check(&plan, "c", 0, 2).await.unwrap();
    assert!(after.allowed, "the local limiter has its whole quota again");
    // Fail-open and fail-closed consumed nothing: no receipt.
    for policy in [FailurePolicy::FailOpen, FailurePolicy::FailClosed] {
        let answer = failing(StoreError::transient("down"), policy);
        let answer = answer.check_returnable(&plan, "c", 0, 1).await.unwrap();
        assert!(answer.receipt.is_none(), "{policy:?}");
    }
}

#[tokio::test]
async fn a_working_store_decides() {
    let store = GuardedStore::new(
        tollgate::MemoryBackend::new(),
        Duration::from_secs(1),
        FailurePolicy::FailClosed,
    );
    let plan = plan();
    for expected in [true, true, false] {
        let d = store.check(&plan, "c", 0, 1).await.unwrap();
        assert_eq!((d.allowed, d.decided_by), (expected, DecidedBy::Store));
    }
    assert_eq!(store.counts().store, 3);
}

#[tokio::test]
async fn an_inspection_passes_through_and_a_failure_is_an_error_whatever_the_policy() {
    let plan = plan();
    let memory = GuardedStore::new(
        tollgate::MemoryBackend::new(),
        Duration::from_secs(1),
        FailurePolicy::FailOpen,
    );
    memory.check(&plan, "c", 100, 1).await.unwrap();
    let seen = memory.inspect(&plan, "c", 200).await.unwrap();
    assert_eq!(seen, memory.inner().inspect(&plan, "c", 200).await.unwrap());
    assert_eq!(seen.limits[0].remaining, 1);
    for policy in [
        FailurePolicy::FailOpen,
        FailurePolicy::FailClosed,
        FailurePolicy::LocalFallback,
    ] {
        let store = failing(StoreError::transient("connection refused"), policy);
        let error = store.inspect(&plan, "c", 0).await.unwrap_err();
        assert_eq!(error.message, "connection refused", "{policy:?}");
        // Not a decision: neither answered by the policy nor counted.
        assert_eq!(store.counts(), tollgate_guard::FailureCounts::default());
    }
    let hanging = GuardedStore::new(
        HangingStore,
        Duration::from_millis(20),
        FailurePolicy::FailOpen,
    );
    let error = hanging.inspect(&plan, "c", 0).await.unwrap_err();
    assert!(
        error.is_transient() && error.message.contains("did not answer"),
        "{error}"
    );
}
