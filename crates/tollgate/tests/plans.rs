//! Plans: several limits checked together, all or nothing; shadow limits
//! observe but never reject; limit ids are stable.

use proptest::prelude::*;
use tollgate::{
    AnyPolicy, Limit, Plan, PlanLimiter, RateLimiter, MAX_LIMITS_PER_PLAN, POLICY_NAMES,
};

fn policy(name: &str, limit: u32, window: u64) -> AnyPolicy {
    AnyPolicy::from_name(name, limit, window).unwrap()
}

fn plan(limits: Vec<Limit>) -> Plan {
    Plan::new("free", limits).unwrap()
}

#[test]
fn a_rejected_request_consumes_nothing_from_any_limit() {
    let p = plan(vec![
        Limit::new("per-second", policy("sliding-window", 2, 1000), false),
        Limit::new("per-day", policy("token-bucket", 5, 5000), false),
    ]);
    let l = PlanLimiter::new();
    assert!(l.check(&p, "a", 0, 1).allowed);
    assert!(l.check(&p, "a", 0, 1).allowed);
    for _ in 0..10 {
        let d = l.check(&p, "a", 10, 1);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms, Some(990));
        assert!(!d.limits[0].decision.allowed);
        assert_eq!(d.limits[1].decision.remaining, 3, "per-day untouched");
    }
    assert_eq!(
        l.peek(&p, "a", 999).limits[1].decision.remaining,
        3,
        "no drip yet"
    );
    let d = l.peek(&p, "a", 1000);
    assert_eq!(d.limits[0].decision.remaining, 2);
    assert_eq!(d.limits[1].decision.remaining, 4, "the first drip, at 1000");
}

#[test]
fn the_retry_is_the_longest_wait_of_the_rejecting_limits() {
    let p = plan(vec![
        Limit::new("short", policy("sliding-window", 1, 100), false),
        Limit::new("long", policy("gcra", 2, 1000), false),
    ]);
    let l = PlanLimiter::new();
    assert!(l.check(&p, "a", 0, 1).allowed);
    assert!(l.check(&p, "a", 100, 1).allowed);
    let d = l.check(&p, "a", 150, 1);
    assert!(!d.allowed);
    // short: free at 200; long: one back at 500.
    assert_eq!(d.retry_after_ms, Some(350));
    assert!(!l.check(&p, "a", 499, 1).allowed);
    assert!(l.check(&p, "a", 500, 1).allowed);
    // A cost above a real limit can never pass.
    assert_eq!(l.check(&p, "b", 0, 2).retry_after_ms, None);
}

#[test]
fn shadow_limits_never_reject_and_do_not_consume_when_they_would() {
    let p = plan(vec![
        Limit::new("real", policy("sliding-window", 10, 1000), false),
        Limit::new("trial", policy("sliding-window", 2, 1000), true),
    ]);
    let l = PlanLimiter::new();
    for t in [0, 1, 2, 3] {
        let d = l.check(&p, "a", t, 1);
        assert!(d.allowed, "the shadow limit never rejects");
        assert_eq!(d.limits[1].decision.allowed, t < 2, "at {t}");
        assert!(d.limits[1].shadow);
    }
    // If the shadow had logged the requests at 2 and 3, it would still be full at 1001.
    assert_eq!(l.peek(&p, "a", 1000).limits[1].decision.remaining, 1);
    assert_eq!(l.peek(&p, "a", 1001).limits[1].decision.remaining, 2);
    assert_eq!(l.peek(&p, "a", 1001).limits[0].decision.remaining, 8);
}

#[test]
fn limit_ids_are_stable_and_change_with_what_matters() {
    let id = |plan_name: &str, limit_name: &str, p: AnyPolicy, shadow: bool| {
        Plan::new(plan_name, vec![Limit::new(limit_name, p, shadow)])
            .unwrap()
            .limits()[0]
            .id()
    };
    let base = id(
        "free",
        "per-second",
        policy("sliding-window", 10, 1000),
        false,
    );
    // The same in every process: a fixed function of its fields.
    assert_eq!(
        base,
        id(
            "free",
            "per-second",
            policy("sliding-window", 10, 1000),
            false
        )
    );
    assert_eq!(
        base, 0x6fc2_66c2_2700_7a73,
        "changing the id would orphan state kept in Redis"
    );
    assert_eq!(
        base,
        id(
            "free",
            "per-second",
            policy("sliding-window", 10, 1000),
            true
        ),
        "shadowing keeps state"
    );
    for other in [
        id(
            "paid",
            "per-second",
            policy("sliding-window", 10, 1000),
            false,
        ),
        id(
            "free",
            "per-minute",
            policy("sliding-window", 10, 1000),
            false,
        ),
        id("free", "per-second", policy("gcra", 10, 1000), false),
        id(
            "free",
            "per-second",
            policy("sliding-window", 11, 1000),
            false,
        ),
        id(
            "free",
            "per-second",
            policy("sliding-window", 10, 1001),
            false,
        ),
        // Fields are length-prefixed: moving a character between them changes the id.
        id(
            "fre",
            "eper-second",
            policy("sliding-window", 10, 1000),
            false,
        ),
    ] {
        assert_ne!(base, other);
    }
    // Position in the plan does not matter.
    let two = Plan::new(
        "free",
        vec![
            Limit::new("other", policy("gcra", 1, 1), false),
            Limit::new("per-second", policy("sliding-window", 10, 1000), false),
        ],
    )
    .unwrap();
    assert_eq!(two.limits()[1].id(), base);
}

