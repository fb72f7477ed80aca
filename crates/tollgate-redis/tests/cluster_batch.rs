//! Batching on a Redis Cluster (`src/masters.rs`), on real `redis-server`
//! clusters spawned by each test: decisions are batched per master with
//! the in-memory limiter's answers, and a decision whose slot moved to
//! another master after the store read its map of slots is still decided
//! exactly, by its new master, and makes the store read the map again.
//! The same map names each client's master as its failure domain.

mod batching;

use batching::{
    assert_answers_in_arrival_order, at_once, config, in_order, plan, requests, runtime,
};
use tollgate::{PlanLimiter, Store};
use tollgate_redis::testing::{RedisCluster, RedisServer};
use tollgate_redis::{RedisStore, RedisStoreConfig};

async fn connect(cluster: &RedisCluster, prefix: &str) -> RedisStore {
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    RedisStore::connect_cluster(&urls, config(prefix, 1))
        .await
        .expect("connect")
}

fn slot_of(node: &RedisServer, key: &str) -> u16 {
    node.cli(&["CLUSTER", "KEYSLOT", key])
        .trim()
        .parse()
        .expect("a slot")
}

#[test]
fn on_a_cluster_concurrent_callers_are_batched_per_master_with_the_memory_stores_answers() {
    let Some(cluster) = RedisCluster::spawn("cluster_batches_per_master") else {
        return;
    };
    runtime().block_on(async {
        let store = connect(&cluster, "masters").await;
        let plan = plan();
        // 30 clients: about ten on each master.
        let requests = requests(600, 30);
        assert_answers_in_arrival_order(&store, &plan, &requests).await;
        let counts = store.call_counts();
        assert_eq!(counts.decisions, 600, "{counts:?}");
        // Batches of up to 16 per master (ceil(600 / 16) = 38 calls if the
        // masters' queues filled evenly; one more per master for the rest).
        assert!(counts.calls <= 600 / 16 + 3, "{counts:?}");
        assert!(counts.batches >= 600 / 16 - 3, "{counts:?}");
    });
}

#[test]
fn a_decision_whose_slot_moved_since_the_map_was_read_is_decided_by_its_new_master() {
    let Some(cluster) = RedisCluster::spawn("cluster_batch_slot_moved") else {
        return;
    };
    let nodes = cluster.nodes();
    // `redis-cli --cluster create` gave the first master slots 0-5460 and
    // the second 5461-10922.
    let (from, to) = (&nodes[0], &nodes[1]);
    runtime().block_on(async {
        let store = connect(&cluster, "moved").await;
        let plan = plan();
        let reference = PlanLimiter::new();
        let on_first: Vec<String> = (0..)
            .map(|i| format!("c{i}"))
            .filter(|c| slot_of(from, &store.keys().seen_key(c)) < 5_461)
            .take(6)
            .collect();
        let (moving, others) = on_first.split_first().expect("clients");
        let first = store
            .decide(&plan, moving, 1_000, 1)
            .await
            .expect("decided");
        assert_eq!(first, reference.check(&plan, moving, 1_000, 1));

        // The client's slot moves to the second master, keys and all.
        let seen = store.keys().seen_key(moving);
        let slot = slot_of(from, &seen).to_string();
        let (from_id, to_id) = (from.node_id(), to.node_id());
        to.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
        from.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
        let keys = from.cli(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
        let keys: Vec<&str> = keys.split_whitespace().collect();
        assert!(keys.contains(&seen.as_str()), "{keys:?}");
        let port = to.port().to_string();
        let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        migrate.extend(&keys);
        assert_eq!(from.cli(&migrate).trim(), "OK");
        for node in nodes {
            node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
        }

        // All five, the moved client among them, go in one batch to the
        // first master, which refuses the moved client's decision before it
        // writes.
        let order = [&others[0], &others[1], moving, &others[2], &others[3]];
        let answers = in_order(at_once(&store, &plan, &order, 2_000)).await;
        for (client, answer) in order.iter().zip(answers) {
            let expected = reference.check(&plan, client, 2_000, 1);
            assert_eq!(answer.expect("decided"), expected, "{client}");
        }
        let counts = store.call_counts();
        // 1 alone, a batch of 5, then the moved client's decision again,
        // alone.
        assert_eq!(
            (counts.decisions, counts.calls, counts.batches),
            (7, 3, 1),
            "{counts:?}"
        );
        assert_eq!(to.cli(&["EXISTS", &seen]).trim(), "1");

        // The refusal made the store read the map again (in the background,
        // at most every 100 ms): within a bounded number of rounds, the
        // moved client goes to its new master's queue, and no decision is
        // sent twice. Every answer stays exact meanwhile.
        let order = [&others[0], &others[1], moving, &others[2]];
        let mut rounds_until_read = None;
        for round in 0..2_000u64 {
            let now = 3_000 + 1_000 * round;
            let before = store.call_counts();
            let answers = in_order(at_once(&store, &plan, &order, now)).await;
            for (client, answer) in order.iter().zip(answers) {
                let expected = reference.check(&plan, client, now, 1);
                assert_eq!(answer.expect("decided"), expected, "{client} at {now}");
            }
            if store.call_counts().decisions - before.decisions == 4 {
                rounds_until_read = Some(round);
                break;
            }
        }
        assert!(
            rounds_until_read.is_some(),
            "the map was never read again: {:?}",
            store.call_counts()
        );
    });
}

/// The part of the store a guard keeps a circuit breaker for
/// (`Store::failure_domain`): on a cluster, the master that serves the
/// client's slot, found here by where the client's keys are, whether or not
/// the store batches; on one node, none (one breaker for the store).
#[test]
fn each_clients_failure_domain_is_the_master_holding_its_keys() {
    let (Some(cluster), Some(node)) = (
        RedisCluster::spawn("failure_domains"),
        RedisServer::spawn("failure_domains_one_node"),
    ) else {
        return;
    };
    runtime().block_on(async {
        let store = connect(&cluster, "domains").await;
        let urls = cluster.urls();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        let unbatched = RedisStoreConfig {
            batch_max: 1,
            ..config("domains", 1)
        };
        let unbatched = RedisStore::connect_cluster(&urls, unbatched)
            .await
            .expect("connect");
        let plan = plan();
        let mut masters = std::collections::HashSet::new();
        for i in 0..12 {
            let client = format!("client-{i}");
            store.check(&plan, &client, 0, 1).await.expect("decided");
            let holder = cluster
                .node_holding(&client)
                .map(|node| &cluster.nodes()[node])
                .expect("a node holds the client's keys");
            let domain = store.failure_domain(&client).expect("a master");
            assert!(
                domain.ends_with(&format!(":{}", holder.port())),
                "{client}: {domain} against port {}",
                holder.port()
            );
            let unbatched = unbatched.failure_domain(&client);
            assert_eq!(unbatched, Some(domain.clone()), "{client}, batch_max 1");
            masters.insert(domain);
        }
        assert!(masters.len() > 1, "12 clients over 3 masters: {masters:?}");

        let single = RedisStore::connect(&node.url(), config("domains", 1))
            .await
            .expect("connect");
        assert_eq!(single.failure_domain("client-0"), None);
    });
}
