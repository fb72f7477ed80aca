//! Fault tests, each on its own `redis-server`: a killed and restarted
//! Redis under each failure policy, SCRIPT FLUSH, a paused Redis past the
//! timeout. No sleep stands in for a clock: decision times are passed in,
//! and the only waits are bounded polls for Redis to come back.

use std::time::Duration;

use tollgate::{AnyPolicy, DecidedBy, FailurePolicy, Limit, Plan, PlanDecision, Store};
use tollgate_guard::GuardedStore;
use tollgate_redis::testing::{runtime, RedisServer};
use tollgate_redis::{RedisStore, RedisStoreConfig, RedisStoreError};

fn plan(policy: &str, limit: u32, window: u64) -> Plan {
    let policy = AnyPolicy::from_name(policy, limit, window).expect("policy");
    Plan::new("faults", vec![Limit::new("l", policy, false)]).expect("plan")
}

async fn guarded(server: &RedisServer, policy: FailurePolicy) -> GuardedStore<RedisStore> {
    let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
        .await
        .expect("connect");
    GuardedStore::new(store, Duration::from_millis(300), policy)
}

/// Calls (with `cost`) until the store itself answers again (bounded: about 10 s).
async fn until_store_answers(
    store: &GuardedStore<RedisStore>,
    plan: &Plan,
    client: &str,
    now: u64,
    cost: u32,
) -> PlanDecision {
    for _ in 0..100 {
        let decision = store
            .check(plan, client, now, cost)
            .await
            .expect("guarded call");
        if decision.decided_by == DecidedBy::Store {
            return decision;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the store did not recover");
}

/// Kills Redis mid-run, checks the failure policy's answers, restarts Redis
/// on the same port and checks the same store object decides again.
fn kill_and_restart(policy: FailurePolicy, test: &str) {
    let Some(mut server) = RedisServer::spawn(test) else {
        return;
    };
    runtime().block_on(async {
        let store = std::sync::Arc::new(guarded(&server, policy).await);
        let plan = plan("sliding-window", 2, 1_000);
        let before = store.check(&plan, "c", 0, 1).await.expect("call");
        assert_eq!(before.decided_by, DecidedBy::Store);
        assert!(before.allowed);

        // Other callers are mid-flight when Redis dies: every call still
        // returns a decision (no error, no panic, no hang).
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let busy: Vec<_> = (0..4)
            .map(|i| {
                let (store, stop) = (store.clone(), stop.clone());
                let plan = std::sync::Arc::new(self::plan("gcra", 1_000, 1_000));
                tokio::spawn(async move {
                    let mut calls = 0u32;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) && calls < 2_000 {
                        let client = format!("busy-{i}");
                        store.check(&plan, &client, 0, 1).await.expect("a decision");
                        calls += 1;
                    }
                    calls
                })
            })
            .collect();
        while store.counts().store < 50 {
            tokio::task::yield_now().await;
        }
        server.kill();
        let mut answers = Vec::new();
        for now in [10, 20, 30] {
            answers.push(
                store
                    .check(&plan, "c", now, 1)
                    .await
                    .expect("never an error"),
            );
        }
        match policy {
            FailurePolicy::FailOpen => {
                for a in &answers {
                    assert_eq!(a.decided_by, DecidedBy::Failure(FailurePolicy::FailOpen));
                    assert!(a.allowed);
                }
            }
            FailurePolicy::FailClosed => {
                for a in &answers {
                    assert_eq!(a.decided_by, DecidedBy::Failure(FailurePolicy::FailClosed));
                    assert!(!a.allowed);
                    assert_eq!(a.retry_after_ms, Some(1_000));
                }
            }
            FailurePolicy::Unavailable => unreachable!("answers with errors"),
            FailurePolicy::LocalFallback => {
                // A fresh local limiter: two allowed, then rejected.
                assert!(answers
                    .iter()
                    .all(|a| a.decided_by == DecidedBy::Failure(FailurePolicy::LocalFallback)));
                let allowed: Vec<bool> = answers.iter().map(|a| a.allowed).collect();
                assert_eq!(allowed, [true, true, false]);
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for task in busy {
            task.await.expect("no panic");
        }
        let counts = store.counts();
        assert!(counts.transient_errors + counts.timeouts >= 3);
        // Every failure, and every call the open circuit answered without
        // Redis, got the policy's answer.
        assert_eq!(
            counts.fail_open + counts.fail_closed + counts.local_fallback,
            counts.transient_errors + counts.timeouts + counts.short_circuited
        );

        server.restart();
        // Redis came back empty: the client starts afresh, on the same store object.
        let after = until_store_answers(&store, &plan, "c", 5_000, 1).await;
        assert!(after.allowed);
        assert_eq!(after.limits[0].decision.remaining, 1);
        let next = store.check(&plan, "c", 5_001, 1).await.expect("call");
        assert_eq!(next.decided_by, DecidedBy::Store);
        assert_eq!(next.limits[0].decision.remaining, 0);
    });
}

#[test]
fn killed_redis_fail_open() {
    kill_and_restart(FailurePolicy::FailOpen, "killed_redis_fail_open");
}

#[test]
fn killed_redis_fail_closed() {
    kill_and_restart(FailurePolicy::FailClosed, "killed_redis_fail_closed");
}

#[test]
fn killed_redis_local_fallback() {
    kill_and_restart(FailurePolicy::LocalFallback, "killed_redis_local_fallback");
}

#[test]
fn a_store_started_while_redis_is_down_uses_it_once_up() {
    let Some(mut server) =
        RedisServer::spawn("a_store_started_while_redis_is_down_uses_it_once_up")
    else {
        return;
    };
    server.kill();
    runtime().block_on(async {
        let redis = RedisStore::connect_lazy(&server.url(), RedisStoreConfig::default())
            .expect("a lazy store needs no Redis yet");
        let store = GuardedStore::new(redis, Duration::from_millis(300), FailurePolicy::FailOpen);
        let plan = plan("token-bucket", 2, 1_000);
        let down = store.check(&plan, "c", 0, 1).await.expect("guarded call");
        assert_eq!(down.decided_by, DecidedBy::Failure(FailurePolicy::FailOpen));
        server.restart();
        let up = until_store_answers(&store, &plan, "c", 0, 1).await;
        assert_eq!(up.limits[0].decision.remaining, 1);
    });
}

/// The breaker's probe after an outage is one call: it must reach Redis.
/// A store made while Redis was down has no measure of Redis's clock yet,
/// so its first call after Redis is back reads `TIME` first; that read,
/// like the script's call, must not be answered by the connection attempt
/// that failed during the outage.
#[test]
fn the_first_call_after_redis_is_back_reaches_it_on_a_store_made_while_down() {
    let Some(mut server) = RedisServer::spawn("the_first_call_after_redis_is_back_reaches_it")
    else {
        return;
    };
    server.kill();
    runtime().block_on(async {
        let store = RedisStore::connect_lazy(&server.url(), RedisStoreConfig::default())
            .expect("a lazy store needs no Redis yet");
        let plan = plan("token-bucket", 2, 1_000);
        for _ in 0..3 {
            let down = store.check(&plan, "c", 0, 1).await;
            assert!(down.is_err(), "{down:?}");
        }
        server.restart();
        let up = store
            .check(&plan, "c", 0, 1)
            .await
            .expect("the first call after the restart");
        assert_eq!(up.limits[0].decision.remaining, 1);
    });
}

#[test]
fn unguarded_store_reports_a_dead_redis_as_transient() {
    let Some(mut server) = RedisServer::spawn("unguarded_store_reports_a_dead_redis_as_transient")
    else {
        return;
    };
    runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
            .await
            .expect("connect");
        let plan = plan("gcra", 2, 1_000);
        server.kill();
        let error = store
            .decide(&plan, "c", 0, 1)
            .await
            .expect_err("Redis is down");
        assert!(error.is_transient(), "{error}");
        let error: tollgate::StoreError = error.into();
        assert!(error.is_transient());
    });
}

#[test]
fn script_flush_is_recovered() {
    let Some(server) = RedisServer::spawn("script_flush_is_recovered") else {
        return;
    };
    runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
            .await
            .expect("connect");
        let plan = plan("token-bucket", 2, 1_000);
        assert!(store.decide(&plan, "c", 0, 1).await.expect("call").allowed);
        let sha = store.script_sha().to_owned();
        assert_eq!(server.cli(&["SCRIPT", "EXISTS", &sha]).trim(), "1");
        assert_eq!(server.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
        assert_eq!(server.cli(&["SCRIPT", "EXISTS", &sha]).trim(), "0");
        // NOSCRIPT: reloaded by itself, and the state is still there.
        let second = store.decide(&plan, "c", 10, 1).await.expect("reloaded");
        assert!(second.allowed);
        assert_eq!(second.limits[0].decision.remaining, 0);
        assert!(!store.decide(&plan, "c", 20, 1).await.expect("call").allowed);
        assert_eq!(server.cli(&["SCRIPT", "EXISTS", &sha]).trim(), "1");
    });
}

