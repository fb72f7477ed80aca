//! The clients the server tracks: the `max_clients` cap (the memory store's
//! and the local fallback's), and the sweep that drops idle clients without
//! changing an answer.

mod common;

use std::sync::Arc;

use common::{TestServer, CONFIG};
use tollgate::testing::FailingStore;
use tollgate::{Clock, StoreError};
use tollgate_server::{Config, StoreHandle};
use tollgate_testkit::metric;

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

/// A shared store's local fallback is capped like the memory store, and
/// the clients its cap drops are counted as the memory store's are.
#[tokio::test]
async fn the_local_fallbacks_dropped_clients_are_counted() {
    let text =
        format!("{CONFIG}\n[store]\nfailure_policy = \"local-fallback\"\nmax_clients = 640\n");
    let config = Config::parse(&text).unwrap();
    let down = FailingStore::new(StoreError::transient("connection refused"));
    let t = TestServer::start_with(&text, config, StoreHandle::Shared(Arc::new(down))).await;
    for i in 0..2_000 {
        let body = t.check(&format!("client-{i}"), 1).await.json();
        assert_eq!(body["decided_by"], "local-fallback");
    }
    let m = t.get("/metrics").await.body;
    let dropped = metric(&m, "tollgate_clients_dropped_total{reason=\"evicted\"}")
        + metric(&m, "tollgate_clients_dropped_total{reason=\"reclaimed\"}");
    assert!(
        dropped >= 2_000 - 640,
        "{dropped} dropped of 2,000 clients, 640 kept at most"
    );
    t.stop().await;
}

/// A request whose time was read just before a sweep (its thread
/// descheduled, or the wall clock stepped back) still finds its client's
/// state: the sweep judges idleness some seconds behind the clock, not at
/// the sweep's own reading, after which a log free at 1,000 ms but not at
/// 999 was dropped and the client's quota came back whole.
#[tokio::test]
async fn a_request_timed_just_before_a_sweep_finds_its_state() {
    let t = TestServer::start(CONFIG).await;
    let start = t.clock.now_ms();
    let spent = t
        .post_check(r#"{"client":"late","plan":"paid","cost":10}"#)
        .await;
    assert_eq!(spent.json()["allowed"], true);
    t.clock.set(start + 1_000);
    t.server.sweep();
    t.clock.set(start + 999);
    let late = t.post_check(r#"{"client":"late","plan":"paid"}"#).await;
    assert_eq!(late.json()["allowed"], false, "{}", late.body);
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
    // Idle for their window, but not yet for the sweep's lag behind it.
    t.clock.advance(1_000);
    assert_eq!(t.server.sweep(), 0);
    t.clock.advance(tollgate::RECLAIM_BEHIND_MS);
    assert_eq!(t.server.sweep(), 10);
    let m = t.get("/metrics").await.body;
    assert_eq!(metric(&m, "tollgate_tracked_clients"), 0);
    assert_eq!(
        metric(&m, "tollgate_clients_dropped_total{reason=\"swept\"}"),
        10
    );
    t.stop().await;
}
