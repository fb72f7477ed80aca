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

/// A `new` whose limit the Redis store could not decide exactly at any time
/// (its numbers leave a Lua number's exact range even at time 0) is refused
/// on its own line, as memory refuses a limit of 0, rather than answered
/// `ok` and followed by an error on every call.
#[test]
fn the_redis_target_refuses_a_new_it_could_never_serve() {
    let Some(server) = RedisServer::spawn("the_redis_target_refuses_a_new_it_could_never_serve")
    else {
        return;
    };
    let session =
        "new gcra 4294967295 18446744073709551615\nallow a 0\nnew gcra 3 1000\nallow a 0\n";
    let mut out = Vec::new();
    let mut target = replay::Redis::connect(&server.url(), None).expect("connect");
    replay::replay(session.as_bytes(), &mut out, &mut target).expect("replay");
    let out = String::from_utf8_lossy(&out);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(
        lines[0].starts_with("error: line 1: out of the Redis store's exact range: gcra 4294967295 per 18446744073709551615 ms: ")
            && lines[0].contains("exceeds 2^53 - 1"),
        "{out}"
    );
    assert_eq!(
        lines[1],
        "error: line 2: no limiter: the `new` on line 1 failed"
    );
    assert_eq!(lines[2..], ["ok", "true"], "{out}");
    // In memory every such limit works.
    let mut out = Vec::new();
    replay::replay(session.as_bytes(), &mut out, &mut Memory::default()).expect("replay");
    assert_eq!(String::from_utf8_lossy(&out), "ok\ntrue\nok\ntrue\n");
}