#[test]
fn paused_redis_times_out_into_the_failure_policy() {
    let Some(server) = RedisServer::spawn("paused_redis_times_out_into_the_failure_policy") else {
        return;
    };
    runtime().block_on(async {
        let config = RedisStoreConfig {
            timeout: Duration::from_millis(200),
            ..RedisStoreConfig::default()
        };
        let redis = RedisStore::connect(&server.url(), config)
            .await
            .expect("connect");
        let store = GuardedStore::new(redis, Duration::from_millis(200), FailurePolicy::FailClosed);
        let plan = plan("sliding-window", 5, 1_000);
        assert_eq!(
            store
                .check(&plan, "c", 0, 1)
                .await
                .expect("call")
                .decided_by,
            DecidedBy::Store
        );
        assert_eq!(server.cli(&["CLIENT", "PAUSE", "2000", "ALL"]).trim(), "OK");
        // Redis holds the call for 2 s; the 200 ms timeout answers first.
        let paused = store.check(&plan, "c", 10, 1).await.expect("guarded call");
        assert_eq!(
            paused.decided_by,
            DecidedBy::Failure(FailurePolicy::FailClosed)
        );
        assert!(!paused.allowed);
        assert_eq!(store.counts().timeouts, 1);
        // After the pause the store decides again. The call that timed out
        // was still held by Redis and ran when the pause ended, after its
        // deadline: it wrote nothing, and the polling peeks are answered
        // once the pause is over (those held by it write nothing either).
        let peek = until_store_answers(&store, &plan, "c", 20, 0).await;
        assert_eq!(peek.limits[0].decision.remaining, 4);
        let after = store.check(&plan, "c", 30, 1).await.expect("call");
        assert_eq!(after.decided_by, DecidedBy::Store);
        assert!(after.allowed);
    });
}

