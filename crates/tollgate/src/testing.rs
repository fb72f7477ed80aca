//! Stand-in stores for testing code built on the [`Store`] trait (a failure
//! policy, a timeout, a front end's answer to an outage) without a real
//! outage. Behind the `testing` feature: enable it in `[dev-dependencies]`.

mod switched;

pub use switched::{Switch, SwitchedStore};

use crate::{Inspection, Plan, PlanDecision, Store, StoreError, StoreFuture};

/// A store that fails every call with the same error, at once: a store
/// that is down (transient) or misconfigured (permanent).
#[derive(Debug, Clone)]
pub struct FailingStore {
    error: StoreError,
}

impl FailingStore {
    /// A store failing every call with `error`.
    pub fn new(error: StoreError) -> Self {
        Self { error }
    }

    /// A store that is down: every call fails with a transient
    /// "connection refused", as a Redis store does while Redis is stopped.
    pub fn down() -> Self {
        Self::new(StoreError::transient("connection refused"))
    }
}

impl Store for FailingStore {
    fn check<'a>(
        &'a self,
        _plan: &'a Plan,
        _client: &'a str,
        _now_ms: u64,
        _cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        StoreFuture::ready(Err(self.error.clone()))
    }

    fn inspect<'a>(
        &'a self,
        _plan: &'a Plan,
        _client: &'a str,
        _now_ms: u64,
    ) -> StoreFuture<'a, Inspection> {
        StoreFuture::ready(Err(self.error.clone()))
    }
}

/// A store that never answers, as a paused or unreachable server: for
/// testing timeouts.
#[derive(Debug, Clone, Copy, Default)]
pub struct HangingStore;

impl Store for HangingStore {
    fn check<'a>(
        &'a self,
        _plan: &'a Plan,
        _client: &'a str,
        _now_ms: u64,
        _cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        StoreFuture::new(std::future::pending())
    }

    fn inspect<'a>(
        &'a self,
        _plan: &'a Plan,
        _client: &'a str,
        _now_ms: u64,
    ) -> StoreFuture<'a, Inspection> {
        StoreFuture::new(std::future::pending())
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::{AnyPolicy, Limit};

    fn plan() -> Plan {
        let policy = AnyPolicy::from_name("token-bucket", 1, 1_000).unwrap();
        Plan::new("p", vec![Limit::new("l", policy, false)]).unwrap()
    }

    fn poll_once<F: Future>(future: F) -> Poll<F::Output> {
        pin!(future)
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn failing_fails_at_once_and_hanging_never_answers() {
        let plan = plan();
        let down = FailingStore::down();
        match poll_once(down.check(&plan, "c", 0, 1)) {
            Poll::Ready(Err(error)) => assert!(error.is_transient(), "{error}"),
            other => panic!("expected a transient error at once, got {other:?}"),
        }
        let broken = FailingStore::new(StoreError::permanent("script error"));
        match poll_once(broken.check(&plan, "c", 0, 1)) {
            Poll::Ready(Err(error)) => assert!(!error.is_transient(), "{error}"),
            other => panic!("expected a permanent error at once, got {other:?}"),
        }
        assert!(poll_once(HangingStore.check(&plan, "c", 0, 1)).is_pending());
    }
}
