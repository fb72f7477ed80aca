//! Reclaiming idle state: a sweep removes only state whose removal cannot
//! change a future answer (calls at or after the sweep's time), and token
//! buckets only when the caller accepts forgetting their drip phase.

use proptest::prelude::*;
use tollgate::{RateLimiter, POLICY_NAMES};

#[test]
fn a_log_whose_times_all_left_the_window_is_freed() {
    let l = RateLimiter::new("sliding-window", 2, 1000).unwrap();
    assert!(l.allow("a", 0));
    assert!(l.allow("b", 500));
    assert_eq!(l.sweep(999, false), 0, "both still inside");
    assert_eq!(l.sweep(1000, false), 1, "a's request at 0 has left");
    assert_eq!(l.clients(), 1);
    assert_eq!(l.sweep(1500, false), 1);
    assert_eq!(l.clients(), 0);
}

#[test]
fn gcra_state_is_freed_once_the_quota_is_full_again() {
    let l = RateLimiter::new("gcra", 2, 1000).unwrap();
    assert!(l.allow("a", 0) && l.allow("a", 0));
    assert_eq!(l.sweep(999, false), 0);
    assert_eq!(l.sweep(1000, false), 1);
}

#[test]
fn clients_that_only_asked_are_freed_too() {
    for name in ["sliding-window", "gcra"] {
        let l = RateLimiter::new(name, 2, 1000).unwrap();
        assert_eq!(l.remaining("asker", 7), 2);
        assert_eq!(l.clients(), 1, "{name}: the time seen is remembered");
        assert_eq!(l.sweep(7, false), 1, "{name}");
    }
}

#[test]
fn token_buckets_are_freed_only_when_full_and_only_on_request() {
    let l = RateLimiter::new("token-bucket", 2, 1000).unwrap();
    assert!(l.allow("a", 0));
    assert_eq!(l.remaining("b", 0), 2);
    assert_eq!(
        l.sweep(10_000, false),
        0,
        "removal would forget the drip phase"
    );
    assert_eq!(l.sweep(499, true), 1, "b is full, a is not yet");
    assert_eq!(l.sweep(500, true), 1, "a is full again at its drip at 500");
    assert_eq!(l.clients(), 0);
}

#[test]
fn resetting_the_phase_is_what_the_opt_in_says() {
    // Anchored at 0: drips at 500, 1000, ... Swept at 700 while full, the
    // next call at 800 anchors anew: the drip that would have come at 1000
    // comes at 1300 instead.
    let kept = RateLimiter::new("token-bucket", 2, 1000).unwrap();
    let swept = RateLimiter::new("token-bucket", 2, 1000).unwrap();
    for l in [&kept, &swept] {
        assert!(l.allow("a", 0));
    }
    assert_eq!(swept.sweep(700, true), 1);
    for l in [&kept, &swept] {
        assert!(l.allow("a", 800) && l.allow("a", 800));
        assert!(!l.allow("a", 800));
    }
    assert_eq!(kept.remaining("a", 1000), 1);
    assert_eq!(swept.remaining("a", 1000), 0);
    assert_eq!(swept.remaining("a", 1300), 1);
}

#[test]
fn a_sweep_with_a_stale_clock_keeps_live_state() {
    let l = RateLimiter::new("sliding-window", 1, 1000).unwrap();
    assert!(l.allow("a", 5_000));
    assert_eq!(
        l.sweep(0, true),
        0,
        "swept at the client's latest time, 5000"
    );
}

