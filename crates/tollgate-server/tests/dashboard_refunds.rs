//! The dashboard of `serve` on Redis after a reply came too late, and after
//! one never came, in a real headless Chromium: a relay in front of the
//! test's own `redis-server` holds Redis's replies, a check is answered by
//! the failure policy, the replies pass, the store takes the call back, and
//! the store panel says so ("uses taken back: 1"), as `/v1/stats` does;
//! then the relay drops its connections with a held reply, and the panel
//! shows the reply lost and its call taken back by its receipt ("replies
//! lost: 1", "uses taken back: 2"). The screenshot is kept in
//! target/test-artefacts/. And, with `[store] replicas_to_ack`, a decision
//! no replica acknowledged ("not acknowledged by replicas: 1").

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::TestServer;
use tollgate_redis::testing::{load_scripts, RedisServer, Relay};
use tollgate_server::{Config, StoreHandle};
use tollgate_testkit::browser::Browser;

fn config_text(url: &str) -> String {
    format!(
        r#"
default_plan = "shared"

[store]
url = "{url}"
failure_policy = "fail-closed"
timeout = "200ms"

[[plans.shared]]
name = "1d"
policy = "gcra"
limit = 5
window = "1d"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_panel_shows_late_and_lost_replies_taken_back_in_a_real_browser() {
    let Some(redis) = RedisServer::spawn("dashboard_refunds") else {
        return;
    };
    let Some(browser) = Browser::start("dashboard_refunds", 1400, 1000).await else {
        return;
    };
    let relay = Relay::start(redis.port());
    let text = config_text(&relay.url());
    let config = Config::parse(&text).expect("the config is valid");
    let store = StoreHandle::for_config(&config).expect("a Redis store");
    let t = TestServer::start_with(&text, config, store).await;
    let warm = t.check("warm-up", 1).await;
    assert_eq!(warm.json()["decided_by"], "store", "{}", warm.body);

    relay.hold_replies();
    let held = t.check("held", 2).await;
    assert_eq!(held.json()["decided_by"], "fail-closed", "{}", held.body);
    relay.release_replies();

    let late = serde_json::json!({"restored": 1, "stale": 0, "failed": 0, "replies_lost": 0, "pending": 0, "not_replicated": 0});
    assert_eq!(refunds_once(&t, |r| r["restored"] == 1).await, late);
    let shown = browser_shows(&browser, &t, &[("uses taken back", 1), ("replies lost", 0)]).await;
    assert!(shown, "the store panel shows the late reply taken back");

    relay.hold_replies();
    let held = t.check("lost", 1).await;
    assert_eq!(held.json()["decided_by"], "fail-closed", "{}", held.body);
    relay.cut();
    let lost = serde_json::json!({"restored": 2, "stale": 0, "failed": 0, "replies_lost": 1, "pending": 0, "not_replicated": 0});
    assert_eq!(refunds_once(&t, |r| r["restored"] == 2).await, lost);
    let shown = browser_shows(
        &browser,
        &t,
        &[
            ("uses taken back", 2),
            ("uses not taken back", 0),
            ("replies lost", 1),
            ("refunds pending", 0),
        ],
    )
    .await;
    assert!(shown, "the store panel shows the lost reply taken back");
    for client in ["held", "lost"] {
        let look = t.get(&format!("/v1/remaining/{client}")).await;
        assert_eq!(
            look.json()["limits"][0]["remaining"],
            5,
            "{client}: taken back: {}",
            look.body
        );
    }

    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/test-artefacts/dashboard-refunds.png");
    let png = browser.screenshot(&[path.as_path()]).await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    browser.finish().await;
    t.stop().await;
}

/// With `[store] replicas_to_ack = 1` on a Redis that has no replica, a
/// check is answered by the failure policy and its use taken back; the
/// store panel says why ("not acknowledged by replicas: 1"), as
/// `/v1/stats` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_panel_shows_decisions_no_replica_acknowledged_in_a_real_browser() {
    let Some(redis) = RedisServer::spawn("dashboard_not_replicated") else {
        return;
    };
    let Some(browser) = Browser::start("dashboard_not_replicated", 1400, 1000).await else {
        return;
    };
    // Loaded before: a script Redis lacks would be sent again after a WAIT
    // (NOSCRIPT), past its deadline.
    load_scripts(&redis.url()).await;
    let text = config_text(&redis.url()).replace(
        "timeout = \"200ms\"\n",
        "timeout = \"200ms\"\nreplicas_to_ack = 1\n",
    );
    let config = Config::parse(&text).expect("the config is valid");
    let store = StoreHandle::for_config(&config).expect("a Redis store");
    let t = TestServer::start_with(&text, config, store).await;
    let answer = t.check("c", 2).await;
    assert_eq!(
        answer.json()["decided_by"],
        "fail-closed",
        "{}",
        answer.body
    );

    let refunds = serde_json::json!({"restored": 1, "stale": 0, "failed": 0, "replies_lost": 0, "pending": 0, "not_replicated": 1});
    assert_eq!(refunds_once(&t, |r| r["restored"] == 1).await, refunds);
    let rows = [("not acknowledged by replicas", 1), ("uses taken back", 1)];
    let shown = browser_shows(&browser, &t, &rows).await;
    assert!(
        shown,
        "the store panel shows the decision no replica acknowledged"
    );
    browser.finish().await;
    t.stop().await;
}

/// `/v1/stats`'s store refunds once `done` holds of them (polled every
/// 20 ms, at most 5 s), or the last read.
async fn refunds_once(
    t: &TestServer,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut refunds = serde_json::Value::Null;
    for _ in 0..250 {
        refunds = t.get("/v1/stats").await.json()["store"]["refunds"].clone();
        if done(&refunds) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    refunds
}

/// Whether the dashboard, opened anew, shows each `(row, value)` in its
/// store panel within 15 s.
async fn browser_shows(browser: &Browser, t: &TestServer, rows: &[(&str, u64)]) -> bool {
    browser
        .client()
        .goto(&format!("{}/", t.base))
        .await
        .expect("the page opens");
    let row = |name: &str, value: u64| {
        format!(
            "[...document.querySelectorAll('#store .kv > div')].some((cell) => \
               cell.textContent === '{name}' && cell.nextElementSibling \
               && cell.nextElementSibling.textContent === '{value}')"
        )
    };
    let all: Vec<String> = rows.iter().map(|&(name, value)| row(name, value)).collect();
    browser
        .wait_until(
            &format!("return {};", all.join(" && ")),
            Duration::from_secs(15),
        )
        .await
}
