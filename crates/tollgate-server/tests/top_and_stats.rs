//! `GET /v1/top` (the heaviest clients of the last minute) and `GET
//! /v1/stats` (decisions per second, per plan, and the store's health),
//! on a real server on 127.0.0.1 port 0.

mod common;

use common::{TestServer, CONFIG, START_MS};
use tollgate_redis::testing::free_port;
use tollgate_server::top::{COUNTERS, SLOTS};
use tollgate_server::{Config, StoreHandle};

#[tokio::test]
async fn top_ranks_the_limited_client_and_forgets_after_a_minute() {
    let t = TestServer::start(CONFIG).await;
    for _ in 0..5 {
        t.check("mallory", 1).await; // 2 allowed, 3 rejected
    }
    t.check("alice", 1).await;
    t.check("acme", 1).await;
    let body = t.get("/v1/top?by=rejected&limit=5").await.json();
    assert_eq!(body["by"], "rejected");
    let clients = body["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 1, "{body}");
    assert_eq!(clients[0]["client"], "mallory");
    assert_eq!(clients[0]["plan"], "free");
    assert_eq!(clients[0]["count"], 3);
    assert_eq!(clients[0]["at_least"], 3);
    assert_eq!(clients[0]["limited_by"], "1s", "the limit that refused");
    assert_eq!(body["error_bound"], 0);
    let body = t.get("/v1/top?by=requests&limit=2").await.json();
    assert!(body["clients"][0].get("limited_by").is_none(), "{body}");
    let ranked: Vec<(&str, u64)> = body["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["client"].as_str().unwrap(), c["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(ranked, [("mallory", 5), ("acme", 1)]);
    assert_eq!(body["total"], 7);
    t.clock.advance(61_000);
    let body = t.get("/v1/top").await.json();
    assert_eq!(body["clients"].as_array().unwrap().len(), 0, "{body}");
    t.stop().await;
}

/// Counts are exact while no slot's summary is full, however many requests
/// it counted: the bound is 0 then (it was the slot's requests / 256, so
/// the dashboard warned of counts "up to 2 high" that were exact).
#[tokio::test]
async fn a_few_clients_with_many_requests_are_counted_with_no_error_bound() {
    let t = TestServer::start(CONFIG).await;
    for _ in 0..600 {
        t.server.decide("solo", None, 1).await.expect("decided");
    }
    t.server.decide("other", None, 1).await.expect("decided");
    let body = t.get("/v1/top?by=requests").await.json();
    assert_eq!(body["error_bound"], 0, "{body}");
    assert_eq!(body["clients"][0]["count"], 600, "{body}");
    assert_eq!(body["clients"][0]["at_least"], 600, "{body}");
    let body = t.get("/v1/top?by=rejected").await.json();
    assert_eq!(body["error_bound"], 0, "{body}");
    t.stop().await;
}

#[tokio::test]
async fn top_stays_bounded_under_many_clients_and_keeps_the_heavy_one() {
    let t = TestServer::start(CONFIG).await;
    let clients = 40_000u64;
    for i in 0..clients {
        let client = format!("c{i}");
        t.server.decide(&client, None, 1).await.expect("decided");
        if i % 50 == 0 {
            t.server.decide("hammer", None, 1).await.expect("decided");
        }
        if i % 10_000 == 9_999 {
            t.clock.advance(1_000);
        }
    }
    let observed = t.server.observed().expect("dashboard on");
    assert!(
        observed.top.counters_held() <= 2 * SLOTS * COUNTERS,
        "{} counters",
        observed.top.counters_held()
    );
    let body = t.get("/v1/top?by=rejected&limit=3").await.json();
    // hammer: 800 requests, of which the free plan's 5 per day are allowed.
    assert_eq!(body["clients"][0]["client"], "hammer", "{body}");
    let count = body["clients"][0]["count"].as_u64().unwrap();
    let at_least = body["clients"][0]["at_least"].as_u64().unwrap();
    let rejected = 800 - 5;
    assert!(at_least <= rejected && rejected <= count, "{body}");
    assert!(count - rejected <= body["error_bound"].as_u64().unwrap());
    let body = t.get("/v1/top?by=requests&limit=1").await.json();
    assert_eq!(body["clients"][0]["client"], "hammer", "{body}");
    assert_eq!(body["total"], clients + 800);
    t.stop().await;
}

#[tokio::test]
async fn stats_count_each_second_per_plan() {
    let t = TestServer::start(CONFIG).await;
    for _ in 0..3 {
        t.check("dave", 1).await; // 2 allowed, 1 rejected on free
    }
    t.check("acme", 1).await; // paid
    t.clock.advance(2_000);
    t.check("erin", 1).await;
    t.check("erin", 0).await; // a look: not counted
    let body = t.get("/v1/stats").await.json();
    let times = body["time_ms"].as_array().unwrap();
    assert_eq!(times.len(), 300);
    let now_second = (START_MS + 2_000) / 1000 * 1000;
    assert_eq!(times[299], now_second);
    assert_eq!(body["now_ms"], START_MS + 2_000);
    let column = |name: &str| -> Vec<u64> {
        body[name]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    let decisions = column("decisions");
    assert_eq!(&decisions[297..], [4, 0, 1]);
    assert_eq!(&column("rejected")[297..], [1, 0, 0]);
    let plan = |name: &str| {
        body["plans"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["plan"] == name)
            .unwrap_or_else(|| panic!("plan {name} in {body}"))
            .clone()
    };
    let tail = |v: &serde_json::Value| -> Vec<u64> {
        v.as_array().unwrap()[297..]
            .iter()
            .map(|n| n.as_u64().unwrap())
            .collect()
    };
    assert_eq!(tail(&plan("free")["allowed"]), [2, 0, 1]);
    assert_eq!(tail(&plan("free")["rejected"]), [1, 0, 0]);
    assert_eq!(tail(&plan("paid")["allowed"]), [1, 0, 0]);
    assert_eq!(tail(&body["decided_by"]["store"]), [4, 0, 1]);
    assert_eq!(tail(&body["store_errors"]), [0, 0, 0]);
    let p50 = tail(&body["latency_us"]["p50"]);
    let max = tail(&body["latency_us"]["max"]);
    assert!(p50[0] <= max[0] && max[1] == 0, "{p50:?} {max:?}");
    assert_eq!(body["store"]["kind"], "memory");
    assert_eq!(body["store"]["status"], "ok");
    assert_eq!(body["store"]["tracked_clients"], 3);
    assert_eq!(
        body["store"]["refunds"],
        serde_json::Value::Null,
        "Redis only"
    );
    assert_eq!(
        body["store"]["circuits"],
        serde_json::json!([]),
        "no masters"
    );
    // Five minutes later the old seconds are gone.
    t.clock.advance(300_000);
    let body = t.get("/v1/stats").await.json();
    assert!(
        body["decisions"].as_array().unwrap().iter().all(|n| n == 0),
        "{body}"
    );
    t.stop().await;
}

/// A server on a Redis that nothing listens on, failing by `policy`.
async fn on_a_redis_down(policy: &str) -> TestServer {
    let text = format!(
        r#"
[store]
url = "redis://127.0.0.1:{}"
failure_policy = "{policy}"
timeout = "200ms"

[[plans.shared]]
name = "1s"
policy = "sliding-window"
limit = 5
window = "1s"
"#,
        free_port()
    );
    let config = Config::parse(&text).unwrap();
    let store = StoreHandle::for_config(&config).unwrap();
    TestServer::start_with(&text, config, store).await
}

#[tokio::test]
async fn store_failures_show_in_stats_and_health() {
    let t = on_a_redis_down("fail-open").await;
    for _ in 0..2 {
        assert_eq!(t.check("tenant", 1).await.json()["decided_by"], "fail-open");
    }
    let body = t.get("/v1/stats").await.json();
    assert_eq!(body["store_errors"][299], 2, "{}", body["store"]);
    assert_eq!(body["decided_by"]["fail-open"][299], 2);
    assert_eq!(body["decided_by"]["store"][299], 0);
    assert_eq!(body["store"]["kind"], "redis");
    assert_eq!(body["store"]["status"], "failing");
    assert_eq!(body["store"]["calls"]["fail_open"], 2);
    // Ten quiet seconds later the store is no longer reported failing.
    t.clock.advance(10_000);
    assert_eq!(t.get("/v1/stats").await.json()["store"]["status"], "ok");
    t.stop().await;
}

/// A look (`GET /v1/remaining`, cost 0) the failure policy answered is a
/// store error too: with only looks arriving during an outage, the store
/// is reported failing under every failure policy, as it was only under
/// `unavailable` (whose looks are errors, not answers).
#[tokio::test]
async fn looks_answered_by_the_failure_policy_count_as_store_errors() {
    for policy in ["fail-open", "fail-closed", "local-fallback"] {
        let t = on_a_redis_down(policy).await;
        for _ in 0..3 {
            let look = t.get("/v1/remaining/tenant").await;
            assert_eq!(look.json()["decided_by"], policy, "{}", look.body);
        }
        let body = t.get("/v1/stats").await.json();
        assert_eq!(body["store_errors"][299], 3, "{policy}: {}", body["store"]);
        assert_eq!(body["store"]["status"], "failing", "{policy}");
        assert_eq!(body["store"]["errors_last_10s"], 3, "{policy}");
        // Looks are not decisions: the per-second decisions stay at 0.
        assert_eq!(body["decisions"][299], 0, "{policy}");
        t.stop().await;
    }
}
