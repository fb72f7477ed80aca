//! `/metrics` content, store failures and the failure policies, and the
//! circuit breaker's settings.

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
    // Counted for the plan, as answered; but no limit decided them, so no
    // limit is said to have rejected them (an outage would read as limits
    // reached, shadow limits included).
    assert_eq!(
        metric(
            &m,
            "tollgate_requests_total{plan=\"free\",outcome=\"rejected\"}"
        ),
        2
    );
    for limit in ["1s", "1d"] {
        let rejected = format!(
            "tollgate_limit_decisions_total{{plan=\"free\",limit=\"{limit}\",outcome=\"rejected\"}}"
        );
        assert_eq!(metric(&m, &rejected), 0, "{limit}");
    }
    let shadow = t
        .post_check(r#"{"client":"pia","plan":"dark"}"#)
        .await
        .json();
    assert_eq!(shadow["decided_by"], "fail-closed");
    let m = t.get("/metrics").await.body;
    assert_eq!(
        metric(
            &m,
            "tollgate_shadow_rejections_total{plan=\"dark\",limit=\"trial\"}"
        ),
        0
    );
    t.stop().await;
}

/// A look answered by the local fallback tells its waits as one answered
/// by the store does: those of a request of cost 1, from the fallback's own
/// limiter, not a look's own 0 beside `allowed: false`.
#[tokio::test]
async fn a_look_answered_by_the_local_fallback_gives_its_waits() {
    let t = down_server("local-fallback", true).await;
    t.check("lulu", 1).await;
    t.clock.advance(300);
    t.check("lulu", 1).await;
    let third = t.check("lulu", 1).await.json();
    assert_eq!(
        (
            &third["allowed"],
            &third["decided_by"],
            &third["retry_after_ms"]
        ),
        (&false.into(), &"local-fallback".into(), &700.into())
    );
    let look = t.get("/v1/remaining/lulu").await.json();
    assert_eq!(look["decided_by"], "local-fallback");
    assert_eq!(
        (&look["allowed"], &look["retry_after_ms"]),
        (&false.into(), &700.into())
    );
    assert_eq!(look["limits"][0]["retry_after_ms"], 700);
    assert_eq!(look["limits"][0]["remaining"], 0);
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

/// One metric of the README's list: its name after `tollgate_` and the
/// names of its labels.
#[derive(Debug)]
struct Documented {
    name: String,
    labels: Vec<String>,
}

/// The metrics the README promises, read from its "Metrics (all
/// `tollgate_*`)" paragraph, so that the list checked here is the list
/// people read (asides in parentheses are skipped).
fn documented_metrics() -> Vec<Documented> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md next to the workspace");
    let start = readme
        .find("Metrics (all `tollgate_*`):")
        .expect("the README lists the metrics");
    let paragraph = &readme[start..];
    let paragraph = &paragraph[..paragraph.find("\n\n").unwrap_or(paragraph.len())];
    let list = paragraph[paragraph.find(':').unwrap() + 1..]
        .split(". ")
        .next()
        .unwrap();
    let mut without_asides = String::new();
    let mut depth = 0;
    for c in list.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => without_asides.push(c),
            _ => {}
        }
    }
    without_asides
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|item| {
            let (name, labels) = item.split_once('{').unwrap_or((item, "}"));
            let labels = labels.trim_end_matches('}');
            Documented {
                name: name.to_owned(),
                labels: labels
                    .split(',')
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned)
                    .collect(),
            }
        })
        .collect()
}

/// The label names of one sample line (`name{a="x",b="y"} 1`), sorted.
fn label_names(sample: &str) -> Vec<String> {
    let Some((_, labels)) = sample.split_once('{') else {
        return Vec::new();
    };
    let labels = &labels[..labels.rfind('}').unwrap()];
    let mut names: Vec<String> = labels
        .split("\",")
        .map(|pair| pair.split('=').next().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn every_documented_metric_is_served_with_its_labels_and_nothing_else_is() {
    let documented = documented_metrics();
    assert!(documented.len() >= 10, "{documented:?}");
    let t = TestServer::start(CONFIG).await;
    t.check("nora", 1).await;
    let m = t.get("/metrics").await.body;
    let types: Vec<&str> = m
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    for metric in &documented {
        let name = format!("tollgate_{}", metric.name);
        assert!(types.contains(&name.as_str()), "no # TYPE {name} in\n{m}");
        let histogram = m.contains(&format!("# TYPE {name} histogram\n"));
        let series = if histogram {
            format!("{name}_count")
        } else {
            name.clone()
        };
        let mut expected = metric.labels.clone();
        expected.sort();
        let samples: Vec<&str> = m
            .lines()
            .filter(|l| l.split(['{', ' ']).next() == Some(series.as_str()))
            .collect();
        assert!(!samples.is_empty(), "no sample of {series} in\n{m}");
        for sample in samples {
            assert_eq!(label_names(sample), expected, "{sample}");
        }
    }
    for name in types {
        assert!(
            documented
                .iter()
                .any(|d| name.strip_prefix("tollgate_") == Some(d.name.as_str())),
            "{name} is served but not in the README's list"
        );
    }
    t.stop().await;
}
