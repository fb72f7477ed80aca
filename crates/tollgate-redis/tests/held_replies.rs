//! An abandoned call consumes nothing even when Redis ran it in time: the
//! replies are held on their way back (a loopback relay in front of a real
//! `redis-server`, [`Relay`]) while checks go through a [`GuardedStore`],
//! which answers them by its failure policy after its timeout. Once the
//! replies pass, the store takes back what those calls consumed
//! (`tollgate_redis::call::refund`), and every client's state must equal that of
//! the in-memory limiter given only the calls the store itself answered.
//!
//! The same when the replies never come: the connection drops while it
//! holds them ([`Relay::cut`]). The store then finds each call by the
//! receipt it left (`tollgate_redis::call::lost`) and takes back what it consumed.
//!
//! And never more than that: under the token bucket and GCRA, a refund
//! whose state another call changed meanwhile keeps the consumption (a
//! blind undo could over-admit); the sliding log takes its units out
//! exactly all the same.

use std::time::Duration;

use tollgate::FailurePolicy;
use tollgate::{
    AnyPolicy, DecidedBy, Limit, Plan, PlanDecision, PlanLimiter, Store, StoreError, POLICY_NAMES,
};
use tollgate_guard::{BreakerConfig, GuardedStore};
use tollgate_redis::testing::{counts_until, load_scripts, wait_until, RedisServer, Relay};
use tollgate_redis::{CallCounts, RedisStore, RedisStoreConfig, RESPONSE_TIMEOUT};

const TIMEOUT: Duration = Duration::from_millis(50);
const DAY_MS: u64 = 86_400_000;

/// Answered by the failure policy, not by the store: a decision it made,
/// or, under `unavailable`, the error it hands on.
fn not_by_the_store(answer: Result<PlanDecision, StoreError>) -> bool {
    answer.map_or(true, |decision| decision.decided_by != DecidedBy::Store)
}

fn plan(policy: &str) -> Plan {
    let policy = AnyPolicy::from_name(policy, 10, DAY_MS).expect("policy");
    Plan::new("held", vec![Limit::new("per-day", policy, false)]).expect("plan")
}

/// One thread, so that the four checks sent together form one batch (on
/// more threads the batch may leave with the first alone, and the others
/// then wait behind it and are never sent).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn config(prefix: String, batch_max: usize) -> RedisStoreConfig {
    RedisStoreConfig {
        prefix,
        timeout: TIMEOUT,
        batch_max,
        ..RedisStoreConfig::default()
    }
}

/// A store straight to `server`, on `prefix`'s keys, that sets up and reads
/// the state the held calls act on: its deadline is far above `TIMEOUT`,
/// because on a loaded machine a call can take longer than 50 ms, and only
/// the calls of the fault are meant to be given up on.
async fn direct(server: &RedisServer, prefix: String) -> RedisStore {
    let config = RedisStoreConfig {
        timeout: Duration::from_secs(2),
        ..config(prefix, 64)
    };
    RedisStore::connect(&server.url(), config)
        .await
        .expect("connect")
}

/// Each client's state under `plan` equals the reference's: peeks, and a
/// request, at several times.
async fn same_state(store: &RedisStore, reference: &PlanLimiter, plan: &Plan, what: &str) {
    for now in [3_000, DAY_MS / 2, DAY_MS + 1_001, DAY_MS + 5_000] {
        for client in ["a", "b", "never-seen"] {
            let got = store.decide(plan, client, now, 0).await.expect("peek");
            assert_eq!(
                got,
                reference.check(plan, client, now, 0),
                "{what}: {client} at {now}"
            );
        }
        let got = store.decide(plan, "a", now, 1).await.expect("request");
        assert_eq!(
            got,
            reference.check(plan, "a", now, 1),
            "{what}: a at {now}"
        );
    }
}

/// How the held replies end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// They pass, late: the store refunds the calls from their replies.
    Released,
    /// The connection drops with them: the store finds the calls by their
    /// receipts.
    Cut,
}

