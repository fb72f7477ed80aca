//! The dashboard in a real headless Chromium: serve runs in-process on port
//! 0 with a hand-moved clock and traffic in which one client is limited;
//! the page must chart the traffic, list that client among the top limited
//! ones, and show its gauges at remaining = 0 when searched for. The
//! screenshot is kept in target/test-artefacts/ and docs/dashboard.png.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::TestServer;
use reqwest::StatusCode;
use tollgate_testkit::browser::fantoccini::Locator;
use tollgate_testkit::browser::Browser;

/// Free: 5 per minute (sliding window) and 1000 per day; pro: 50 per second.
const CONFIG: &str = r#"
default_plan = "free"

[clients]
acme = "pro"
globex = "pro"

[[plans.free]]
name = "1m"
policy = "sliding-window"
limit = 5
window = "1m"

[[plans.free]]
name = "1d"
policy = "token-bucket"
limit = 1000
window = "1d"

[[plans.pro]]
name = "1s"
policy = "gcra"
limit = 50
window = "1s"
"#;

/// Five minutes of traffic, one second at a time: a steady pro load with a
/// swell, free clients now and then, and `mallory` far over its 5 per minute.
async fn traffic(t: &TestServer) {
    for second in 0..300u32 {
        t.clock.advance(1_000);
        let swell = 20.0 + (f64::from(second) / 18.0).sin().abs() * 40.0;
        for i in 0..swell as u32 {
            let client = if i % 2 == 0 { "acme" } else { "globex" };
            t.server.decide(client, None, 1).await.expect("decided");
        }
        for i in 0..(second % 7) {
            let client = format!("user-{}", (second * 7 + i) % 40);
            t.server.decide(&client, None, 1).await.expect("decided");
        }
        for _ in 0..4 {
            t.server.decide("mallory", None, 1).await.expect("decided");
        }
        if second % 3 == 0 {
            t.server.decide("bob", None, 1).await.expect("decided");
        }
    }
}

