//! The proof that the rejection cache changes no answer: three instances on
//! one real `redis-server` (spawned here), each a `CachedStore` over its own
//! Redis connection, against the same sequence on three plain connections,
//! decision by decision, over random interleavings of clients, costs, times
//! and all three policies; and, on one instance, with times that go
//! backwards (a request stamped before one already answered).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tollgate::{AnyPolicy, DecidedBy, Limit, Plan, PlanDecision, Store};
use tollgate_cache::{CachedStore, RejectionCache};
use tollgate_redis::testing::RedisServer;
use tollgate_redis::{RedisStore, RedisStoreConfig};

const INSTANCES: usize = 3;

fn limit(name: &str, policy: &str, limit: u32, window_ms: u64, shadow: bool) -> Limit {
    Limit::new(
        name,
        AnyPolicy::from_name(policy, limit, window_ms).unwrap(),
        shadow,
    )
}

/// One single-limit plan per policy, then a plan of two limits and a shadow.
fn plans() -> Vec<Plan> {
    vec![
        Plan::new("sw", vec![limit("l", "sliding-window", 3, 100, false)]).unwrap(),
        Plan::new("tb", vec![limit("l", "token-bucket", 4, 200, false)]).unwrap(),
        Plan::new("gcra", vec![limit("l", "gcra", 3, 90, false)]).unwrap(),
        Plan::new(
            "multi",
            vec![
                limit("fast", "sliding-window", 3, 100, false),
                limit("slow", "token-bucket", 5, 500, false),
                limit("dark", "gcra", 1, 50, true),
            ],
        )
        .unwrap(),
    ]
}

/// One request: instance, client, plan, cost, time since the previous one,
/// and how far its stamp lies behind that time (0: a clock that never goes
/// back).
type Op = (usize, usize, usize, u32, u64, u64);

struct Fleet {
    runtime: tokio::runtime::Runtime,
    plain: Vec<RedisStore>,
    redis: Vec<RedisStore>,
    plans: Vec<Plan>,
    case: AtomicUsize,
    cached_answers: AtomicUsize,
}

impl Fleet {
    fn new(server: &RedisServer) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let connect = |prefix: &str| {
            let config = RedisStoreConfig {
                prefix: prefix.to_owned(),
                timeout: Duration::from_secs(5),
                ..RedisStoreConfig::default()
            };
            runtime
                .block_on(RedisStore::connect(&server.url(), config))
                .expect("connect")
        };
        let plain = (0..INSTANCES).map(|_| connect("plain")).collect();
        let redis = (0..INSTANCES).map(|_| connect("cached")).collect();
        Self {
            runtime,
            plain,
            redis,
            plans: plans(),
            case: AtomicUsize::new(0),
            cached_answers: AtomicUsize::new(0),
        }
    }

    /// Runs `ops` both ways (fresh clients, fresh caches) and hands every
    /// pair of answers (with the cache, without) to `compare`.
    fn run(
        &self,
        ops: &[Op],
        compare: impl Fn(&Plan, u32, &PlanDecision, &PlanDecision) -> Result<(), TestCaseError>,
    ) -> Result<(), TestCaseError> {
        let case = self.case.fetch_add(1, Ordering::Relaxed);
        let cached: Vec<_> = self
            .redis
            .iter()
            .map(|r| CachedStore::new(r.clone(), Arc::new(RejectionCache::new(1_000).unwrap())))
            .collect();
        self.runtime.block_on(async {
            let mut now = 0;
            for &(instance, client, plan, cost, dt, behind) in ops {
                now += dt;
                let now = now.saturating_sub(behind);
                let (plan, client) = (&self.plans[plan], format!("case{case}-c{client}"));
                let with = cached[instance]
                    .check(plan, &client, now, cost)
                    .await
                    .unwrap();
                let without = self.plain[instance]
                    .check(plan, &client, now, cost)
                    .await
                    .unwrap();
                if with.decided_by == DecidedBy::Cache {
                    self.cached_answers.fetch_add(1, Ordering::Relaxed);
                }
                compare(plan, cost, &with, &without).map_err(|e| {
                    TestCaseError::fail(format!("{e} at {now}, cost {cost}, {}", plan.name()))
                })?;
            }
            Ok(())
        })
    }
}

/// Every answer equal; where the cache answered, a rejection the store
/// made too, with a retry-after no longer than the store's.
fn same_answers(
    _: &Plan,
    _: u32,
    with: &PlanDecision,
    without: &PlanDecision,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(with.allowed, without.allowed);
    match with.decided_by {
        DecidedBy::Store => prop_assert_eq!(with, without),
        DecidedBy::Cache => {
            let (Some(cached), Some(true_wait)) = (with.retry_after_ms, without.retry_after_ms)
            else {
                return Err(TestCaseError::fail(format!(
                    "a cached answer without a wait: {with:?} vs {without:?}"
                )));
            };
            prop_assert!(
                0 < cached && cached <= true_wait,
                "retry-after {} vs the store's {}",
                cached,
                true_wait
            );
        }
        other => return Err(TestCaseError::fail(format!("decided by {other:?}"))),
    }
    Ok(())
}

