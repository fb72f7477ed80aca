//! A refund whose connection drops is sent again, and takes back once.
//!
//! A call whose reply came after its caller gave up is refunded
//! (`tollgate_redis::call::refund`). The refund itself can lose its connection:
//! on the way in, before Redis saw it (the consumption would stay, though
//! the request was abandoned), or on the way back, after Redis ran it. The
//! store cannot tell which, so it sends the refund again on a new
//! connection; each refund carries an id that `refund.lua` records with its
//! answer, so a refund Redis already ran answers from that record and takes
//! nothing back twice (the sliding log's undo, run twice, would take out
//! another request's units logged at the same time, and over-admit).
//!
//! The same when Redis cannot be reached for a while (it restarts), or
//! refuses writes for a while (too few replicas in sync): the refund is
//! sent again, every 100 ms, for up to a minute.
//!
//! A burst of refunds of many clients, or of claims of their lost calls,
//! goes at most 64 clients at a time.
//!
//! One `redis-server` of the test's own, behind a [`Relay`] that holds the
//! refund's request or its reply and then cuts the connection.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{AnyPolicy, DecidedBy, FailurePolicy, Limit, Plan, Store};
use tollgate_guard::GuardedStore;
use tollgate_redis::testing::{
    counts_until, current_thread_runtime, load_scripts, wait_until, RedisServer, Relay,
};
use tollgate_redis::{RedisStore, RedisStoreConfig, RESPONSE_TIMEOUT};

const TIMEOUT: Duration = Duration::from_millis(50);

/// Ten units a day, in a sliding log: the policy whose undo is not a
/// compare and restore.
fn plan() -> Plan {
    let policy = AnyPolicy::from_name("sliding-window", 10, 86_400_000).expect("policy");
    Plan::new("day", vec![Limit::new("1d", policy, false)]).expect("plan")
}

/// A store on `server` through a relay of its own (keys under `prefix`, no
/// batching), whose client "a" used 4 units at t = 1000 in a call the store
/// answered, then 2 more at the same millisecond in a check given up on at
/// `TIMEOUT` (answered by the failure policy) whose reply the relay holds.
async fn a_late_reply(server: &RedisServer, prefix: &str) -> (Relay, RedisStore, Plan) {
    let (relay, store) = behind_a_relay(server, prefix, 1).await;
    let plan = plan();
    store.decide(&plan, "a", 1_000, 4).await.expect("decided");
    let guard = GuardedStore::new(store.clone(), TIMEOUT, FailurePolicy::FailClosed);
    relay.hold_replies();
    let answer = guard.check(&plan, "a", 1_000, 2).await.expect("check");
    assert_ne!(answer.decided_by, DecidedBy::Store);
    (relay, store, plan)
}

/// A store on `server` through a relay of its own (keys under `prefix`,
/// timeout `TIMEOUT`, batches of up to `batch_max`), the scripts loaded (a
/// first call's NOSCRIPT would be held too).
async fn behind_a_relay(
    server: &RedisServer,
    prefix: &str,
    batch_max: usize,
) -> (Relay, RedisStore) {
    load_scripts(&server.url()).await;
    let relay = Relay::start(server.port());
    let config = RedisStoreConfig {
        prefix: prefix.into(),
        timeout: TIMEOUT,
        batch_max,
        ..RedisStoreConfig::default()
    };
    let store = RedisStore::connect(&relay.url(), config)
        .await
        .expect("connect");
    (relay, store)
}

/// The late reply passes, and the refund it causes waits in the relay on
/// its way in.
async fn refund_held_on_its_way_in(relay: &Relay, store: &RedisStore) {
    relay.hold_requests();
    relay.release_replies();
    let held = wait_until(500, || relay.requests_waiting() >= 1).await;
    assert!(held, "the refund was never sent: {:?}", store.call_counts());
}

/// Client "a"'s log, as Redis holds it: `time:count:end` per element.
fn log_of_a(server: &RedisServer, store: &RedisStore) -> String {
    let base = store.keys().seen_key("a").replace(":seen", ":");
    let keys = server.cli(&["KEYS", &format!("{base}*:v2")]);
    server.cli(&["LRANGE", keys.trim(), "0", "-1"])
}

