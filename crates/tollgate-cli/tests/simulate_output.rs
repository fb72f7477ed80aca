//! `tollgate simulate`'s outputs: the `--json` schema, the text summary,
//! the HTML report, and errors that name the file.

mod simulate_common;

use std::path::Path;

use simulate_common::*;
use tollgate_cli::simulate::JsonSummary;

#[test]
fn the_json_summary_has_exactly_the_documented_keys_and_round_trips() {
    let requests = traffic(500, 100, 1);
    let text: String = requests
        .iter()
        .map(|(c, ms)| format!("{{\"client\":\"{c}\",\"time\":{ms}}}\n"))
        .collect();
    let dir = Dir::new();
    let log = dir.write("a.jsonl", &text);
    let config = dir.path("plans.toml");
    let out = tollgate(&[
        "simulate",
        "--json",
        "--format",
        "json",
        "--config",
        config.to_str().unwrap(),
        &log,
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().count(),
        1,
        "one JSON object on one line: {text}"
    );
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        keys(&value),
        [
            "allowed",
            "clients",
            "evicted",
            "malformed",
            "plans",
            "rejected",
            "requests"
        ]
    );
    assert_eq!(keys(&value["plans"]), ["free", "paid"]);
    assert_eq!(keys(&value["plans"]["paid"]), ["1s", "burst"]);
    assert_eq!(keys(&value["plans"]["free"]["1s"]), ["rejected"]);
    let first = &value["clients"][0];
    assert_eq!(
        keys(first),
        [
            "client",
            "first_rejected_ms",
            "plan",
            "rejected",
            "requests"
        ]
    );
    assert!(first["first_rejected_ms"].is_u64());
    let summary: JsonSummary = serde_json::from_value(value.clone()).unwrap();
    assert_eq!(serde_json::to_value(&summary).unwrap(), value);
    assert_eq!(summary, expected(&requests, 0));
}

#[test]
fn the_text_summary_shows_plans_limits_shadows_clients_and_malformed_lines() {
    let requests = traffic(2000, 300, 1);
    let mut text: String = requests
        .iter()
        .map(|(c, ms)| format!("{ms},{c}\n"))
        .collect();
    text.insert_str(0, "time,client\n");
    text.push_str(&format!("{},x\n", "9".repeat(70 * 1024)));
    text.push_str("1764669600000,\n");
    let dir = Dir::new();
    let log = dir.write("a.csv", &text);
    let config = dir.path("plans.toml");
    let shown = text_summary("csv", &config, &log);
    let want = expected(&requests, 2);
    assert!(
        shown.starts_with(&format!(
            "requests: {} from 2003 lines (2 malformed), 11 clients",
            want.requests
        )),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "allowed: {}, rejected: {}",
            want.allowed, want.rejected
        )),
        "{shown}"
    );
    let free_1s = want.plans["free"]["1s"].rejected;
    assert!(
        shown.contains(&format!(
            "    limit \"1s\" (sliding-window 5 per 1s): {free_1s}\n"
        )),
        "{shown}"
    );
    let burst = want.plans["paid"]["burst"].rejected;
    assert!(shown.contains(&format!(
        "shadow limits (decided, never reject):\n  plan \"paid\", limit \"burst\" (sliding-window 3 per 1s): {burst} would have been rejected\n"
    )), "{shown}");
    let top = &want.clients[0];
    assert!(
        shown.contains(&format!(
            "clients that would have been rejected: {}\n",
            want.clients.len()
        )),
        "{shown}"
    );
    let row = [
        top.client.clone(),
        top.plan.clone(),
        top.requests.to_string(),
        top.rejected.to_string(),
    ];
    assert!(
        shown.lines().any(|l| l
            .split_whitespace()
            .take(4)
            .eq(row.iter().map(String::as_str))),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("{log}:2002: line longer than 65536 bytes\n")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("{log}:2003: the client id is empty\n")),
        "{shown}"
    );
}

