//! The rules that keep the rejection cache exact, on the in-memory limiter's
//! real decisions: when an entry answers, when it must not, and its bound.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate::testing::FailingStore;
use tollgate::{
    AnyPolicy, DecidedBy, FailurePolicy, Limit, MemoryBackend, Plan, PlanDecision, PlanLimiter,
    Store, StoreFuture,
};
use tollgate_cache::{CachedStore, Error, Lookup, RejectionCache, MAX_MAX_CLIENTS};
use tollgate_guard::GuardedStore;

fn plan(name: &str, policy: &str, limit: u32, window_ms: u64) -> Plan {
    let policy = AnyPolicy::from_name(policy, limit, window_ms).unwrap();
    Plan::new(name, vec![Limit::new("l", policy, false)]).unwrap()
}

/// Two requests per second: the third at `at` is rejected until 1,000.
fn exhausted(limiter: &PlanLimiter, plan: &Plan, client: &str, at: u64) -> PlanDecision {
    assert!(limiter.check(plan, client, 0, 1).allowed);
    assert!(limiter.check(plan, client, 0, 1).allowed);
    let rejected = limiter.check(plan, client, at, 1);
    assert!(!rejected.allowed);
    rejected
}

fn cache(max: usize) -> RejectionCache {
    RejectionCache::new(max).unwrap()
}

/// The cache's own answer to a request, if it gives one.
fn answer(
    cache: &RejectionCache,
    plan: &Plan,
    client: &str,
    now_ms: u64,
    cost: u32,
) -> Option<PlanDecision> {
    match cache.lookup(plan, client, now_ms, cost) {
        Lookup::Answered(decision) => Some(decision),
        Lookup::AskStore { .. } => None,
    }
}

#[test]
fn answers_until_exactly_t_plus_w_and_not_at_it() {
    let (limiter, cache, plan) = (
        PlanLimiter::new(),
        cache(100),
        plan("p", "sliding-window", 2, 1_000),
    );
    let rejected = exhausted(&limiter, &plan, "c", 100);
    assert_eq!(rejected.retry_after_ms, Some(900));
    cache.remember(&plan, "c", 100, 1, &rejected);
    let at_100 = answer(&cache, &plan, "c", 100, 1).expect("answered at t");
    assert_eq!(at_100.decided_by, DecidedBy::Cache);
    assert_eq!(at_100.retry_after_ms, Some(900));
    let last = answer(&cache, &plan, "c", 999, 1).expect("answered at t + w - 1");
    assert_eq!(last.retry_after_ms, Some(1));
    assert_eq!(last.limits[0].decision.retry_after_ms, Some(1));
    // The store allows it at t + w: the cache must not answer.
    let asked = cache.lookup(&plan, "c", 1_000, 1);
    assert_eq!(asked, Lookup::AskStore { now_ms: 1_000 });
    let allowed = limiter.check(&plan, "c", 1_000, 1);
    assert!(allowed.allowed);
    assert_eq!(cache.len(), 1, "kept until the store has answered");
    cache.remember(&plan, "c", 1_000, 1, &allowed);
    assert!(
        cache.is_empty(),
        "ended by the store's answer past its wait"
    );
}

#[test]
fn a_rejected_cost_says_nothing_about_a_smaller_one() {
    let (limiter, cache, plan) = (
        PlanLimiter::new(),
        cache(100),
        plan("p", "token-bucket", 4, 1_000),
    );
    assert!(limiter.check(&plan, "c", 0, 2).allowed);
    let rejected = limiter.check(&plan, "c", 10, 3);
    assert!(!rejected.allowed);
    cache.remember(&plan, "c", 10, 3, &rejected);
    // Cost 2 still passes in the store: the cache leaves it to the store.
    assert_eq!(answer(&cache, &plan, "c", 20, 2), None);
    assert!(limiter.check(&plan, "c", 20, 2).allowed);
    // Costs 3 and 4 are rejected by the store, and by the cache.
    for cost in [3, 4] {
        assert!(!limiter.check(&plan, "c", 30, cost).allowed);
        let cached = answer(&cache, &plan, "c", 30, cost).expect("cost >= rejected cost");
        assert!(!cached.allowed);
    }
    // Cost 5 can never pass (limit 4): the store says "never", not a wait.
    assert_eq!(limiter.check(&plan, "c", 30, 5).retry_after_ms, None);
    assert_eq!(answer(&cache, &plan, "c", 30, 5), None);
    // Cost 0 only asks: always the store.
    assert_eq!(answer(&cache, &plan, "c", 30, 0), None);
}

