//! A cached answer says, limit by limit, what the store would: each limit
//! of the plan allows or refuses the request as it does in the store's
//! answer at the same time. The metrics, the top clients' "limited by" and
//! a shadow limit's count of rejections are taken from these per-limit
//! answers, so the cache answers only where every limit would answer the
//! request as it answered the remembered one, and asks the store otherwise.

use tollgate::{AnyPolicy, DecidedBy, Limit, Plan, PlanDecision, PlanLimiter};
use tollgate_cache::{Lookup, RejectionCache};

fn plan(limits: &[(&str, &str, u32, u64, bool)]) -> Plan {
    let limits = limits
        .iter()
        .map(|&(name, policy, limit, window_ms, shadow)| {
            let policy = AnyPolicy::from_name(policy, limit, window_ms).unwrap();
            Limit::new(name, policy, shadow)
        })
        .collect();
    Plan::new("gold", limits).unwrap()
}

/// Each limit's verdict, in the plan's order.
fn verdicts(decision: &PlanDecision) -> Vec<bool> {
    decision.limits.iter().map(|l| l.decision.allowed).collect()
}

/// A larger cost than the remembered one: a limit that allowed the smaller
/// cost but has less room than the larger one refuses it, which the
/// remembered answer does not say (an audit: the cache answered such a
/// limit "allowed", and the metrics never counted its rejections).
#[test]
fn a_larger_cost_a_limit_would_refuse_is_sent_to_the_store() {
    // The audit's plan: 4 per 10 h (token bucket) and 6 per day (sliding
    // window), and a shadow limit of 5 per day.
    let plan = plan(&[
        ("tb", "token-bucket", 4, 36_000_000, false),
        ("sw", "sliding-window", 6, 86_400_000, false),
        ("shadow", "sliding-window", 5, 86_400_000, true),
    ]);
    let (limiter, cache) = (PlanLimiter::new(), RejectionCache::new(100).unwrap());
    for _ in 0..4 {
        assert!(limiter.check(&plan, "c", 0, 1).allowed);
    }
    let rejected = limiter.check(&plan, "c", 0, 1);
    assert_eq!(verdicts(&rejected), [false, true, true], "{rejected:?}");
    assert_eq!(rejected.limits[1].decision.remaining, 2);
    assert_eq!(rejected.limits[2].decision.remaining, 1);
    cache.remember(&plan, "c", 0, 1, &rejected);

    // Cost 1: as remembered, answered.
    let cached = cache.lookup(&plan, "c", 1, 1);
    let Lookup::Answered(cached) = cached else {
        panic!("cost 1 answered by the cache: {cached:?}");
    };
    assert_eq!(cached.decided_by, DecidedBy::Cache);
    assert_eq!(
        verdicts(&cached),
        verdicts(&limiter.check(&plan, "c", 1, 1))
    );
    // Cost 2: the shadow limit, 1 left, would refuse it; cost 3: so would
    // `sw`, 2 left. The store answers both.
    for cost in [2, 3] {
        assert_eq!(
            cache.lookup(&plan, "c", 1, cost),
            Lookup::AskStore { now_ms: 1 },
            "cost {cost}"
        );
    }
    let store = limiter.check(&plan, "c", 1, 3);
    assert_eq!(verdicts(&store), [false, false, false], "{store:?}");
}

