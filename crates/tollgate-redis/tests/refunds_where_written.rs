//! A refund takes back only where its call's write is, and its call's
//! receipt is kept until it has.
//!
//! A call whose reply came after its caller gave up is refunded
//! (`tollgate_redis::call::refund`); so is one that too few replicas
//! acknowledged (`replicas_to_ack`). On a Redis Cluster, a failover can
//! send that refund to a new master that never received the call's write
//! (a replica promoted before the write reached it, while the old master
//! went on deciding): the sliding log's undo, which takes the call's units
//! out of whatever is logged at the call's millisecond, took out units of
//! other, answered requests there (an audit's forced failovers under load:
//! one or two uses fewer held than answered allowed, in 3 runs of 3). A
//! refund now runs only where its call's receipt is, which the call's
//! write carries (`refund.lua`).
//!
//! Here without a failover: one `redis-server` of the test's own, behind a
//! [`Relay`] that holds the late reply, whose keys are put back before the
//! refund as a replica that never received the call holds them.
//!
//! And the receipt must still be there for the refund of every call that
//! did run: later calls of the store drop the receipts of its calls that
//! are no longer open (`decide.lua`), so a call's receipt stays open until
//! its refund has ended, even when the store's other calls for the client
//! run between the late reply and its refund. A refund marks what it took
//! back in the receipt, so that a claim of the same call (`claim.lua`)
//! takes nothing twice.

use std::time::Duration;

use redis::Script;
use tollgate::{AnyPolicy, DecidedBy, FailurePolicy, Limit, Plan, Store};
use tollgate_guard::GuardedStore;
use tollgate_redis::testing::{
    counts_until, current_thread_runtime, load_scripts, wait_until, RedisServer, Relay,
};
use tollgate_redis::{scripts, CallCounts, RedisStore, RedisStoreConfig};

const TIMEOUT: Duration = Duration::from_millis(50);

/// Ten units a day, in a sliding log: the policy whose undo takes units
/// out of whatever is logged at the call's time.
fn plan() -> Plan {
    let policy = AnyPolicy::from_name("sliding-window", 10, 86_400_000).expect("policy");
    Plan::new("day", vec![Limit::new("1d", policy, false)]).expect("plan")
}

/// A store on `server` through a relay of its own (keys under `prefix`, no
/// batching, timeout `TIMEOUT`), the scripts loaded (a first call's
/// NOSCRIPT would be held too), whose client "a" used 4 units at t = 1000
/// in a call the store answered.
async fn a_used_four(server: &RedisServer, prefix: &str) -> (Relay, RedisStore, Plan) {
    load_scripts(&server.url()).await;
    let relay = Relay::start(server.port());
    let config = RedisStoreConfig {
        prefix: prefix.into(),
        timeout: TIMEOUT,
        batch_max: 1,
        ..RedisStoreConfig::default()
    };
    let store = RedisStore::connect(&relay.url(), config)
        .await
        .expect("connect");
    let plan = plan();
    let used = store.decide(&plan, "a", 1_000, 4).await.expect("decided");
    assert!(used.allowed);
    (relay, store, plan)
}

/// Then 2 more units of "a" at the same millisecond, in a check given up
/// on at `TIMEOUT` (answered by the failure policy) whose reply the relay
/// holds, once Redis has run it.
async fn two_more_held(relay: &Relay, store: &RedisStore, server: &RedisServer, plan: &Plan) {
    let guard = GuardedStore::new(store.clone(), TIMEOUT, FailurePolicy::FailClosed);
    relay.hold_replies();
    let answer = guard.check(plan, "a", 1_000, 2).await.expect("check");
    assert_ne!(answer.decided_by, DecidedBy::Store);
    let ran = wait_until(100, || log_of_a(server, store).contains("1000:6:")).await;
    assert!(ran, "log {}", log_of_a(server, store));
}

