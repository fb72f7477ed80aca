//! Decisions answered only once a replica holds them
//! (`RedisStoreConfig::replicas_to_ack`, `src/replicas.rs`), against real
//! `redis-server` masters and replicas. The replication stream runs through
//! a relay that can hold it: a replica that hears nothing more, as one
//! behind a slow link or on a stalled host, without stopping its process
//! (a stopped replica on one host still finds in its socket buffer what the
//! master wrote, and loses nothing in a failover).

mod batching;

use std::time::Duration;

use batching::{at_once, in_order, runtime};

use tollgate::{AnyPolicy, Limit, Plan};
use tollgate_redis::testing::{ClusterOptions, RedisCluster, RedisServer, Relay};
use tollgate_redis::{RedisStore, RedisStoreConfig, RedisStoreError};

/// One limit of 5 per policy, over a window far longer than the test.
fn plan() -> Plan {
    let limits = ["sliding-window", "token-bucket", "gcra"]
        .iter()
        .map(|name| {
            let policy = AnyPolicy::from_name(name, 5, 1_000_000).expect("policy");
            Limit::new(*name, policy, false)
        })
        .collect();
    Plan::new("replicas", limits).expect("plan")
}

/// A store that waits 300 ms for `replicas` replicas to acknowledge.
fn config(replicas: u32) -> RedisStoreConfig {
    RedisStoreConfig {
        timeout: Duration::from_millis(300),
        replicas_to_ack: replicas,
        ..RedisStoreConfig::default()
    }
}

/// A store on `server` waiting for `replicas` replicas ([`config`]).
async fn store_on(server: &RedisServer, replicas: u32) -> RedisStore {
    RedisStore::connect(&server.url(), config(replicas))
        .await
        .expect("connect")
}

/// A master, and its replica, which replicates through `relay`.
struct MasterAndReplica {
    master: RedisServer,
    relay: Relay,
    replica: RedisServer,
}

fn master_and_replica(test: &str) -> Option<MasterAndReplica> {
    let master = RedisServer::spawn(test)?;
    let relay = Relay::start(master.port());
    let replica = RedisServer::spawn_replica_of(test, relay.port())?;
    Some(MasterAndReplica {
        master,
        relay,
        replica,
    })
}

/// Three requests of `client`, each allowed (and acknowledged, when the
/// store asks for replicas).
async fn three_allowed(store: &RedisStore, client: &str) {
    let plan = plan();
    for t in 0..3 {
        let decision = store.decide(&plan, client, t, 1).await.expect("decided");
        assert!(decision.allowed, "{client}: request {t}");
    }
}

/// The master dies; its replica, which heard nothing since the relay held
/// the replication stream (dropped now), takes over: a store on it.
async fn fail_over(pair: &mut MasterAndReplica) -> RedisStore {
    pair.master.kill();
    pair.relay.cut();
    assert_eq!(pair.replica.cli(&["REPLICAOF", "NO", "ONE"]).trim(), "OK");
    store_on(&pair.replica, 0).await
}

/// Once `store` settled, `decisions` decisions were taken back, each one
/// too few replicas acknowledged.
async fn assert_taken_back(store: &RedisStore, decisions: u64) {
    store.settle(Duration::from_secs(5)).await.expect("settled");
    let counts = store.call_counts();
    assert_eq!(
        (counts.refunded, counts.not_replicated),
        (decisions, decisions),
        "{counts:?}"
    );
}

/// `client` has `remaining` left under every limit of [`plan`] at `now_ms`.
async fn assert_left(store: &RedisStore, client: &str, now_ms: u64, remaining: u32) {
    let inspection = store
        .inspect(&plan(), client, now_ms)
        .await
        .expect("inspect");
    for limit in &inspection.limits {
        assert_eq!(limit.remaining, remaining, "{client}, {}", limit.name);
    }
}