#[test]
fn out_of_range_arguments_are_refused_before_any_write() {
    let Some(server) = RedisServer::spawn("out_of_range_arguments_are_refused_before_any_write")
    else {
        return;
    };
    runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
            .await
            .expect("connect");
        // Refused in Rust, before the call.
        let gcra = plan("gcra", 1_000, 1_000);
        let too_late = (1u64 << 53) / 1_000;
        let error = store
            .decide(&gcra, "c", too_late, 1)
            .await
            .expect_err("out of range");
        assert!(matches!(error, RedisStoreError::OutOfRange(_)), "{error}");
        assert!(!error.is_transient());
        assert!(store.decide(&gcra, "c", u64::MAX, 1).await.is_err());
        assert_eq!(server.cli(&["DBSIZE"]).trim(), "0");

        // Refused by the script: a sliding window pushed the client's
        // last-seen time where GCRA's scaled arithmetic would not be exact.
        let sliding = plan("sliding-window", 1, 1_000);
        let late = tollgate_redis::bounds::MAX_EXACT - 10_000;
        assert!(
            store
                .decide(&sliding, "c", late, 1)
                .await
                .expect("in range")
                .allowed
        );
        let keys_before = server.cli(&["DBSIZE"]);
        let error = store
            .decide(&gcra, "c", 0, 1)
            .await
            .expect_err("clamped time out of range");
        assert!(matches!(error, RedisStoreError::Script(_)), "{error}");
        assert!(error.to_string().contains("exact range"), "{error}");
        assert_eq!(server.cli(&["DBSIZE"]), keys_before, "nothing written");

        // Refused by the script: arguments a caller of the raw script got wrong.
        let script = redis::Script::new(tollgate_redis::scripts::PLAN);
        let client = redis::Client::open(server.url()).expect("client");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        // ARGV: now, cost, margin, deadline (Redis TIME in µs: far ahead
        // here), then code, limit, window, shadow, receipt id, watermark.
        let late = "9007199254740991";
        for argv in [
            [
                "9007199254740993",
                "1",
                "0",
                late,
                "s",
                "1",
                "10",
                "0",
                "ab:7",
                "0",
            ],
            ["0", "1", "0", late, "x", "1", "10", "0", "ab:7", "0"],
            ["0", "1", "0", late, "t", "3", "10", "0", "ab:7", "0"],
            ["0", "-1", "0", late, "s", "1", "10", "0", "ab:7", "0"],
            ["0", "1", "0", late, "g", "0", "10", "0", "ab:7", "0"],
            ["0", "1", "0", late, "s", "1", "10", "yes", "ab:7", "0"],
            ["0", "1", "0", "soon", "s", "1", "10", "0", "ab:7", "0"],
            ["0", "1", "0", late, "s", "1", "10", "", "ab:7", "0"],
            ["0", "1", "0", late, "s", "1", "10", "0", "x7", "0"],
        ] {
            let mut invocation = script.key("raw:{c:r}:seen");
            invocation.key("raw:{c:r}:1");
            invocation.key("raw:{c:r}:receipts");
            for arg in argv.iter().filter(|a| !a.is_empty()) {
                invocation.arg(arg);
            }
            let reply: Result<Vec<i64>, _> = invocation.invoke_async(&mut connection).await;
            let error = reply.expect_err("refused");
            assert_eq!(error.code(), Some("TOLLGATE"), "{argv:?}: {error}");
        }
        // Without the receipts key declared last: one key short.
        let mut invocation = script.key("raw:{c:r}:seen");
        invocation.key("raw:{c:r}:1");
        invocation.arg("0").arg("1").arg("0").arg(late);
        invocation
            .arg("s")
            .arg("1")
            .arg("10")
            .arg("0")
            .arg("ab:7")
            .arg("0");
        let reply: Result<Vec<i64>, _> = invocation.invoke_async(&mut connection).await;
        let error = reply.expect_err("refused");
        assert_eq!(error.code(), Some("TOLLGATE"), "{error}");
        assert_eq!(server.cli(&["KEYS", "raw:*"]).trim(), "");
    });
}
