//! Several stores sharing one Redis, key expiries, and Redis's own clock.

use std::sync::Arc;

use tollgate::{AnyPolicy, Limit, Plan, Store, POLICY_NAMES};
use tollgate_redis::testing::{current_thread_runtime, RedisServer};
use tollgate_redis::{RedisStore, RedisStoreConfig, TimeSource};

fn plan(policy: &str, limit: u32, window: u64) -> Plan {
    let policy = AnyPolicy::from_name(policy, limit, window).expect("policy");
    Plan::new("shared", vec![Limit::new("l", policy, false)]).expect("plan")
}

/// Two stores with their own connections (two ConnectionManagers, as two
/// servers would have), 16 tasks each on a multi-threaded runtime, hammer
/// one client at one time: together they are allowed exactly the limit.
#[test]
fn two_stores_never_allow_more_than_the_limit_together() {
    let Some(server) = RedisServer::spawn("two_stores_never_allow_more_than_the_limit_together")
    else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for (i, name) in POLICY_NAMES.iter().enumerate() {
            let config = RedisStoreConfig {
                prefix: format!("hammer{i}"),
                ..RedisStoreConfig::default()
            };
            let a = RedisStore::connect(&server.url(), config.clone())
                .await
                .expect("a");
            let b = RedisStore::connect(&server.url(), config).await.expect("b");
            let plan = Arc::new(plan(name, 25, 1_000_000));
            let mut tasks = Vec::new();
            for (store, task) in [a, b]
                .into_iter()
                .flat_map(|s| (0..16).map(move |t| (s.clone(), t)))
            {
                let plan = plan.clone();
                tasks.push(tokio::spawn(async move {
                    let mut allowed = 0u32;
                    for call in 0..10 {
                        // Times differ a little and go back and forth, all
                        // within one window and before any drip.
                        let now = 1_000 + (task * 7 + call * 3) % 11;
                        if store
                            .decide(&plan, "one-client", now, 1)
                            .await
                            .expect("decide")
                            .allowed
                        {
                            allowed += 1;
                        }
                    }
                    allowed
                }));
            }
            let mut total = 0;
            for task in tasks {
                total += task.await.expect("task");
            }
            assert_eq!(total, 25, "{name}: 320 calls, limit 25");
        }
    });
}

/// After a run of every policy (allowed, rejected, peeks, plans of several
/// limits), every key has an expiry.
#[test]
fn every_key_has_a_ttl_after_a_run() {
    let Some(server) = RedisServer::spawn("every_key_has_a_ttl_after_a_run") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
            .await
            .expect("connect");
        let limits = POLICY_NAMES
            .iter()
            .map(|name| {
                let policy = AnyPolicy::from_name(name, 3, 3_000).expect("policy");
                Limit::new(*name, policy, *name == "gcra")
            })
            .collect();
        let all = Plan::new("all", limits).expect("plan");
        let plans = [
            plan("sliding-window", 2, 100),
            plan("token-bucket", 2, 100),
            plan("gcra", 2, 100),
            all,
        ];
        for (i, p) in plans.iter().enumerate() {
            for step in 0..20u64 {
                let client = format!("client-{}", step % 3);
                let cost = (step % 4) as u32; // 0 peeks, 3 above some limits
                store
                    .check(p, &client, 1_000 + step * 17 + i as u64, cost)
                    .await
                    .expect("check");
            }
        }
    });
    let keys = server.cli(&["--scan", "--pattern", "*"]);
    let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
    assert!(keys.len() >= 10, "expected keys, found {keys:?}");
    for key in keys {
        let ttl: i64 = server.cli(&["PTTL", key]).trim().parse().expect("PTTL");
        assert!(ttl > 0, "{key} has PTTL {ttl}");
    }
}

/// With Redis's clock, the caller's time is ignored: two calls "at time 0"
/// and one "at time 10^12" all happen now on Redis's clock.
#[test]
fn redis_time_source_ignores_the_callers_time() {
    let Some(server) = RedisServer::spawn("redis_time_source_ignores_the_callers_time") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let config = RedisStoreConfig {
            time_source: TimeSource::Redis,
            ..RedisStoreConfig::default()
        };
        let store = RedisStore::connect(&server.url(), config)
            .await
            .expect("connect");
        // A window of a day: nothing leaves it during the test.
        let p = plan("sliding-window", 2, 86_400_000);
        assert!(store.decide(&p, "c", 0, 1).await.expect("call").allowed);
        assert!(store.decide(&p, "c", 0, 1).await.expect("call").allowed);
        let third = store
            .decide(&p, "c", 1_000_000_000_000, 1)
            .await
            .expect("call");
        assert!(
            !third.allowed,
            "the caller's later time must not open the window"
        );
        let seen = server.cli(&["GET", &store.keys().seen_key("c")]);
        let seen: u64 = seen.trim().parse().expect("seen time");
        let redis_time = server.cli(&["TIME"]);
        let redis_secs: u64 = redis_time
            .lines()
            .next()
            .expect("TIME")
            .trim()
            .parse()
            .expect("secs");
        assert!(
            seen / 1_000 <= redis_secs && seen / 1_000 + 60 >= redis_secs,
            "{seen} vs {redis_secs}"
        );
    });
}

