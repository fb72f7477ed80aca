//! Edge cases named in issue 2: boundaries, huge times and gaps, extremes,
//! and the rule for times earlier than one already seen.

use tollgate::{RateLimiter, POLICY_NAMES};

#[test]
fn limit_one() {
    for name in POLICY_NAMES {
        let l = RateLimiter::new(name, 1, 1000).unwrap();
        assert!(l.allow("a", 0), "{name}");
        assert!(!l.allow("a", 0), "{name}");
        assert!(!l.allow("a", 999), "{name}");
        assert_eq!(l.remaining("a", 999), 0, "{name}");
        assert_eq!(l.remaining("a", 1000), 1, "{name}");
        assert!(l.allow("a", 1000), "{name}");
        assert!(!l.allow("a", 1000), "{name}");
    }
}

#[test]
fn a_request_at_exactly_now_minus_window_has_left() {
    let l = RateLimiter::new("sliding-window", 2, 1000).unwrap();
    assert!(l.allow("a", 5_000));
    assert!(l.allow("a", 5_500));
    assert!(!l.allow("a", 5_999), "5000 > 5999 - 1000: still inside");
    assert_eq!(l.remaining("a", 5_999), 0);
    assert_eq!(l.remaining("a", 6_000), 1, "5000 > 6000 - 1000 is false");
    assert!(l.allow("a", 6_000));
    assert!(!l.allow("a", 6_499));
    assert!(l.allow("a", 6_500));
}

#[test]
fn a_full_bucket_wastes_drips_but_keeps_its_phase() {
    // One drip every 500 ms at 0 + 500k.
    let l = RateLimiter::new("token-bucket", 2, 1000).unwrap();
    assert!(l.allow("a", 0));
    // Drips at 500, 1000, ... 5000 fall into a bucket that is full from 500 on.
    assert_eq!(l.remaining("a", 5_200), 2, "never more than the capacity");
    assert!(l.allow("a", 5_200) && l.allow("a", 5_200));
    assert!(!l.allow("a", 5_200));
    assert_eq!(l.remaining("a", 5_499), 0);
    assert_eq!(
        l.remaining("a", 5_500),
        1,
        "the next drip keeps the phase of 0"
    );
    assert_eq!(l.remaining("a", 6_000), 2);
    assert_eq!(l.remaining("a", 9_999), 2);
}

#[test]
fn remaining_on_an_unknown_client_anchors_the_bucket() {
    let l = RateLimiter::new("token-bucket", 2, 1000).unwrap();
    assert_eq!(l.remaining("a", 100), 2, "first call: anchors at 100");
    assert!(l.allow("a", 350) && l.allow("a", 350));
    assert_eq!(l.remaining("a", 599), 0);
    assert_eq!(l.remaining("a", 600), 1, "drip at 100 + 500, not 350 + 500");
    // Without the earlier `remaining`, the anchor is the first `allow`.
    assert!(l.allow("b", 350) && l.allow("b", 350));
    assert_eq!(l.remaining("b", 600), 0);
    assert_eq!(l.remaining("b", 849), 0);
    assert_eq!(l.remaining("b", 850), 1);
}

#[test]
fn times_near_two_times_ten_to_the_twelve() {
    const T: u64 = 2_000_000_000_000;
    let l = RateLimiter::new("sliding-window", 3, 1000).unwrap();
    assert!(l.allow("rahul", T) && l.allow("rahul", T + 100) && l.allow("rahul", T + 200));
    assert!(!l.allow("rahul", T + 300));
    assert!(l.allow("rahul", T + 1000));
    assert_eq!(l.remaining("rahul", T + 1150), 1);

    let l = RateLimiter::new("token-bucket", 2, 1000).unwrap();
    assert!(l.allow("app", T) && l.allow("app", T + 10));
    assert!(!l.allow("app", T + 20));
    assert_eq!(l.remaining("app", T + 499), 0);
    assert!(l.allow("app", T + 500));
    assert_eq!(l.remaining("app", T + 2000), 2);

    let l = RateLimiter::new("gcra", 2, 1000).unwrap();
    assert!(l.allow("g", T) && l.allow("g", T));
    let d = l.check("g", T, 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after_ms, Some(500));
    assert_eq!(d.reset_after_ms, 1000);
}

