//! On a Redis Cluster, one master's trouble holds no other master's
//! decisions (each master's queue has a connection of its own, its lane:
//! `src/masters.rs`), against real `redis-server` nodes the test starts.
//!
//! The trouble: redis-rs holds every request of a cluster connection while
//! it reads the map of slots again (after a `MOVED`), and that reading asks
//! every node it knows on the same connections as the requests: behind a
//! call that a master holds (its writes paused, as `CLUSTER FAILOVER`
//! pauses them), it waits as long as the pause lasts.

use std::time::{Duration, Instant};

use tollgate::{AnyPolicy, Limit, Plan};
use tollgate_redis::testing::{info_number, wait_for, RedisCluster, RedisServer};
use tollgate_redis::{RedisStore, RedisStoreConfig};

/// A limit of 5 over a window far longer than the test.
fn plan() -> Plan {
    let policy = AnyPolicy::from_name("token-bucket", 5, 1_000_000).expect("policy");
    Plan::new("lanes", vec![Limit::new("5", policy, false)]).expect("plan")
}

/// How long a caller waits for a decision.
const TIMEOUT: Duration = Duration::from_millis(300);

/// How many clients `node` holds blocked (a client whose write waits out
/// a pause counts).
fn blocked_clients(node: &RedisServer) -> u64 {
    info_number(&node.cli(&["INFO", "clients"]), "blocked_clients").unwrap_or(0)
}

/// Three clients on three masters. The victim's master pauses writes
/// (`CLIENT PAUSE 3000 WRITE`) and holds the victim's call. The mover's slot
/// has moved to the bystander's master, so the mover's next call meets
/// `MOVED` and redis-rs reads the map of slots again. Meanwhile the
/// bystander is decided by the store, call after call, for a second. On
/// one connection for the whole cluster (before the lanes) the reading
/// waited behind the victim's held call, and the bystander's first call
/// behind the reading, until it timed out. Once the pause is over, the
/// victim's abandoned call has consumed nothing.
#[test]
fn a_map_reading_held_behind_one_masters_paused_call_holds_no_other_masters_decisions() {
    let Some(cluster) = RedisCluster::spawn("cluster-lanes") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let plan = plan();
        let urls = cluster.urls();
        let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
        let config = RedisStoreConfig {
            timeout: TIMEOUT,
            ..RedisStoreConfig::default()
        };
        let store = RedisStore::connect_cluster(&seeds, config)
            .await
            .expect("connect");
        let clients: Vec<String> = (0..30).map(|i| format!("c{i}")).collect();
        for client in &clients {
            let decision = store.decide(&plan, client, 0, 1).await.expect("decided");
            assert!(decision.allowed, "{client}");
        }
        let on = |master: usize| {
            clients
                .iter()
                .find(|client| cluster.master_holding(client) == master)
                .expect("a client on every master")
                .clone()
        };
        let [paused, moved_from, moved_to] = <[usize; 3]>::try_from(cluster.masters()).expect("3");
        let (victim, mover, bystander) = (on(paused), on(moved_from), on(moved_to));
        cluster.move_slot_of(&mover, moved_to);

        let pause = cluster.nodes()[paused].cli(&["CLIENT", "PAUSE", "3000", "WRITE"]);
        assert_eq!(pause.trim(), "OK");
        let victim_call = {
            let (store, plan, victim) = (store.clone(), plan.clone(), victim.clone());
            tokio::spawn(async move { store.decide(&plan, &victim, 1, 1).await })
        };
        let held = wait_for(100, || blocked_clients(&cluster.nodes()[paused]) > 0);
        assert!(held, "the paused master holds the victim's call");
        let mover_call = {
            let (store, plan, mover) = (store.clone(), plan.clone(), mover.clone());
            tokio::spawn(async move { store.decide(&plan, &mover, 1, 1).await })
        };

        let started = Instant::now();
        let mut asked = 0;
        while started.elapsed() < Duration::from_secs(1) && asked < 1_000 {
            asked += 1;
            // Within the store's timeout, as `tollgate-guard` bounds it.
            let answer = tokio::time::timeout(TIMEOUT, store.decide(&plan, &bystander, 1, 0)).await;
            assert!(
                matches!(answer, Ok(Ok(_))),
                "the bystander's call {asked}, {:?} in: {answer:?}",
                started.elapsed()
            );
        }
        let victim_answer = victim_call.await.expect("the victim's task");
        mover_call
            .await
            .expect("the mover's task")
            .expect("the mover is decided");
        assert!(
            victim_answer.is_err(),
            "held past its timeout: {victim_answer:?}"
        );

        store
            .settle(Duration::from_secs(10))
            .await
            .expect("settled");
        let decision = store.decide(&plan, &victim, 2, 1).await.expect("decided");
        assert_eq!(
            decision.limits[0].decision.remaining, 3,
            "2 used: the abandoned call was taken back"
        );
    });
}
