//! The client cap of `PlanLimiter`: bounded memory, idle state reclaimed
//! before any live state is evicted.

use tollgate::{AnyPolicy, Limit, Plan, PlanLimiter, RECLAIM_BEHIND_MS};

fn plan() -> Plan {
    Plan::new(
        "free",
        vec![Limit::new(
            "1s",
            AnyPolicy::from_name("sliding-window", 2, 1_000).unwrap(),
            false,
        )],
    )
    .unwrap()
}

#[test]
fn expired_windows_are_reclaimed_instead_of_evicting_live_clients() {
    let limiter = PlanLimiter::with_max_clients(6_400);
    let plan = plan();
    // One new client per 10 ms: at any time only the last 100 hold a live
    // window, far fewer than the 100 per shard the cap allows.
    for i in 0..100_000u64 {
        assert!(limiter.check(&plan, &format!("c{i}"), i * 10, 1).allowed);
        assert!(limiter.clients() <= 6_400);
    }
    assert_eq!(limiter.store().evicted(), 0);
    assert!(limiter.store().reclaimed() > 0);
}

#[test]
fn live_clients_are_evicted_least_recently_seen_first() {
    let limiter = PlanLimiter::with_max_clients(640);
    let day = Plan::new(
        "daily",
        vec![Limit::new(
            "1d",
            AnyPolicy::from_name("sliding-window", 2, 86_400_000).unwrap(),
            false,
        )],
    )
    .unwrap();
    assert!(limiter.check(&day, "hot", 0, 1).allowed);
    // Nothing expires within the day, so the cap must evict live clients;
    // the hot client, seen again right after every newcomer, is never the
    // least recently seen in its shard.
    for i in 1..=10_000u64 {
        limiter.check(&day, &format!("c{i}"), 2 * i, 1);
        limiter.check(&day, "hot", 2 * i + 1, 0);
        assert!(limiter.clients() <= 640);
    }
    assert!(limiter.store().evicted() > 0);
    // The hot client kept its state: one request used, one left.
    assert!(limiter.check(&day, "hot", 30_000, 1).allowed);
    assert!(!limiter.check(&day, "hot", 30_000, 1).allowed);
}

/// A full shard drops for room only what was idle `RECLAIM_BEHIND_MS`
/// before the new client's time: a request that read the clock a moment
/// earlier (or after the wall clock stepped back) still finds its client's
/// state. Judged at the newcomer's own time, a spent client whose log had
/// just left its window was dropped, and at 1 ms earlier it had its whole
/// quota back: 6 allowed in one second where the limit is 3.
#[test]
fn a_full_shard_keeps_a_client_a_request_a_moment_earlier_still_needs() {
    let limiter = PlanLimiter::with_max_clients(128);
    let plan = Plan::new(
        "p",
        vec![Limit::new(
            "1s",
            AnyPolicy::from_name("sliding-window", 3, 1_000).unwrap(),
            false,
        )],
    )
    .unwrap();
    let spent: Vec<bool> = (0..4)
        .map(|_| limiter.check(&plan, "x", 0, 1).allowed)
        .collect();
    assert_eq!(spent, [true, true, true, false]);
    // Enough new clients at 1,000 to fill every shard, x's among them.
    for i in 0..400 {
        limiter.check(&plan, &format!("new-{i}"), 1_000, 1);
    }
    assert!(limiter.clients() <= 128);
    let again: Vec<bool> = (0..4)
        .map(|_| limiter.check(&plan, "x", 999, 1).allowed)
        .collect();
    assert_eq!(again, [false; 4], "x's log at 999 holds its three units");
    // Past the lag, idle clients are dropped for room as before.
    let later = 1_000 + RECLAIM_BEHIND_MS + 1_000;
    for i in 0..400 {
        limiter.check(&plan, &format!("later-{i}"), later, 1);
    }
    assert!(limiter.store().reclaimed() > 0);
}