/// A request stamped before the latest time the cache holds for the client
/// is answered at that time, as the store answers it.
#[test]
fn a_time_before_the_clients_latest_is_answered_at_the_latest() {
    let (limiter, cache, plan) = (PlanLimiter::new(), cache(100), plan("p", "gcra", 2, 1_000));
    // Two used at 0, the third rejected at 300 until 500.
    let rejected = exhausted(&limiter, &plan, "c", 300);
    assert_eq!(rejected.retry_after_ms, Some(200));
    cache.remember(&plan, "c", 300, 1, &rejected);
    let at_450 = answer(&cache, &plan, "c", 450, 1).expect("within the wait");
    assert_eq!(at_450.retry_after_ms, Some(50));
    for stale in [449, 300, 0] {
        let cached = answer(&cache, &plan, "c", stale, 1).expect("answered at 450");
        assert_eq!(cached.retry_after_ms, Some(50), "at {stale}");
    }
    // A smaller cost is the store's, at the latest time.
    assert_eq!(
        cache.lookup(&plan, "c", 0, 0),
        Lookup::AskStore { now_ms: 450 }
    );
    assert_eq!(cache.time_for("c", 0), 450);
    assert_eq!(cache.time_for("unknown", 7), 7);
}

#[test]
fn only_the_stores_own_rejections_are_remembered() {
    let (limiter, cache, plan) = (
        PlanLimiter::new(),
        cache(100),
        plan("p", "sliding-window", 2, 1_000),
    );
    let allowed = limiter.check(&plan, "a", 0, 1);
    cache.remember(&plan, "a", 0, 1, &allowed);
    let mut failure = exhausted(&limiter, &plan, "f", 10);
    failure.decided_by = DecidedBy::Failure(FailurePolicy::FailClosed);
    cache.remember(&plan, "f", 10, 1, &failure);
    let mut local = exhausted(&limiter, &plan, "l", 10);
    local.decided_by = DecidedBy::Failure(FailurePolicy::LocalFallback);
    cache.remember(&plan, "l", 10, 1, &local);
    let never = limiter.check(&plan, "n", 10, 3);
    cache.remember(&plan, "n", 10, 3, &never);
    assert!(cache.is_empty());
}

#[test]
fn a_plan_whose_limits_changed_answers_nothing_and_is_forgotten() {
    let (limiter, cache) = (PlanLimiter::new(), cache(100));
    let old = plan("p", "sliding-window", 2, 1_000);
    let other = plan("q", "sliding-window", 2, 1_000);
    cache.remember(&old, "c", 10, 1, &exhausted(&limiter, &old, "c", 10));
    cache.remember(&other, "d", 10, 1, &exhausted(&limiter, &other, "d", 10));
    let raised = plan("p", "sliding-window", 3, 1_000);
    assert_eq!(answer(&cache, &raised, "c", 20, 1), None);
    let shadowed = Plan::new(
        "p",
        vec![Limit::new("l", old.limits()[0].policy().clone(), true)],
    )
    .unwrap();
    assert_eq!(answer(&cache, &shadowed, "c", 20, 1), None);
    assert!(answer(&cache, &old, "c", 20, 1).is_some());
    assert_eq!(cache.forget_changed(&[raised, other.clone()]), 1);
    assert_eq!(cache.len(), 1);
    assert!(answer(&cache, &other, "d", 20, 1).is_some());
}

/// One entry per client, as the store keeps one latest time per client:
/// a rejection under another plan takes the entry's place, and keeps its
/// latest time.
#[test]
fn a_clients_rejection_under_another_plan_replaces_its_entry() {
    let (limiter, cache) = (PlanLimiter::new(), cache(100));
    let (p, q) = (
        plan("p", "sliding-window", 2, 1_000),
        plan("q", "sliding-window", 2, 1_000),
    );
    cache.remember(&p, "c", 10, 1, &exhausted(&limiter, &p, "c", 10));
    assert!(answer(&cache, &p, "c", 500, 1).is_some());
    assert_eq!(answer(&cache, &q, "c", 20, 1), None, "q is the store's");
    // The store is asked at the client's latest time, 500.
    let asked = cache.lookup(&q, "c", 20, 1);
    assert_eq!(asked, Lookup::AskStore { now_ms: 500 });
    let rejected = exhausted(&limiter, &q, "c", 500);
    cache.remember(&q, "c", 500, 1, &rejected);
    assert_eq!(cache.len(), 1);
    assert_eq!(answer(&cache, &p, "c", 600, 1), None, "p's entry went");
    let q_answer = answer(&cache, &q, "c", 20, 1).expect("q's entry");
    assert_eq!(
        q_answer.retry_after_ms, rejected.retry_after_ms,
        "answered at 500"
    );
}

#[test]
fn the_cap_drops_expired_entries_first_then_the_soonest_to_expire() {
    let plan = plan("p", "sliding-window", 1, 1_000);
    let (limiter, cache) = (PlanLimiter::new(), cache(16)); // one entry per shard
    let reject = |client: &str, at: u64| {
        limiter.check(&plan, client, at, 1);
        let d = limiter.check(&plan, client, at, 1);
        cache.remember(&plan, client, at, 1, &d);
    };
    for i in 0..200 {
        reject(&format!("old{i}"), 0); // until 1,000
    }
    assert!(
        cache.len() <= 16,
        "{} entries over a cap of 16",
        cache.len()
    );
    // At 5,000 every old entry has expired: new ones replace them.
    for i in 0..200 {
        reject(&format!("new{i}"), 5_000);
    }
    assert!(cache.len() <= 16);
    let new_ones = (0..200)
        .filter(|i| answer(&cache, &plan, &format!("new{i}"), 5_001, 1).is_some())
        .count();
    assert_eq!(new_ones, cache.len(), "only new entries are left");
    assert_eq!(RejectionCache::new(1).unwrap().max_clients(), 1);
}

