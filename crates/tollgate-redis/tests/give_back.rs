//! What a check consumed, given back (`Store::check_returnable`, then
//! `Store::give_back`), as a caller deciding several clients together does
//! when a later client refuses: on one node and on a Redis Cluster (each a
//! real `redis-server` spawned by the test), the client's state becomes the
//! in-memory limiter's without the call, as if it had been refused.
//!
//! And never more than that: once the client was used again, the token
//! bucket and GCRA keep the use (giving it back could give what the cap
//! would have wasted), while the sliding log takes its units out exactly.

use std::time::Duration;

use tollgate::{AnyPolicy, GivenBack, Limit, Plan, PlanLimiter, Returnable, Store, POLICY_NAMES};
use tollgate_redis::testing::{runtime, RedisCluster, RedisServer};
use tollgate_redis::{CallCounts, RedisStore, RedisStoreConfig, RedisTarget};

const DAY_MS: u64 = 86_400_000;

/// Two limits, so that every limit's undo numbers are read back in order.
fn plan(policy: &str) -> Plan {
    let limit = |name: &str, n: u32, window: u64| {
        let policy = AnyPolicy::from_name(policy, n, window).expect("policy");
        Limit::new(name, policy, false)
    };
    Plan::new(
        "given",
        vec![limit("per-second", 4, 1_000), limit("per-day", 10, DAY_MS)],
    )
    .expect("plan")
}

async fn connect(target: &RedisTarget, prefix: String) -> RedisStore {
    // A deadline far above the default 100 ms: these tests are about what is
    // given back, and on a loaded machine a cluster's first call (its slots,
    // the clock's offset) can take longer than that.
    let config = RedisStoreConfig {
        prefix,
        timeout: Duration::from_secs(2),
        ..RedisStoreConfig::default()
    };
    RedisStore::connect_to(target, config)
        .await
        .expect("connect")
}

/// `client`'s state equals the reference's: looks and a request, at
/// several later times.
async fn same_state(store: &RedisStore, reference: &PlanLimiter, plan: &Plan, what: &str) {
    for now in [1_700, 2_600, DAY_MS + 1_001] {
        let got = store.check(plan, "a", now, 0).await.expect("look");
        assert_eq!(got, reference.check(plan, "a", now, 0), "{what} at {now}");
        let got = store.check(plan, "a", now, 1).await.expect("request");
        assert_eq!(got, reference.check(plan, "a", now, 1), "{what} at {now}");
    }
}

/// A use of 2 at 1,500, its receipt, and the same answer as `with_call`'s.
async fn use_two(
    store: &RedisStore,
    with_call: &PlanLimiter,
    plan: &Plan,
    what: &str,
) -> Returnable {
    let used = store
        .check_returnable(plan, "a", 1_500, 2)
        .await
        .expect("use");
    assert_eq!(
        used.decision,
        with_call.check(plan, "a", 1_500, 2),
        "{what}"
    );
    assert!(used.decision.allowed, "{what}");
    assert!(
        used.receipt.is_some(),
        "{what}: an allowed use has a receipt"
    );
    used
}

async fn given_back_at_once(target: &RedisTarget, policy: &str, where_: &str) {
    let what = format!("{policy} on {where_}");
    let store = connect(target, format!("give-{policy}")).await;
    let plan = plan(policy);
    let (without, with_call) = (PlanLimiter::new(), PlanLimiter::new());
    for reference in [&without, &with_call] {
        reference.check(&plan, "a", 1_000, 1);
    }
    store.check(&plan, "a", 1_000, 1).await.expect("first use");

    let used = use_two(&store, &with_call, &plan, &what).await;
    let receipt = used.receipt.expect("receipt");
    let before = store.call_counts();
    let given = store.give_back(receipt).await.expect("give back");
    assert_eq!(given, GivenBack::Restored, "{what}");
    assert_eq!(
        store.call_counts().refunded - before.refunded,
        1,
        "{what}: counted with the refunds"
    );
    same_state(&store, &without, &plan, &what).await;

    // Nothing to give back: a refusal and a look consume nothing.
    for cost in [0, 11] {
        let answer = store.check_returnable(&plan, "a", 3_000, cost).await;
        let answer = answer.expect("check");
        assert!(answer.receipt.is_none(), "{what}: cost {cost}");
    }
}

async fn given_back_after_another_use(target: &RedisTarget, policy: &str, where_: &str) {
    let what = format!("{policy} on {where_}, after another use");
    let exact = policy == "sliding-window";
    let store = connect(target, format!("give-later-{policy}")).await;
    let plan = plan(policy);
    let (without, with_call) = (PlanLimiter::new(), PlanLimiter::new());
    let used = use_two(&store, &with_call, &plan, &what).await;
    let later = store.check(&plan, "a", 1_600, 1).await.expect("later use");
    assert_eq!(later, with_call.check(&plan, "a", 1_600, 1), "{what}");
    without.check(&plan, "a", 1_600, 1);

    let before: CallCounts = store.call_counts();
    let given = (store.give_back(used.receipt.expect("receipt")).await).expect("give back");
    let counts = store.call_counts();
    if exact {
        assert_eq!(given, GivenBack::Restored, "{what}");
        assert_eq!(counts.refunded - before.refunded, 1, "{what}");
        same_state(&store, &without, &plan, &what).await;
    } else {
        assert_eq!(given, GivenBack::Kept, "{what}");
        assert_eq!(counts.refunds_stale - before.refunds_stale, 1, "{what}");
        same_state(&store, &with_call, &plan, &what).await;
    }
}

#[test]
fn a_use_given_back_leaves_the_state_a_refusal_would_have_on_one_node() {
    let Some(server) = RedisServer::spawn("give_back_one_node") else {
        return;
    };
    let target = RedisTarget::single(server.url());
    runtime().block_on(async {
        for policy in POLICY_NAMES {
            given_back_at_once(&target, policy, "one node").await;
            given_back_after_another_use(&target, policy, "one node").await;
        }
    });
}

#[test]
fn a_use_given_back_leaves_the_state_a_refusal_would_have_on_a_cluster() {
    let Some(cluster) = RedisCluster::spawn("give_back_cluster") else {
        return;
    };
    let target = RedisTarget::cluster(cluster.urls());
    runtime().block_on(async {
        for policy in POLICY_NAMES {
            given_back_at_once(&target, policy, "a cluster").await;
            given_back_after_another_use(&target, policy, "a cluster").await;
        }
    });
}