/// The key of "a"'s log.
fn log_key(server: &RedisServer, store: &RedisStore) -> String {
    let base = store.keys().seen_key("a").replace(":seen", ":");
    server
        .cli(&["KEYS", &format!("{base}*:v2")])
        .trim()
        .to_owned()
}

/// Client "a"'s log, as Redis holds it: `time:count:end` per element.
fn log_of_a(server: &RedisServer, store: &RedisStore) -> String {
    server.cli(&["LRANGE", &log_key(server, store), "0", "-1"])
}

/// Client "a"'s receipts, as Redis holds them.
fn receipts_of_a(server: &RedisServer, store: &RedisStore) -> String {
    let key = store.keys().seen_key("a").replace(":seen", ":receipts");
    server.cli(&["GET", &key]).trim().to_owned()
}

/// How the store's refunds have ended: restored, stale (kept), failed,
/// once one has.
async fn refund_ended(store: &RedisStore) -> (u64, u64, u64, CallCounts) {
    let done = |c: &CallCounts| c.refunded + c.refunds_stale + c.refunds_failed >= 1;
    let c = counts_until(store, done).await;
    (c.refunded, c.refunds_stale, c.refunds_failed, c)
}

/// What "a" has left at 1001.
async fn remaining_of_a(store: &RedisStore, plan: &Plan) -> u32 {
    let peek = store.decide(plan, "a", 1_001, 0).await.expect("peek");
    peek.limits[0].decision.remaining
}

/// The late call ran on Redis, but before its reply passes, Redis's keys
/// become what they were before it (as a replica promoted before the
/// call's write reached it holds them): the 4 units the store answered at
/// the same millisecond, and no receipt of the call. Its refund must take
/// nothing there: on the old script it took 2 of those 4 units out (the log
/// held 2, so 8 more were allowed against 10 a day with 4 answered).
#[test]
fn a_refund_where_its_call_never_ran_takes_nothing() {
    let Some(server) = RedisServer::spawn("a_refund_where_its_call_never_ran") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let (relay, store, plan) = a_used_four(&server, "never-ran").await;
        let log_before = log_of_a(&server, &store);
        let receipts_before = receipts_of_a(&server, &store);
        assert_eq!(log_before.trim(), "1000:4:4");
        two_more_held(&relay, &store, &server, &plan).await;

        let receipts = store.keys().seen_key("a").replace(":seen", ":receipts");
        let log = log_key(&server, &store);
        let set_back = [
            server.cli(&["LSET", &log, "-1", log_before.trim()]),
            server.cli(&["SET", &receipts, &receipts_before, "KEEPTTL"]),
        ];
        assert!(set_back.iter().all(|ok| ok.trim() == "OK"), "{set_back:?}");
        relay.release_replies();

        let (restored, stale, failed, counts) = refund_ended(&store).await;
        assert_eq!(log_of_a(&server, &store), log_before, "untouched");
        assert_eq!((restored, stale, failed), (0, 1, 0), "{counts:?}");
        assert_eq!(receipts_of_a(&server, &store), receipts_before);
        assert_eq!(remaining_of_a(&store, &plan).await, 6);
    });
}

