//! The circuit breaker on a real, private `redis-server` that is killed and
//! restarted: while the circuit is open no call reaches Redis (even once it
//! is back, until the probe interval has passed), and one probe interval
//! after Redis is back, the first probe closes the circuit; and calls to a
//! dead Redis fail at once rather than at their timeout. The breaker's time is a
//! ManualClock; the only real waits are bounded polls for Redis itself.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{
    AnyPolicy, DecidedBy, FailurePolicy, Limit, ManualClock, Plan, PlanDecision, Store,
};
use tollgate_guard::{BreakerConfig, GuardedStore};
use tollgate_redis::testing::{runtime, RedisServer};
use tollgate_redis::{RedisStore, RedisStoreConfig};

const PROBE_MS: u64 = 500;

fn plan() -> Plan {
    let policy = AnyPolicy::from_name("sliding-window", 1_000, 60_000).expect("policy");
    Plan::new("breaker", vec![Limit::new("l", policy, false)]).expect("plan")
}

async fn ask(guard: &GuardedStore<RedisStore>, plan: &Plan) -> PlanDecision {
    guard
        .check(plan, "c", 1_000, 1)
        .await
        .expect("fail-closed answers")
}

fn evalsha_calls(server: &RedisServer) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

async fn connect(server: &RedisServer) -> RedisStore {
    RedisStore::connect(&server.url(), RedisStoreConfig::default())
        .await
        .expect("connect")
}

#[test]
fn a_killed_redis_is_short_circuited_and_one_probe_brings_it_back() {
    let Some(mut server) =
        RedisServer::spawn("a_killed_redis_is_short_circuited_and_one_probe_brings_it_back")
    else {
        return;
    };
    runtime().block_on(async {
        let redis = connect(&server).await;
        let clock = Arc::new(ManualClock::new(1_000_000));
        let store = redis.clone();
        let guard = GuardedStore::new(redis, Duration::from_millis(300), FailurePolicy::FailClosed)
            .with_clock(clock.clone())
            .with_breaker(BreakerConfig {
                failures: 3,
                probe_interval_ms: PROBE_MS,
            });
        let plan = plan();
        assert_eq!(ask(&guard, &plan).await.decided_by, DecidedBy::Store);

        server.kill();
        let closed = DecidedBy::Failure(FailurePolicy::FailClosed);
        for _ in 0..3 {
            assert_eq!(ask(&guard, &plan).await.decided_by, closed);
        }
        let counts = guard.counts();
        assert_eq!(counts.transient_errors + counts.timeouts, 3);
        assert!(counts.circuit_open);
        for _ in 0..50 {
            assert_eq!(ask(&guard, &plan).await.decided_by, closed);
        }
        let counts = guard.counts();
        assert_eq!(
            counts.transient_errors + counts.timeouts,
            3,
            "no call tried Redis"
        );
        assert_eq!(counts.short_circuited, 50);

        // redis-rs reconnects in the background after the kill; let that
        // round give up (its retries and connection timeout are well under
        // a second), so the probe after the restart meets a connection whose last
        // reconnect failed: the state an outage of any length leaves.
        tokio::time::sleep(Duration::from_secs(1)).await;

        // Redis is back. A call the kill cut off may have run, so the store
        // claims it by its receipt once Redis answers (`tollgate_redis::call::lost`),
        // with a script call of its own: once that is done, the calls
        // counted below are decisions alone.
        server.restart();
        let settled = store.settle(Duration::from_secs(5)).await;
        assert!(settled.is_ok(), "{settled:?}");
        let claims = evalsha_calls(&server);

        // Within the probe interval nothing calls Redis.
        clock.advance(PROBE_MS - 1);
        assert_eq!(ask(&guard, &plan).await.decided_by, closed);
        assert_eq!(
            evalsha_calls(&server),
            claims,
            "the open circuit called Redis"
        );

        // One interval after the opening, the very first probe is decided
        // by the store: recovery within one probe interval.
        clock.advance(1);
        assert_eq!(
            ask(&guard, &plan).await.decided_by,
            DecidedBy::Store,
            "the first probe after Redis came back was not decided by Redis"
        );
        assert!(!guard.counts().circuit_open);
        let before = evalsha_calls(&server);
        for _ in 0..5 {
            assert_eq!(ask(&guard, &plan).await.decided_by, DecidedBy::Store);
        }
        assert_eq!(evalsha_calls(&server), before + 5);
    });
}

/// When Redis dies, a call does not wait out its timeout: its connection is
/// refused and it fails at once (before, redis-rs's reconnect waited between
/// retries, and every call made meanwhile waited with it, so the calls that
/// should have opened the circuit timed out instead, each costing its
/// caller the whole timeout). Breaker off, so that every call goes to the
/// store; a short timeout, of which a refused connection on loopback needs a
/// small part (a few calls are allowed to be slow on a busy machine).
#[test]
fn a_dead_redis_fails_calls_at_once_rather_than_at_their_timeout() {
    let Some(mut server) =
        RedisServer::spawn("a_dead_redis_fails_calls_at_once_rather_than_at_their_timeout")
    else {
        return;
    };
    runtime().block_on(async {
        let redis = connect(&server).await;
        let guard = GuardedStore::new(redis, Duration::from_millis(25), FailurePolicy::FailClosed)
            .with_breaker(BreakerConfig {
                failures: 0,
                probe_interval_ms: PROBE_MS,
            });
        let plan = plan();
        assert_eq!(ask(&guard, &plan).await.decided_by, DecidedBy::Store);

        server.kill();
        const CALLS: u64 = 20;
        for _ in 0..CALLS {
            let closed = DecidedBy::Failure(FailurePolicy::FailClosed);
            assert_eq!(ask(&guard, &plan).await.decided_by, closed);
        }
        let counts = guard.counts();
        assert_eq!(counts.transient_errors + counts.timeouts, CALLS);
        assert!(
            counts.timeouts <= 5,
            "calls to a dead Redis waited out their timeout: {counts:?}"
        );
    });
}
