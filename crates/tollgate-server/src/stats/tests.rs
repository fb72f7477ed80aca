//! The per-second ring's unit tests: latency buckets, a clock gone back,
//! plans counted apart, percentiles.

use super::*;

#[test]
fn latency_buckets_are_ordered_and_hold_their_values() {
    for micros in [0u64, 1, 3, 4, 5, 7, 8, 9, 15, 16, 100, 1_000, 123_456] {
        let b = latency_bucket(micros);
        assert!(latency_upper_bound(b) >= micros, "{micros} in {b}");
        if b > 0 {
            assert!(latency_upper_bound(b - 1) < micros, "{micros} in {b}");
        }
        // At most 25 % wide.
        assert!(latency_upper_bound(b) as f64 <= (micros as f64 * 1.25).max(3.0));
    }
}

fn decision(allowed: bool) -> PlanDecision {
    PlanDecision {
        allowed,
        retry_after_ms: Some(0),
        limits: Vec::new(),
        decided_by: DecidedBy::Store,
    }
}

#[test]
fn a_clock_gone_back_past_the_ring_does_not_wipe_later_seconds() {
    let stats = Stats::new();
    let later = 1_000_000_000;
    stats.record_decision(later, "free", &decision(true));
    // 300 s earlier lands on the same slot.
    stats.record_decision(later - 300_000, "free", &decision(false));
    let snapshot = stats.snapshot(later);
    assert_eq!(snapshot.decisions[SECONDS - 1], 1);
    assert_eq!(snapshot.rejected[SECONDS - 1], 0);
    // A second within the window still counts.
    stats.record_decision(later - 1_000, "free", &decision(false));
    assert_eq!(stats.snapshot(later).rejected[SECONDS - 2], 1);
}

/// Each plan's allowed count in `stats`' last second, by name.
fn allowed_per_plan(stats: &Stats, now_ms: u64) -> Vec<(String, u64)> {
    let snapshot = stats.snapshot(now_ms);
    (snapshot.plans.into_iter())
        .map(|columns| (columns.plan, columns.allowed[SECONDS - 1]))
        .collect()
}

#[test]
fn a_config_of_forty_plans_has_each_counted_apart() {
    let stats = Stats::new();
    let now = 1_000_000_000;
    for i in 0..40 {
        stats.record_decision(now, &format!("p{i}"), &decision(true));
    }
    // No overflow entry when nothing overflowed.
    let expected: Vec<(String, u64)> = (0..40).map(|i| (format!("p{i}"), 1)).collect();
    assert_eq!(allowed_per_plan(&stats, now), expected);
}

#[test]
fn plans_past_max_plans_are_counted_together() {
    let stats = Stats::new();
    let now = 1_000_000_000;
    for i in 0..MAX_PLANS + 3 {
        stats.record_decision(now, &format!("p{i}"), &decision(true));
    }
    // A plan counted apart stays apart.
    stats.record_decision(now, "p0", &decision(true));
    let mut expected: Vec<(String, u64)> = (0..MAX_PLANS).map(|i| (format!("p{i}"), 1)).collect();
    expected[0].1 = 2;
    expected.push((OTHER_PLANS.to_owned(), 3));
    assert_eq!(allowed_per_plan(&stats, now), expected);
}

#[test]
fn percentiles_come_from_the_buckets() {
    let mut buckets = vec![0u64; LATENCY_BUCKETS];
    buckets[latency_bucket(10)] = 98;
    buckets[latency_bucket(1_000)] = 2;
    assert_eq!(
        percentile(&buckets, 0.5),
        latency_upper_bound(latency_bucket(10))
    );
    assert_eq!(
        percentile(&buckets, 0.98),
        latency_upper_bound(latency_bucket(10))
    );
    assert_eq!(
        percentile(&buckets, 0.99),
        latency_upper_bound(latency_bucket(1_000))
    );
    assert_eq!(percentile(&[0; 4], 0.5), 0);
}