/// Redis's clock, in ms, read from the server.
fn redis_ms(server: &RedisServer) -> u64 {
    let time = server.cli(&["TIME"]);
    let mut parts = time.lines().map(|p| p.trim().parse::<u64>().expect("TIME"));
    let (seconds, micros) = (parts.next().unwrap(), parts.next().unwrap());
    seconds * 1_000 + micros / 1_000
}

/// The shortest expiry among `client`'s state and last-seen keys (not its
/// receipts, kept for lost replies whatever the clocks).
fn shortest_ttl(server: &RedisServer, client: &str) -> i64 {
    let keys = server.cli(&["--scan", "--pattern", &format!("*{{c:{client}}}*")]);
    let ttls: Vec<i64> = (keys.lines())
        .filter(|k| !k.is_empty() && !k.ends_with(":receipts"))
        .map(|key| server.cli(&["PTTL", key]).trim().parse().expect("PTTL"))
        .collect();
    assert!(
        ttls.len() >= 2,
        "{client}: state and last-seen keys, got {ttls:?}"
    );
    ttls.into_iter().min().unwrap()
}

/// A server whose clock runs ahead of Redis's writes state that must stay
/// until its clock, stepped back to the true time, has passed it again, as
/// the memory store keeps a client whose latest seen time is ahead: every
/// key lives the window and the margin beyond how far the call's time is
/// ahead of Redis's clock (at most a day). An audit saw a server 120 s
/// fast, then corrected, find its clients' state gone after 61 s and let a
/// client in again within the window of its use.
#[test]
fn a_callers_clock_ahead_of_redis_keeps_the_keys_that_much_longer() {
    let Some(server) = RedisServer::spawn("a_callers_clock_ahead_of_redis_keeps_the_keys") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    const DAY_MS: i64 = 86_400_000;
    let plans: Vec<(&str, Plan)> = (POLICY_NAMES.iter())
        .map(|name| (*name, plan(name, 1, 1_000)))
        .collect();
    runtime.block_on(async {
        let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
            .await
            .expect("connect");
        let now = redis_ms(&server);
        let margin = 60_000 + 1_000; // the default margin and the window
        let cases = [
            ("behind", now - 10_000, margin),
            ("ahead", now + 120_000, margin + 120_000),
            ("years", now + 10 * 365 * DAY_MS as u64, margin + DAY_MS),
        ];
        for ((policy, plan), (name, at, expected)) in
            plans.iter().flat_map(|p| cases.map(|c| (p, c)))
        {
            let client = format!("{name}-{policy}");
            let used = store.check(plan, &client, at, 1).await.expect("check");
            assert!(used.allowed, "{client}");
            let ttl = shortest_ttl(&server, &client);
            // Seconds of slack for the calls' own time, never a window.
            assert!(
                (expected - 5_000..=expected).contains(&ttl),
                "{client}: expiry {ttl} ms, expected about {expected}"
            );
        }
    });
}

/// The same for a call that writes no state, a look (cost 0) or a refused
/// request, from a server whose clock runs ahead: it moves the client's
/// last-seen time forward, so that key must live that much longer too, or
/// the client's calls at the true time would be decided at their own times
/// after about a minute, where the memory store decides them at the latest
/// seen time until its clock has passed it. It kept the expiry of the
/// earlier write (61 s where 181 s was due).
#[test]
fn a_look_or_a_refusal_from_a_clock_ahead_keeps_the_last_seen_time_that_much_longer() {
    let Some(server) = RedisServer::spawn("a_look_from_a_clock_ahead_keeps_the_last_seen_time")
    else {
        return;
    };
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
            .await
            .expect("connect");
        for policy in POLICY_NAMES {
            let plan = plan(policy, 1, 1_000);
            // A cost over the limit is refused whenever it comes.
            for (what, cost) in [("look", 0), ("refusal", 2)] {
                let client = format!("{what}-{policy}");
                let now = redis_ms(&server);
                let used = store.check(&plan, &client, now, 1).await.expect("use");
                assert!(used.allowed, "{client}");
                let ahead = store.check(&plan, &client, now + 120_000, cost);
                let ahead = ahead.await.expect("ahead");
                assert_eq!(ahead.allowed, cost == 0, "{client}");
                let pattern = format!("*{{c:{client}}}:seen");
                let keys = server.cli(&["--scan", "--pattern", &pattern]);
                let seen_key = keys.lines().next().expect("the last-seen key").to_owned();
                let ttl: i64 = server.cli(&["PTTL", &seen_key]).trim().parse().expect("PTTL");
                let expected = 60_000 + 1_000 + 120_000;
                assert!(
                    (expected - 5_000..=expected).contains(&ttl),
                    "{client}: last-seen key {seen_key} expires in {ttl} ms, expected about {expected}"
                );
            }
        }
    });
}
