//! The contract of issue 2, line by line, through `RateLimiter`'s public API.

use tollgate::{Error, RateLimiter, POLICY_NAMES};

#[test]
fn worked_session_1_sliding_window() {
    let l = RateLimiter::new("sliding-window", 3, 1000).unwrap();
    assert!(l.allow("rahul", 0));
    assert!(l.allow("rahul", 100));
    assert!(l.allow("rahul", 200));
    assert!(!l.allow("rahul", 300), "3 allowed in (-700, 300] already");
    assert!(l.allow("priya", 300), "her own window");
    assert_eq!(l.remaining("rahul", 999), 0);
    assert!(l.allow("rahul", 1000), "0 > 1000 - 1000 is false");
    assert_eq!(
        l.remaining("rahul", 1150),
        1,
        "only 200 and 1000 in (150, 1150]"
    );
}

#[test]
fn worked_session_2_token_bucket() {
    let l = RateLimiter::new("token-bucket", 2, 1000).unwrap();
    assert!(l.allow("app", 0), "starts full: 2 -> 1");
    assert!(l.allow("app", 10));
    assert!(!l.allow("app", 20));
    assert_eq!(l.remaining("app", 499), 0, "first drip at 0 + 500");
    assert!(l.allow("app", 500), "one drip, used at once");
    assert_eq!(l.remaining("app", 2000), 2, "the bucket holds only 2");
}

#[test]
fn the_policy_names_are_exactly_the_registered_ones() {
    assert_eq!(POLICY_NAMES, ["sliding-window", "token-bucket", "gcra"]);
    for name in POLICY_NAMES {
        assert_eq!(
            tollgate::Policy::name(RateLimiter::new(name, 2, 1000).unwrap().policy()),
            *name
        );
    }
}

#[test]
fn unknown_policy_names_it_and_lists_the_known_ones() {
    let err = RateLimiter::new("leaky-bucket", 3, 1000).err().unwrap();
    assert_eq!(
        err,
        Error::UnknownPolicy {
            name: "leaky-bucket".into()
        }
    );
    let message = err.to_string();
    assert!(message.contains("leaky-bucket"), "{message}");
    for known in POLICY_NAMES {
        assert!(message.contains(known), "{message} lacks {known}");
    }
}

#[test]
fn policy_names_are_case_sensitive() {
    for name in [
        "Token-Bucket",
        "SLIDING-WINDOW",
        "Gcra",
        " gcra",
        "token_bucket",
        "",
    ] {
        assert!(
            matches!(
                RateLimiter::new(name, 2, 1000),
                Err(Error::UnknownPolicy { .. })
            ),
            "{name:?}"
        );
    }
}

#[test]
fn arguments_that_cannot_work_are_errors() {
    for name in POLICY_NAMES {
        assert_eq!(
            RateLimiter::new(name, 0, 1000).err(),
            Some(Error::ZeroLimit)
        );
        assert_eq!(RateLimiter::new(name, 3, 0).err(), Some(Error::ZeroWindow));
        assert_eq!(RateLimiter::new(name, 0, 0).err(), Some(Error::ZeroLimit));
    }
    assert_eq!(
        RateLimiter::new("token-bucket", 3, 1000).err(),
        Some(Error::WindowNotMultipleOfLimit {
            limit: 3,
            window_ms: 1000
        })
    );
    let message = RateLimiter::new("token-bucket", 3, 1000)
        .err()
        .unwrap()
        .to_string();
    assert!(
        message.contains("1000") && message.contains('3'),
        "{message}"
    );
    // The other policies take any window.
    assert!(RateLimiter::new("sliding-window", 3, 1000).is_ok());
    assert!(RateLimiter::new("gcra", 3, 1000).is_ok());
    // A window shorter than the limit is outside the contract's domain but works.
    assert!(RateLimiter::new("sliding-window", 10, 1).is_ok());
}

