//! Replies lost on their way back from a Redis Cluster, on a real
//! three-master cluster: one master announces a [`Relay`] in front of it as
//! its address, so that the store's connection to that master goes through
//! the relay, which can hold the replies or drop the connection with them.
//!
//! - A connection that drops after Redis ran a call: redis-rs's cluster
//!   client sends the call again on a new connection
//!   (`ClusterClientBuilder::retries`), since it cannot know whether it
//!   ran. Run twice, a decision that consumed would charge the client twice
//!   for one request; the scripts run a call once (a call whose receipt is
//!   already stored answers from it, writing nothing: `decide.lua`).
//!   Sent again too late to run, it answers "late": an earlier attempt may
//!   have run, so its receipt is claimed all the same.
//! - A reply that never comes (the connection is silent, not closed): the
//!   call is given up on after `RESPONSE_TIMEOUT`, then taken back by its
//!   receipt (`src/call/lost.rs`), as on one node.
//! - A refund whose connection drops after Redis ran it: sent again, the
//!   sliding log's undo would take out another request's units; the copy
//!   finds the answer the first run kept under the refund's own key, and
//!   answers from it (`refund.lua`).
//! - A refund sent to the master that held its client's slot before the
//!   slot moved: redirected (MOVED) to the new one, where it runs.
//! - A master down: its clients' lost calls wait for it to come back, and
//!   hold back the drop of closed receipts of their own group of slots
//!   only (`src/receipts.rs`), not of the other masters' clients.

mod batching;

use std::time::Duration;

use batching::{config, plan, runtime};
use tollgate::{AnyPolicy, GivenBack, Limit, Plan, PlanLimiter, Store};
use tollgate_redis::testing::{
    load_scripts, wait_for, wait_until, RedisCluster, RedisServer, Relay,
};
use tollgate_redis::{RedisStore, RedisStoreConfig, RESPONSE_TIMEOUT};

/// A three-master cluster whose first master announces a [`Relay`] in
/// front of it as its address, once every node's map of slots says so
/// (waited for, bounded); `None` when Redis is not installed.
fn cluster_behind_relay(test: &str) -> Option<(RedisCluster, Relay)> {
    let cluster = RedisCluster::spawn(test)?;
    let nodes = cluster.nodes();
    let relay = Relay::start(nodes[0].port());
    let port = relay.port().to_string();
    let set = nodes[0].cli(&["CONFIG", "SET", "cluster-announce-port", &port]);
    assert_eq!(set.trim(), "OK", "{set}");
    let announced = wait_for(500, || {
        nodes
            .iter()
            .all(|node| node.cli(&["CLUSTER", "SLOTS"]).contains(&port))
    });
    assert!(
        announced,
        "the nodes never announced the relay's port {port}"
    );
    Some((cluster, relay))
}

#[test]
fn a_call_sent_again_after_its_connection_dropped_is_charged_once() {
    let Some((cluster, relay)) = cluster_behind_relay("cluster_resent_call") else {
        return;
    };
    let first = &cluster.nodes()[0];
    runtime().block_on(async {
        for batch_max in [1, 16] {
            let config = RedisStoreConfig {
                batch_max,
                ..config(&format!("resent{batch_max}"), 1)
            };
            let (store, client) = connect(&cluster, config).await;
            let plan = plan();
            let reference = PlanLimiter::new();
            // Three calls use up the shadow limit (3 per 10 s), so that the
            // held call's receipt has a limit that did not consume.
            for _ in 0..3 {
                let answer = store.decide(&plan, &client, 1_000, 1).await;
                assert_eq!(
                    answer.expect("decided"),
                    reference.check(&plan, &client, 1_000, 1)
                );
            }

            let receipt_of_call = |seq: u64| has_receipt(first, &store, &client, seq);
            relay.hold_replies();
            let held = {
                let (store, plan, client) = (store.clone(), plan.clone(), client.clone());
                tokio::spawn(async move { store.decide(&plan, &client, 1_000, 1).await })
            };
            // The store's fourth call (numbered from 1) has run in Redis
            // once its receipt is there; its reply is held.
            assert!(
                wait_until(500, || receipt_of_call(4)).await,
                "the held call never ran"
            );
            relay.cut();
            let answer = held.await.expect("task");
            let expected = reference.check(&plan, &client, 1_000, 1);
            assert_eq!(
                answer.expect("decided, once"),
                expected,
                "batch_max {batch_max}"
            );

            // What the client has left: one consumption, not two.
            let left = store.decide(&plan, &client, 1_000, 0).await;
            assert_eq!(
                left.expect("decided"),
                reference.check(&plan, &client, 1_000, 0),
                "batch_max {batch_max}"
            );
            let counts = store.call_counts();
            assert_eq!(counts.replies_lost, 0, "{counts:?}");
        }
    });
}

