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
    let running = t.get("/v1/config").await.json()["listen"].clone();
    t.write_config(&format!("listen = [\"127.0.0.1:9\"]\n{CONFIG}"));
    let report = t.server.reload().unwrap();
    assert_eq!(report.needs_restart, vec!["listen"]);
    assert_eq!((report.kept, report.fresh, report.removed), (5, 0, 0));
    // The config in force shows what the server runs, not what waits.
    assert_eq!(t.get("/v1/config").await.json()["listen"], running);
    // Asked again, the change still waits for a restart...
    assert_eq!(t.server.reload().unwrap().needs_restart, vec!["listen"]);
    // ...and once the file is back to the running value, nothing does.
    t.write_config(CONFIG);
    let report = t.server.reload().unwrap();
    assert!(report.needs_restart.is_empty(), "{report}");
    t.stop().await;
}

/// A `[store]` change waits for a restart, so a reload's limits go into
/// force on the store the server runs: a limit that store could not serve
/// (here a Redis store, and a window beyond its exact range) is refused
/// even when the file now names a store that could, instead of every
/// decision under it failing (and so passing, under `fail-open`).
#[tokio::test]
async fn a_reload_is_refused_when_the_running_store_could_not_serve_a_limit() {
    // Redis is never called: the check is the config's.
    let running = format!("{CONFIG}\n[store]\nurl = \"redis://127.0.0.1:9\"\n");
    let t = TestServer::start(&running).await;
    let before = t.get("/v1/config").await.json();
    let to_memory = format!(
        "{}\n[store]\nurl = \"memory\"\n",
        CONFIG.replace("window = \"1d\"", "window = \"100000000000d\"")
    );
    t.write_config(&to_memory);
    match t.server.reload() {
        Err(Error::Config(ConfigError::InvalidConfig { message, line, .. })) => {
            assert!(message.contains("running redis store"), "{message}");
            assert!(message.contains("exceeds 2^53 - 1"), "{message}");
            assert_eq!(
                to_memory.lines().nth(line - 1),
                Some("window = \"100000000000d\"")
            );
        }
        other => panic!("expected the limit refused, got {other:?}"),
    }
    assert_eq!(t.get("/v1/config").await.json(), before);
    // The same file with limits the running store can serve is taken, the
    // store change announced.
    t.write_config(&format!("{CONFIG}\n[store]\nurl = \"memory\"\n"));
    assert_eq!(t.server.reload().unwrap().needs_restart, vec!["store"]);
    t.stop().await;
}

/// `tollgate serve --listen … --grpc-listen … --redis …` on a file that
/// names other values for those keys: the first reload of the unchanged
/// file announces no restart, while a real change of a restart setting
/// still is announced.
#[tokio::test]
async fn settings_given_as_flags_are_unchanged_when_the_file_repeats_what_they_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    let text = format!(
        "listen = [\"127.0.0.1:8080\"]\n{CONFIG}\n[envoy]\ngrpc_listen = \"127.0.0.1:8081\"\n"
    );
    std::fs::write(&path, &text).unwrap();
    let prepared = tollgate_server::prepare(tollgate_server::Options {
        config: Some(path.clone()),
        flags: tollgate_server::Overrides {
            listen: vec!["127.0.0.1:0".into()],
            grpc_listen: Some("127.0.0.1:0".into()),
            // Never asked: no request is decided here.
            redis: Some("redis://127.0.0.1:1".into()),
            ..Default::default()
        },
    })
    .await
    .unwrap();
    let server = prepared.server().clone();

    let report = server.reload().unwrap();
    assert!(report.needs_restart.is_empty(), "{report}");
    assert_eq!((report.kept, report.fresh, report.removed), (5, 0, 0));

    // The file's own listen changes too: the flag still replaces it, so
    // a restart would change nothing either.
    std::fs::write(&path, text.replace("127.0.0.1:8080", "127.0.0.1:9090")).unwrap();
    assert!(server.reload().unwrap().needs_restart.is_empty());

    // Real changes of restart settings are announced.
    std::fs::write(
        &path,
        format!("sweep_interval = \"5s\"\n{text}[store]\nfailure_policy = \"fail-closed\"\n"),
    )
    .unwrap();
    let report = server.reload().unwrap();
    assert_eq!(
        report.needs_restart,
        ["store", "sweep_interval"],
        "{report}"
    );
}

/// Reads `series` from `/metrics` until it equals `want`, for at most 10 s
/// (the watcher polls the file every 10 ms).
async fn wait_for_metric(t: &TestServer, series: &str, want: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let value = tollgate_testkit::metric(&t.get("/metrics").await.body, series);
        if value == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{series} is {value}, not {want}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// A config file that is deleted, or no longer readable as text, while the
/// server watches it: one failed reload, logged and counted in
/// `tollgate_config_reloads_total{result="error"}` (once, not at every
/// poll); the running config stays, and the file coming back is reloaded.
#[tokio::test]
async fn a_deleted_or_unreadable_config_file_is_a_counted_failed_reload() {
    const ERRORS: &str = "tollgate_config_reloads_total{result=\"error\"}";
    const OKS: &str = "tollgate_config_reloads_total{result=\"ok\"}";
    let t = TestServer::start(CONFIG).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let watcher = tokio::spawn(tollgate_server::tasks::watch(
        t.server.clone(),
        std::time::Duration::from_millis(10),
        None,
        async {
            let _ = stopped.await;
        },
    ));
    // The watcher is running once it has seen a change (its first read of
    // the file may come after any one write: write until one is seen).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut edit = 0;
    let oks = loop {
        let oks = tollgate_testkit::metric(&t.get("/metrics").await.body, OKS);
        if oks > 0 {
            break oks;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the watcher never reloaded"
        );
        edit += 1;
        t.write_config(&format!("{CONFIG}\n# edit {edit}\n"));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    std::fs::remove_file(&t.config_path).unwrap();
    wait_for_metric(&t, ERRORS, 1).await;
    t.write_config(CONFIG);
    wait_for_metric(&t, OKS, oks + 1).await;
    std::fs::write(&t.config_path, [0xff, 0xfe, b'\n']).unwrap();
    wait_for_metric(&t, ERRORS, 2).await;
    t.write_config(&format!("{CONFIG}\n# edited again\n"));
    wait_for_metric(&t, OKS, oks + 2).await;
    // Each outage counted once, however many polls it lasted.
    assert_eq!(
        tollgate_testkit::metric(&t.get("/metrics").await.body, ERRORS),
        2
    );
    assert_eq!(t.check("kim", 1).await.status, StatusCode::OK);
    let _ = stop.send(());
    watcher.await.unwrap();
    t.stop().await;
}
