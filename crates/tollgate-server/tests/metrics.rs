//! `/metrics` content, store failures and the failure policies, and the cap
//! on tracked clients.

mod common;

use std::sync::Arc;

use common::{TestServer, CONFIG};
use reqwest::StatusCode;
use tollgate::testing::FailingStore;
use tollgate::StoreError;
use tollgate_server::{Config, StoreHandle};
use tollgate_testkit::metric;

async fn down_server(policy: &str, transient: bool) -> TestServer {
    let text = format!("{CONFIG}\n[store]\nfailure_policy = \"{policy}\"\n");
    let config = Config::parse(&text).unwrap();
    let store = StoreHandle::Shared(Arc::new(FailingStore::new(if transient {
        StoreError::transient("connection refused")
    } else {
        StoreError::permanent("script error")
    })));
    TestServer::start_with(&text, config, store).await
}

#[tokio::test]
async fn every_metric_is_a_tollgate_metric_and_counts_decisions() {
    let t = TestServer::start(CONFIG).await;
    for _ in 0..3 {
        t.check("nora", 1).await;
    }
    t.get("/v1/remaining/nora").await;
    t.check("acme", 1).await;
    let a = t.get("/metrics").await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let m = a.body;
    for line in m.lines() {
        let name = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
            .unwrap_or(line);
        assert!(name.starts_with("tollgate_"), "{line}");
    }
    assert_eq!(
        metric(
            &m,
            "tollgate_requests_total{plan=\"free\",outcome=\"allowed\"}"
        ),
        2
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_requests_total{plan=\"free\",outcome=\"rejected\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_requests_total{plan=\"paid\",outcome=\"allowed\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_limit_decisions_total{plan=\"free\",limit=\"1s\",outcome=\"rejected\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_limit_decisions_total{plan=\"free\",limit=\"1d\",outcome=\"allowed\"}"
        ),
        3
    );
    // Four decisions and one look, all by the store, all timed.
    assert_eq!(
        metric(&m, "tollgate_decisions_by_total{decided_by=\"store\"}"),
        5
    );
    assert_eq!(metric(&m, "tollgate_decision_duration_seconds_count"), 5);
    assert_eq!(
        metric(&m, "tollgate_decision_duration_seconds_bucket{le=\"+Inf\"}"),
        5
    );
    assert_eq!(metric(&m, "tollgate_tracked_clients"), 2);
    assert_eq!(
        metric(&m, "tollgate_store_errors_total{kind=\"transient\"}"),
        0
    );
    assert!(m.contains("# TYPE tollgate_decision_duration_seconds histogram\n"));
    t.stop().await;
}

#[tokio::test]
async fn fail_open_lets_requests_in_and_is_counted() {
    let t = down_server("fail-open", true).await;
    for _ in 0..3 {
        let a = t.check("olga", 1).await;
        assert_eq!(a.status, StatusCode::OK);
        let body = a.json();
        assert_eq!(body["allowed"], true);
        assert_eq!(body["decided_by"], "fail-open");
    }
    let m = t.get("/metrics").await.body;
    assert_eq!(
        metric(&m, "tollgate_store_errors_total{kind=\"transient\"}"),
        3
    );
    assert_eq!(
        metric(&m, "tollgate_decisions_by_total{decided_by=\"fail-open\"}"),
        3
    );
    assert_eq!(
        metric(&m, "tollgate_decisions_by_total{decided_by=\"store\"}"),
        0
    );
    // No memory store behind this server: no tracked-clients gauge.
    assert!(!m.contains("tollgate_tracked_clients "));
    t.stop().await;
}

#[tokio::test]
async fn fail_closed_rejects_with_retry_after() {
    let t = down_server("fail-closed", true).await;
    let a = t.check("pia", 1).await;
    let body = a.json();
    assert_eq!(body["allowed"], false);
    assert_eq!(body["decided_by"], "fail-closed");
    assert_eq!(a.header("retry-after"), Some("1"));
    let a = t.get_with("/v1/auth", &[("X-Client-Id", "pia")]).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    let m = t.get("/metrics").await.body;
    assert_eq!(
        metric(&m, "tollgate_store_errors_total{kind=\"transient\"}"),
        2
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_decisions_by_total{decided_by=\"fail-closed\"}"
        ),
        2
    );
    t.stop().await;
}

#[tokio::test]
async fn a_permanent_store_error_is_answered_by_the_failure_policy() {
    let t = down_server("fail-open", false).await;
    let a = t.check("rosa", 1).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json()["decided_by"], "fail-open");
    assert!(!a.body.contains("script error"), "{}", a.body);
    let m = t.get("/metrics").await.body;
    assert_eq!(
        metric(&m, "tollgate_store_errors_total{kind=\"permanent\"}"),
        1
    );
    assert_eq!(
        metric(&m, "tollgate_store_errors_total{kind=\"transient\"}"),
        0
    );
    assert_eq!(
        metric(&m, "tollgate_decisions_by_total{decided_by=\"fail-open\"}"),
        1
    );
    t.stop().await;
}

