//! A cache on its own clock ([`RejectionCache::on_own_clock`]) in front of a
//! store that times its decisions by a clock of its own, as the Redis store
//! does under `TimeSource::Redis`: a caller's clock stepped back or forward
//! changes no answer and no wait. On the callers' times, a server whose
//! clock stepped back a minute went on rejecting from the cache, with the
//! same frozen wait, for that minute after the store would allow.

use std::sync::{Arc, Mutex};

use tollgate::{
    AnyPolicy, Clock, DecidedBy, Inspection, Limit, ManualClock, MonotonicClock, Plan,
    PlanDecision, PlanLimiter, Store, StoreFuture,
};
use tollgate_cache::{CachedStore, RejectionCache};

/// A store that decides at its own clock's time, whatever the caller says,
/// and notes the times it was handed.
struct OnItsOwnClock {
    limiter: PlanLimiter,
    clock: Arc<ManualClock>,
    handed: Mutex<Vec<u64>>,
}

impl Store for OnItsOwnClock {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        self.handed.lock().unwrap().push(now_ms);
        let own = self.clock.now_ms();
        StoreFuture::ready(Ok(self.limiter.check(plan, client, own, cost)))
    }

    fn inspect<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Inspection> {
        self.handed.lock().unwrap().push(now_ms);
        let own = self.clock.now_ms();
        StoreFuture::ready(Ok(self.limiter.inspect(plan, client, own)))
    }
}

/// The cache's monotonic clock, moved by hand with the store's.
struct Monotonic(Arc<ManualClock>);

impl MonotonicClock for Monotonic {
    fn now_us(&self) -> u64 {
        self.0.now_ms() * 1_000
    }
}

#[tokio::test]
async fn a_callers_clock_that_steps_changes_no_answer_and_no_wait() {
    let policy = AnyPolicy::from_name("sliding-window", 1, 1_000).expect("policy");
    let plan = Plan::new("p", vec![Limit::new("l", policy, false)]).expect("plan");
    // The store's clock and the cache's move together, as Redis's and a
    // server's monotonic clock do; the caller's wall clock is another.
    let clock = Arc::new(ManualClock::new(5_000));
    let cache = RejectionCache::new(100).expect("cache");
    let cache = Arc::new(cache.on_own_clock(Arc::new(Monotonic(clock.clone()))));
    let store = OnItsOwnClock {
        limiter: PlanLimiter::new(),
        clock: clock.clone(),
        handed: Mutex::default(),
    };
    let store = CachedStore::new(store, cache);
    let wall = 1_700_000_000_000;

    assert!(store.check(&plan, "c", wall, 1).await.unwrap().allowed);
    clock.advance(10);
    let rejected = store.check(&plan, "c", wall + 10, 1).await.unwrap();
    assert_eq!(
        (rejected.decided_by, rejected.retry_after_ms),
        (DecidedBy::Store, Some(990))
    );

    // The caller's clock steps back a minute; the wait counts down all the same.
    clock.advance(490);
    let back = store.check(&plan, "c", wall - 60_000, 1).await.unwrap();
    assert_eq!(
        (back.allowed, back.decided_by, back.retry_after_ms),
        (false, DecidedBy::Cache, Some(500))
    );
    // Then forward an hour: still the cache's rejection, with the true wait.
    clock.advance(400);
    let forward = store.check(&plan, "c", wall + 3_600_000, 1).await.unwrap();
    assert_eq!(
        (forward.allowed, forward.decided_by, forward.retry_after_ms),
        (false, DecidedBy::Cache, Some(100))
    );
    // check_returnable is answered the same way.
    let returnable = store.check_returnable(&plan, "c", wall, 1).await.unwrap();
    assert_eq!(
        (
            returnable.decision.decided_by,
            returnable.decision.retry_after_ms
        ),
        (DecidedBy::Cache, Some(100))
    );
    // At the end of the wait, stepped back again: the store's, and allowed.
    clock.advance(100);
    let allowed = store.check(&plan, "c", wall - 60_000, 1).await.unwrap();
    assert_eq!(
        (allowed.allowed, allowed.decided_by),
        (true, DecidedBy::Store)
    );
    // The store is handed each caller's own time, inspections included:
    // never the cache's clock, nor a latest time measured on it.
    let inspection = store.inspect(&plan, "c", wall + 5).await.unwrap();
    assert_eq!(inspection.limits[0].remaining, 0);
    let handed = store.inner().handed.lock().unwrap().clone();
    assert_eq!(handed, [wall, wall + 10, wall - 60_000, wall + 5]);
}