#[test]
fn a_capacity_out_of_bounds_is_a_clear_error() {
    for bad in [0, MAX_MAX_CLIENTS + 1] {
        let error = RejectionCache::new(bad).err().expect("refused");
        assert_eq!(
            error,
            Error::Capacity {
                got: bad,
                max: MAX_MAX_CLIENTS
            }
        );
        assert!(error.to_string().contains(&format!("got {bad}")), "{error}");
    }
}

/// A store that counts the calls reaching it.
struct Counting<S> {
    inner: S,
    calls: AtomicUsize,
}

impl<S: Store> Store for Counting<S> {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.check(plan, client, now_ms, cost)
    }
}

#[tokio::test]
async fn a_repeat_offender_costs_the_store_one_call_per_wait() {
    let plan = plan("p", "sliding-window", 2, 1_000);
    let inner = Arc::new(Counting {
        inner: MemoryBackend::new(),
        calls: AtomicUsize::new(0),
    });
    let store = CachedStore::new(inner.clone(), Arc::new(cache(100)));
    let mut by = Vec::new();
    for now in (0..2_000).step_by(10) {
        by.push(store.check(&plan, "c", now, 1).await.unwrap().decided_by);
    }
    let cached = by.iter().filter(|d| **d == DecidedBy::Cache).count();
    // Allowed at 0, 10, 1000, 1010; rejected by the store at 20 and 1020.
    assert_eq!(inner.calls.load(Ordering::Relaxed), 6);
    assert_eq!(cached, 200 - 6);
}

#[tokio::test]
async fn the_failure_policys_rejections_pass_through_uncached() {
    let plan = plan("p", "sliding-window", 2, 1_000);
    let guarded = GuardedStore::new(
        FailingStore::down(),
        Duration::from_millis(50),
        FailurePolicy::FailClosed,
    );
    let store = CachedStore::new(guarded, Arc::new(cache(100)));
    for now in 0..5 {
        let d = store.check(&plan, "c", now, 1).await.unwrap();
        assert_eq!(d.decided_by, DecidedBy::Failure(FailurePolicy::FailClosed));
    }
    assert!(store.cache().is_empty());
}

/// The answers of `calls` ((time, cost) of one client) with the cache and
/// without it, each on a fresh memory store.
async fn both_ways(plan: &Plan, calls: &[(u64, u32)]) -> Vec<(PlanDecision, PlanDecision)> {
    let cached = CachedStore::new(MemoryBackend::new(), Arc::new(cache(100)));
    let plain = MemoryBackend::new();
    let mut answers = Vec::new();
    for &(now, cost) in calls {
        let with = cached.check(plan, "c", now, cost).await.unwrap();
        let without = plain.check(plan, "c", now, cost).await.unwrap();
        answers.push((with, without));
    }
    answers
}

/// A request stamped before one the cache answered is decided at the
/// client's latest time, as the store decides it without the cache: the
/// cache's answer at 900 is a time the store never saw, and the store
/// logged the use at 200 instead of 900, letting a third request into the
/// window ending at 1,250 (found by an audit).
#[tokio::test]
async fn a_request_stamped_before_a_cached_answer_is_decided_at_the_latest_time() {
    let plan = plan("p", "sliding-window", 2, 1_000);
    let calls = [(0, 1), (100, 2), (900, 2), (200, 1), (1_250, 2)];
    let answers = both_ways(&plan, &calls).await;
    assert_eq!(answers[2].0.decided_by, DecidedBy::Cache);
    for ((with, without), (now, cost)) in answers.iter().zip(calls) {
        assert_eq!(with.allowed, without.allowed, "at {now}, cost {cost}");
    }
    assert!(
        !answers[4].0.allowed,
        "two used in the window ending at 1,250"
    );
}

/// A request the store answered at a time past a remembered rejection's
/// wait ends it: a later request stamped earlier is the store's to answer
/// at that time (allowed here), not the cache's (found by an audit).
#[tokio::test]
async fn a_later_time_the_store_saw_ends_a_remembered_rejection() {
    let plan = plan("p", "sliding-window", 1, 1_000);
    let calls = [(0, 1), (10, 1), (1_500, 0), (500, 1)];
    let answers = both_ways(&plan, &calls).await;
    assert_eq!(answers[1].0.decided_by, DecidedBy::Store);
    for ((with, without), (now, cost)) in answers.iter().zip(calls) {
        assert_eq!(with.allowed, without.allowed, "at {now}, cost {cost}");
    }
    assert!(
        answers[3].0.allowed,
        "decided at 1,500, a window after the use"
    );
}
