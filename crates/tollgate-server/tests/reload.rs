//! Hot reload: unchanged limits keep their clients' state, changed ones
//! start afresh, a broken file is refused and the running config stays.

mod common;

use common::{TestServer, CONFIG};
use reqwest::StatusCode;
use tollgate_server::config::Error as ConfigError;
use tollgate_server::Error;

#[tokio::test]
async fn reload_keeps_the_state_of_unchanged_limits() {
    let t = TestServer::start(CONFIG).await;
    t.check("kim", 1).await;
    t.check("acme", 1).await;
    t.check("acme", 1).await;
    assert_eq!(t.remaining("kim", 0).await, 1);
    assert_eq!(t.remaining("kim", 1).await, 4);
    assert_eq!(t.remaining("acme", 0).await, 8);

    // free/1s changes (2 -> 3 per second), free/1d stays, paid/1s stays,
    // a plan is added and kim moves to it.
    let changed = CONFIG
        .replace("limit = 2\n", "limit = 3\n")
        .replace("acme = \"paid\"", "acme = \"paid\"\nlee = \"extra\"")
        + "\n[[plans.extra]]\nname = \"1m\"\npolicy = \"gcra\"\nlimit = 60\nwindow = \"1m\"\n";
    t.write_config(&changed);
    let report = t.server.reload().unwrap();
    assert_eq!(
        (report.kept, report.fresh, report.removed),
        (4, 2, 1),
        "{report}"
    );
    assert!(report.needs_restart.is_empty());

    // free/1s is fresh under its new limit; free/1d kept kim's use.
    let body = t.get("/v1/remaining/kim").await.json();
    assert_eq!(body["limits"][0]["limit"], 3);
    assert_eq!(body["limits"][0]["remaining"], 3);
    assert_eq!(body["limits"][1]["remaining"], 4);
    // paid/1s kept acme's two requests.
    assert_eq!(t.remaining("acme", 0).await, 8);
    assert_eq!(t.check("lee", 1).await.json()["plan"], "extra");
    let metrics = t.get("/metrics").await.body;
    assert!(metrics.contains("tollgate_config_reloads_total{result=\"ok\"} 1\n"));
    t.stop().await;
}

#[tokio::test]
async fn a_broken_file_is_refused_and_the_running_config_stays() {
    let t = TestServer::start(CONFIG).await;
    t.check("mia", 1).await;
    t.check("mia", 1).await;
    for broken in [
        "default_plan = \"free\"\n[[plans.free]]\nname = \"1s\"\npolicy = \"nope\"\nlimit = 1\nwindow = \"1s\"\n",
        "this is not toml",
        "default_plan = \"gone\"\n[[plans.free]]\nname = \"1s\"\npolicy = \"gcra\"\nlimit = 1\nwindow = \"1s\"\n",
    ] {
        t.write_config(broken);
        match t.server.reload() {
            Err(Error::Config(ConfigError::InvalidConfig { line, .. })) => assert!(line >= 1),
            other => panic!("expected a config error, got {other:?}"),
        }
        // Still the old plans, with mia's state.
        let a = t.check("mia", 1).await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(
            a.header("ratelimit-policy"),
            Some(r#""free-1s";q=2;w=1, "free-1d";q=5;w=86400"#)
        );
        assert_eq!(a.json()["allowed"], false);
    }
    std::fs::remove_file(&t.config_path).unwrap();
    assert!(matches!(
        t.server.reload(),
        Err(Error::Config(ConfigError::ReadConfig { .. }))
    ));
    let metrics = t.get("/metrics").await.body;
    assert!(
        metrics.contains("tollgate_config_reloads_total{result=\"error\"} 4\n"),
        "{metrics}"
    );
    assert!(metrics.contains("tollgate_config_reloads_total{result=\"ok\"} 0\n"));
    t.stop().await;
}

#[tokio::test]
async fn listen_and_store_changes_are_reported_as_needing_a_restart() {
    let t = TestServer::start(CONFIG).await;
    t.write_config(&format!("listen = [\"127.0.0.1:9\"]\n{CONFIG}"));
    let report = t.server.reload().unwrap();
    assert_eq!(report.needs_restart, vec!["listen"]);
    assert_eq!((report.kept, report.fresh, report.removed), (5, 0, 0));
    t.stop().await;
}
