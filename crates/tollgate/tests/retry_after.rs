//! The waits in a [`tollgate::Decision`] are exact: wait `retry_after_ms` and
//! the same request is allowed, one millisecond less and it is not; at
//! `reset_after_ms` the full quota is back, one millisecond earlier it is not.
//!
//! Checked on copies of one state through the [`Policy`] trait (so the probe
//! at `now + w - 1` cannot disturb the probe at `now + w`), after a random
//! prefix of requests, over the whole contract domain and beyond.

use proptest::prelude::*;
use tollgate::{AnyPolicy, AnyState, Policy, RateLimiter, POLICY_NAMES};

/// Checks every promise of the decision for `cost` at `now` on `state`.
fn check_waits(
    policy: &AnyPolicy,
    state: &AnyState,
    now: u64,
    cost: u32,
) -> Result<(), TestCaseError> {
    let limit = policy.limit();
    let decision = policy.decide(state, now, cost);
    let mut after = state.clone();
    if decision.allowed && cost > 0 {
        policy.consume(&mut after, now, cost);
    }
    // `remaining` is what is left after this request.
    prop_assert_eq!(policy.decide(&after, now, 0).remaining, decision.remaining);

    match decision.retry_after_ms {
        Some(0) => prop_assert!(decision.allowed),
        Some(w) => {
            prop_assert!(!decision.allowed);
            prop_assert!(cost <= limit);
            prop_assert!(
                policy.decide(state, now + w, cost).allowed,
                "allowed after waiting {}",
                w
            );
            prop_assert!(
                !policy.decide(state, now + w - 1, cost).allowed,
                "not allowed 1 ms before {}",
                w
            );
        }
        None => {
            prop_assert!(!decision.allowed);
            prop_assert!(cost > limit, "None only when the cost exceeds the limit");
            for later in [
                now.saturating_add(1),
                now.saturating_add(policy.window_ms()),
                u64::MAX,
            ] {
                prop_assert!(!policy.decide(state, later, cost).allowed);
            }
        }
    }

    let reset = decision.reset_after_ms;
    prop_assert_eq!(
        policy.decide(&after, now + reset, 0).remaining,
        limit,
        "full at reset {}",
        reset
    );
    if reset > 0 {
        prop_assert!(
            policy.decide(&after, now + reset - 1, 0).remaining < limit,
            "not full 1 ms before reset {}",
            reset
        );
    }
    Ok(())
}

fn policy() -> impl Strategy<Value = AnyPolicy> {
    let limit = prop_oneof![6 => 1..=20u32, 2 => 1..=1_000u32, 1 => Just(u32::MAX / 4)];
    let interval = prop_oneof![5 => 1..=100u64, 2 => 1..=1_000_000u64];
    (0..POLICY_NAMES.len(), limit, interval, 0..=9u64).prop_map(|(i, limit, interval, extra)| {
        let name = POLICY_NAMES[i];
        // The log stores one time per allowed unit: keep its limit small enough for memory.
        let limit = if name == "sliding-window" {
            limit.min(1_000)
        } else {
            limit
        };
        let window = u64::from(limit) * interval + if name == "token-bucket" { 0 } else { extra };
        AnyPolicy::from_name(name, limit, window).expect("valid parameters")
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn waits_are_exact(
        policy in policy(),
        start in prop_oneof![Just(0u64), 0..=2_000_000_000_000u64],
        prefix in proptest::collection::vec((0..=1_000u64, 0..=3u32), 0..60),
        probes in proptest::collection::vec((0..=1_000u64, 0..=25u32), 1..10),
    ) {
        let limit = policy.limit();
        let window = policy.window_ms();
        // Time steps are scaled to the window so that requests pile up.
        let step = |s: u64| s * window.div_ceil(500).min(1 << 40);
        let mut state = policy.new_state(start);
        let mut now = start;
        for (s, cost) in prefix {
            now += step(s) / 4;
            let cost = if limit > 20 { cost * (limit / 8) } else { cost };
            policy.check(&mut state, now, cost);
        }
        for (s, cost) in probes {
            now += step(s) / 8;
            let cost = match cost {
                25 => limit.saturating_add(1),
                24 => limit,
                c if limit > 20 => c * (limit / 20),
                c => c,
            };
            check_waits(&policy, &state, now, cost)?;
            policy.check(&mut state, now, cost);
        }
    }

    #[test]
    fn waits_are_exact_near_the_end_of_time(
        policy in policy(),
        back in 0..=5_000u64,
        costs in proptest::collection::vec(0..=4u32, 1..20),
    ) {
        let mut state = policy.new_state(u64::MAX - 2 * back);
        let now = u64::MAX - back;
        for cost in costs {
            // Probes past u64::MAX are out of reach; check only what fits.
            let d = policy.decide(&state, now, cost);
            if d.retry_after_ms.unwrap_or(0) <= back && d.reset_after_ms <= back {
                check_waits(&policy, &state, now, cost)?;
            }
            policy.check(&mut state, now, cost);
        }
    }
}

/// The same promise through the public limiter: two limiters replay the same
/// calls, then one is asked at `now + w - 1` and the other at `now + w`.
#[test]
fn retry_after_through_two_limiters() {
    for name in POLICY_NAMES {
        for (limit, window, cost) in [(3, 999, 1), (3, 999, 2), (3, 999, 3), (7, 7_000, 5)] {
            let window = window / u64::from(limit) * u64::from(limit);
            let a = RateLimiter::new(name, limit, window).unwrap();
            let b = RateLimiter::new(name, limit, window).unwrap();
            for t in [0, 10, 20, 350, 351] {
                a.check("c", t, 1);
                b.check("c", t, 1);
            }
            let d = a.check("c", 400, cost);
            assert_eq!(d, b.check("c", 400, cost));
            if let Some(w) = d.retry_after_ms.filter(|&w| w > 0) {
                assert!(
                    !a.check("c", 400 + w - 1, cost).allowed,
                    "{name} {limit} {window} {cost}"
                );
                assert!(
                    b.check("c", 400 + w, cost).allowed,
                    "{name} {limit} {window} {cost}"
                );
            }
        }
    }
}