/// As [`same_answers`], and each limit's verdict equal too (the metrics,
/// the top clients and a shadow limit's count take them from a cached
/// answer): what the cache's own instance consumed, it knows of.
fn same_verdicts(
    plan: &Plan,
    cost: u32,
    with: &PlanDecision,
    without: &PlanDecision,
) -> Result<(), TestCaseError> {
    same_answers(plan, cost, with, without)?;
    let verdicts = |d: &PlanDecision| {
        d.limits
            .iter()
            .map(|l| l.decision.allowed)
            .collect::<Vec<_>>()
    };
    prop_assert_eq!(
        verdicts(with),
        verdicts(without),
        "{:?} vs {:?}",
        with,
        without
    );
    Ok(())
}

/// Cost 1 on a single-limit plan: nobody can consume before the wait is
/// over, so a cached answer equals the store's in every number.
fn identical_answers(
    _: &Plan,
    _: u32,
    with: &PlanDecision,
    without: &PlanDecision,
) -> Result<(), TestCaseError> {
    let mut with = with.clone();
    prop_assert!(matches!(
        with.decided_by,
        DecidedBy::Store | DecidedBy::Cache
    ));
    with.decided_by = DecidedBy::Store;
    prop_assert_eq!(&with, without);
    Ok(())
}

fn ops(plans: usize, costs: std::ops::RangeInclusive<u32>) -> impl Strategy<Value = Vec<Op>> {
    let op = (0..INSTANCES, 0..2usize, 0..plans, costs, 0..6u64, Just(0));
    prop::collection::vec(op, 1..150)
}

/// Requests to one instance, of every cost, in order of time.
fn one_instance_ops(plans: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = (Just(0), 0..2usize, 0..plans, 0..=4u32, 0..6u64, Just(0));
    prop::collection::vec(op, 1..150)
}

/// Requests to one instance, one in four stamped up to 60 ms behind the
/// others (a thread descheduled between reading the clock and deciding).
fn stale_ops(plans: usize) -> impl Strategy<Value = Vec<Op>> {
    let behind = prop_oneof![3 => Just(0u64), 1 => 0..60u64];
    let op = (Just(0), 0..2usize, 0..plans, 0..=4u32, 0..8u64, behind);
    prop::collection::vec(op, 1..150)
}

fn fleet(test: &str) -> Option<(RedisServer, Fleet)> {
    let server = RedisServer::spawn(test)?;
    let fleet = Fleet::new(&server);
    Some((server, fleet))
}

fn check(
    fleet: &Fleet,
    strategy: impl Strategy<Value = Vec<Op>>,
    compare: fn(&Plan, u32, &PlanDecision, &PlanDecision) -> Result<(), TestCaseError>,
) {
    let mut runner = TestRunner::new(Config {
        cases: 96,
        ..Config::default()
    });
    if let Err(e) = runner.run(&strategy, |ops| fleet.run(&ops, compare)) {
        panic!("{e}");
    }
    let cached = fleet.cached_answers.load(Ordering::Relaxed);
    assert!(
        cached > 150,
        "the cache answered {cached} times: too rarely to prove anything"
    );
}

#[test]
fn the_cache_changes_no_allow_or_reject_answer() {
    let Some((_server, fleet)) = fleet("the_cache_changes_no_allow_or_reject_answer") else {
        return;
    };
    // Costs up to 4: above the single-limit plans' 3 ("never") and 0 (asks).
    check(&fleet, ops(4, 0..=4), same_answers);
}

#[test]
fn cost_one_on_a_single_limit_gives_identical_answers() {
    let Some((_server, fleet)) = fleet("cost_one_on_a_single_limit_gives_identical_answers") else {
        return;
    };
    check(&fleet, ops(3, 1..=1), identical_answers);
}

/// The store answers a request stamped earlier than the client's latest
/// time at that latest time; with the cache it must do the same, although
/// the cache answered some of those later requests without telling it.
#[test]
fn times_that_go_backwards_on_one_instance_change_no_answer() {
    let Some((_server, fleet)) = fleet("times_that_go_backwards_on_one_instance_change_no_answer")
    else {
        return;
    };
    check(&fleet, stale_ops(4), same_verdicts);
}

/// On one instance, nobody consumes unseen: every limit's verdict of a
/// cached answer is the store's, over mixed costs and plans of several
/// limits (a request of a smaller cost, allowed by the store, consumed from
/// a limit the remembered rejection said had room: the cache went on
/// answering that limit "allowed"; a review).
#[test]
fn on_one_instance_every_limits_verdict_is_the_stores() {
    let Some((_server, fleet)) = fleet("on_one_instance_every_limits_verdict_is_the_stores") else {
        return;
    };
    check(&fleet, one_instance_ops(4), same_verdicts);
}
