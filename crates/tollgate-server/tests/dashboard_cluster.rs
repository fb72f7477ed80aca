//! The dashboard of `serve` on a Redis Cluster with one master killed, in a
//! real headless Chromium: the store panel shows that master's circuit
//! open and the other masters' closed, so that an operator sees why that
//! master's clients are answered by the failure policy and nobody else's
//! are. The cluster is started by the test; the screenshot is kept in
//! target/test-artefacts/.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::TestServer;
use tollgate_redis::testing::{ClusterOptions, RedisCluster};
use tollgate_server::{Config, StoreHandle};
use tollgate_testkit::browser::Browser;

/// A plan far above the demand, failing closed, on the cluster at `seeds`.
fn config_text(seeds: &[String]) -> String {
    let seeds: Vec<String> = seeds.iter().map(|seed| format!("\"{seed}\"")).collect();
    format!(
        r#"
default_plan = "big"

[store]
cluster = [{}]
failure_policy = "fail-closed"
timeout = "500ms"

[[plans.big]]
name = "1d"
policy = "sliding-window"
limit = 1000000
window = "1d"
"#,
        seeds.join(", ")
    )
}

/// Who decided one check of `client`.
async fn decided_by(t: &TestServer, client: &str) -> String {
    let answer = t.check(client, 1).await;
    answer.json()["decided_by"]
        .as_str()
        .unwrap_or("?")
        .to_owned()
}

/// The masters the store panel's data lists, and whether each is open.
async fn circuits(t: &TestServer) -> Vec<(String, bool)> {
    let stats = t.get("/v1/stats").await.json();
    let circuits = stats["store"]["circuits"].as_array().expect("circuits");
    circuits
        .iter()
        .map(|c| (c["part"].as_str().unwrap().to_owned(), c["open"] == true))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_panel_shows_which_masters_circuit_is_open_in_a_real_browser() {
    let options = ClusterOptions::one_master_may_fail();
    let Some(mut cluster) = RedisCluster::spawn_with("dashboard_cluster", &options) else {
        return;
    };
    let Some(browser) = Browser::start("dashboard_cluster", 1400, 1000).await else {
        return;
    };
    let text = config_text(&cluster.urls());
    let config = Config::parse(&text).expect("the config is valid");
    let store = StoreHandle::for_config(&config).expect("a cluster store");
    let t = TestServer::start_with(&text, config, store).await;

    // Every master decides for some client, once the store has its map
    // (bounded: 10 s).
    let clients: Vec<String> = (0..12).map(|i| format!("client-{i}")).collect();
    let started = Instant::now();
    while circuits(&t).await.len() < 3 && started.elapsed() < Duration::from_secs(10) {
        for client in &clients {
            decided_by(&t, client).await;
        }
    }
    let states = circuits(&t).await;
    assert_eq!(states.len(), 3, "a circuit per master: {states:?}");
    assert!(states.iter().all(|(_, open)| !open), "{states:?}");

    // Kill the master of client-0, and ask for its clients until its
    // circuit opens (5 failures by default).
    let victim = cluster
        .node_holding("client-0")
        .expect("a node holds client-0");
    let victim_address = format!("127.0.0.1:{}", cluster.nodes()[victim].port());
    cluster.nodes_mut()[victim].kill();
    for _ in 0..5 {
        assert_eq!(decided_by(&t, "client-0").await, "fail-closed");
    }
    let states = circuits(&t).await;
    let open: Vec<&str> = states
        .iter()
        .filter(|(_, open)| *open)
        .map(|(part, _)| part.as_str())
        .collect();
    assert_eq!(open, [victim_address.as_str()], "{states:?}");

    // The page shows the same: the victim's circuit open, the others closed.
    browser
        .client()
        .goto(&format!("{}/", t.base))
        .await
        .expect("the page opens");
    let shown = browser
        .wait_until(
            &format!(
                "const cells = [...document.querySelectorAll('#store [data-circuit]')]; \
                 return cells.length === 3 && cells.every((cell) => \
                   (cell.dataset.circuit === '{victim_address}') === (cell.dataset.open === 'true') \
                   && cell.textContent === (cell.dataset.open === 'true' ? 'open' : 'closed'));"
            ),
            Duration::from_secs(15),
        )
        .await;
    assert!(
        shown,
        "the store panel shows {victim_address}'s circuit open, the others closed"
    );

    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/test-artefacts/dashboard-cluster.png");
    let png = browser.screenshot(&[path.as_path()]).await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    browser.finish().await;
    t.stop().await;
}
