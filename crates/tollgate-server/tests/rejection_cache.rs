//! `tollgate serve` on Redis with its exact rejection cache: a repeat
//! offender is answered by the instance itself (no Redis call), counted in
//! `/metrics`, until exactly the store's wait is over; a reload that changes
//! a plan's limits empties that plan's entries and no other's.

mod common;

use common::TestServer;
use tollgate_redis::testing::RedisServer;
use tollgate_server::{Config, StoreHandle};
use tollgate_testkit::metric;

/// Plans `free` (2 per second, or `free_limit`) and `paid` (1 per second).
fn config_text(url: &str, free_limit: u32) -> String {
    format!(
        r#"
default_plan = "free"

[store]
url = "{url}"
prefix = "cache-test"
timeout = "2s"

[clients]
"big" = "paid"

[[plans.free]]
name = "1s"
policy = "sliding-window"
limit = {free_limit}
window = "1s"

[[plans.paid]]
name = "1s"
policy = "token-bucket"
limit = 1
window = "1s"
"#
    )
}

/// Scripts Redis has run so far (`EVALSHA` and `EVAL` calls).
fn script_calls(redis: &RedisServer) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

async fn check(t: &TestServer, client: &str) -> serde_json::Value {
    let answer = t.check(client, 1).await;
    assert_eq!(answer.status, reqwest::StatusCode::OK, "{}", answer.body);
    answer.json()
}

async fn start(text: &str) -> TestServer {
    let config = Config::parse(text).expect("test config is valid");
    let store = StoreHandle::for_config(&config).expect("redis store");
    TestServer::start_with(text, config, store).await
}

#[tokio::test]
async fn a_repeat_offender_is_answered_by_the_cache_until_the_wait_is_over() {
    let Some(redis) = RedisServer::spawn("a_repeat_offender_is_answered_by_the_cache") else {
        return;
    };
    let t = start(&config_text(&redis.url(), 2)).await;
    for _ in 0..2 {
        assert_eq!(check(&t, "abuser").await["allowed"], true);
    }
    t.clock.advance(100);
    let rejected = check(&t, "abuser").await;
    assert_eq!(
        (rejected["allowed"].clone(), rejected["decided_by"].clone()),
        (false.into(), "store".into())
    );
    assert_eq!(rejected["retry_after_ms"], 900);
    let calls = script_calls(&redis);
    for step in 1..=8 {
        t.clock.advance(100);
        let again = check(&t, "abuser").await;
        assert_eq!(again["allowed"], false, "{again}");
        assert_eq!(again["decided_by"], "cache", "{again}");
        assert_eq!(again["retry_after_ms"], 900 - 100 * step, "{again}");
    }
    assert_eq!(
        script_calls(&redis),
        calls,
        "the cache's answers never reached Redis"
    );
    let m = t.get("/metrics").await.body;
    assert_eq!(
        metric(&m, "tollgate_decisions_by_total{decided_by=\"cache\"}"),
        8
    );
    assert_eq!(
        metric(&m, "tollgate_decisions_by_total{decided_by=\"store\"}"),
        3
    );
    assert_eq!(metric(&m, "tollgate_rejection_cache_clients"), 1);
    // The cache's answers are not store failures: the dashboard's store
    // panel stays healthy.
    let stats: serde_json::Value = t.get("/v1/stats").await.json();
    assert_eq!(stats["store"]["status"], "ok", "{}", stats["store"]);
    assert_eq!(stats["store"]["errors_last_10s"], 0, "{}", stats["store"]);
    let store_errors: u64 = stats["store_errors"]
        .as_array()
        .expect("store_errors is a list")
        .iter()
        .map(|n| n.as_u64().expect("a count"))
        .sum();
    assert_eq!(store_errors, 0, "{stats}");
    // At exactly t + w the store decides again, and allows.
    t.clock.advance(100);
    let after = check(&t, "abuser").await;
    assert_eq!(
        (after["allowed"].clone(), after["decided_by"].clone()),
        (true.into(), "store".into())
    );
    assert_eq!(script_calls(&redis), calls + 1);
    t.stop().await;
}

#[tokio::test]
async fn a_reload_that_changes_a_plans_limits_empties_its_entries() {
    let Some(redis) =
        RedisServer::spawn("a_reload_that_changes_a_plans_limits_empties_its_entries")
    else {
        return;
    };
    let t = start(&config_text(&redis.url(), 2)).await;
    for client in ["small", "big"] {
        let limit = if client == "big" { 1 } else { 2 };
        for _ in 0..limit {
            assert_eq!(check(&t, client).await["allowed"], true);
        }
        assert_eq!(check(&t, client).await["decided_by"], "store");
        assert_eq!(check(&t, client).await["decided_by"], "cache");
    }
    assert_eq!(
        metric(
            &t.get("/metrics").await.body,
            "tollgate_rejection_cache_clients"
        ),
        2
    );
    // `free` goes from 2 to 3 per second; `paid` stays.
    std::fs::write(&t.config_path, config_text(&redis.url(), 3)).unwrap();
    t.server.reload().expect("reload");
    assert_eq!(
        metric(
            &t.get("/metrics").await.body,
            "tollgate_rejection_cache_clients"
        ),
        1
    );
    // The changed plan's limit is a new one (fresh state in Redis): the
    // store decides, and allows.
    let small = check(&t, "small").await;
    assert_eq!(
        (small["allowed"].clone(), small["decided_by"].clone()),
        (true.into(), "store".into())
    );
    assert_eq!(check(&t, "big").await["decided_by"], "cache");
    t.stop().await;
}