/// A limit that refused comes to the end of its own wait while another
/// still refuses: from then on it would allow the request, which the
/// remembered answer does not say, so the store is asked.
#[test]
fn a_refusing_limit_at_the_end_of_its_own_wait_sends_the_request_to_the_store() {
    let plan = plan(&[
        ("1s", "sliding-window", 2, 1_000, false),
        ("10s", "sliding-window", 2, 10_000, false),
    ]);
    let (limiter, cache) = (PlanLimiter::new(), RejectionCache::new(100).unwrap());
    assert!(limiter.check(&plan, "c", 0, 1).allowed);
    assert!(limiter.check(&plan, "c", 0, 1).allowed);
    let rejected = limiter.check(&plan, "c", 0, 1);
    assert_eq!(verdicts(&rejected), [false, false]);
    assert_eq!(rejected.retry_after_ms, Some(10_000));
    cache.remember(&plan, "c", 0, 1, &rejected);

    let Lookup::Answered(cached) = cache.lookup(&plan, "c", 999, 1) else {
        panic!("both limits still refuse at 999");
    };
    assert_eq!(
        verdicts(&cached),
        verdicts(&limiter.check(&plan, "c", 999, 1))
    );
    assert_eq!(
        cache.lookup(&plan, "c", 1_000, 1),
        Lookup::AskStore { now_ms: 1_000 }
    );
    let store = limiter.check(&plan, "c", 1_000, 1);
    assert_eq!(verdicts(&store), [true, false], "{store:?}");
    // The store's answer is remembered in turn, and answers until 10,000.
    cache.remember(&plan, "c", 1_000, 1, &store);
    let Lookup::Answered(cached) = cache.lookup(&plan, "c", 5_000, 1) else {
        panic!("the new rejection is answered");
    };
    assert_eq!(verdicts(&cached), [true, false]);
    assert_eq!(cached.retry_after_ms, Some(5_000));
}

/// Two calls of one client in flight together: the store runs a rejection
/// first, then an allowed request of a smaller cost, and the cache takes in
/// the allowed answer first (with no entry yet, nothing to take it off).
/// The rejection, remembered then, takes off its room what the store
/// allowed the client since it was sent (a re-check: 14 of 300 such pairs
/// left a limit answered "allowed" that the store refused).
#[test]
fn a_rejection_remembered_after_an_allowed_answer_it_preceded_takes_that_off() {
    let plan = plan(&[
        ("a", "sliding-window", 5, 10_000, false),
        ("b", "token-bucket", 10, 1_000_000, false),
    ]);
    let (limiter, cache) = (PlanLimiter::new(), RejectionCache::new(100).unwrap());
    for _ in 0..4 {
        assert!(limiter.check(&plan, "c", 0, 1).allowed);
    }
    for _ in 0..3 {
        assert!(limiter.check(&plan, "c", 20_000, 1).allowed);
    }
    let rejection = cache.begin_call("c");
    let allowed = cache.begin_call("c");
    let rejected = limiter.check(&plan, "c", 20_000, 3);
    assert_eq!(verdicts(&rejected), [false, true]);
    assert_eq!(rejected.limits[1].decision.remaining, 3);
    let let_in = limiter.check(&plan, "c", 20_000, 1);
    assert!(let_in.allowed);
    cache.remember_call(&plan, "c", 20_000, 1, &let_in, &allowed);
    drop(allowed);
    cache.remember_call(&plan, "c", 20_000, 3, &rejected, &rejection);
    drop(rejection);
    assert_eq!(cache.clients_in_flight(), 0, "no note outlives its calls");

    // `b` has 2 left: it refuses a cost of 3, which the store answers.
    assert_eq!(
        cache.lookup(&plan, "c", 20_001, 3),
        Lookup::AskStore { now_ms: 20_001 }
    );
    let store = limiter.check(&plan, "c", 20_001, 3);
    assert_eq!(verdicts(&store), [false, false], "{store:?}");
}

/// A call abandoned while in flight (its caller gone) leaves no note of it
/// behind: the notes live only while a client has calls in flight.
#[tokio::test]
async fn an_abandoned_call_leaves_no_note_behind() {
    use std::sync::Arc;
    use tollgate::testing::HangingStore;
    use tollgate::Store;
    use tollgate_cache::CachedStore;

    let plan = plan(&[("a", "sliding-window", 5, 10_000, false)]);
    let cache = Arc::new(RejectionCache::new(100).unwrap());
    let store = CachedStore::new(HangingStore, cache.clone());
    let mut call = store.check(&plan, "c", 0, 1);
    tokio::select! {
        biased;
        _ = &mut call => panic!("the store never answers"),
        () = std::future::ready(()) => {}
    }
    assert_eq!(cache.clients_in_flight(), 1, "polled once: sent");
    drop(call);
    assert_eq!(cache.clients_in_flight(), 0);
}