/// One policy under one failure policy, batched or not, through held
/// replies that end as `end` says.
async fn held_run(
    server: &RedisServer,
    policy: &str,
    failure: FailurePolicy,
    batch_max: usize,
    end: End,
) {
    let what = format!("{policy} / {failure:?} / batch_max {batch_max} / {end:?}");
    let prefix =
        format!("held-{policy}-{failure:?}-{batch_max}-{end:?}").replace([' ', '{', '}'], "");
    let relay = Relay::start(server.port());
    let redis = RedisStore::connect(&relay.url(), config(prefix.clone(), batch_max))
        .await
        .expect("connect");
    let raw = redis.clone();
    let direct = direct(server, prefix).await;
    // Every call of the fault must reach Redis, so no circuit breaker.
    let guard = GuardedStore::new(redis, TIMEOUT, failure).with_breaker(BreakerConfig {
        failures: 0,
        ..BreakerConfig::default()
    });
    let plan = plan(policy);
    let reference = PlanLimiter::new();
    for (client, now) in [("a", 1_000), ("b", 1_001), ("a", 1_002)] {
        let got = direct.decide(&plan, client, now, 1).await.expect("check");
        assert_eq!(got.decided_by, DecidedBy::Store, "{what}");
        assert_eq!(got, reference.check(&plan, client, now, 1), "{what}");
    }

    relay.hold_replies();
    let before = raw.call_counts();
    // Sent together (one batch when batching), then one by one: each is run
    // by Redis at once and would be allowed, but its reply is held.
    let answers = tokio::join!(
        guard.check(&plan, "a", 2_000, 1),
        guard.check(&plan, "a", 2_000, 3),
        guard.check(&plan, "b", 2_001, 2),
        guard.check(&plan, "a", 2_002, 1),
    );
    for (client, now, cost) in [("a", 2_010, 1), ("b", 2_011, 1)] {
        let answer = guard.check(&plan, client, now, cost).await;
        assert!(not_by_the_store(answer), "{what}");
    }
    for answer in [answers.0, answers.1, answers.2, answers.3] {
        assert!(not_by_the_store(answer), "{what}");
    }
    let sent = raw.call_counts().decisions - before.decisions;
    assert!(sent >= 4, "{what}: only {sent} calls reached Redis");
    match end {
        End::Released => relay.release_replies(),
        End::Cut => relay.cut(),
    }

    let counts = counts_until(&raw, |c| c.refunded - before.refunded >= sent).await;
    let what = format!("{what}: {sent} sent, {counts:?}");
    same_state(&direct, &reference, &plan, &what).await;
    assert_eq!(
        counts.refunded - before.refunded,
        sent,
        "{what}: {counts:?}"
    );
    assert_eq!(counts.refunds_stale, before.refunds_stale, "{what}");
    assert_eq!(counts.refunds_failed, before.refunds_failed, "{what}");
    let lost = match end {
        End::Released => 0,
        End::Cut => sent,
    };
    assert_eq!(counts.replies_lost - before.replies_lost, lost, "{what}");
}

fn every_policy(batch_max: usize, end: End, test: &str) {
    let Some(server) = RedisServer::spawn(test) else {
        return;
    };
    runtime().block_on(async {
        load_scripts(&server.url()).await;
        for policy in POLICY_NAMES {
            for failure in FailurePolicy::ALL {
                held_run(&server, policy, failure, batch_max, end).await;
            }
        }
    });
}

#[test]
fn calls_whose_replies_came_too_late_are_refunded_when_batched() {
    every_policy(
        64,
        End::Released,
        "calls_whose_replies_came_too_late_are_refunded_when_batched",
    );
}

#[test]
fn calls_whose_replies_were_lost_are_found_by_their_receipts_when_batched() {
    every_policy(64, End::Cut, "calls_whose_replies_were_lost_batched");
}

#[test]
fn calls_whose_replies_were_lost_are_found_by_their_receipts_when_sent_alone() {
    every_policy(1, End::Cut, "calls_whose_replies_were_lost_alone");
}

#[test]
fn calls_whose_replies_came_too_late_are_refunded_when_sent_alone() {
    every_policy(
        1,
        End::Released,
        "calls_whose_replies_came_too_late_are_refunded_when_sent_alone",
    );
}

/// A refund whose client was used meanwhile by a call the store answered:
/// the token bucket and GCRA keep the consumption (taking it back could
/// give back what the cap would have wasted), so the state is the
/// reference's with the abandoned call counted, never less; the sliding log
/// takes its units out all the same (a log has no cap: the state is the
/// reference's without the call, which then only recorded its time).
#[test]
fn a_refund_after_another_use_is_exact_for_the_log_and_kept_otherwise() {
    let Some(server) = RedisServer::spawn("a_refund_after_another_use") else {
        return;
    };
    runtime().block_on(async {
        load_scripts(&server.url()).await;
        for policy in POLICY_NAMES {
            let what = policy.to_string();
            let exact = *policy == "sliding-window";
            let prefix = format!("stale-{policy}");
            let relay = Relay::start(server.port());
            let held = RedisStore::connect(&relay.url(), config(prefix.clone(), 64))
                .await
                .expect("connect");
            let direct = direct(&server, prefix).await;
            let guard = GuardedStore::new(held.clone(), TIMEOUT, FailurePolicy::FailClosed);
            let plan = plan(policy);
            let reference = PlanLimiter::new();

            relay.hold_replies();
            let abandoned = guard.check(&plan, "a", 1_000, 4).await.expect("check");
            assert!(!abandoned.allowed, "{what}: fail-closed");
            // The abandoned call ran: counted, or (the log) as refused.
            reference.check(&plan, "a", 1_000, if exact { 0 } else { 4 });
            // Then another server's request, which the store answered: its
            // answer counted the abandoned call.
            let other = direct.decide(&plan, "a", 1_001, 1).await.expect("decide");
            assert!(other.allowed, "{what}");
            assert_eq!(other.limits[0].decision.remaining, 5, "{what}");
            reference.check(&plan, "a", 1_001, 1);
            relay.release_replies();

            let done = |c: &CallCounts| c.refunded + c.refunds_stale >= 1;
            let counts = counts_until(&held, done).await;
            assert_eq!(counts.refunded, u64::from(exact), "{what}: {counts:?}");
            assert_eq!(counts.refunds_stale, u64::from(!exact), "{what}");
            same_state(&direct, &reference, &plan, &what).await;
        }
    });
}

