//! `[store] replicas_to_ack`, from the file to the store a service decides
//! with (`StoreHandle::connect`, then `into_store`: the guard and its
//! failure policy in front), against a real `redis-server` the test starts
//! itself, and then a replica of it.

use std::time::Duration;

use tollgate::{AnyPolicy, DecidedBy, FailurePolicy, Limit, Plan};
use tollgate_config::{Config, StoreHandle};
use tollgate_redis::testing::{current_thread_runtime, RedisServer};

/// A decision that no replica acknowledged is answered by the failure
/// policy and consumes nothing; once a replica is in sync, the store
/// decides, and the client has its whole limit.
#[test]
fn a_decision_is_answered_by_the_store_only_once_a_replica_holds_it() {
    let Some(master) = RedisServer::spawn("config_replicas_to_ack") else {
        return;
    };
    let text = format!(
        "[[plans.default]]\nname = \"s\"\npolicy = \"sliding-window\"\nlimit = 5\nwindow = \"1h\"\n\
         [store]\nurl = \"{}\"\nreplicas_to_ack = 1\ntimeout = \"200ms\"\n\
         failure_policy = \"fail-closed\"\nbreaker_failures = 0\n",
        master.url()
    );
    let config = Config::parse(&text).expect("config");
    let policy = AnyPolicy::from_name("sliding-window", 5, 3_600_000).expect("policy");
    let plan = Plan::new("s", vec![Limit::new("1h", policy, false)]).expect("plan");
    current_thread_runtime().block_on(async {
        let handle = StoreHandle::connect(&config).await.expect("connect");
        let StoreHandle::Redis(redis) = &handle else {
            panic!("not the Redis store");
        };
        let redis = redis.clone();
        let (store, ..) = handle.into_store(&config.store);

        let decision = store.check(&plan, "c", 0, 1).await.expect("answered");
        assert_eq!(
            decision.decided_by,
            DecidedBy::Failure(FailurePolicy::FailClosed),
            "no replica: {decision:?}"
        );
        assert!(!decision.allowed);
        // Whatever it consumed is taken back before the next call.
        redis.settle(Duration::from_secs(5)).await.expect("settled");

        let _replica = RedisServer::spawn_replica_of("config_replicas_to_ack", master.port())
            .expect("replica");
        let mut decided = None;
        for t in 1..=50 {
            let decision = store.check(&plan, "c", t, 1).await.expect("answered");
            if decision.decided_by == DecidedBy::Store {
                decided = Some(decision);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let decided = decided.expect("the store never decided with a replica in sync");
        assert!(decided.allowed);
        assert_eq!(
            decided.limits[0].decision.remaining, 4,
            "the decision answered by the failure policy consumed nothing"
        );
    });
}