#[test]
fn every_client_has_its_own_limit() {
    for name in POLICY_NAMES {
        let l = RateLimiter::new(name, 2, 1000).unwrap();
        assert!(l.allow("a", 0) && l.allow("a", 0));
        assert!(!l.allow("a", 0), "{name}");
        for other in ["b", "A", "a ", ""] {
            assert_eq!(l.remaining(other, 0), 2, "{name} {other:?}");
            assert!(l.allow(other, 0), "{name} {other:?}");
        }
        assert_eq!(l.remaining("a", 0), 0, "{name}");
    }
}

#[test]
fn remaining_uses_nothing() {
    for name in POLICY_NAMES {
        let l = RateLimiter::new(name, 3, 3000).unwrap();
        for _ in 0..10 {
            assert_eq!(l.remaining("a", 5), 3, "{name}");
        }
        assert!(l.allow("a", 5));
        for _ in 0..10 {
            assert_eq!(l.remaining("a", 5), 2, "{name}");
        }
    }
}

#[test]
fn rejected_requests_are_not_counted() {
    // Sliding window: hammering while full does not push the window out.
    let l = RateLimiter::new("sliding-window", 2, 1000).unwrap();
    assert!(l.allow("a", 0) && l.allow("a", 1));
    for t in 2..1000 {
        assert!(!l.allow("a", t));
    }
    assert!(l.allow("a", 1000));
    assert!(l.allow("a", 1001));
    assert!(!l.allow("a", 1001));
}

#[test]
fn the_token_bucket_refills_by_whole_drips_from_the_first_call() {
    // limit 4, window 1000: one drip every 250 ms from the first call at 7.
    let l = RateLimiter::new("token-bucket", 4, 1000).unwrap();
    for _ in 0..4 {
        assert!(l.allow("a", 7));
    }
    assert!(!l.allow("a", 7));
    assert_eq!(l.remaining("a", 256), 0);
    assert_eq!(l.remaining("a", 257), 1);
    assert_eq!(l.remaining("a", 506), 1);
    assert_eq!(l.remaining("a", 507), 2);
    assert_eq!(l.remaining("a", 1007), 4);
}

#[test]
fn gcra_spreads_the_quota_and_allows_a_burst_of_limit() {
    // 4 per 1000 ms: a burst of 4, then one every 250 ms.
    let l = RateLimiter::new("gcra", 4, 1000).unwrap();
    for _ in 0..4 {
        assert!(l.allow("a", 0));
    }
    assert!(!l.allow("a", 249));
    assert!(l.allow("a", 250));
    assert!(!l.allow("a", 250));
    // A fractional emission interval (1000 / 3 ms) stays exact.
    let l = RateLimiter::new("gcra", 3, 1000).unwrap();
    for _ in 0..3 {
        assert!(l.allow("b", 0));
    }
    assert_eq!(l.check("b", 0, 1).retry_after_ms, Some(334)); // 333.33 rounded up
    assert!(!l.allow("b", 333));
    assert!(l.allow("b", 334));
}

#[test]
fn decisions_carry_the_numbers_for_headers() {
    let l = RateLimiter::new("sliding-window", 3, 1000).unwrap();
    let d = l.check("a", 100, 1);
    assert!(d.allowed);
    assert_eq!(d.limit, 3);
    assert_eq!(d.remaining, 2);
    assert_eq!(d.retry_after_ms, Some(0));
    assert_eq!(d.reset_after_ms, 1000);
    assert!(!d.can_never_pass());
    l.check("a", 300, 2);
    let d = l.check("a", 400, 1);
    assert!(!d.allowed);
    assert_eq!(d.remaining, 0);
    assert_eq!(
        d.retry_after_ms,
        Some(700),
        "the request at 100 leaves at 1100"
    );
    assert_eq!(d.reset_after_ms, 900, "the ones at 300 leave at 1300");
    // Costs larger than the limit can never pass, and say so.
    let d = l.check("b", 0, 4);
    assert!(!d.allowed && d.can_never_pass());
    assert_eq!(d.remaining, 3, "nothing was used");
}
