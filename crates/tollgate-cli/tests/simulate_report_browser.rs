//! `tollgate simulate --report` looked at as a user would: the report of a
//! generated log with one limited client is opened from its file in a real
//! headless Chromium, which must draw every chart with its points and list
//! that client (and only it) in the table of would-be rejected clients.
//! The screenshot is kept in target/test-artefacts/ and
//! docs/simulate-report.png (shown in the README). Skipped when Chromium is
//! missing, unless `TOLLGATE_REQUIRE_BROWSER=1`.

mod simulate_common;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use simulate_common::{tollgate, Dir};
use tollgate_testkit::browser::Browser;

/// The log's first time: 2025-12-02T10:00:00Z.
const START_MS: u64 = 1_764_669_600_000;

/// Two minutes of JSON lines in time order: `hammer` (free plan, 5 per
/// second) sends 10 a second; `c1` (paid, GCRA 8 per second, and a shadow
/// of 3 per second) sends 2 a second; `u1` to `u6` (free) one every
/// 3 seconds each, in turn; and two malformed lines.
fn log() -> String {
    let mut text = String::new();
    for tenth in 0..1_200u64 {
        let at = START_MS + tenth * 100;
        let mut line = |client: &str| {
            let _ = writeln!(text, "{{\"client\":\"{client}\",\"time\":{at}}}");
        };
        line("hammer");
        if tenth % 5 == 0 {
            line("c1");
        }
        if tenth % 5 == 1 {
            line(&format!("u{}", tenth / 5 % 6 + 1));
        }
        if tenth == 600 {
            text.push_str("{\"client\":\"late\"}\nnot json\n");
        }
    }
    text
}

fn artefacts() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    vec![
        root.join("target/test-artefacts/simulate-report.png"),
        root.join("docs/simulate-report.png"),
    ]
}

/// For every chart of `selector`: the most points of any of its lines (the
/// legend's are two points each).
const POINTS: &str = "return Array.from(document.querySelectorAll(arguments[0])).map(f => \
     Math.max(0, ...Array.from(f.querySelectorAll('polyline')).map(p => p.points.numberOfItems)));";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_shows_its_charts_and_the_limited_client_in_a_real_browser() {
    let Some(browser) = Browser::start("simulate_report", 1000, 1500).await else {
        return;
    };
    let dir = Dir::new();
    let log = dir.write("access.jsonl", &log());
    let report = dir.path("report.html");
    let config = dir.path("plans.toml");
    let out = tollgate(&[
        "simulate",
        "--format",
        "json",
        "--config",
        config.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
        &log,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("(2 malformed)"), "{stdout}");

    browser.open_file(&report).await;
    let b = browser.client();
    let points = |selector: &'static str| async move {
        let got = b
            .execute(POINTS, vec![serde_json::json!(selector)])
            .await
            .expect("the script runs");
        serde_json::from_value::<Vec<u64>>(got).expect("numbers")
    };
    // Two plans and the top clients (8 clients, 6 charted), each
    // with one point per second of the two minutes.
    let plans = points("figure.chart.plan").await;
    assert_eq!(plans.len(), 2, "{plans:?}");
    let clients = points("figure.chart.client").await;
    assert_eq!(clients.len(), 6, "{clients:?}");
    for n in plans.iter().chain(&clients) {
        assert!(*n >= 100, "a chart with {n} points: {plans:?} {clients:?}");
    }
    let listed = b
        .execute(
            "return Array.from(document.querySelectorAll('#clients tr td:first-child'))\
             .map(td => td.textContent);",
            vec![],
        )
        .await
        .expect("the table is read");
    assert_eq!(
        listed,
        serde_json::json!(["hammer"]),
        "the limited client, alone"
    );
    let first_chart = b
        .execute(
            "return document.querySelector('figure.chart.client').dataset.client;",
            vec![],
        )
        .await
        .expect("the first client chart");
    assert_eq!(first_chart, "hammer");
    // The page is drawn: the first timeline has a visible width on screen.
    let drawn = browser
        .wait_until(
            "const r = document.querySelector('figure.chart.plan svg').getBoundingClientRect(); \
             return r.width > 500 && r.height > 100;",
            Duration::from_secs(10),
        )
        .await;
    assert!(drawn, "the timeline is laid out");

    let paths = artefacts();
    let refs: Vec<&std::path::Path> = paths.iter().map(PathBuf::as_path).collect();
    let png = browser.screenshot(&refs).await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    browser.finish().await;
}