#[test]
fn a_gap_of_ten_to_the_twelve_ms_is_one_division() {
    // One drip per millisecond: a loop over drips would take 10^12 steps.
    let l = RateLimiter::new("token-bucket", 1_000, 1_000).unwrap();
    for _ in 0..1_000 {
        assert!(l.allow("a", 0));
    }
    assert!(!l.allow("a", 0));
    let later = 1_000_000_000_000;
    assert_eq!(l.remaining("a", later), 1_000);
    for _ in 0..1_000 {
        assert!(l.allow("a", later + 3));
    }
    assert!(!l.allow("a", later + 3));
    // The phase is still that of the first call at 0.
    assert_eq!(l.remaining("a", later + 4), 1);
    for name in ["sliding-window", "gcra"] {
        let l = RateLimiter::new(name, 1_000, 1_000).unwrap();
        assert_eq!(l.check("a", 0, 1_000).remaining, 0, "{name}");
        assert_eq!(l.remaining("a", later), 1_000, "{name}");
    }
}

#[test]
fn u64_extremes_never_panic_and_stay_exact() {
    const MAX: u64 = u64::MAX;
    for name in POLICY_NAMES {
        // Time at the very end, small limit.
        let limit = 3;
        let l = RateLimiter::new(name, limit, 3).unwrap();
        assert!(l.allow("a", 0));
        let allowed = (0..10).filter(|_| l.allow("a", MAX)).count();
        assert_eq!(allowed, 3, "{name}: exactly the limit at u64::MAX");
        let d = l.check("a", MAX, 1);
        assert!(!d.allowed, "{name}");
        assert!(d.retry_after_ms.unwrap() >= 1, "{name}");
        assert_eq!(d.remaining, 0);
        assert_eq!(l.remaining("a", MAX), 0, "{name}");

        // Largest window and limit (the token bucket needs a multiple:
        // u64::MAX = (2^32 - 1)(2^32 + 1), so u32::MAX divides it).
        let l = RateLimiter::new(name, u32::MAX, MAX).unwrap();
        for now in [0, 1, MAX / 2, MAX - 1, MAX] {
            assert!(l.allow("b", now), "{name} at {now}");
            let d = l.check("b", now, 1);
            assert!(d.allowed, "{name}");
            assert_eq!(d.limit, u32::MAX);
            assert!(d.reset_after_ms > 0, "{name}");
            // The log stores one entry per allowed time, whatever the cost.
            let big = l.check("c", now, u32::MAX);
            assert!(big.allowed || big.retry_after_ms.is_some(), "{name}");
        }
        assert!(l.remaining("b", MAX) < u32::MAX, "{name}");

        // Window u64::MAX with limit 1: one request, then never again.
        let l = RateLimiter::new(name, 1, MAX).unwrap();
        assert!(l.allow("d", 5));
        assert!(!l.allow("d", MAX), "{name}");
        let d = l.check("d", MAX, 1);
        assert!(d.retry_after_ms.is_some(), "{name}");
        // Costs beyond the limit: rejected, never passes, no panic.
        let d = l.check("e", MAX, u32::MAX);
        assert!(!d.allowed && d.can_never_pass(), "{name}");
    }
}