/// `error` is the store's: too few replicas acknowledged, transient.
fn assert_not_replicated(error: &RedisStoreError) {
    assert!(
        matches!(
            error,
            RedisStoreError::NotReplicated {
                acknowledged: 0,
                replicas: 1,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.is_transient(), "{error}");
}

/// How many of `client`'s requests `store` allows from `now_ms` on, one
/// at a time, until the first refused (at most 10).
async fn allowed_until_refused(store: &RedisStore, client: &str, now_ms: u64) -> u64 {
    let plan = plan();
    let mut allowed = 0;
    for t in 0..10 {
        let decision = store
            .decide(&plan, client, now_ms + t, 1)
            .await
            .expect("decided");
        if !decision.allowed {
            break;
        }
        allowed += 1;
    }
    allowed
}

/// The fault this guards against, and the guard: with `replicas_to_ack` =
/// 1, a decision the replica never received is not answered as allowed,
/// and its consumption is taken back from the master; so when the master
/// dies and the replica takes over, the client has had exactly its limit
/// across the two. (Without it, the fourth decision is allowed on the
/// master and lost with it, and the promoted replica allows the client
/// 5 - 3 more: 6 in all.)
#[test]
fn a_decision_no_replica_acknowledged_is_taken_back_and_a_failover_keeps_the_limit() {
    let Some(mut pair) = master_and_replica("replica-ack") else {
        return;
    };
    runtime().block_on(async {
        let plan = plan();
        let store = store_on(&pair.master, 1).await;
        three_allowed(&store, "a").await;
        pair.relay.hold_replies();
        let error = store
            .decide(&plan, "a", 3, 1)
            .await
            .expect_err("no replica acknowledged it");
        assert_not_replicated(&error);
        // A refusal consumed nothing: no replica is needed to answer it.
        let refused = store.decide(&plan, "a", 4, 6).await.expect("a refusal");
        assert!(!refused.allowed);
        assert_taken_back(&store, 1).await;
        assert_left(&store, "a", 5, 2).await;

        let promoted = fail_over(&mut pair).await;
        let after = allowed_until_refused(&promoted, "a", 10).await;
        assert_eq!(3 + after, 5, "allowed in all across the failover");
    });
}

/// The fault itself, which `replicas_to_ack` guards against: Redis
/// replicates asynchronously, so a decision the replica never heard is
/// allowed on the master and lost with it, and the promoted replica allows
/// the client its limit a second time, in part.
#[test]
fn without_replicas_to_ack_a_failover_loses_what_the_replica_never_heard() {
    let Some(mut pair) = master_and_replica("replica-no-ack") else {
        return;
    };
    runtime().block_on(async {
        let store = store_on(&pair.master, 0).await;
        three_allowed(&store, "a").await;
        pair.replica.wait_caught_up_with(&pair.master);
        pair.relay.hold_replies();
        let decision = store.decide(&plan(), "a", 3, 1).await.expect("decided");
        assert!(decision.allowed, "no replica asked for: allowed at once");
        let promoted = fail_over(&mut pair).await;
        let after = allowed_until_refused(&promoted, "a", 10).await;
        assert_eq!(
            3 + 1 + after,
            6,
            "one more than the limit across the failover"
        );
    });
}

/// Decisions of many clients in one batch, none acknowledged: each is
/// taken back and answered by the error; once the replica hears the master
/// again, every client is decided as if nothing had been consumed (by
/// scripts loaded again: Redis's were flushed).
#[test]
fn a_batch_no_replica_acknowledged_is_taken_back_whole() {
    let Some(pair) = master_and_replica("replica-ack-batch") else {
        return;
    };
    runtime().block_on(async {
        let plan = plan();
        let store = store_on(&pair.master, 1).await;
        let clients: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
        pair.relay.hold_replies();
        let answers = in_order(at_once(&store, &plan, &clients, 0)).await;
        for answer in &answers {
            assert_not_replicated(answer.as_ref().expect_err("not acknowledged"));
        }
        let counts = store.call_counts();
        assert!(counts.batches >= 1, "no batch was sent: {counts:?}");
        assert_taken_back(&store, 10).await;

        pair.relay.release_replies();
        pair.replica.wait_caught_up_with(&pair.master);
        // A Redis that lost its scripts (restarted, flushed): loaded again.
        assert_eq!(pair.master.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
        for client in &clients {
            let decision = store.decide(&plan, client, 1, 1).await.expect("decided");
            assert!(decision.allowed, "{client}");
            for limit in &decision.limits {
                assert_eq!(limit.decision.remaining, 4, "{client}: one use in all");
            }
        }
        drop(pair.replica);
    });
}

/// On a cluster, each decision's `WAIT` goes to the master that ran it: a
/// client whose master's replica is stopped gets the error and keeps its
/// budget, while a client of another master is decided as usual; and a
/// client whose slot moved is decided, with its `WAIT`, by its new master.
#[test]
fn on_a_cluster_only_the_clients_of_a_master_whose_replica_is_silent_wait_in_vain() {
    let options = ClusterOptions {
        replicas_per_master: 1,
        ..ClusterOptions::default()
    };
    let Some(cluster) = RedisCluster::spawn_with("replica-ack-cluster", &options) else {
        return;
    };
    runtime().block_on(async {
        let plan = plan();
        let urls = cluster.urls();
        let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
        let store = RedisStore::connect_cluster(&seeds, config(1))
            .await
            .expect("connect");
        let clients: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
        for client in &clients {
            let decision = store
                .decide(&plan, client, 0, 1)
                .await
                .expect("acknowledged");
            assert!(decision.allowed, "{client}");
        }
        let master = cluster.master_holding(&clients[0]);
        let victim = &clients[0];
        let bystander = clients
            .iter()
            .find(|client| cluster.master_holding(client) != master)
            .expect("a client of another master");

        let replica = &cluster.nodes()[cluster.replica_of(master)];
        replica.stop_process();
        let error = store
            .decide(&plan, victim, 1, 1)
            .await
            .expect_err("its replica is stopped");
        assert_not_replicated(&error);
        let decision = store.decide(&plan, bystander, 1, 1).await.expect("decided");
        assert!(decision.allowed);
        store.settle(Duration::from_secs(5)).await.expect("settled");
        replica.continue_process();

        assert_left(&store, victim, 2, 4).await;
        assert_left(&store, bystander, 2, 3).await;

        // The victim's slot moves to the bystander's master: the store's
        // call, with its WAIT, meets MOVED at the old master, and is sent on.
        cluster.move_slot_of(victim, cluster.master_holding(bystander));
        let decision = store.decide(&plan, victim, 3, 1).await.expect("decided");
        assert!(decision.allowed);
        for limit in &decision.limits {
            assert_eq!(limit.decision.remaining, 3, "{}: 2 used", limit.name);
        }
    });
}

/// A user who may not run `WAIT` (an ACL without it): a decision that
/// consumed is taken back, and its caller gets Redis's refusal (`NOPERM`,
/// permanent: a configuration to fix), not an allowed answer no replica
/// may hold; a refusal is answered as it is.
#[test]
fn a_wait_refused_takes_the_decision_back_and_says_why() {
    let user = ["--user", "alice", "on", ">pw", "~*", "&*", "+@all", "-wait"];
    let Some(server) = RedisServer::spawn_with("replica-ack-noperm", &user) else {
        return;
    };
    runtime().block_on(async {
        let plan = plan();
        let url = format!("redis://alice:pw@127.0.0.1:{}", server.port());
        let store = RedisStore::connect(&url, config(1)).await.expect("connect");
        let error = store
            .decide(&plan, "a", 0, 1)
            .await
            .expect_err("WAIT refused");
        assert!(error.to_string().contains("NOPERM"), "{error}");
        assert!(!error.is_transient(), "{error}");
        let refused = store.decide(&plan, "a", 1, 6).await.expect("a refusal");
        assert!(!refused.allowed);
        assert_taken_back(&store, 1).await;
        assert_left(&store, "a", 2, 5).await;
    });
}
