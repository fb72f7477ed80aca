//! The sliding-window log's Redis list: one element per distinct allowed
//! time whatever the cost, and stored lists it did not write refused clearly.

use tollgate::{AnyPolicy, Limit, Plan, PlanLimiter};
use tollgate_redis::testing::{current_thread_runtime, RedisServer};
use tollgate_redis::{scripts, RedisStore, RedisStoreConfig, RedisStoreError};

fn plan(limit: u32, window: u64) -> Plan {
    let policy = AnyPolicy::from_name("sliding-window", limit, window).expect("policy");
    Plan::new("log", vec![Limit::new("l", policy, false)]).expect("plan")
}

/// The state key of the plan's only limit for `client`, in `format`.
fn state_key(store: &RedisStore, plan: &Plan, client: &str, format: u32) -> String {
    store
        .keys()
        .limit_key(client, plan.limits()[0].id(), format)
}

#[test]
fn huge_costs_take_one_small_element_per_time() {
    let Some(server) = RedisServer::spawn("huge_costs_take_one_small_element_per_time") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
            .await
            .expect("connect");
        let reference = PlanLimiter::new();
        for limit in [1_000_000_000, u32::MAX] {
            let plan = plan(limit, 1_000);
            let key = state_key(&store, &plan, "bytes", scripts::state_format("s"));
            // Close to half the limit every half window: the log never
            // empties (so its running count is never reset), the running
            // count wraps past 2^32 within a few steps, and the list stays
            // at most two elements long.
            let cost = limit / 2 - 7;
            for step in 0..20u64 {
                let now = 500 * step;
                for cost in [cost, 0, cost, 1, 0] {
                    let want = reference.check(&plan, "bytes", now, cost);
                    let got = store
                        .decide(&plan, "bytes", now, cost)
                        .await
                        .expect("decide");
                    assert_eq!(got, want, "limit {limit} at {now} cost {cost}");
                }
                let len: u64 = server.cli(&["LLEN", &key]).trim().parse().expect("LLEN");
                assert!((1..=2).contains(&len), "{len} elements at {now}");
            }
            let usage: u64 = server
                .cli(&["MEMORY", "USAGE", &key])
                .trim()
                .parse()
                .expect("MEMORY USAGE");
            // The key, its expiry and a listpack of two short strings (232 bytes
            // on Redis 7); one element per unit would take gigabytes.
            assert!(usage < 1_024, "{usage} bytes");
        }
        // One request of cost 10^9 is one element.
        let plan = plan(1_000_000_000, 60_000);
        let decision = store
            .decide(&plan, "one", 7, 1_000_000_000)
            .await
            .expect("decide");
        assert!(decision.allowed);
        let key = state_key(&store, &plan, "one", scripts::state_format("s"));
        assert_eq!(
            server.cli(&["LRANGE", &key, "0", "-1"]).trim(),
            "7:1000000000:1000000000"
        );
    });
}

#[test]
fn stored_lists_of_another_format_are_never_misread() {
    let Some(server) = RedisServer::spawn("stored_lists_of_another_format_are_never_misread")
    else {
        return;
    };
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
            .await
            .expect("connect");
        let plan = plan(2, 1_000);
        // A full log in format 1 (one element per unit) under its old key is
        // not read: the new key starts empty.
        let old = state_key(&store, &plan, "c", 1);
        server.cli(&["RPUSH", &old, "100", "100"]);
        let decision = store.decide(&plan, "c", 200, 2).await.expect("decide");
        assert!(decision.allowed);
        assert_eq!(server.cli(&["LRANGE", &old, "0", "-1"]).trim(), "100\n100");

        // Lists at the new key that this script did not write: a clear
        // error, and nothing written.
        let new = state_key(&store, &plan, "d", scripts::state_format("s"));
        for elements in [
            &["100", "100"][..],
            &["100:1:1", "x"],
            &["100:0:0"],
            &["100:1:1", "200:2:5"],
            &["100:1:4294967296"],
            &["100:1:1", "200:1:2", "300:1:3"],
        ] {
            server.cli(&["DEL", &new]);
            let mut rpush = vec!["RPUSH", new.as_str()];
            rpush.extend_from_slice(elements);
            server.cli(&rpush);
            let before = server.cli(&["LRANGE", &new, "0", "-1"]);
            let error = store.decide(&plan, "d", 250, 1).await.expect_err("refused");
            assert!(
                matches!(&error, RedisStoreError::Script(m) if m.contains("stored log")),
                "{elements:?}: {error}"
            );
            assert!(!error.is_transient());
            assert_eq!(server.cli(&["LRANGE", &new, "0", "-1"]), before);
        }
    });
}

