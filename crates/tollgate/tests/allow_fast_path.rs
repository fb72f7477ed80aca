//! `Policy::allow`, the shortcut `RateLimiter::allow` takes, gives the same
//! answer as `Policy::check` and leaves a state that answers every later
//! question alike, for every policy, on random calls (costs from 0 past the
//! limit, gaps from none to several windows). The states are compared by
//! what they answer, not field by field: the sliding log's `allow` drops
//! expired entries even on a rejection, as its own `check` does, which the
//! default `check` of `AnyPolicy` leaves for the next allowed call.

use proptest::prelude::*;
use tollgate::{AnyPolicy, Policy, RateLimiter, POLICY_NAMES};

/// A policy by name with `limit` and a window that the token bucket accepts.
fn policy(name: &str, limit: u32, interval: u64) -> AnyPolicy {
    AnyPolicy::from_name(name, limit, u64::from(limit) * interval).expect("valid")
}

proptest! {
    #[test]
    fn allow_agrees_with_check(
        name in proptest::sample::select(POLICY_NAMES),
        limit in 1u32..12,
        interval in 1u64..40,
        start in prop_oneof![Just(0u64), 0u64..1_000_000, Just(u64::MAX - 100_000)],
        calls in proptest::collection::vec((0u64..120, 0u32..15), 1..120),
    ) {
        let policy = policy(name, limit, interval);
        let mut by_check = policy.new_state(start);
        let mut by_allow = by_check.clone();
        let mut now = start;
        for (gap, cost) in calls {
            now = now.saturating_add(gap);
            let checked = policy.check(&mut by_check, now, cost).allowed;
            let allowed = policy.allow(&mut by_allow, now, cost);
            prop_assert_eq!(allowed, checked, "at {} for cost {}", now, cost);
            for later in [now, now.saturating_add(interval), now.saturating_add(u64::from(limit) * interval)] {
                for probe in [0, 1, limit, limit + 1] {
                    prop_assert_eq!(
                        policy.decide(&by_allow, later, probe),
                        policy.decide(&by_check, later, probe),
                        "after {} at {}: {} at {}", cost, now, probe, later
                    );
                }
            }
        }
    }
}

#[test]
fn rate_limiter_allow_is_check_allowed() {
    for name in POLICY_NAMES {
        let fast = RateLimiter::new(name, 3, 300).expect("valid");
        let slow = RateLimiter::new(name, 3, 300).expect("valid");
        for now in (0..2_000).step_by(37) {
            for client in ["a", "b"] {
                assert_eq!(
                    fast.allow(client, now),
                    slow.check(client, now, 1).allowed,
                    "{name} {client} at {now}"
                );
            }
        }
    }
}