/// The refund was restored once, nothing failed, and "a" has the 6 units
/// its answered call left it, no more and no fewer.
async fn assert_taken_back_once(store: &RedisStore, plan: &Plan, log: &str) {
    let counts = counts_until(store, |c| c.refunded + c.refunds_failed >= 1).await;
    let ended = (counts.refunded, counts.refunds_stale, counts.refunds_failed);
    assert_eq!(ended, (1, 0, 0), "{counts:?}");
    assert_eq!(counts.refunds_pending, 0, "{counts:?}");
    let peek = store.decide(plan, "a", 1_001, 0).await.expect("peek");
    assert_eq!(peek.limits[0].decision.remaining, 6, "log {log}");
}

#[test]
fn a_refund_lost_on_its_way_in_is_sent_again() {
    let Some(server) = RedisServer::spawn("a_refund_lost_on_its_way_in") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let (relay, store, plan) = a_late_reply(&server, "refund-in").await;
        refund_held_on_its_way_in(&relay, &store).await;
        assert!(log_of_a(&server, &store).contains("1000:6:"), "not run yet");
        relay.cut();
        assert_taken_back_once(&store, &plan, &log_of_a(&server, &store)).await;
    });
}

#[test]
fn a_refund_whose_reply_was_lost_is_sent_again_and_takes_back_once() {
    let Some(server) = RedisServer::spawn("a_refund_whose_reply_was_lost") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let (relay, store, plan) = a_late_reply(&server, "refund-out").await;
        refund_held_on_its_way_in(&relay, &store).await;
        relay.hold_replies();
        relay.release_requests();
        let refunded_in_redis =
            wait_until(500, || log_of_a(&server, &store).contains("1000:4:")).await;
        assert!(refunded_in_redis, "log {}", log_of_a(&server, &store));
        relay.cut();
        assert_taken_back_once(&store, &plan, &log_of_a(&server, &store)).await;
    });
}

/// Redis is killed while the refund is on its way, and restarts (with its
/// data: an append-only file written on every command) 300 ms later: the
/// refund, refused meanwhile, is sent again once Redis is back.
#[test]
fn a_refund_that_meets_redis_restarting_is_sent_once_it_is_back() {
    let persistent = ["--appendonly", "yes", "--appendfsync", "always"];
    let Some(mut server) =
        RedisServer::spawn_with("a_refund_that_meets_redis_restarting", &persistent)
    else {
        return;
    };
    current_thread_runtime().block_on(async {
        let (relay, store, plan) = a_late_reply(&server, "refund-restart").await;
        refund_held_on_its_way_in(&relay, &store).await;
        server.kill();
        relay.cut();
        // Refused, and sent again, for a while.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let counts = store.call_counts();
        assert_eq!((counts.refunds_failed, counts.refunds_pending), (0, 1));
        server.restart();
        assert_taken_back_once(&store, &plan, &log_of_a(&server, &store)).await;
    });
}

/// Redis refuses the refund's writes for a while (`min-replicas-to-write`
/// with no replica in sync: `NOREPLICAS`, at the script's first write): the
/// refund is sent again until a replica is in sync, and then takes back.
#[test]
fn a_refund_that_meets_too_few_replicas_is_sent_once_one_is_in_sync() {
    let Some(server) = RedisServer::spawn("a_refund_that_meets_too_few_replicas") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let (relay, store, plan) = a_late_reply(&server, "refund-noreplicas").await;
        refund_held_on_its_way_in(&relay, &store).await;
        for (name, value) in [
            ("min-replicas-to-write", "1"),
            ("repl-diskless-sync-delay", "0"),
        ] {
            assert_eq!(server.cli(&["CONFIG", "SET", name, value]).trim(), "OK");
        }
        relay.release_requests();
        // Refused, and sent again (so the store has had the refusal).
        let refused_twice = wait_until(500, || noreplicas_answered(&server) >= 2).await;
        assert!(
            refused_twice,
            "NOREPLICAS answered {} times",
            noreplicas_answered(&server)
        );
        let counts = store.call_counts();
        assert_eq!((counts.refunds_failed, counts.refunds_pending), (0, 1));
        assert!(
            log_of_a(&server, &store).contains("1000:6:"),
            "not taken back yet"
        );

        let port = server.port().to_string();
        let replica = RedisServer::spawn_with(
            "a_refund_that_meets_too_few_replicas",
            &["--replicaof", "127.0.0.1", &port],
        );
        let _replica = replica.expect("replica");
        assert_taken_back_once(&store, &plan, &log_of_a(&server, &store)).await;
    });
}

