//! Each replay target (memory, one Redis node, a Redis Cluster) prints the
//! hand-computed output of the conformance suite's edge cases. The stores
//! themselves are checked by the conformance suite in their own crates
//! (`tollgate_testkit::conformance`); this checks the replay's wiring to
//! them: a fresh key space per `new`, errors per line, the printed answers.

use tollgate_cli::replay::{self, Memory, Target};
use tollgate_redis::testing::{RedisCluster, RedisServer};
use tollgate_testkit::conformance::EDGE_CASES;

/// Replays every edge case on the target made by `target`.
fn prints_the_edge_cases<T: Target>(target: impl Fn() -> T) {
    for (what, session, expected) in EDGE_CASES {
        let mut out = Vec::new();
        replay::replay(session.as_bytes(), &mut out, &mut target()).expect("replay");
        assert_eq!(
            String::from_utf8_lossy(&out),
            *expected,
            "edge case: {what}"
        );
    }
}

#[test]
fn the_memory_target_prints_the_edge_cases() {
    prints_the_edge_cases(Memory::default);
}

#[test]
fn the_redis_target_prints_the_edge_cases() {
    let Some(server) = RedisServer::spawn("the_redis_target_prints_the_edge_cases") else {
        return;
    };
    prints_the_edge_cases(|| replay::Redis::connect(&server.url(), None).expect("connect"));
}

#[test]
fn the_cluster_target_prints_the_edge_cases() {
    let Some(cluster) = RedisCluster::spawn("the_cluster_target_prints_the_edge_cases") else {
        return;
    };
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    prints_the_edge_cases(|| replay::Redis::connect_cluster(&nodes, None).expect("connect"));
}