/// A client seen later than the sweep's time keeps its state, even when
/// that state would be removable at its latest time: a call between the
/// two is answered at the latest time seen, and a new client's would be
/// logged at its own, earlier time, which leaves the window earlier (audit:
/// one request too many in the next window, under the sliding log and GCRA).
#[test]
fn a_client_seen_after_the_sweeps_time_keeps_its_latest_time() {
    for policy in ["sliding-window", "gcra"] {
        let kept = RateLimiter::new(policy, 1, 1000).unwrap();
        let swept = RateLimiter::new(policy, 1, 1000).unwrap();
        for l in [&kept, &swept] {
            assert!(l.allow("c", 100));
            assert_eq!(l.remaining("c", 1200), 1);
        }
        assert_eq!(swept.sweep(500, false), 0, "{policy}");
        for l in [&kept, &swept] {
            assert!(l.allow("c", 600), "{policy}: answered at 1200");
            assert!(
                !l.allow("c", 1700),
                "{policy}: 1200's request is in the window"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// A swept and an unswept limiter give the same answers afterwards.
    #[test]
    fn sweeping_changes_no_answer(
        policy in 0..POLICY_NAMES.len(),
        limit in 1..=5u32,
        interval in 1..=200u64,
        calls in proptest::collection::vec((0..4usize, 0..=300u64, any::<bool>(), 0..10u8), 1..150),
    ) {
        let name = POLICY_NAMES[policy];
        let window = u64::from(limit) * interval;
        let kept = RateLimiter::new(name, limit, window).unwrap();
        let swept = RateLimiter::new(name, limit, window).unwrap();
        let mut now = 0;
        for (client, step, allow, sweep) in calls {
            now += step;
            let client = format!("c{client}");
            if sweep == 0 {
                swept.sweep(now, false);
                prop_assert!(swept.clients() <= kept.clients());
            }
            if allow {
                prop_assert_eq!(kept.check(&client, now, 1), swept.check(&client, now, 1));
            } else {
                prop_assert_eq!(kept.peek(&client, now), swept.peek(&client, now));
            }
        }
        if name == "token-bucket" {
            prop_assert_eq!(swept.clients(), kept.clients(), "buckets are kept without the opt-in");
        }
    }

    /// With the opt-in, only full buckets go, and a removed client answers
    /// as full at once.
    #[test]
    fn the_opt_in_removes_only_full_buckets(
        limit in 1..=5u32,
        interval in 1..=200u64,
        calls in proptest::collection::vec((0..4usize, 0..=300u64), 1..100),
        sweep_at in 0..=2_000u64,
    ) {
        let l = RateLimiter::new("token-bucket", limit, u64::from(limit) * interval).unwrap();
        let mut now = 0;
        for (client, step) in calls {
            now += step;
            l.allow(&format!("c{client}"), now);
        }
        let at = now + sweep_at;
        let full: Vec<bool> = (0..4).map(|c| l.peek(&format!("c{c}"), at).remaining == limit).collect();
        let before = l.clients();
        let removed = l.sweep(at, true);
        prop_assert_eq!(removed, before - l.clients());
        // Peeking stored every client (it records the time seen): exactly
        // the full ones go.
        prop_assert_eq!(before, 4);
        prop_assert_eq!(removed, full.iter().filter(|f| **f).count());
        for (c, was_full) in full.iter().enumerate() {
            prop_assert_eq!(l.peek(&format!("c{c}"), at).remaining == limit, *was_full);
        }
    }
}

fn day_plan(name: &str) -> tollgate::Plan {
    let policy = tollgate::AnyPolicy::from_name("sliding-window", 2, 86_400_000).unwrap();
    tollgate::Plan::new(name, vec![tollgate::Limit::new(name, policy, false)]).unwrap()
}

/// A sweep holding the plans it read before a reload added a plan finds the
/// new plan's first states in none of its plans. Dropped then, a client
/// that had spent its quota under the new plan had it whole again; they go
/// only once the next sweep, reading the plans again, finds them of no
/// plan either.
#[test]
fn a_limit_a_sweep_does_not_know_yet_keeps_its_states_until_the_next_sweep() {
    let limiter = tollgate::PlanLimiter::new();
    let (old, new) = (day_plan("old"), day_plan("new"));
    assert!(limiter.check(&new, "c", 0, 2).allowed);
    // The sweep's plans were read before the reload that added "new".
    limiter.sweep(std::slice::from_ref(&old), 1_000, false);
    assert!(!limiter.check(&new, "c", 2_000, 1).allowed, "c's use kept");
    // The next sweep reads the plans again: "new" is there, the state stays.
    limiter.sweep(&[old.clone(), new.clone()], 3_000, false);
    assert!(!limiter.check(&new, "c", 4_000, 1).allowed, "c's use kept");
    // Removed for good: two sweeps in a row without it drop its states.
    limiter.sweep(std::slice::from_ref(&old), 5_000, false);
    assert_eq!(limiter.clients(), 1);
    limiter.sweep(std::slice::from_ref(&old), 6_000, false);
    assert_eq!(limiter.clients(), 0);
}

/// The same for a limit a reload put back: removed, found in no plan by a
/// sweep, then restored (the same limit id) and spent while the next sweep,
/// holding the plans it read before, walks the shards. The client was seen
/// after that sweep's time, so its state stays; it was dropped, and the
/// spent quota was whole again.
#[test]
fn a_limit_put_back_keeps_the_state_a_client_wrote_after_the_sweeps_time() {
    let limiter = tollgate::PlanLimiter::new();
    let (old, back) = (day_plan("old"), day_plan("back"));
    limiter.check(&back, "other", 0, 1);
    // "back" removed: a sweep finds its states in no plan.
    limiter.sweep(std::slice::from_ref(&old), 1_000, false);
    // Put back, and spent by c after the next sweep's time...
    assert!(limiter.check(&back, "c", 3_000, 2).allowed);
    // ...which still holds the plans without it.
    limiter.sweep(std::slice::from_ref(&old), 2_000, false);
    assert!(!limiter.check(&back, "c", 3_001, 1).allowed, "c's use kept");
    // Idle since before the sweep's time, "other" goes.
    assert!(limiter.store().get("other").is_none());
}

proptest! {
    // Many cases: the stale calls that tell a wrongly swept client apart
    // are rare (one in a few hundred runs), and each case is cheap.
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// A swept and an unswept limiter give the same answers to calls at or
    /// after the latest sweep's time, however far behind the newest time
    /// seen they are (a stale clock), and the sweeps themselves behind it
    /// (as `tollgate serve` sweeps, `RECLAIM_BEHIND_MS` behind its clock).
    #[test]
    fn sweeping_changes_no_answer_to_stale_times(
        policy in 0..POLICY_NAMES.len(),
        limit in 1..=5u32,
        interval in 1..=200u64,
        calls in proptest::collection::vec(
            (0..4usize, 0..=300u64, 0..=400u64, any::<bool>(), 0..10u8, 0..=400u64),
            1..150,
        ),
    ) {
        let name = POLICY_NAMES[policy];
        let window = u64::from(limit) * interval;
        let kept = RateLimiter::new(name, limit, window).unwrap();
        let swept = RateLimiter::new(name, limit, window).unwrap();
        let (mut newest, mut swept_at) = (0u64, 0u64);
        for (client, step, back, allow, sweep, sweep_back) in calls {
            newest += step;
            let client = format!("c{client}");
            if sweep == 0 {
                swept_at = swept_at.max(newest.saturating_sub(sweep_back));
                swept.sweep(swept_at, false);
            }
            let now = newest.saturating_sub(back).max(swept_at);
            if allow {
                prop_assert_eq!(kept.check(&client, now, 1), swept.check(&client, now, 1));
            } else {
                prop_assert_eq!(kept.peek(&client, now), swept.peek(&client, now));
            }
        }
    }
}
