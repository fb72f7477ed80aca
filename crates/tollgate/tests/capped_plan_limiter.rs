//! The client cap of `PlanLimiter`: bounded memory, idle state reclaimed
//! before any live state is evicted.

use tollgate::{AnyPolicy, Limit, Plan, PlanLimiter};

/// A plan of one sliding window of `limit` per `window_ms`.
fn sliding(limit: u32, window_ms: u64) -> Plan {
    let policy = AnyPolicy::from_name("sliding-window", limit, window_ms).unwrap();
    Plan::new("p", vec![Limit::new("l", policy, false)]).unwrap()
}

#[test]
fn expired_windows_are_reclaimed_instead_of_evicting_live_clients() {
    let limiter = PlanLimiter::with_max_clients(6_400);
    let plan = sliding(2, 1_000);
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
    let day = sliding(2, 86_400_000);
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

/// A full shard drops first what was idle `RECLAIM_BEHIND_MS` before the
/// new client's time, so a request that read the clock a moment before the
/// newcomer's (or after the wall clock stepped back) still finds its
/// client's state. Judged at the newcomer's own time, a spent client whose
/// log had just left its window went with the long-idle ones, and at 1 ms
/// earlier it had its whole quota back: 6 allowed in one second where the
/// limit is 3.
#[test]
fn a_full_shard_drops_the_long_idle_before_a_client_a_moment_earlier_needs() {
    let limiter = PlanLimiter::with_max_clients(6_400);
    let plan = sliding(3, 1_000);
    for i in 0..64 * 90 {
        limiter.check(&plan, &format!("idle-{i}"), 0, 3);
    }
    let spent: Vec<bool> = (0..4)
        .map(|_| limiter.check(&plan, "x", 20_000, 1).allowed)
        .collect();
    assert_eq!(spent, [true, true, true, false]);
    // Enough new clients at 21,000 to fill every shard, x's among them.
    for i in 0..64 * 40 {
        limiter.check(&plan, &format!("new-{i}"), 21_000, 1);
    }
    assert!(limiter.store().reclaimed() > 0);
    let again: Vec<bool> = (0..4)
        .map(|_| limiter.check(&plan, "x", 20_999, 1).allowed)
        .collect();
    assert_eq!(again, [false; 4], "x's log at 20,999 holds its three units");
}

/// When what was idle ten seconds before is not enough, what is idle now
/// goes next, before any client still in use: evicting an active client
/// hands it back what it used for certain. Weighed ten seconds back, the
/// clients whose windows had just ended counted as spent and the active
/// ones were evicted first, then let in again as new: 4 or more in one
/// second for most of them.
#[test]
fn a_full_shard_drops_the_idle_before_evicting_clients_in_use() {
    // 16 clients a shard. The new ones, about 3 a shard, never fill one
    // alone (15 in one of the 64: about once in 10^6 runs).
    let limiter = PlanLimiter::with_max_clients(1_024);
    let plan = sliding(3, 1_000);
    for i in 0..960 {
        limiter.check(&plan, &format!("old-{i}"), 0, 3);
    }
    // (A shard that drew more than its 16 old clients evicted some then.)
    let evicted_before = limiter.store().evicted();
    for i in 0..200 {
        assert!(limiter.check(&plan, &format!("new-{i}"), 2_000, 1).allowed);
    }
    let over: Vec<usize> = (0..200)
        .filter(|i| {
            let client = format!("new-{i}");
            (0..3)
                .filter(|_| limiter.check(&plan, &client, 2_100, 1).allowed)
                .count()
                > 2
        })
        .collect();
    assert_eq!(
        over,
        Vec::<usize>::new(),
        "clients let in a 4th time within 1 s"
    );
    assert_eq!(
        limiter.store().evicted(),
        evicted_before,
        "nobody in use evicted"
    );
}

/// A reload that changes a limit leaves the old limit's states in the store
/// until they go. A sweep with the new plans forgot the old limit, so a
/// full shard took those states for priceless (it could neither reclaim
/// them nor weigh them) and evicted the clients of the limit in force, a
/// spent one first, which then had its quota whole again: 8 allowed in a
/// second where the limit is 4.
#[test]
fn a_limit_a_reload_changed_is_still_judged_by_its_own_policy() {
    let limiter = PlanLimiter::with_max_clients(128);
    let (old, new) = (sliding(4, 2_000), sliding(4, 1_000));
    for i in 0..384 {
        limiter.check(&old, &format!("old-{i}"), 0, 1);
    }
    // The reload: the sweeps now have the new plan only.
    limiter.sweep(std::slice::from_ref(&new), 100, false);
    let spent: Vec<bool> = (0..5)
        .map(|_| limiter.check(&new, "spender", 500, 1).allowed)
        .collect();
    assert_eq!(spent, [true, true, true, true, false]);
    for i in 0..256 {
        limiter.check(&new, &format!("new-{i}"), 600, 1);
    }
    let again: Vec<bool> = (0..5)
        .map(|_| limiter.check(&new, "spender", 700, 1).allowed)
        .collect();
    assert_eq!(again, [false; 5], "the spender kept its log");
}