/// The replies of one batch of checks of 100 clients, held past the checks'
/// timeout and then released together: more clients' refunds than the
/// store sends at once (64, so that a burst of refunds queues no more than
/// a batch's worth of calls ahead of the decisions), every one taken back.
#[test]
fn a_burst_of_late_replies_of_many_clients_is_taken_back_in_full() {
    let Some(server) = RedisServer::spawn("a_burst_of_late_replies") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let (relay, store, plan) = a_batch_of_100_clients_held(&server, "burst").await;
        // The refunds' requests are held too: none is answered, so no more
        // than 64 clients' go (watched for 300 ms after the 64th).
        relay.hold_requests();
        relay.release_replies();
        assert_64_sent_and_no_more(&relay).await;
        relay.release_requests();
        assert_all_100_taken_back(&store, &plan).await;
    });
}

/// The same batch, whose replies never come within the connection's
/// `RESPONSE_TIMEOUT` (5 s): its 100 calls are lost, and claimed by their
/// receipts, one claim per client, no more than 64 on their way at once.
#[test]
fn a_burst_of_lost_replies_of_many_clients_is_claimed_64_at_a_time() {
    let Some(server) = RedisServer::spawn("a_burst_of_lost_replies") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let (relay, store, plan) = a_batch_of_100_clients_held(&server, "lost-burst").await;
        relay.hold_requests();
        // Polled every 10 ms, for at most twice the response timeout.
        let tries = u32::try_from(2 * RESPONSE_TIMEOUT.as_millis() / 10).expect("small");
        let lost = wait_until(tries, || store.call_counts().replies_lost == 100).await;
        assert!(lost, "never given up on: {:?}", store.call_counts());
        assert_64_sent_and_no_more(&relay).await;
        relay.release_requests();
        relay.release_replies();
        assert_all_100_taken_back(&store, &plan).await;
    });
}

/// A store behind a relay whose client `c0` to `c99` each had a check of 2
/// units, all in one batch, given up on at `TIMEOUT` (answered by the
/// failure policy) while the relay holds the batch's reply.
async fn a_batch_of_100_clients_held(
    server: &RedisServer,
    prefix: &str,
) -> (Relay, RedisStore, Arc<Plan>) {
    let (relay, store) = behind_a_relay(server, prefix, 128).await;
    let guard = Arc::new(GuardedStore::new(
        store.clone(),
        TIMEOUT,
        FailurePolicy::FailClosed,
    ));
    let plan = Arc::new(plan());
    relay.hold_replies();
    let checks: Vec<_> = (0..100)
        .map(|i| {
            let (guard, plan) = (guard.clone(), plan.clone());
            tokio::spawn(async move { guard.check(&plan, &format!("c{i}"), 1_000, 2).await })
        })
        .collect();
    for check in checks {
        let answer = check.await.expect("task").expect("check");
        assert_ne!(answer.decided_by, DecidedBy::Store);
    }
    assert_eq!(store.call_counts().calls, 1, "one batch");
    (relay, store, plan)
}

/// With requests held (and none answered), 64 scripts are sent and no
/// 65th, watched for 300 ms after the 64th.
async fn assert_64_sent_and_no_more(relay: &Relay) {
    let sent = || count_of(b"EVALSHA", &relay.requests_held());
    assert!(wait_until(500, || sent() >= 64).await, "{} sent", sent());
    let more = wait_until(30, || sent() > 64).await;
    assert!(!more, "{} sent at once", sent());
}

/// All 100 calls are taken back, each once, and every client has its whole
/// limit.
async fn assert_all_100_taken_back(store: &RedisStore, plan: &Plan) {
    let counts = counts_until(store, |c| c.refunded >= 100).await;
    let ended = (counts.refunded, counts.refunds_stale, counts.refunds_failed);
    assert_eq!(ended, (100, 0, 0), "{counts:?}");
    assert_eq!(counts.refunds_pending, 0, "{counts:?}");
    for i in 0..100 {
        let peek = store.decide(plan, &format!("c{i}"), 1_001, 0).await;
        assert_eq!(peek.expect("peek").limits[0].decision.remaining, 10, "c{i}");
    }
}

/// How many times `server` answered `NOREPLICAS`.
fn noreplicas_answered(server: &RedisServer) -> u64 {
    let stats = server.cli(&["INFO", "errorstats"]);
    let count = stats
        .lines()
        .find_map(|line| line.strip_prefix("errorstat_NOREPLICAS:count="));
    count.map_or(0, |n| n.trim().parse().unwrap_or(0))
}

/// How many times `part` occurs in `text`.
fn count_of(part: &[u8], text: &[u8]) -> usize {
    text.windows(part.len()).filter(|w| *w == part).count()
}
