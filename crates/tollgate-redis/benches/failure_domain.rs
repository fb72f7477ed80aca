//! What naming a client's master costs the Redis store on a cluster
//! (`Store::failure_domain`, called by the guard on every decision to pick
//! the master's circuit breaker): the client's key, its slot (CRC16) and a
//! lookup in the store's map of slots. No call to Redis is made; the
//! cluster (three masters, spawned by the bench itself, killed at the end)
//! is only there for the store to read its map from. On one node the store
//! answers `None` at once, measured alongside.
//!
//! Run: `cargo bench -p tollgate-redis --bench failure_domain -- --warm-up-time 1 --measurement-time 3`

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate::Store;
use tollgate_redis::testing::{RedisCluster, RedisServer};
use tollgate_redis::{RedisStore, RedisStoreConfig};

fn bench(c: &mut Criterion) {
    let (Some(cluster), Some(node)) = (
        RedisCluster::spawn("bench-failure-domain"),
        RedisServer::spawn("bench-failure-domain-node"),
    ) else {
        eprintln!("redis-server is not installed: nothing to measure");
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let urls = cluster.urls();
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    let (on_cluster, on_node) = runtime.block_on(async {
        let config = RedisStoreConfig::default();
        let on_cluster = RedisStore::connect_cluster(&seeds, config.clone()).await;
        let on_node = RedisStore::connect(&node.url(), config).await;
        (on_cluster.unwrap(), on_node.unwrap())
    });
    let clients: Vec<String> = (0..1_000).map(|i| format!("client-{i}")).collect();
    assert!(
        on_cluster.failure_domain(&clients[0]).is_some(),
        "the map is read"
    );
    let mut group = c.benchmark_group("failure-domain");
    for (name, store) in [("cluster", &on_cluster), ("one-node", &on_node)] {
        group.bench_function(name, |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % clients.len();
                black_box(store.failure_domain(&clients[i]))
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
