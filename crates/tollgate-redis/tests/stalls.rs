//! A rejected or abandoned call never consumes, even when Redis runs it
//! later: Redis is stalled (SIGSTOP, or `CLIENT PAUSE ... WRITE`) while
//! checks are sent through a [`GuardedStore`]; the guard answers them by its
//! failure policy after its timeout; Redis resumes and runs the waiting
//! scripts, which must see that their deadline passed and write nothing.
//! Afterwards every client's state must equal that of the in-memory limiter
//! given only the calls the store itself answered.
//!
//! Each stall kind runs on its own `redis-server`; times are passed in, and
//! the only waits are the guard's timeouts and bounded polls for Redis.

use std::time::Duration;

use tollgate::FailurePolicy;
use tollgate::{AnyPolicy, DecidedBy, Limit, Plan, PlanLimiter, Store, POLICY_NAMES};
use tollgate_guard::{BreakerConfig, GuardedStore};
use tollgate_redis::testing::{raw_command, runtime, wait_for, RedisServer};
use tollgate_redis::{RedisStore, RedisStoreConfig, RedisStoreError};

const TIMEOUT: Duration = Duration::from_millis(50);
const DAY_MS: u64 = 86_400_000;

#[derive(Debug, Clone, Copy)]
enum Stall {
    /// SIGSTOP, then SIGCONT.
    Stopped,
    /// `CLIENT PAUSE 10000 WRITE`, then `CLIENT UNPAUSE`.
    PausedWrites,
}

impl Stall {
    fn begin(self, server: &RedisServer) {
        match self {
            Stall::Stopped => server.stop_process(),
            Stall::PausedWrites => {
                assert_eq!(
                    server.cli(&["CLIENT", "PAUSE", "10000", "WRITE"]).trim(),
                    "OK"
                );
            }
        }
    }

    fn end(self, server: &RedisServer) {
        match self {
            Stall::Stopped => server.continue_process(),
            Stall::PausedWrites => assert_eq!(server.cli(&["CLIENT", "UNPAUSE"]).trim(), "OK"),
        }
        let port = server.port();
        assert!(
            wait_for(250, || raw_command(port, "PING")
                .is_some_and(|r| r.starts_with("+PONG"))),
            "Redis did not come back"
        );
    }
}

const FAILURE_POLICIES: [FailurePolicy; 3] = [
    FailurePolicy::FailOpen,
    FailurePolicy::FailClosed,
    FailurePolicy::LocalFallback,
];

fn plan(policy: &str) -> Plan {
    let policy = AnyPolicy::from_name(policy, 10, DAY_MS).expect("policy");
    Plan::new("stall", vec![Limit::new("per-day", policy, false)]).expect("plan")
}

fn config(prefix: String) -> RedisStoreConfig {
    RedisStoreConfig {
        prefix,
        timeout: TIMEOUT,
        ..RedisStoreConfig::default()
    }
}