#[test]
fn unchanged_limits_keep_their_state_across_a_reload() {
    let old = plan(vec![Limit::new(
        "s",
        policy("sliding-window", 2, 1000),
        false,
    )]);
    let new = plan(vec![
        Limit::new("s", policy("sliding-window", 2, 1000), false),
        Limit::new("d", policy("token-bucket", 100, 100_000), false),
    ]);
    let l = PlanLimiter::new();
    assert!(l.check(&old, "a", 0, 2).allowed);
    let d = l.check(&new, "a", 10, 1);
    assert!(!d.allowed, "the sliding window kept its two requests");
    assert_eq!(l.sweep(std::slice::from_ref(&new), 10, false), 0);
    assert_eq!(
        l.sweep(&[new], 1000, true),
        1,
        "the log left; the new bucket is full"
    );
}

#[test]
fn bad_plans_are_errors() {
    assert!(Plan::new("p", vec![]).is_err());
    let err = Plan::new(
        "p",
        vec![
            Limit::new("x", policy("gcra", 1, 1), false),
            Limit::new("x", policy("gcra", 2, 2), false),
        ],
    )
    .unwrap_err();
    assert!(err.to_string().contains("\"x\""), "{err}");
    let limits = |count: usize| -> Vec<Limit> {
        (0..count)
            .map(|i| Limit::new(format!("l{i}"), policy("gcra", 1, 1), false))
            .collect()
    };
    assert!(Plan::new("p", limits(MAX_LIMITS_PER_PLAN)).is_ok());
    let err = Plan::new("p", limits(MAX_LIMITS_PER_PLAN + 1)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plan \"p\" has 65 limits; a plan holds at most 64"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// A plan answers like its limits as separate limiters, where a request
    /// is used on all of them only if every non-shadow limit has room.
    #[test]
    fn a_plan_is_its_limits_all_or_nothing(
        specs in proptest::collection::vec((0..POLICY_NAMES.len(), 1..=4u32, 1..=100u64, prop::bool::weighted(0.3)), 1..4),
        calls in proptest::collection::vec((0..3usize, 0..=150u64, 0..=5u32), 1..100),
    ) {
        let limits: Vec<Limit> = specs
            .iter()
            .enumerate()
            .map(|(i, &(p, limit, interval, shadow))| {
                Limit::new(format!("l{i}"), policy(POLICY_NAMES[p], limit, u64::from(limit) * interval), shadow)
            })
            .collect();
        let p = plan(limits);
        let singles: Vec<RateLimiter> = p.limits().iter().map(|l| RateLimiter::with_policy(l.policy().clone())).collect();
        let l = PlanLimiter::new();
        let mut now = 0;
        for (client, step, cost) in calls {
            now += step;
            let client = format!("c{client}");
            let d = l.check(&p, &client, now, cost);
            let peeks: Vec<_> = singles.iter().map(|s| s.peek(&client, now)).collect();
            let fits: Vec<bool> = peeks.iter().map(|x| cost <= x.remaining).collect();
            let allowed = p.limits().iter().zip(&fits).all(|(limit, &fit)| fit || limit.is_shadow());
            prop_assert_eq!(d.allowed, allowed);
            for (i, single) in singles.iter().enumerate() {
                let one = if allowed && fits[i] { single.check(&client, now, cost) } else { single.peek(&client, now) };
                prop_assert_eq!(d.limits[i].decision.remaining, one.remaining, "limit {}", i);
            }
        }
    }
}

#[test]
fn a_refusal_names_the_limit_that_holds_it_back_longest() {
    let p = plan(vec![
        Limit::new("per-second", policy("sliding-window", 2, 1000), false),
        Limit::new("per-minute", policy("sliding-window", 3, 60_000), false),
        Limit::new("watching", policy("gcra", 1, 1000), true),
    ]);
    let l = PlanLimiter::new();
    let refused_by = |cost, now| {
        let decision = l.check(&p, "a", now, cost);
        decision.refused_by().map(|limit| limit.name.to_string())
    };
    // The shadow refuses the second request: it never holds one back.
    assert_eq!(refused_by(1, 0), None);
    assert_eq!(refused_by(1, 0), None);
    assert_eq!(refused_by(1, 0).as_deref(), Some("per-second"));
    assert_eq!(refused_by(1, 1_000), None, "the third of the minute");
    // Both refuse: the minute waits longer.
    assert_eq!(refused_by(1, 1_000).as_deref(), Some("per-minute"));
    // Over the second's limit, for ever: before any wait.
    assert_eq!(refused_by(3, 1_000).as_deref(), Some("per-second"));
}