/// The late reply passes, and the refund it causes is held in the relay
/// on its way in; the relay's connection is then cut, so the refund never
/// reached Redis and is sent again (at most 100 ms later). Meanwhile the
/// store's own calls for "a" run, each of which drops the receipts of the
/// store's calls it finds closed: the late call's receipt must stay, so
/// that its refund still takes its 2 units back.
#[test]
fn a_late_refund_after_other_calls_of_its_store_still_takes_back() {
    let Some(server) = RedisServer::spawn("a_late_refund_after_other_calls") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let (relay, store, plan) = a_used_four(&server, "after-others").await;
        two_more_held(&relay, &store, &server, &plan).await;
        relay.hold_requests();
        relay.release_replies();
        let held = wait_until(500, || relay.requests_waiting() >= 1).await;
        assert!(held, "the refund was never sent: {:?}", store.call_counts());
        relay.cut();

        // A look first, until the store has its new connection (a look
        // leaves no receipt, and is never looked up as lost).
        let mut looked = false;
        for _ in 0..20 {
            looked = store.decide(&plan, "a", 1_001, 0).await.is_ok();
            if looked {
                break;
            }
        }
        assert!(looked, "no new connection");
        for remaining in [3, 2] {
            let used = store.decide(&plan, "a", 1_001, 1).await.expect("use");
            assert!(used.allowed);
            assert_eq!(used.limits[0].decision.remaining, remaining);
        }
        let counts = store.call_counts();
        let not_yet = (counts.refunded, counts.refunds_pending, counts.replies_lost);
        assert_eq!(
            not_yet,
            (0, 1, 0),
            "the refund is still to come: {counts:?}"
        );

        let (restored, stale, failed, counts) = refund_ended(&store).await;
        assert_eq!((restored, stale, failed), (1, 0, 0), "{counts:?}");
        assert_eq!(
            remaining_of_a(&store, &plan).await,
            4,
            "10 - 4 - 2 answered"
        );
    });
}

/// The scripts called raw, as `tollgate_redis::scripts` lays out their
/// KEYS and ARGV: two calls of client "r" at the same millisecond under a
/// sliding log of 10 a day, of 4 and 2 units; the second is refunded, then
/// claimed (as if its reply had been lost too). The claim finds its receipt
/// marked taken back and takes nothing: the log keeps the first call's 4
/// units (a second undo would have taken 2 of them out).
#[test]
fn a_call_refunded_is_not_taken_back_again_by_a_claim() {
    let Some(server) = RedisServer::spawn("a_call_refunded_is_not_claimed") else {
        return;
    };
    let (seen, state, receipts) = ("w:{c:r}:seen", "w:{c:r}:1", "w:{c:r}:receipts");
    current_thread_runtime().block_on(async {
        let client = redis::Client::open(server.url()).expect("client");
        let mut c = client
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let plan = Script::new(scripts::PLAN);
        let decide = |cost: u32, id: &'static str| {
            let mut call = plan.key(seen);
            call.key(state).key(receipts);
            call.arg(1_000).arg(cost).arg(0).arg(u64::MAX >> 11);
            call.arg("s").arg(10).arg(86_400_000).arg(0).arg(id).arg(1);
            call
        };
        let _: Vec<i64> = decide(4, "b:1").invoke_async(&mut c).await.expect("use");
        let reply: Vec<i64> = decide(2, "b:2").invoke_async(&mut c).await.expect("use");
        let (undo1, undo2) = (reply[7], reply[8]);
        let log = || server.cli(&["LRANGE", state, "0", "-1"]);
        assert_eq!(log().trim(), "1000:6:6");

        let refund = Script::new(scripts::REFUND);
        let mut call = refund.key(state);
        call.key("w:{c:r}:refund:b:3").key(receipts);
        call.arg(1_000).arg(2).arg("b:2");
        call.arg("s")
            .arg(10)
            .arg(86_400_000)
            .arg(undo1)
            .arg(undo2)
            .arg(1);
        let restored: Vec<i64> = call.invoke_async(&mut c).await.expect("refund");
        assert_eq!(restored, [1]);
        assert_eq!(log().trim(), "1000:4:4");
        let marked = server.cli(&["GET", receipts]);
        assert!(marked.contains("|b:2,1000,x,x"), "{marked}");

        let claim = Script::new(scripts::CLAIM);
        let mut call = claim.key(seen);
        call.key(receipts).key(state);
        call.arg(1)
            .arg(1)
            .arg(seen)
            .arg(state)
            .arg("b:2")
            .arg(0)
            .arg(2);
        call.arg("s").arg(10).arg(86_400_000);
        let claimed: Vec<Vec<i64>> = call.invoke_async(&mut c).await.expect("claim");
        assert_eq!(claimed, [vec![1, 1]], "found, nothing left to take back");
        assert_eq!(log().trim(), "1000:4:4", "the first call's units stay");
    });
}
