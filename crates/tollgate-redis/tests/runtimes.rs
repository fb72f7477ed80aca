//! A store serves callers on several runtimes at once: `tollgate serve`
//! answers HTTP on its main runtime and Envoy's gRPC on threads of their
//! own, each with a single-threaded runtime, which end at shutdown before
//! the main one. Whatever the store starts for its calls (its connections
//! to Redis, made at their first use; the tasks that carry batches and
//! refunds) must not live on a caller's runtime, or it ends with that
//! runtime and the store's other callers are left with a dead connection.
//! Against real `redis-server` nodes the test starts.

use std::time::Duration;

use tollgate::{AnyPolicy, Limit, Plan};
use tollgate_redis::testing::{current_thread_runtime, runtime, RedisCluster, RedisServer};
use tollgate_redis::{RedisStore, RedisStoreConfig, RedisTarget};

/// A limit of 1,000 over a window far longer than the test.
fn plan() -> Plan {
    let policy = AnyPolicy::from_name("sliding-window", 1_000, 10_000_000).expect("policy");
    Plan::new("runtimes", vec![Limit::new("1000", policy, false)]).expect("plan")
}

/// Every client of `clients` decided once, at `now`, from a thread of its
/// own with a single-threaded runtime (a gRPC worker), which then ends.
fn decide_on_a_runtime_that_ends(store: &RedisStore, clients: &[String], now: u64) {
    let (store, plan, clients) = (store.clone(), plan(), clients.to_vec());
    std::thread::spawn(move || {
        current_thread_runtime().block_on(async {
            for client in &clients {
                let decision = store.decide(&plan, client, now, 1).await;
                assert!(decision.expect("decided on the worker").allowed, "{client}");
            }
            // Settled as a worker settles before its runtime ends.
            tollgate::Store::settle(&store, Duration::from_secs(1))
                .await
                .expect("settled");
        });
    })
    .join()
    .expect("the worker's thread");
}

/// Each client decided once more on `home`, within a caller's timeout.
fn decided_after(home: &tokio::runtime::Runtime, store: &RedisStore, clients: &[String]) {
    home.block_on(async {
        let plan = plan();
        for client in clients {
            let answer =
                tokio::time::timeout(Duration::from_secs(2), store.decide(&plan, client, 1, 1))
                    .await;
            let decision = answer
                .unwrap_or_else(|_| panic!("{client}: no answer in 2 s"))
                .unwrap_or_else(|e| panic!("{client}: {e}"));
            assert!(decision.allowed, "{client}");
            assert_eq!(
                decision.limits[0].decision.remaining, 998,
                "{client}: both calls counted"
            );
        }
    });
}

/// A store for `target` made on `home`, connected at once or (`lazy`, as
/// `tollgate serve` makes it when Redis is not up at start-up) at its first
/// use.
fn store_on(home: &tokio::runtime::Runtime, target: &RedisTarget, lazy: bool) -> RedisStore {
    let config = RedisStoreConfig::default();
    if lazy {
        let _inside = home.enter();
        RedisStore::connect_lazy_to(target, config).expect("a lazy store")
    } else {
        home.block_on(RedisStore::connect_to(target, config))
            .expect("connect")
    }
}

/// A store first used on a worker's runtime, which then ends, must still
/// answer on its home runtime, for clients of every master: what the first
/// decisions started (on a cluster, the reading of the map of slots and
/// each master's lane; on a lazy store, its connection) is the store's, not
/// the worker's.
#[test]
fn a_store_first_used_on_a_runtime_that_ended_still_answers_on_its_own() {
    let Some(redis) = RedisServer::spawn("runtimes-node") else {
        return;
    };
    let Some(cluster) = RedisCluster::spawn("runtimes-cluster") else {
        return;
    };
    let clients: Vec<String> = (0..30).map(|i| format!("c{i}")).collect();
    let targets = [
        ("one node", RedisTarget::single(redis.url())),
        ("cluster", RedisTarget::cluster(cluster.urls())),
    ];
    for (name, target) in &targets {
        for lazy in [false, true] {
            let home = runtime();
            let store = store_on(&home, target, lazy);
            let prefix = format!("{name}, lazy {lazy}");
            let clients: Vec<String> = clients.iter().map(|c| format!("{prefix}: {c}")).collect();
            decide_on_a_runtime_that_ends(&store, &clients, 0);
            decided_after(&home, &store, &clients);
        }
    }
}

/// A store has a home only inside a runtime: made outside one, it is
/// refused with an error that says so (before, a lazy one-node store
/// panicked inside the Redis client).
#[test]
fn a_store_made_outside_a_runtime_is_refused_saying_why() {
    let targets = [
        RedisTarget::single("redis://127.0.0.1:1"),
        RedisTarget::cluster(["redis://127.0.0.1:1"]),
    ];
    for target in &targets {
        let refused = RedisStore::connect_lazy_to(target, RedisStoreConfig::default())
            .err()
            .expect("refused outside a runtime");
        assert!(
            matches!(refused, tollgate_redis::RedisStoreError::Config(_))
                && refused.to_string().contains("inside a Tokio runtime"),
            "{refused}"
        );
    }
}
