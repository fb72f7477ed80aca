//! Eviction that gives away the least (issue 10, item 4): a client that has
//! used its quota cannot get it back by flooding a capped store with fresh
//! ids, whatever the size of the flood, for every policy.

use tollgate::{AnyPolicy, Limit, Plan, PlanLimiter, POLICY_NAMES};

const LIMIT: u32 = 10;
const DAY_MS: u64 = 86_400_000;
/// 10 clients per shard: every flood below fills the victim's shard.
const MAX_CLIENTS: usize = 640;

fn daily(policy: &str) -> Plan {
    let policy = AnyPolicy::from_name(policy, LIMIT, DAY_MS).expect("valid limit");
    Plan::new("daily", vec![Limit::new("1d", policy, false)]).expect("valid plan")
}

/// The victim uses its whole quota at times 0..LIMIT; then `flood` fresh ids
/// each use `flood_cost` units (at most the limit). Returns the victim's
/// decision right after the flood.
fn after_flood(policy: &str, flood: u64, flood_cost: u32) -> tollgate::PlanDecision {
    after_flood_capped(MAX_CLIENTS, policy, flood, flood_cost)
}

/// [`after_flood`] on a store capped at `max_clients`.
fn after_flood_capped(
    max_clients: usize,
    policy: &str,
    flood: u64,
    flood_cost: u32,
) -> tollgate::PlanDecision {
    let limiter = PlanLimiter::with_max_clients(max_clients);
    let kept = tollgate::MemoryStore::<()>::clients_kept_at_most(max_clients);
    let plan = daily(policy);
    for t in 0..u64::from(LIMIT) {
        assert!(limiter.check(&plan, "victim", t, 1).allowed);
    }
    assert!(!limiter.check(&plan, "victim", 100, 1).allowed);
    for i in 0..flood {
        let decision = limiter.check(&plan, &format!("fresh-{i}"), 1_000 + i, flood_cost);
        assert!(decision.allowed, "{policy}: fresh id {i} was rejected");
        assert!(limiter.clients() <= kept);
    }
    limiter.check(&plan, "victim", 1_000 + flood, 1)
}

#[test]
fn a_flood_of_fresh_ids_never_resets_a_client_that_used_its_quota() {
    // From nothing to far beyond the cap (the attack: 39,060 ids at
    // a cap of 10,000, i.e. about four caps; here up to 150 caps).
    for flood in [0, 1, 9, 10, 639, 640, 641, 2_560, 6_400, 96_000] {
        for policy in POLICY_NAMES {
            let decision = after_flood(policy, flood, 1);
            assert!(
                !decision.allowed,
                "{policy}: the victim got its quota back after {flood} fresh ids"
            );
            assert_eq!(
                decision.limits[0].decision.remaining, 0,
                "{policy}, {flood}"
            );
        }
    }
}

#[test]
fn fresh_ids_that_only_ask_or_use_all_but_one_unit_do_not_reset_it_either() {
    // A flood of ids that only ask (state of a fresh client: gives nothing
    // away) and of ids one unit short of the victim's usage.
    for flood_cost in [0, LIMIT - 1] {
        for policy in POLICY_NAMES {
            let decision = after_flood(policy, 6_400, flood_cost);
            assert!(
                !decision.allowed,
                "{policy}: fresh ids costing {flood_cost} reset the victim"
            );
        }
    }
}

#[test]
fn the_smallest_caps_never_reset_a_client_that_used_its_quota_either() {
    // Below 128 clients, a shard of one client would have to evict the
    // victim for any newcomer, whatever it gives back.
    for max_clients in [1, 64, 100, 127, 128] {
        for flood_cost in [0, 1] {
            for policy in POLICY_NAMES {
                let decision = after_flood_capped(max_clients, policy, 6_400, flood_cost);
                assert!(
                    !decision.allowed,
                    "{policy}: capped at {max_clients}, fresh ids costing {flood_cost} reset the victim"
                );
            }
        }
    }
}

