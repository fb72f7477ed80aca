//! What a service checks of Redis at start-up, against real `redis-server`s
//! the test starts itself: `RedisStore::evicting_memory_policy` (under an
//! evicting `maxmemory-policy` a full Redis drops tollgate's keys early,
//! since every key carries an expiry), read of the node or of every cluster
//! primary; `RedisStore::is_replica` (a replica refuses every write); and
//! `RedisStore::fewest_connected_replicas` (fewer than `replicas_to_ack`,
//! and every decision that consumes is answered by the failure policy).

use tollgate_redis::testing::{current_thread_runtime, wait_for, RedisCluster, RedisServer};
use tollgate_redis::{RedisStore, RedisStoreConfig};

#[test]
fn a_node_that_evicts_is_named_and_one_that_refuses_writes_when_full_is_not() {
    let Some(server) = RedisServer::spawn("memory_policy") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
            .await
            .expect("connect");
        assert_eq!(store.evicting_memory_policy().await.expect("read"), None);
        let set = server.cli(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]);
        assert_eq!(set.trim(), "OK");
        let policy = store.evicting_memory_policy().await.expect("read");
        assert_eq!(policy.as_deref(), Some("volatile-lru"));
    });
}

#[test]
fn one_evicting_primary_of_a_cluster_is_named() {
    let Some(cluster) = RedisCluster::spawn("memory_policy_cluster") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let urls = cluster.urls();
        let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
        let store = RedisStore::connect_cluster(&seeds, RedisStoreConfig::default())
            .await
            .expect("connect");
        assert_eq!(store.evicting_memory_policy().await.expect("read"), None);
        let last = *cluster.masters().last().expect("a master");
        let set = cluster.nodes()[last].cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
        assert_eq!(set.trim(), "OK");
        let policy = store.evicting_memory_policy().await.expect("read");
        assert_eq!(policy.as_deref(), Some("allkeys-lru"));
        // No primary of this cluster has a replica.
        let replicas = store.fewest_connected_replicas().await.expect("INFO");
        assert_eq!(replicas, Some(0));
    });
}

/// An ACL user without `CONFIG` reads the policy from `INFO memory` (so a
/// managed Redis that renames `CONFIG` is checked too); without `INFO`
/// either, the policy is unknown, an error (which a service warns of and
/// goes on), not a wrong answer.
#[test]
fn a_user_without_config_reads_it_from_info_and_without_both_cannot() {
    let users = [
        "--user",
        "alice",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-config",
        "--user",
        "bob",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-config",
        "-info",
        "--maxmemory-policy",
        "volatile-lru",
    ];
    let Some(server) = RedisServer::spawn_with("memory_policy_acl", &users) else {
        return;
    };
    current_thread_runtime().block_on(async {
        let connect = |user: &str| {
            let url = format!("redis://{user}:pw@127.0.0.1:{}", server.port());
            async move {
                RedisStore::connect(&url, RedisStoreConfig::default())
                    .await
                    .expect("connect")
            }
        };
        let alice = connect("alice").await;
        let policy = alice.evicting_memory_policy().await.expect("from INFO");
        assert_eq!(policy.as_deref(), Some("volatile-lru"));
        let bob = connect("bob").await;
        let error = bob.evicting_memory_policy().await.expect_err("NOPERM");
        assert!(error.to_string().contains("NOPERM"), "{error}");
    });
}

#[test]
fn a_replica_is_told_from_its_primary() {
    let Some(primary) = RedisServer::spawn("is_replica") else {
        return;
    };
    let port = primary.port().to_string();
    let replica = RedisServer::spawn_with("is_replica", &["--replicaof", "127.0.0.1", &port])
        .expect("replica");
    let linked = wait_for(250, || {
        replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
    });
    assert!(linked, "the replica never linked");
    current_thread_runtime().block_on(async {
        for (server, is_replica) in [(&primary, false), (&replica, true)] {
            let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
                .await
                .expect("connect");
            assert_eq!(store.is_replica().await.expect("ROLE"), is_replica);
            let replicas = store.fewest_connected_replicas().await.expect("INFO");
            assert_eq!(replicas, Some(if is_replica { 0 } else { 1 }));
        }
    });
}