fn artefacts() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    vec![
        root.join("target/test-artefacts/dashboard.png"),
        root.join("docs/dashboard.png"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_traffic_top_clients_and_gauges_in_a_real_browser() {
    let Some(browser) = Browser::start("dashboard", 1400, 1400).await else {
        return;
    };
    let t = TestServer::start(CONFIG).await;
    traffic(&t).await;
    // mallory is limited right now, through the HTTP API too.
    let answer = t.check("mallory", 1).await;
    assert_eq!(answer.json()["allowed"], false, "{}", answer.body);

    let page = t.get("/").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("/assets/uPlot.iife.min.js"));
    assert!(!page.body.contains("https://"), "no network in the page");

    let b = browser.client();
    b.goto(&format!("{}/", t.base))
        .await
        .expect("the page opens");
    let wait = Duration::from_secs(15);
    let charted = browser
        .wait_until(
            "return Number(document.getElementById('chart-allowed').dataset.points) > 250 \
             && Number(document.getElementById('chart-rejected').dataset.points) > 250 \
             && document.querySelectorAll('#chart-allowed canvas').length > 0",
            wait,
        )
        .await;
    assert!(charted, "the charts have points");
    let listed = browser
        .wait_until(
            "const first = document.querySelector('#top tbody tr'); \
             return !!first && first.dataset.client === 'mallory';",
            wait,
        )
        .await;
    assert!(listed, "mallory heads the top limited clients");
    let row = b
        .find(Locator::Css("#top tbody tr[data-client='mallory']"))
        .await
        .expect("mallory's row");
    let why = row
        .find(Locator::Css("td.why"))
        .await
        .expect("mallory's limited-by cell");
    assert_eq!(
        why.text().await.expect("cell text"),
        "1m",
        "the limit that refuses mallory"
    );
    assert!(row.text().await.expect("row text").contains("free"));

    // A row clicked shows that client under the plan of its row.
    b.find(Locator::Css("#top tbody tr[data-client='bob']"))
        .await
        .expect("bob's row")
        .click()
        .await
        .expect("clicked");
    let shown = browser
        .wait_until(
            "const head = document.querySelector('#client .client-head'); \
             return !!head && head.textContent.startsWith('bob on plan free') \
             && !!document.querySelector('#client .gauge[data-limit=\"1m\"]');",
            wait,
        )
        .await;
    assert!(shown, "bob's limits after a click on his row");

    let search = b.find(Locator::Id("client-id")).await.expect("search box");
    // The click put bob's id in the box.
    search.clear().await.expect("cleared");
    search.send_keys("mallory").await.expect("typed");
    b.find(Locator::Css("#search button"))
        .await
        .expect("button")
        .click()
        .await
        .expect("clicked");
    let gauged = browser
        .wait_until(
            "const g = document.querySelector('#client .gauge[data-limit=\"1m\"]'); \
             return !!g && g.dataset.remaining === '0';",
            wait,
        )
        .await;
    assert!(gauged, "mallory's 1m gauge shows remaining = 0");
    let text = b
        .find(Locator::Id("client"))
        .await
        .expect("client panel")
        .text()
        .await
        .expect("text");
    assert!(text.contains("0 / 5"), "{text}");
    assert!(text.contains("limited"), "{text}");
    // The config and the store's health are shown.
    let config = b
        .find(Locator::Id("config"))
        .await
        .expect("config")
        .text()
        .await
        .expect("text");
    assert!(
        config.contains("pro") && config.contains("sliding-window"),
        "{config}"
    );
    let store = b
        .find(Locator::Id("store"))
        .await
        .expect("store")
        .text()
        .await
        .expect("text");
    assert!(store.contains("memory") && store.contains("ok"), "{store}");

    let paths = artefacts();
    let refs: Vec<&std::path::Path> = paths.iter().map(PathBuf::as_path).collect();
    let png = browser.screenshot(&refs).await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    browser.finish().await;
    t.stop().await;
}

/// Client ids are the callers' to choose, up to 256 bytes of anything. One
/// without a break point must wrap inside its card rather than push the
/// other columns out of it, and one holding U+202E (RIGHT-TO-LEFT
/// OVERRIDE) must not reverse the page's own text after it: every id is
/// shown in an element of its own, bidi-isolated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_client_ids_wrap_inside_their_card_and_are_bidi_isolated() {
    let Some(browser) = Browser::start("dashboard_hostile_ids", 1280, 1400).await else {
        return;
    };
    let t = TestServer::start(CONFIG).await;
    let long = "x".repeat(256);
    let reversing = "mallory\u{202e}";
    for client in [long.as_str(), reversing, "bob"] {
        for _ in 0..8 {
            t.server.decide(client, None, 1).await.expect("decided");
        }
    }
    let b = browser.client();
    b.goto(&format!("{}/", t.base))
        .await
        .expect("the page opens");
    let wait = Duration::from_secs(15);
    let listed = browser
        .wait_until(
            "return document.querySelectorAll('#top tbody tr').length === 3;",
            wait,
        )
        .await;
    assert!(listed, "the three limited clients are listed");

    // Every cell of every row, and the table, end inside the card.
    let inside = b
        .execute(
            "const card = document.querySelector('#top').closest('section').getBoundingClientRect(); \
             const edges = [document.querySelector('#top').getBoundingClientRect().right]; \
             for (const row of document.querySelectorAll('#top tbody tr')) \
               for (const cell of row.cells) edges.push(cell.getBoundingClientRect().right); \
             return Math.max(...edges) <= card.right + 0.5 ? true : \
               'right edge ' + Math.max(...edges) + ' past the card at ' + card.right;",
            vec![],
        )
        .await
        .expect("the script runs");
    assert_eq!(inside, serde_json::Value::Bool(true), "{inside}");

    // The element showing each id is isolated from the text around it.
    let isolated = "const id = arguments[0]; \
        const holder = [...document.querySelectorAll(arguments[1] + ' *')] \
          .find((e) => e.textContent === id && e.children.length === 0); \
        if (!holder) return 'no element holds the id alone'; \
        return holder.tagName === 'BDI' || getComputedStyle(holder).unicodeBidi === 'isolate' \
          ? true : holder.tagName + ' is not isolated: ' + getComputedStyle(holder).unicodeBidi;";
    for id in [long.as_str(), reversing] {
        let answer = b
            .execute(
                isolated,
                vec![serde_json::json!(id), serde_json::json!("#top tbody")],
            )
            .await
            .expect("the script runs");
        assert_eq!(answer, serde_json::Value::Bool(true), "{id:?}: {answer}");
    }

    // Inspected, the id heads the client panel: isolated, and inside its card.
    for id in [reversing, long.as_str()] {
        b.execute("showClient(arguments[0], '');", vec![serde_json::json!(id)])
            .await
            .expect("the script runs");
        let shown = browser
            .wait_until(
                &format!(
                    "return document.querySelector('#client').dataset.client === {} \
                     && !!document.querySelector('#client .client-head');",
                    serde_json::json!(id)
                ),
                wait,
            )
            .await;
        assert!(shown, "{id:?} inspected");
        let answer = b
            .execute(
                isolated,
                vec![
                    serde_json::json!(id),
                    serde_json::json!("#client .client-head"),
                ],
            )
            .await
            .expect("the script runs");
        assert_eq!(answer, serde_json::Value::Bool(true), "{id:?}: {answer}");
    }
    let inside = b
        .execute(
            "const card = document.querySelector('#client').closest('section').getBoundingClientRect(); \
             const head = document.querySelector('#client .client-head'); \
             const right = Math.max(...[head, ...head.querySelectorAll('*')] \
               .map((e) => e.getBoundingClientRect().right)); \
             return right <= card.right + 0.5 ? true : 'right edge ' + right + ' past ' + card.right;",
            vec![],
        )
        .await
        .expect("the script runs");
    assert_eq!(inside, serde_json::Value::Bool(true), "{inside}");

    let shot = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/test-artefacts/dashboard-hostile-ids.png");
    browser.screenshot(&[&shot]).await;
    browser.finish().await;
    t.stop().await;
}