#[test]
fn partly_used_clients_go_before_more_used_ones() {
    // Two clients in a table full of fresh ids that used one unit: one that
    // used half its quota and one that used all of it keep their state.
    for policy in POLICY_NAMES {
        let limiter = PlanLimiter::with_max_clients(MAX_CLIENTS);
        let plan = daily(policy);
        assert!(limiter.check(&plan, "half", 0, LIMIT / 2).allowed);
        assert!(limiter.check(&plan, "all", 0, LIMIT).allowed);
        for i in 0..20_000u64 {
            limiter.check(&plan, &format!("fresh-{i}"), 1 + i, 1);
        }
        assert!(limiter.store().evicted() > 0);
        let half = limiter.check(&plan, "half", 30_000, 0);
        assert_eq!(half.limits[0].decision.remaining, LIMIT / 2, "{policy}");
        assert!(!limiter.check(&plan, "all", 30_000, 1).allowed, "{policy}");
    }
}

#[test]
fn a_flood_on_another_plan_does_not_reset_it() {
    // The victim's plan has two limits and the flood comes on another plan:
    // the store judges every client in a full shard, whatever its plan.
    let per_second = AnyPolicy::from_name("gcra", 5, 1_000).expect("valid");
    let per_day = AnyPolicy::from_name("sliding-window", LIMIT, DAY_MS).expect("valid");
    let two = Plan::new(
        "two",
        vec![
            Limit::new("1s", per_second, false),
            Limit::new("1d", per_day, false),
        ],
    )
    .expect("valid plan");
    for flood_plan in [daily("token-bucket"), two.clone()] {
        let limiter = PlanLimiter::with_max_clients(MAX_CLIENTS);
        for t in 0..u64::from(LIMIT) {
            assert!(limiter.check(&two, "victim", t * 1_000, 1).allowed);
        }
        for i in 0..10_000u64 {
            limiter.check(&flood_plan, &format!("fresh-{i}"), 20_000 + i, 1);
        }
        assert!(limiter.store().evicted() > 0);
        let decision = limiter.check(&two, "victim", 40_000, 1);
        assert!(!decision.allowed, "flood on {}", flood_plan.name());
        assert_eq!(decision.limits[1].decision.remaining, 0);
    }
}

/// Clients of a plan whose checks never had to make room (nor a sweep
/// ran) are weighed by that plan's limits too: their states were of limits
/// the limiter had not met, taken for priceless, and a full shard evicted
/// the spent client of the plan at hand first, which then had its quota
/// whole again (audit: about half the trials). Each trial a new limiter,
/// since which clients share a shard depends on its random hash.
#[test]
fn clients_of_a_plan_not_met_while_making_room_are_weighed_by_its_limits() {
    let spent_plan = daily("sliding-window");
    let other = Plan::new(
        "other",
        vec![Limit::new(
            "1d",
            AnyPolicy::from_name("sliding-window", 50, DAY_MS).expect("valid"),
            false,
        )],
    )
    .expect("valid plan");
    let mut trials = 0;
    for _ in 0..200 {
        let limiter = PlanLimiter::with_max_clients(128);
        assert!(limiter.check(&spent_plan, "spent", 0, LIMIT).allowed);
        // Few enough that most trials make no room meanwhile (two clients
        // a shard at this cap), enough that one often shares the spent
        // client's shard.
        for i in 0..20 {
            limiter.check(&other, &format!("other-{i}"), 1, 1);
        }
        if limiter.store().evicted() + limiter.store().reclaimed() > 0 {
            // Room was made under `other`: its limits were met then.
            continue;
        }
        trials += 1;
        for i in 0..200 {
            limiter.check(&spent_plan, &format!("fresh-{i}"), 2, 1);
        }
        assert!(!limiter.check(&spent_plan, "spent", 3, 1).allowed);
    }
    assert!(
        trials >= 20,
        "only {trials} trials made no room before the flood"
    );
}

#[test]
fn units_given_back_count_what_a_fresh_client_has_beyond_this_one() {
    use tollgate::Policy;
    for name in POLICY_NAMES {
        let policy = AnyPolicy::from_name(name, LIMIT, DAY_MS).expect("valid");
        let mut state = policy.new_state(0);
        assert_eq!(policy.units_given_back(&state, 0), 0, "{name}: fresh");
        for used in 1..=u64::from(LIMIT) {
            assert!(policy.check(&mut state, 0, 1).allowed);
            assert_eq!(policy.units_given_back(&state, 0), used, "{name}");
        }
        // A day later everything has come back: nothing left to give.
        assert_eq!(policy.units_given_back(&state, DAY_MS), 0, "{name}");
    }
}