/// A client id is the log's to choose: one holding ESC or a newline must
/// not clear the terminal or forge a row of the text summary. It is shown
/// escaped as plan names are (`"\u{1b}[2J..."`), and an ordinary id keeps
/// its place in the columns, quotes and backslashes included (they were
/// shown quoted and escaped too).
#[test]
fn client_ids_with_control_characters_are_escaped_in_the_text_summary() {
    let forged = "\u{1b}[2J\u{1b}[Hfake row\nalice  free  1 0\r\u{7}";
    let mut text = String::new();
    let lookalike = "\"\\u{1b}[2J\"";
    for client in ["bob", forged, "quote\"id", "back\\slash", lookalike, "bob "] {
        let id = serde_json::to_string(client).unwrap();
        for _ in 0..6 {
            text.push_str(&format!("{{\"client\":{id},\"time\":1764669600000}}\n"));
        }
    }
    let dir = Dir::new();
    let log = dir.write("a.jsonl", &text);
    let config = dir.path("plans.toml");
    let shown = text_summary("json", &config, &log);
    assert!(
        !shown.contains(['\u{1b}', '\r', '\u{7}']),
        "control characters reach the terminal: {shown:?}"
    );
    assert!(
        !shown.lines().any(|line| line.starts_with("alice")),
        "a forged row: {shown}"
    );
    assert!(
        shown.contains(&format!("\n  {forged:?} free ")),
        "the id shown escaped: {shown}"
    );
    assert!(
        shown.contains(&format!("\n  {:<24} free ", format!("{lookalike:?}"))),
        "an id beginning with a quote shown escaped, unlike the escaped ESC: {shown}"
    );
    assert!(
        shown.contains(&format!("\n  {:<24} free ", "\"bob \"")),
        "a trailing space shown between quotes: {shown}"
    );
    for ordinary in ["bob", "quote\"id", "back\\slash"] {
        assert!(
            shown.contains(&format!(
                "\n  {:<24} {:<12} {:>10} {:>10}  2025-12-02T10:00:00.000Z\n",
                ordinary, "free", 6, 1
            )),
            "an ordinary id in its column: {shown}"
        );
    }
    // The JSON summary keeps the id as it is (serde escapes it).
    let (summary, _) = dir.simulate_json(&["--format", "json", &log]);
    assert!(summary.clients.iter().any(|row| row.client == forged));
}

#[test]
fn the_report_is_one_offline_html_file_with_the_charts_and_the_table() {
    let requests = traffic(3000, 300, 1);
    let text: String = requests
        .iter()
        .map(|(c, ms)| format!("{{\"client\":\"{c}\",\"time\":{ms}}}\n"))
        .collect();
    let dir = Dir::new();
    let log = dir.write(
        "a.jsonl",
        &format!("{text}{{\"client\":\"https://evil\",\"time\":1}}\nnot json: http://x\n"),
    );
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
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.starts_with("<!doctype html>"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "a URL in the report"
    );
    assert!(!html.contains("<script") && !html.contains(" src=") && !html.contains("href="));
    // One chart per plan, one per top client (6 of the 12 clients).
    assert_eq!(html.matches("<figure class=\"chart plan\"").count(), 2);
    assert_eq!(html.matches("<figure class=\"chart client\"").count(), 6);
    assert_eq!(html.matches("<svg").count(), 8);
    assert!(
        html.contains("<polyline") || html.contains("<path"),
        "the charts have lines"
    );
    let want = expected(&requests, 1);
    let top = &want.clients[0];
    assert!(html.contains(&format!("data-client=\"{}\"", top.client)));
    assert!(html.contains(&format!(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
        top.client, top.plan, top.requests, top.rejected
    )));
    assert!(html.contains("<table id=\"plans\">") && html.contains("<table id=\"clients\">"));
}

