//! A Redis restarted while the store's connection was idle: the connection
//! died with it, and the first calls after, sent on the dead connection,
//! failed ("broken pipe") and were answered by the failure policy, on every
//! connection and after every restart (under fail-open, requests let in
//! uncounted; an audit). On one node, a call whose connection turned out
//! dropped is sent once more on the new connection. Each test on a
//! `redis-server` of its own, killed and restarted on its port.

use tollgate::{AnyPolicy, Limit, Plan, Store};
use tollgate_redis::testing::{runtime, RedisServer};
use tollgate_redis::{RedisStore, RedisStoreConfig};

fn plan() -> Plan {
    let policy = AnyPolicy::from_name("sliding-window", 3, 60_000).expect("policy");
    Plan::new("restarts", vec![Limit::new("l", policy, false)]).expect("plan")
}

/// A store on `server` that has made one call (client "c", at 0), so that
/// its connection is up; then Redis is killed and restarted, no call
/// between.
async fn used_then_restarted(server: &mut RedisServer) -> RedisStore {
    let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
        .await
        .expect("connect");
    let first = store.check(&plan(), "c", 0, 1).await.expect("Redis up");
    assert_eq!(first.limits[0].decision.remaining, 2);
    server.kill();
    server.restart();
    store
}

/// The first calls after the restart are answered by Redis: alone, an
/// inspection, and 8 at once (batched); each counted once.
#[test]
fn the_first_calls_after_a_restart_with_no_call_during_it_are_answered() {
    let Some(mut server) = RedisServer::spawn("the_first_calls_after_a_restart_are_answered")
    else {
        return;
    };
    runtime().block_on(async {
        let (store, plan) = (used_then_restarted(&mut server).await, plan());
        let after = store
            .check(&plan, "c", 1, 1)
            .await
            .expect("the first call after the restart");
        // The restart lost the state (no persistence): a new client.
        assert_eq!(after.limits[0].decision.remaining, 2);
        let next = store.check(&plan, "c", 2, 1).await.expect("Redis up");
        let counted_once = next.limits[0].decision.remaining;
        assert_eq!(counted_once, 1, "the first counted once");

        server.kill();
        server.restart();
        let looked = store.inspect(&plan, "c", 3).await.expect("the first look");
        assert!(looked.allowed, "{looked:?}");

        server.kill();
        server.restart();
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..8 {
            let (store, plan) = (store.clone(), plan.clone());
            calls.spawn(async move { store.check(&plan, &format!("b{i}"), 3, 1).await });
        }
        while let Some(answer) = calls.join_next().await {
            let answer = answer.expect("joined");
            let answer = answer.expect("each first call after the restart");
            assert_eq!(answer.limits[0].decision.remaining, 2);
        }
    });
}

/// Sent again after its connection dropped, a call that Redis refuses
/// with an error of its own (Redis came back requiring a password) fails
/// with that error, not with the first "broken pipe": the cause is logged,
/// and its kind (permanent) keeps the breaker from counting a Redis that
/// answers as one that does not (a re-check).
#[test]
fn a_call_sent_again_and_refused_by_redis_fails_with_redis_s_error() {
    let Some(mut server) = RedisServer::spawn("a_call_sent_again_and_refused_by_redis") else {
        return;
    };
    runtime().block_on(async {
        let store = used_then_restarted(&mut server).await;
        server.cli(&["CONFIG", "SET", "requirepass", "now-required"]);
        let refused = store.decide(&plan(), "c", 1, 1).await;
        let refused = refused.expect_err("no password");
        // Redis refuses a large command of a client that has not logged in
        // ("unauthenticated multibulk length"), a small one with NOAUTH.
        let said = refused.to_string();
        let redis_said = said.contains("NOAUTH") || said.contains("unauthenticated");
        assert!(redis_said, "{said}");
        assert!(!refused.is_transient(), "{said}");
    });
}