/// One policy under one failure policy through one stall.
async fn stall_run(server: &RedisServer, stall: Stall, policy: &str, failure: FailurePolicy) {
    let what = format!("{policy} / {failure:?} / {stall:?}");
    let prefix = format!("stall-{policy}-{failure:?}-{stall:?}").replace([' ', '{', '}'], "");
    let redis = RedisStore::connect(&server.url(), config(prefix))
        .await
        .expect("connect");
    let raw = redis.clone();
    // Every call of the stall must reach Redis (to be refused as late by
    // its deadline), so no circuit breaker here: it is tested in
    // tollgate-guard.
    let guard = GuardedStore::new(redis, TIMEOUT, failure).with_breaker(BreakerConfig {
        failures: 0,
        ..BreakerConfig::default()
    });
    let plan = plan(policy);
    let reference = PlanLimiter::new();

    // Before: the store answers, and so does the reference.
    for (client, now) in [("a", 1_000), ("b", 1_001), ("a", 1_002)] {
        let got = guard.check(&plan, client, now, 1).await.expect("check");
        assert_eq!(got.decided_by, DecidedBy::Store, "{what}");
        assert_eq!(got, reference.check(&plan, client, now, 1), "{what}");
    }

    // During: every call is answered by the failure policy after the timeout.
    stall.begin(server);
    for (client, now, cost) in [("a", 2_000, 1), ("a", 2_001, 3), ("b", 2_002, 2)]
        .into_iter()
        .chain((3..7).map(|i| ("a", 2_000 + i, 1)))
    {
        let got = guard.check(&plan, client, now, cost).await.expect("check");
        assert_ne!(
            got.decided_by,
            DecidedBy::Store,
            "{what}: answered in a stall"
        );
    }
    let counts = guard.counts();
    assert_eq!(counts.timeouts + counts.transient_errors, 7, "{what}");
    stall.end(server);

    // After: Redis ran (or refused) the waiting scripts before anything sent
    // later on the same connection. Each client's state is the reference's:
    // compare peeks, and a request, at several times.
    for now in [
        3_000,
        DAY_MS / 2,
        DAY_MS + 1_001,
        DAY_MS + 1_002,
        DAY_MS + 5_000,
    ] {
        for client in ["a", "b", "never-seen"] {
            let got = raw.decide(&plan, client, now, 0).await.expect("peek");
            assert_eq!(
                got,
                reference.check(&plan, client, now, 0),
                "{what}: {client} at {now}"
            );
        }
        let got = raw.decide(&plan, "a", now, 1).await.expect("request");
        assert_eq!(
            got,
            reference.check(&plan, "a", now, 1),
            "{what}: a at {now}"
        );
    }
}

fn every_policy_through(stall: Stall, test: &str) {
    let Some(server) = RedisServer::spawn(test) else {
        return;
    };
    runtime().block_on(async {
        for policy in POLICY_NAMES {
            for failure in FAILURE_POLICIES {
                stall_run(&server, stall, policy, failure).await;
            }
        }
    });
}

#[test]
fn a_stopped_redis_runs_no_abandoned_call() {
    every_policy_through(Stall::Stopped, "a_stopped_redis_runs_no_abandoned_call");
}

#[test]
fn a_write_paused_redis_runs_no_abandoned_call() {
    every_policy_through(
        Stall::PausedWrites,
        "a_write_paused_redis_runs_no_abandoned_call",
    );
}

/// Without a guard: the store's own answer to a script that started after
/// its deadline is a transient error, and nothing was written.
#[test]
fn a_late_script_writes_nothing_and_says_so() {
    let Some(server) = RedisServer::spawn("a_late_script_writes_nothing_and_says_so") else {
        return;
    };
    runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), config("late".into()))
            .await
            .expect("connect");
        for policy in POLICY_NAMES {
            let plan = plan(policy);
            assert!(
                store
                    .decide(&plan, policy, 0, 1)
                    .await
                    .expect("call")
                    .allowed
            );
            let keys = server.cli(&["DBSIZE"]);
            // Redis holds writes for 300 ms, then lets the script run: by
            // then its 50 ms deadline has passed.
            assert_eq!(
                server.cli(&["CLIENT", "PAUSE", "300", "WRITE"]).trim(),
                "OK"
            );
            let error = store
                .decide(&plan, policy, 10, 1)
                .await
                .expect_err("a late script is refused");
            assert!(
                matches!(error, RedisStoreError::DeadlinePassed { .. }),
                "{policy}: {error}"
            );
            assert!(error.is_transient(), "{error}");
            assert!(!error.to_string().contains("script:"), "{error}");
            assert_eq!(server.cli(&["DBSIZE"]), keys, "{policy}: nothing written");
            let peek = store.decide(&plan, policy, 20, 0).await.expect("peek");
            assert_eq!(peek.limits[0].decision.remaining, 9, "{policy}");
        }
    });
}