#[test]
fn long_logs_read_in_part_give_the_same_answers() {
    let Some(server) = RedisServer::spawn("long_logs_read_in_part_give_the_same_answers") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
            .await
            .expect("connect");
        let reference = PlanLimiter::new();
        let plan = plan(40, 1_000);
        // 30 elements, longer than the newest 16 the script reads at once:
        // element i at 10 * i, of cost 2 when i is a multiple of 5. Probed
        // where `gone` of them have left the window (the window's start at
        // the oldest element, before the part read at once, inside it, past
        // the newest), by requests whose wait ends in either part.
        for gone in 0..=30u64 {
            let now = 1_000 + 10 * gone - 5;
            for cost in [0, 1, 2, 7, 25, 40, 41] {
                let client = format!("c{gone}-{cost}");
                let mut expected = Vec::new();
                let mut end = 0;
                for i in 0..30u64 {
                    let units = if i % 5 == 0 { 2 } else { 1 };
                    let want = reference.check(&plan, &client, 10 * i, units);
                    let got = store.decide(&plan, &client, 10 * i, units).await;
                    assert_eq!(got.expect("decide"), want, "history {i} of {client}");
                    end += units;
                    expected.push(format!("{}:{units}:{end}", 10 * i));
                }
                let key = state_key(&store, &plan, &client, scripts::state_format("s"));
                let stored = server.cli(&["LRANGE", &key, "0", "-1"]);
                assert_eq!(stored.split_whitespace().collect::<Vec<_>>(), expected);
                // The probe, then one more request on the log it left (trimmed
                // when the probe was allowed).
                for (at, cost) in [(now, cost), (now + 1, 1)] {
                    let want = reference.check(&plan, &client, at, cost);
                    let got = store.decide(&plan, &client, at, cost).await;
                    assert_eq!(got.expect("decide"), want, "{client} at {at}, cost {cost}");
                }
            }
        }
    });
}

/// Inspecting a long log reads at most 1,000 of its elements: read whole,
/// a log of a limit in the hundreds of thousands held Redis (and its output
/// buffer) for as long as it took, stalling every other client. The oldest
/// runs are shown as they are, the later units as one run at the newest
/// time, and the numbers are the memory store's.
#[test]
fn inspecting_a_long_log_reads_a_thousand_elements_and_the_numbers_stay_exact() {
    let Some(server) = RedisServer::spawn("inspecting_a_long_log") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
            .await
            .expect("connect");
        let reference = PlanLimiter::new();
        let day = 86_400_000;
        let plan = plan(3_000, day);
        // 2,999 requests at distinct milliseconds, the last of cost 2.
        for now in 0..2_999u64 {
            let cost = if now == 2_998 { 2 } else { 1 };
            let got = store
                .decide(&plan, "long", now, cost)
                .await
                .expect("decide");
            assert!(got.allowed, "at {now}");
            reference.check(&plan, "long", now, cost);
        }
        let got = store.inspect(&plan, "long", 5_000).await.expect("inspect");
        let want = reference.inspect(&plan, "long", 5_000);
        let (got_limit, want_limit) = (&got.limits[0], &want.limits[0]);
        assert_eq!(
            (
                got_limit.remaining,
                got_limit.retry_after_ms,
                got_limit.reset_after_ms
            ),
            (
                want_limit.remaining,
                want_limit.retry_after_ms,
                want_limit.reset_after_ms
            )
        );
        assert_eq!(
            (got_limit.remaining, got_limit.retry_after_ms),
            (0, day - 5_000)
        );
        assert_eq!(
            (got.allowed, got.retry_after_ms),
            (want.allowed, want.retry_after_ms)
        );
        let (got_log, want_log) = (
            got_limit.log.as_ref().unwrap(),
            want_limit.log.as_ref().unwrap(),
        );
        assert_eq!((got_log.len(), want_log.len()), (1_000, 2_999));
        assert_eq!(
            got_log[..999],
            want_log[..999],
            "the oldest runs as they are"
        );
        let rest = got_log.last().unwrap();
        assert_eq!(
            (rest.at_ms, rest.units),
            (2_998, 2_001),
            "the later units at the newest time"
        );
    });
}