#[test]
fn a_reply_that_never_comes_is_given_up_on_and_its_call_taken_back() {
    let Some((cluster, relay)) = cluster_behind_relay("cluster_reply_never_comes") else {
        return;
    };
    runtime().block_on(async {
        let (store, client) = a_call_given_up_on(&cluster, &relay, "silent").await;
        let lost = wait_until(TRIES, || store.call_counts().replies_lost == 1).await;
        let counts = store.call_counts();
        assert!(lost, "the reply was never given up on: {counts:?}");
        // The silent connection is reset; the claim goes on a new one.
        relay.cut();
        assert_taken_back(&cluster, &store, &client).await;
    });
}

/// The connection drops after Redis ran a call whose caller has given up;
/// redis-rs sends the call again, past its deadline, so the second attempt
/// writes nothing and answers "late". The first attempt's consumption is
/// still found by its receipt, and taken back.
#[test]
fn a_call_sent_again_too_late_is_taken_back_by_its_receipt() {
    let Some((cluster, relay)) = cluster_behind_relay("cluster_resent_too_late") else {
        return;
    };
    runtime().block_on(async {
        let (store, client) = a_call_given_up_on(&cluster, &relay, "late").await;
        relay.cut();
        assert_taken_back(&cluster, &store, &client).await;
    });
}

/// A refund (here the give-back of an Envoy request another of whose
/// clients refused) whose connection drops after Redis ran it: the cluster
/// client would send it again, and the sliding log's undo, which takes the
/// call's units out of the log, would take out another request's units
/// logged at the same time. The copy answers from what the first run kept.
#[test]
fn a_refund_whose_connection_dropped_takes_back_once() {
    let Some((cluster, relay)) = cluster_behind_relay("cluster_refund_resent") else {
        return;
    };
    let first = &cluster.nodes()[0];
    runtime().block_on(async {
        let (store, plan, client, receipt) = a_give_back_ready(&cluster, "refund").await;
        relay.hold_replies();
        let given = {
            let store = store.clone();
            tokio::spawn(async move { Store::give_back(&store, receipt).await })
        };
        let ran = wait_until(500, || log_of(first, &store, &client).contains("1000:2:")).await;
        assert!(
            ran,
            "the refund never ran: {}",
            log_of(first, &store, &client)
        );
        relay.cut();
        let given = given.await.expect("task");
        assert_eq!(given.ok(), Some(GivenBack::Restored));
        assert_eq!(store.call_counts().refunds_failed, 0);
        assert_two_units_left(&store, &plan, &client).await;
    });
}

/// A refund sent after its client's slot moved to another master (a
/// resharding), while the store's map of slots still names the old one:
/// the old master answers MOVED, and the refund follows it to the new one.
#[test]
fn a_refund_follows_its_clients_slot_to_another_master() {
    let Some(cluster) = RedisCluster::spawn("cluster_refund_moved") else {
        return;
    };
    runtime().block_on(async {
        let (store, plan, client, receipt) = a_give_back_ready(&cluster, "moved").await;
        cluster.move_slot_of(&client, 1);
        let given = Store::give_back(&store, receipt).await;
        assert_eq!(given.as_ref().ok(), Some(&GivenBack::Restored), "{given:?}");
        let log = log_of(&cluster.nodes()[1], &store, &client);
        assert!(log.contains("1000:2:"), "taken back where it moved: {log}");
        assert_two_units_left(&store, &plan, &client).await;
    });
}

