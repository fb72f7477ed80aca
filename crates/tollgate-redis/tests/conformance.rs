//! The conformance suite (`tollgate_testkit::conformance`) on Redis: every
//! case, one test each, on one `redis-server` and on a Redis Cluster of three
//! masters, each spawned by the test itself (skipped, with a message, when
//! `redis-server` is not installed, unless `TOLLGATE_REQUIRE_REDIS=1`).
//! Every decision is compared with the naive models and, for the worked
//! sessions and edge cases, with answers written down by hand.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tollgate::Store;
use tollgate_redis::testing::{RedisCluster, RedisServer};
use tollgate_redis::{RedisStore, RedisStoreConfig};

/// A store config with a key prefix no other store of this process uses.
fn fresh_config() -> RedisStoreConfig {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    RedisStoreConfig {
        prefix: format!("conformance:{}", NEXT.fetch_add(1, Ordering::Relaxed)),
        // The cases' times run far faster than Redis's clock: keep keys for
        // the whole test whatever the windows.
        expiry_margin_ms: 600_000,
        // The suite checks answers, not stalls (tests/stalls.rs does): on a
        // loaded test machine a call may take longer than the default
        // 100 ms, and its deadline would then refuse it.
        timeout: std::time::Duration::from_secs(10),
        ..RedisStoreConfig::default()
    }
}

mod one_node {
    use super::*;

    tollgate_testkit::conformance_tests!(RedisServer::spawn(module_path!()).map(|server| {
        move || {
            let url = server.url();
            async move {
                let store = RedisStore::connect(&url, fresh_config())
                    .await
                    .expect("connect the store");
                Arc::new(store) as Arc<dyn Store>
            }
        }
    }));
}

/// Stores on the cluster, connected through all three masters as seeds.
fn cluster_stores(
    cluster: &RedisCluster,
) -> impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Arc<dyn Store>>>> + '_ {
    move || {
        let urls = cluster.urls();
        Box::pin(async move {
            let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
            let store = RedisStore::connect_cluster(&nodes, fresh_config())
                .await
                .expect("connect the cluster store");
            Arc::new(store) as Arc<dyn Store>
        })
    }
}

mod cluster {
    use super::*;

    tollgate_testkit::conformance_tests!(
        RedisCluster::spawn(module_path!()).map(|cluster| move || cluster_stores(&cluster)())
    );
}

/// The suite's clients really are spread over the three masters (so the
/// cluster leg exercises every node): the edge cases' fifteen clients
/// land on all of them.
#[test]
fn cluster_spreads_the_suites_clients_over_every_master() {
    let Some(cluster) = RedisCluster::spawn("cluster_spreads_the_suites_clients") else {
        return;
    };
    tollgate_testkit::conformance::edge_cases(&cluster_stores(&cluster));
    for node in cluster.nodes() {
        let keys: u64 = node.cli(&["DBSIZE"]).trim().parse().expect("DBSIZE");
        assert!(keys > 0, "node {} holds no key", node.port());
    }
}

/// The suite's extremes run just inside the Redis store's exact range.
#[test]
fn the_suites_exact_range_is_the_redis_stores() {
    assert_eq!(
        tollgate_testkit::conformance::EXACT_RANGE,
        tollgate_redis::bounds::MAX_EXACT
    );
}