/// A reply held for longer than half a second (a SIGSTOP of seconds, a
/// blocking command) still comes back, and its call is refunded: the
/// connection waits for replies up to `RESPONSE_TIMEOUT`, where redis-rs's
/// default (500 ms) dropped them, leaving their calls counted.
#[test]
fn a_reply_held_for_a_second_is_refunded_too() {
    let Some(server) = RedisServer::spawn("a_reply_held_for_a_second_is_refunded_too") else {
        return;
    };
    runtime().block_on(async {
        let (relay, store, plan) = one_reply_held(&server, "long-hold", "gcra").await;
        // The fault's length: the relay holds the reply this long after the
        // check gave up.
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        relay.release_replies();
        let counts = counts_until(&store, |c| c.refunded >= 1).await;
        assert_eq!(counts.refunded, 1, "{counts:?}");
        assert_nothing_consumed(&store, &plan).await;
    });
}

/// A reply held past `RESPONSE_TIMEOUT` (a call stuck on a connection that
/// went silent) is given up on, so that the batch it rode in stops holding
/// the queue, and its call is taken back by its receipt; the reply, when it
/// finally comes, takes nothing back a second time.
#[test]
fn a_reply_held_past_the_response_timeout_is_given_up_on_and_claimed() {
    let Some(server) = RedisServer::spawn("a_reply_held_past_the_response_timeout") else {
        return;
    };
    runtime().block_on(async {
        let (relay, store, plan) = one_reply_held(&server, "stuck", "sliding-window").await;
        // Polled every 10 ms, for at most three times the response timeout.
        let tries = u32::try_from(3 * RESPONSE_TIMEOUT.as_millis() / 10).expect("small");
        let lost = wait_until(tries, || store.call_counts().replies_lost == 1).await;
        assert!(lost, "never given up on: {:?}", store.call_counts());
        relay.release_replies();
        let counts = counts_until(&store, |c| c.refunded >= 1).await;
        assert_eq!(
            (counts.refunded, counts.refunds_stale, counts.refunds_failed),
            (1, 0, 0),
            "{counts:?}"
        );
        assert_nothing_consumed(&store, &plan).await;
    });
}

/// A store on `server` through a relay of its own (keys under `prefix`,
/// batches of up to 64) whose relay holds the reply of one check of client
/// "a", cost 4, under `policy`'s plan: the check, given up on at `TIMEOUT`,
/// is answered by the failure policy. The relay still holds the reply.
async fn one_reply_held(
    server: &RedisServer,
    prefix: &str,
    policy: &str,
) -> (Relay, RedisStore, Plan) {
    load_scripts(&server.url()).await;
    let relay = Relay::start(server.port());
    let store = RedisStore::connect(&relay.url(), config(prefix.into(), 64))
        .await
        .expect("connect");
    let guard = GuardedStore::new(store.clone(), TIMEOUT, FailurePolicy::FailClosed);
    let plan = plan(policy);
    relay.hold_replies();
    let answer = guard.check(&plan, "a", 1_000, 4).await.expect("check");
    assert_ne!(answer.decided_by, DecidedBy::Store);
    (relay, store, plan)
}

/// Client "a" has its whole limit (10): the held check took nothing.
async fn assert_nothing_consumed(store: &RedisStore, plan: &Plan) {
    let peek = store.decide(plan, "a", 1_001, 0).await.expect("peek");
    assert_eq!(peek.limits[0].decision.remaining, 10, "nothing consumed");
}

/// `RedisStore::settle`, which a front end awaits before it exits: not
/// settled while a reply is held, and once it came, settled only after the
/// refund it needs was sent (so nothing is left to count).
#[test]
fn a_store_settles_once_its_held_replies_came_and_their_refunds_were_sent() {
    let Some(server) = RedisServer::spawn("a_store_settles_once_its_held_replies_came") else {
        return;
    };
    runtime().block_on(async {
        load_scripts(&server.url()).await;
        let relay = Relay::start(server.port());
        let redis = RedisStore::connect(&relay.url(), config("settle".into(), 1))
            .await
            .expect("connect");
        let guard = GuardedStore::new(redis.clone(), TIMEOUT, FailurePolicy::FailClosed);
        let plan = plan("gcra");
        let idle = redis.settle(Duration::from_millis(100)).await;
        assert!(idle.is_ok(), "idle: {idle:?}");

        relay.hold_replies();
        let answer = guard.check(&plan, "a", 1_000, 2).await;
        assert!(not_by_the_store(answer));
        let held = redis.settle(Duration::from_millis(100)).await;
        let message = held
            .expect_err("settled while a reply was held")
            .to_string();
        assert!(message.starts_with("1 calls still waited"), "{message}");
        relay.release_replies();
        let settled = redis.settle(Duration::from_secs(5)).await;
        assert!(settled.is_ok(), "never settled: {settled:?}");
        assert_eq!(redis.call_counts().refunded, 1);
    });
}