/// A store (keys under `prefix`, no batching) and its client of the first
/// master, which used 2 units of a sliding log of 5 a day at t = 1000, then
/// 1 more at the same millisecond in a call whose receipt is ready to be
/// given back. The refund script is loaded, as in a store that has run a
/// while (a first EVALSHA's NOSCRIPT would be held too).
async fn a_give_back_ready(
    cluster: &RedisCluster,
    prefix: &str,
) -> (RedisStore, Plan, String, tollgate::Receipt) {
    let first = &cluster.nodes()[0];
    let config = RedisStoreConfig {
        batch_max: 1,
        ..config(prefix, 1)
    };
    load_scripts(&first.url()).await;
    let (store, client) = connect(cluster, config).await;
    let policy = AnyPolicy::from_name("sliding-window", 5, 86_400_000).expect("policy");
    let plan = Plan::new("day", vec![Limit::new("1d", policy, false)]).expect("plan");
    store
        .decide(&plan, &client, 1_000, 2)
        .await
        .expect("decided");
    let taken = Store::check_returnable(&store, &plan, &client, 1_000, 1)
        .await
        .expect("decided");
    let receipt = taken.receipt.expect("consumed");
    let log = log_of(first, &store, &client);
    assert!(log.contains("1000:3:"), "three units at 1000: {log}");
    (store, plan, client, receipt)
}

/// `client`'s sliding log on `node`, `time:count:end` per element.
fn log_of(node: &RedisServer, store: &RedisStore, client: &str) -> String {
    let base = store.keys().seen_key(client).replace(":seen", ":");
    let keys = node.cli(&["KEYS", &format!("{base}*:v2")]);
    node.cli(&["LRANGE", keys.trim(), "0", "-1"])
}

/// Taken back once: the two units of the first request stay, 3 are left.
async fn assert_two_units_left(store: &RedisStore, plan: &Plan, client: &str) {
    let left = store.decide(plan, client, 1_000, 0).await.expect("decided");
    assert_eq!(left.limits[0].decision.remaining, 3);
}

/// Polls every 10 ms, for at most three times the response timeout.
const TRIES: u32 = (3 * RESPONSE_TIMEOUT.as_millis() / 10) as u32;

/// A store (keys under `prefix`, timeout 300 ms, no batching) and its
/// client of the first master, whose first call is answered, and whose
/// second runs in Redis but has its reply held by `relay`, and is given up
/// on by its caller at the timeout, as `GuardedStore` does (the call's
/// deadline has passed by then); its reply is still waited for.
async fn a_call_given_up_on(
    cluster: &RedisCluster,
    relay: &Relay,
    prefix: &str,
) -> (RedisStore, String) {
    let timeout = Duration::from_millis(300);
    let config = RedisStoreConfig {
        batch_max: 1,
        timeout,
        ..config(prefix, 1)
    };
    let (store, client) = connect(cluster, config).await;
    let plan = plan();
    let answer = store.decide(&plan, &client, 1_000, 1).await;
    let expected = PlanLimiter::new().check(&plan, &client, 1_000, 1);
    assert_eq!(answer.expect("decided"), expected);

    relay.hold_replies();
    let answer = tokio::time::timeout(timeout, store.decide(&plan, &client, 1_000, 1)).await;
    assert!(answer.is_err(), "no reply: {answer:?}");
    let first = &cluster.nodes()[0];
    assert!(has_receipt(first, &store, &client, 2), "the call ran");
    (store, client)
}