#[test]
fn token_bucket_with_one_ms_drips_at_the_end_of_time() {
    // The drip index is about u64::MAX here: using tokens must still count.
    let l = RateLimiter::new("token-bucket", 5, 5).unwrap();
    assert_eq!(l.remaining("a", 0), 5);
    for now in [
        u64::MAX - 3,
        u64::MAX - 3,
        u64::MAX - 3,
        u64::MAX - 3,
        u64::MAX - 3,
    ] {
        assert!(l.allow("a", now));
    }
    assert!(!l.allow("a", u64::MAX - 3));
    assert_eq!(l.remaining("a", u64::MAX - 1), 2);
    assert_eq!(l.remaining("a", u64::MAX), 3);
    let d = l.check("a", u64::MAX, 5);
    assert!(!d.allowed);
    assert_eq!(
        d.retry_after_ms,
        Some(2),
        "past the end of u64 time, not wrapped"
    );
}

/// An earlier time than the latest seen for a client is answered as at that
/// latest time, whichever call saw it.
#[test]
fn earlier_times_are_answered_at_the_latest_time_seen() {
    // Seen by an allowed call.
    let l = RateLimiter::new("sliding-window", 1, 1000).unwrap();
    assert!(l.allow("a", 1000));
    assert!(!l.allow("a", 10), "answered at 1000");
    assert_eq!(l.remaining("a", 1999), 0);
    assert!(l.allow("a", 2000));

    // Seen by `remaining` on an unknown client: the allow at 100 is logged at 5000.
    let l = RateLimiter::new("sliding-window", 1, 1000).unwrap();
    assert_eq!(l.remaining("b", 5000), 1);
    assert!(l.allow("b", 100));
    assert!(!l.allow("b", 5999), "the request counts from 5000");
    assert!(l.allow("b", 6000));

    // Seen by a rejected call.
    let l = RateLimiter::new("sliding-window", 1, 1000).unwrap();
    assert!(l.allow("c", 0));
    assert!(!l.allow("c", 800));
    let d = l.check("c", 100, 1);
    assert_eq!(d.retry_after_ms, Some(200), "measured from 800, not 100");

    // Token bucket: the anchor stays where the first call put it.
    let l = RateLimiter::new("token-bucket", 2, 1000).unwrap();
    assert_eq!(l.remaining("t", 1000), 2);
    assert!(l.allow("t", 0) && l.allow("t", 0), "both answered at 1000");
    assert!(!l.allow("t", 1499));
    assert!(l.allow("t", 1500));

    // GCRA.
    let l = RateLimiter::new("gcra", 1, 1000).unwrap();
    assert!(
        !l.check("g", 3000, 2).allowed,
        "cost above the limit: seen, nothing used"
    );
    assert!(l.allow("g", 0), "answered at 3000");
    assert!(!l.allow("g", 3999));
    assert!(l.allow("g", 4000));
}

#[test]
fn out_of_order_times_never_give_more_than_the_limit() {
    for name in POLICY_NAMES {
        let l = RateLimiter::new(name, 5, 1000).unwrap();
        let times = [900, 100, 500, 0, 899, 300, 700, 1, 2, 3];
        let allowed = times.iter().filter(|&&t| l.allow("a", t)).count();
        assert_eq!(allowed, 5, "{name}");
    }
}

#[test]
fn cost_larger_than_one_uses_that_many() {
    for name in POLICY_NAMES {
        let l = RateLimiter::new(name, 10, 1000).unwrap();
        let d = l.check("a", 0, 7);
        assert!(d.allowed, "{name}");
        assert_eq!(d.remaining, 3, "{name}");
        let d = l.check("a", 0, 4);
        assert!(!d.allowed, "{name}");
        assert_eq!(d.remaining, 3, "{name}: a rejected request uses nothing");
        assert!(l.check("a", 0, 3).allowed, "{name}");
        assert_eq!(l.remaining("a", 0), 0, "{name}");
        let d = l.check("a", 0, 11);
        assert!(!d.allowed && d.can_never_pass(), "{name}");
        let d = l.check("fresh", 0, 11);
        assert!(
            !d.allowed && d.can_never_pass(),
            "{name}: even a fresh client"
        );
        assert_eq!(d.remaining, 10, "{name}");
        let d = l.check("fresh", 0, 10);
        assert!(d.allowed, "{name}: cost == limit fits a full quota");
    }
}
