//! [`Taken`]: what the clients of one request consumed, given back unless
//! the request is allowed, so that a refused or abandoned request consumes
//! nothing (see [`crate::service`]).

use std::sync::Arc;

use tollgate::{Receipt, Store};

/// The receipts of what one request's clients consumed so far. Given back
/// by [`Taken::give_back`], or, when the request is abandoned (Envoy
/// cancelled the call, its future dropped), by a task started on drop;
/// kept only by [`Taken::keep`].
pub(crate) struct Taken {
    store: Arc<dyn Store>,
    receipts: Vec<Receipt>,
}

impl Taken {
    /// Nothing taken yet from `store`.
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            receipts: Vec::new(),
        }
    }

    /// Adds what one check consumed (`None`: nothing to give back).
    pub(crate) fn push(&mut self, receipt: Option<Receipt>) {
        self.receipts.extend(receipt);
    }

    /// The request is allowed: what it consumed stays.
    pub(crate) fn keep(mut self) {
        self.receipts.clear();
    }

    /// Gives back everything taken, newest first (a client used twice
    /// unwinds), before the caller lets go of the clients' locks. A
    /// give-back that fails leaves its consumption in place; the store
    /// counts it (a Redis store's `refunds_failed`), so there is nothing
    /// more to do with the error here. The receipts are taken one at a
    /// time: abandoned half way (Envoy gave up while a give-back waited
    /// for Redis), the ones not yet sent are still held, and [`Drop`]
    /// gives them back.
    pub(crate) async fn give_back(mut self) {
        while let Some(receipt) = self.receipts.pop() {
            let _ = self.store.give_back(receipt).await;
        }
    }
}

impl Drop for Taken {
    /// Abandoned before it was kept or given back: gives back in a task of
    /// its own (outside a Tokio runtime, where no store call could run, the
    /// consumption stays).
    fn drop(&mut self) {
        if self.receipts.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.store.clone();
        let receipts = std::mem::take(&mut self.receipts);
        runtime.spawn(async move {
            for receipt in receipts.into_iter().rev() {
                let _ = store.give_back(receipt).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Context, Waker};

    use tollgate::{
        AnyPolicy, GivenBack, Limit, MemoryBackend, Plan, PlanDecision, Returnable, StoreFuture,
    };

    use super::*;

    /// The memory store, whose first give-back never answers (Redis
    /// stalled while Envoy gives up on the call).
    struct FirstGiveBackHangs {
        memory: MemoryBackend,
        hung: AtomicBool,
    }

    impl Store for FirstGiveBackHangs {
        fn check<'a>(
            &'a self,
            plan: &'a Plan,
            client: &'a str,
            now_ms: u64,
            cost: u32,
        ) -> StoreFuture<'a, PlanDecision> {
            self.memory.check(plan, client, now_ms, cost)
        }

        fn check_returnable<'a>(
            &'a self,
            plan: &'a Plan,
            client: &'a str,
            now_ms: u64,
            cost: u32,
        ) -> StoreFuture<'a, Returnable> {
            self.memory.check_returnable(plan, client, now_ms, cost)
        }

        fn give_back(&self, receipt: Receipt) -> StoreFuture<'_, GivenBack> {
            if self.hung.swap(true, Ordering::SeqCst) {
                return self.memory.give_back(receipt);
            }
            StoreFuture::new(std::future::pending())
        }
    }

    /// Abandoned while one give-back waits, the others are still given
    /// back: an audit saw a refused Envoy request of three clients keep
    /// one client's use for a day when Envoy cancelled the call then.
    #[tokio::test]
    async fn a_give_back_abandoned_half_way_still_gives_back_the_rest() {
        let policy = AnyPolicy::from_name("sliding-window", 2, 86_400_000).unwrap();
        let plan = Plan::new("p", vec![Limit::new("l", policy, false)]).unwrap();
        let store = Arc::new(FirstGiveBackHangs {
            memory: MemoryBackend::new(),
            hung: AtomicBool::new(false),
        });
        let mut taken = Taken::new(store.clone());
        for client in ["x", "y"] {
            let used = store.check_returnable(&plan, client, 0, 1).await.unwrap();
            taken.push(used.receipt);
        }
        {
            let mut giving = pin!(taken.give_back());
            let polled = giving
                .as_mut()
                .poll(&mut Context::from_waker(Waker::noop()));
            assert!(polled.is_pending(), "the first give-back hangs");
        }
        // The task started on drop runs once this one yields.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let remaining =
            |client| store.memory.limiter().inspect(&plan, client, 0).limits[0].remaining;
        let restored = ["x", "y"].map(remaining);
        assert!(
            restored.contains(&2) && restored.contains(&1),
            "one client given back, the hung one's use kept: {restored:?}"
        );
    }
}