/// Waits until the store's one lost call, its second, is claimed, and
/// checks that it was taken back: its receipt is gone, and the client is as
/// the in-memory limiter leaves it after the first call alone.
async fn assert_taken_back(cluster: &RedisCluster, store: &RedisStore, client: &str) {
    let taken_back = wait_until(TRIES, || store.call_counts().refunded == 1).await;
    let counts = store.call_counts();
    assert!(taken_back, "never claimed: {counts:?}");
    assert_eq!(
        (
            counts.replies_lost,
            counts.refunds_stale,
            counts.refunds_failed
        ),
        (1, 0, 0),
        "{counts:?}"
    );
    let first = &cluster.nodes()[0];
    assert!(
        !has_receipt(first, store, client, 2),
        "the receipt is claimed"
    );
    let plan = plan();
    let reference = PlanLimiter::new();
    reference.check(&plan, client, 1_000, 1);
    let left = store.decide(&plan, client, 1_000, 0).await;
    assert_eq!(
        left.expect("decided"),
        reference.check(&plan, client, 1_000, 0)
    );
}

/// A master down: its clients' failed calls are lost calls whose claims
/// cannot run until it is back, and each holds back the drop of closed
/// receipts, but only for clients of its own group of slots: a client of
/// another master keeps one receipt, not one per call.
#[test]
fn a_master_down_holds_back_no_other_masters_receipts() {
    let options = tollgate_redis::testing::ClusterOptions::one_master_may_fail();
    let Some(mut cluster) = RedisCluster::spawn_with("cluster_master_down_receipts", &options)
    else {
        return;
    };
    runtime().block_on(async {
        let config = RedisStoreConfig {
            batch_max: 1,
            ..config("down", 1)
        };
        let (store, down) = connect(&cluster, config).await;
        // A client of the second master (slots 5461-10922), away from the
        // group of slots the first master's last slots share with it.
        let up = (0..)
            .map(|i| format!("u{i}"))
            .find(|c| {
                (5_472..10_923).contains(&slot_of(&cluster.nodes()[1], &store.keys().seen_key(c)))
            })
            .expect("a client");
        let plan = plan();
        store.decide(&plan, &down, 1_000, 1).await.expect("decided");

        cluster.nodes_mut()[0].kill();
        let failed = store.decide(&plan, &down, 1_000, 1).await;
        assert!(failed.is_err(), "its master is down: {failed:?}");
        assert_eq!(
            store.call_counts().replies_lost,
            1,
            "claimed once it is back"
        );

        for now in 1_000..1_010 {
            store.decide(&plan, &up, now, 1).await.expect("decided");
        }
        let receipts = store.keys().seen_key(&up).replace(":seen", ":receipts");
        let stored = cluster.nodes()[1].cli(&["GET", &receipts]);
        assert_eq!(stored.matches('|').count(), 1, "one receipt: {stored}");
    });
}

/// A store on `cluster`, and a client of the first master (slots 0-5460),
/// whose calls go through the relay.
async fn connect(cluster: &RedisCluster, config: RedisStoreConfig) -> (RedisStore, String) {
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let store = RedisStore::connect_cluster(&urls, config)
        .await
        .expect("connect");
    let first = &cluster.nodes()[0];
    let client = (0..)
        .map(|i| format!("c{i}"))
        .find(|c| slot_of(first, &store.keys().seen_key(c)) < 5_461)
        .expect("a client");
    (store, client)
}

/// Whether `node` holds the receipt of `store`'s call number `seq` (from 1)
/// for `client`: the call has run in Redis and consumed.
fn has_receipt(node: &RedisServer, store: &RedisStore, client: &str, seq: u64) -> bool {
    let receipts = store.keys().seen_key(client).replace(":seen", ":receipts");
    node.cli(&["GET", &receipts]).contains(&format!(":{seq},"))
}

fn slot_of(node: &RedisServer, key: &str) -> u16 {
    node.cli(&["CLUSTER", "KEYSLOT", key])
        .trim()
        .parse()
        .expect("a slot")
}