#[test]
fn unreadable_inputs_are_errors_that_name_the_file() {
    let dir = Dir::new();
    let log = dir.write("a.csv", "when,who\n1,a\n");
    let config = dir.path("plans.toml");
    let config = config.to_str().unwrap();
    let out = tollgate(&["simulate", "--format", "csv", "--config", config, &log]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(&format!(
            "{log}: line 1: the CSV header has no column \"client\" (its columns: when, who)"
        )),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    let missing = Path::new(&log).with_extension("nope");
    let out = tollgate(&["simulate", "--config", config, missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open"));
    let out = tollgate(&["simulate", "--config", config, "--client", "agent", &log]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("http_user_agent"));
}

#[test]
fn an_empty_client_field_is_refused_before_reading_in_every_format() {
    let dir = Dir::new();
    let log = dir.write("a.jsonl", "{\"client\":\"a\",\"time\":1}\n");
    let config = dir.path("plans.toml");
    let config = config.to_str().unwrap();
    for format in ["json", "csv", "combined"] {
        let args = [
            "simulate", "--format", format, "--config", config, "--client", "", &log,
        ];
        let out = tollgate(&args);
        assert_eq!(out.status.code(), Some(2), "{format}");
        assert!(out.stdout.is_empty(), "{format}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "tollgate simulate: --client is empty: name the field holding the client id, \
             or leave --client out for the format's default\n",
            "{format}"
        );
    }
}

#[test]
fn malformed_lines_are_all_counted_and_the_first_twenty_shown_with_their_numbers() {
    let requests = traffic(100, 300, 1);
    let mut text = String::new();
    // A malformed line after every fourth request: 25 in all, at lines
    // 5, 10, ..., 125.
    for (i, (client, ms)) in requests.iter().enumerate() {
        text.push_str(&format!("{{\"client\":\"{client}\",\"time\":{ms}}}\n"));
        if i % 4 == 3 {
            text.push_str("{\"client\":\"x\",\"time\":\"yesterday\"}\n");
        }
    }
    let dir = Dir::new();
    let log = dir.write("a.jsonl", &text);
    // The line numbers listed as `FILE:LINE: why` (after "malformed: " on
    // standard error).
    let prefix = format!("{log}:");
    let numbers = |listed: &str| -> Vec<u64> {
        listed
            .lines()
            .map(|l| {
                let l = l.trim();
                l.strip_prefix("malformed: ").unwrap_or(l)
            })
            .filter_map(|l| l.strip_prefix(prefix.as_str()))
            .map(|l| l.split(':').next().unwrap().parse().unwrap())
            .collect()
    };
    let first_twenty: Vec<u64> = (1..=20).map(|k| 5 * k).collect();
    let config = dir.path("plans.toml");
    let config = config.to_str().unwrap();
    let out = tollgate(&["simulate", "--format", "json", "--config", config, &log]);
    assert!(out.status.success());
    let shown = String::from_utf8(out.stdout).unwrap();
    assert!(
        shown.contains("\nmalformed lines: 25 (the first 20 shown)\n"),
        "{shown}"
    );
    assert_eq!(numbers(&shown), first_twenty, "{shown}");
    assert!(shown.contains(&format!("{log}:5: ")), "{shown}");
    // The decisions are those of the well-formed lines alone.
    let (summary, stderr) = dir.simulate_json(&["--format", "json", &log]);
    assert_eq!(summary, expected(&requests, 25));
    assert_eq!(numbers(&stderr), first_twenty, "{stderr}");
    assert!(
        stderr.contains("malformed: 25 lines in all (the first 20 shown)\n"),
        "{stderr}"
    );
}

/// The text summary of `tollgate simulate` on `log` in `format` under the
/// plans at `config`, which must succeed.
fn text_summary(format: &str, config: &Path, log: &str) -> String {
    let config = config.to_str().unwrap();
    let out = tollgate(&["simulate", "--format", format, "--config", config, log]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// With more clients at once than `[store] max_clients` holds, states in
/// use are dropped for room and their clients decided afresh, as in
/// `serve`: the summary says so, since its rejections are then fewer than
/// with room for all (an audit: 9,840 of 10,000 allowed against 5,000,
/// without a word).
#[test]
fn a_simulation_past_max_clients_says_clients_were_evicted() {
    // 200 clients, 7 requests each within one second, in turn: the 6th and
    // 7th of each are over plan free's 5 per second.
    let mut text = String::new();
    for round in 0..7u64 {
        for client in 0..200 {
            let ms = 1_764_669_600_000 + round * 100;
            text.push_str(&format!("{{\"client\":\"u{client}\",\"time\":{ms}}}\n"));
        }
    }
    let dir = Dir::new();
    let log = dir.write("a.jsonl", &text);
    let roomy = text_summary("json", &dir.path("plans.toml"), &log);
    assert!(roomy.contains("rejected: 400 "), "{roomy}");
    assert!(!roomy.contains("evicted"), "{roomy}");
    let capped = dir.write(
        "capped.toml",
        &format!("{CONFIG}\n[store]\nmax_clients = 16\n"),
    );
    let shown = text_summary("json", Path::new(&capped), &log);
    assert!(
        !shown.contains("rejected: 400 "),
        "fewer rejections: {shown}"
    );
    assert!(
        shown.contains("evicted: ") && shown.contains("max_clients = 16"),
        "{shown}"
    );
    // --json says it too (audit: it did not).
    let evicted = |config: &Path| {
        let config = config.to_str().unwrap();
        let out = tollgate(&[
            "simulate", "--json", "--format", "json", "--config", config, &log,
        ]);
        assert!(out.status.success(), "{out:?}");
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        value["evicted"].as_u64().expect("evicted, a number")
    };
    assert_eq!(evicted(&dir.path("plans.toml")), 0);
    assert!(evicted(Path::new(&capped)) > 0);
}
