//! How many Redis commands a decision's script runs, counted with
//! `INFO commandstats` on a Redis of the test's own: every command a script
//! runs costs Redis real CPU, which is most of a decision's cost there
//! (BENCHMARKS.md, "The scripts' own cost per decision"). The answers are
//! the conformance suite's business; these tests hold the counts.

use std::collections::HashMap;

use tollgate::{AnyPolicy, Limit, Plan};
use tollgate_redis::testing::{current_thread_runtime, RedisServer};
use tollgate_redis::{RedisStore, RedisStoreConfig};

fn plan(limit: u32) -> Plan {
    let policy = AnyPolicy::from_name("sliding-window", limit, 3_600_000).expect("policy");
    Plan::new("log", vec![Limit::new("l", policy, false)]).expect("plan")
}

/// The calls of every command since the last `CONFIG RESETSTAT`.
fn calls(server: &RedisServer) -> HashMap<String, u64> {
    let mut calls = HashMap::new();
    for line in server.cli(&["INFO", "commandstats"]).lines() {
        let Some((name, stats)) = line.trim().split_once(':') else {
            continue;
        };
        let Some(name) = name.strip_prefix("cmdstat_") else {
            continue;
        };
        let count = stats
            .split(',')
            .find_map(|field| field.strip_prefix("calls="))
            .and_then(|count| count.parse().ok())
            .expect("calls=");
        calls.insert(name.to_owned(), count);
    }
    calls
}

/// The calls of each of `names` since the last `CONFIG RESETSTAT`, in order.
fn counts(server: &RedisServer, names: &[&str]) -> Vec<u64> {
    let calls = calls(server);
    names
        .iter()
        .map(|name| calls.get(*name).copied().unwrap_or(0))
        .collect()
}

/// Whether a request of cost 1 from client "c" at `now` is allowed.
async fn allowed(store: &RedisStore, plan: &Plan, now: u64) -> bool {
    store
        .decide(plan, "c", now, 1)
        .await
        .expect("decide")
        .allowed
}

#[test]
fn a_short_log_is_read_with_one_command() {
    let Some(server) = RedisServer::spawn("a_short_log_is_read_with_one_command") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
            .await
            .expect("connect");
        let plan = plan(100);
        for now in 1_000..1_010 {
            assert!(allowed(&store, &plan, now).await);
        }
        server.cli(&["CONFIG", "RESETSTAT"]);
        // A log of 10 live elements: read whole by one LRANGE, no LLEN, no
        // search; the request logged by one RPUSH and one PEXPIRE.
        assert!(allowed(&store, &plan, 2_000).await);
        assert_eq!(
            counts(&server, &["lrange", "llen", "lindex", "rpush", "pexpire"]),
            [1, 0, 0, 1, 1]
        );
        // Another request at the same time joins the newest element: its
        // expiry stays (no PEXPIRE of the log).
        server.cli(&["CONFIG", "RESETSTAT"]);
        assert!(allowed(&store, &plan, 2_000).await);
        assert_eq!(counts(&server, &["lset", "pexpire"]), [1, 0]);
    });
}

#[test]
fn a_rejection_reads_no_expiry() {
    let Some(server) = RedisServer::spawn("a_rejection_reads_no_expiry") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), RedisStoreConfig::default())
            .await
            .expect("connect");
        let plan = plan(2);
        for now in [1, 2] {
            assert!(allowed(&store, &plan, now).await);
        }
        server.cli(&["CONFIG", "RESETSTAT"]);
        // Rejections write no state key: the last-seen key takes each new
        // time and keeps its expiry, which still outlives the log's.
        for now in 3..8 {
            assert!(!allowed(&store, &plan, now).await);
        }
        assert_eq!(
            counts(&server, &["pttl", "pexpire", "set", "rpush", "lset"]),
            [0, 0, 5, 0, 0]
        );
        let seen = store.keys().seen_key("c");
        assert_eq!(server.cli(&["GET", &seen]).trim(), "7");
        let log = store.keys().limit_key(
            "c",
            plan.limits()[0].id(),
            tollgate_redis::scripts::state_format("s"),
        );
        let ttl = |key: &str| -> i64 { server.cli(&["PTTL", key]).trim().parse().expect("PTTL") };
        assert!(ttl(&seen) >= ttl(&log) && ttl(&log) > 0);
    });
}