#[tokio::test]
async fn unavailable_is_a_503_that_shows_no_internals() {
    let t = down_server("unavailable", false).await;
    let a = t.check("rosa", 1).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(!a.body.contains("script error"), "{}", a.body);
    let a = t.get_with("/v1/auth", &[("X-Client-Id", "rosa")]).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    let m = t.get("/metrics").await.body;
    assert_eq!(
        metric(&m, "tollgate_store_errors_total{kind=\"permanent\"}"),
        2
    );
    t.stop().await;
}

#[tokio::test]
async fn local_fallback_keeps_limiting_in_memory() {
    let t = down_server("local-fallback", true).await;
    let verdicts: Vec<bool> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            let body = t.check("quinn", 1).await.json();
            assert_eq!(body["decided_by"], "local-fallback");
            v.push(body["allowed"].as_bool().unwrap());
        }
        v
    };
    assert_eq!(verdicts, [true, true, false]);
    let m = t.get("/metrics").await.body;
    assert_eq!(
        metric(
            &m,
            "tollgate_decisions_by_total{decided_by=\"local-fallback\"}"
        ),
        3
    );
    t.stop().await;
}

#[tokio::test]
async fn tracked_clients_stay_under_the_cap() {
    let text = format!("{CONFIG}\n[store]\nmax_clients = 640\n");
    let t = TestServer::start(&text).await;
    for i in 0..2_000 {
        t.check(&format!("client-{i}"), 1).await;
    }
    let m = t.get("/metrics").await.body;
    assert!(metric(&m, "tollgate_tracked_clients") <= 640);
    assert_eq!(metric(&m, "tollgate_tracked_clients_max"), 640);
    let dropped = metric(&m, "tollgate_clients_dropped_total{reason=\"evicted\"}")
        + metric(&m, "tollgate_clients_dropped_total{reason=\"reclaimed\"}");
    assert_eq!(dropped + metric(&m, "tollgate_tracked_clients"), 2_000);
    t.stop().await;
}

#[tokio::test]
async fn the_sweep_drops_idle_clients() {
    let t = TestServer::start(CONFIG).await;
    for i in 0..10 {
        t.post_check(format!(r#"{{"client":"s{i}","plan":"paid"}}"#))
            .await;
    }
    assert_eq!(t.server.sweep(), 0);
    t.clock.advance(1_000);
    assert_eq!(t.server.sweep(), 10);
    let m = t.get("/metrics").await.body;
    assert_eq!(metric(&m, "tollgate_tracked_clients"), 0);
    assert_eq!(
        metric(&m, "tollgate_clients_dropped_total{reason=\"swept\"}"),
        10
    );
    t.stop().await;
}

#[tokio::test]
async fn an_open_circuit_is_shown_in_metrics() {
    let text = format!(
        "{CONFIG}\n[store]\nfailure_policy = \"fail-closed\"\nbreaker_failures = 2\nbreaker_probe_interval = \"1h\"\n"
    );
    let config = Config::parse(&text).unwrap();
    assert_eq!(config.store.breaker.failures, 2);
    assert_eq!(config.store.breaker.probe_interval_ms, 3_600_000);
    let store = StoreHandle::Shared(Arc::new(FailingStore::down()));
    let t = TestServer::start_with(&text, config, store).await;
    let m = t.get("/metrics").await.body;
    assert_eq!(metric(&m, "tollgate_store_circuit_open"), 0);
    for _ in 0..5 {
        assert_eq!(t.check("uma", 1).await.json()["decided_by"], "fail-closed");
    }
    let m = t.get("/metrics").await.body;
    assert_eq!(metric(&m, "tollgate_store_circuit_open"), 1);
    assert_eq!(metric(&m, "tollgate_store_short_circuited_total"), 3);
    assert_eq!(
        metric(&m, "tollgate_store_errors_total{kind=\"transient\"}"),
        2
    );
    t.stop().await;
}

#[test]
fn breaker_settings_are_checked_with_the_line() {
    for (setting, message) in [
        (
            "breaker_probe_interval = \"0ms\"",
            "breaker_probe_interval must be at least 1ms",
        ),
        (
            "breaker_failures = 5000000000",
            "breaker_failures must be at most",
        ),
    ] {
        let text = format!("{CONFIG}\n[store]\n{setting}\n");
        let error = Config::parse(&text).err().unwrap().to_string();
        assert!(
            error.contains(message) && error.contains("line "),
            "{error}"
        );
    }
}