/// Clients named `.` and `..`: a browser removes dot segments from a path
/// (`%2e` too, by the WHATWG URL rules), so `/v1/clients/..` would be asked
/// as `/v1/`; the page asks for the id in the query instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_named_dot_and_dot_dot_are_inspected_from_their_rows() {
    let Some(browser) = Browser::start("dashboard_dot_ids", 1280, 1000).await else {
        return;
    };
    let t = TestServer::start(CONFIG).await;
    for id in [".", ".."] {
        for _ in 0..8 {
            t.server.decide(id, None, 1).await.expect("decided");
        }
    }
    let b = browser.client();
    b.goto(&format!("{}/", t.base))
        .await
        .expect("the page opens");
    let wait = Duration::from_secs(15);
    for id in [".", ".."] {
        let row = format!("#top tbody tr[data-client=\"{id}\"]");
        let listed = browser
            .wait_until(&format!("return !!document.querySelector('{row}');"), wait)
            .await;
        assert!(listed, "{id:?} is listed");
        // Found and clicked in one script: the table is redrawn every
        // second, and a row found first may be gone by the click.
        b.execute(
            "document.querySelector(arguments[0]).click();",
            vec![serde_json::json!(row)],
        )
        .await
        .expect("clicked");
        let shown = browser
            .wait_until(
                &format!(
                    "const head = document.querySelector('#client .client-head'); \
                     return !!head && head.textContent.startsWith({}) \
                     && !!document.querySelector('#client .gauge[data-limit=\"1m\"]');",
                    serde_json::json!(format!("{id} on plan free"))
                ),
                wait,
            )
            .await;
        let panel = b
            .find(Locator::Id("client"))
            .await
            .expect("the client panel")
            .text()
            .await
            .expect("its text");
        assert!(shown, "{id:?} inspected after a click on its row: {panel}");
    }
    browser.finish().await;
    t.stop().await;
}

#[tokio::test]
async fn the_dashboard_is_off_when_disabled() {
    let t = TestServer::start(&format!("{CONFIG}\n[dashboard]\nenabled = false\n")).await;
    for path in ["/", "/assets/dashboard.js"] {
        let a = t.get(path).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{path}");
        assert!(a.error().contains("dashboard is off"), "{}", a.body);
    }
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_harness_renders_a_local_html_file() {
    let Some(browser) = Browser::start("local_html_file", 800, 600).await else {
        return;
    };
    let dir = tempfile::tempdir().expect("a directory");
    let page = dir.path().join("report.html");
    std::fs::write(
        &page,
        "<!doctype html><title>report</title><svg width=300 height=100><rect id=bar width=240 height=40 fill=teal /></svg>",
    )
    .expect("written");
    browser.open_file(&page).await;
    let width = browser
        .client()
        .execute(
            "return document.getElementById('bar').getBBox().width;",
            vec![],
        )
        .await
        .expect("script runs");
    assert_eq!(width.as_f64(), Some(240.0));
    assert_eq!(browser.client().title().await.expect("title"), "report");
    let shot = dir.path().join("shot.png");
    let png = browser.screenshot(&[&shot]).await;
    assert!(png.starts_with(b"\x89PNG") && std::fs::metadata(&shot).expect("saved").len() > 0);
    browser.finish().await;
}

/// A test that fails before `finish()` drops its browser: dropping it stops
/// the session's Chromium too, not only chromedriver (which left Chromium
/// running).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_dropped_without_finish_leaves_no_chromium_behind() {
    let Some(browser) = Browser::start("dropped_browser", 400, 300).await else {
        return;
    };
    let profile = browser.profile_dir().to_owned();
    let running = browser.processes();
    assert!(
        !running.is_empty(),
        "Chromium runs with {}",
        profile.display()
    );
    drop(browser);
    // The processes exit as the kernel gets to them: bounded, 5 s.
    let still_running = || {
        running.iter().any(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(&*profile.to_string_lossy())
        })
    };
    let mut gone = !still_running();
    for _ in 0..50 {
        if gone {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        gone = !still_running();
    }
    assert!(
        gone,
        "Chromium processes of {} still run",
        profile.display()
    );
}
