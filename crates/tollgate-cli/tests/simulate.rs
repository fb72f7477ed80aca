//! `tollgate simulate` against an independent computation: the same
//! requests, put in time order by the test and decided by
//! `tollgate::PlanLimiter` directly, must give the summary the binary prints,
//! in every log format; malformed lines are counted with their numbers.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tollgate::{AnyPolicy, Limit, Plan, PlanLimiter};
use tollgate_cli::simulate::{ClientRow, JsonSummary, LimitCount};

const CONFIG: &str = r#"
default_plan = "free"

[clients]
"c1" = "paid"
"c2" = "paid"

[[plans.free]]
name = "1s"
policy = "sliding-window"
limit = 5
window = "1s"

[[plans.free]]
name = "1m"
policy = "token-bucket"
limit = 60
window = "1m"

[[plans.paid]]
name = "1s"
policy = "gcra"
limit = 8
window = "1s"

[[plans.paid]]
name = "burst"
policy = "sliding-window"
limit = 3
window = "1s"
shadow = true
"#;

/// The plans of CONFIG, built with the core library (not from the file).
fn plans() -> (Plan, Plan) {
    let limit = |name: &str, policy, n, window, shadow| {
        Limit::new(
            name,
            AnyPolicy::from_name(policy, n, window).unwrap(),
            shadow,
        )
    };
    let free = Plan::new(
        "free",
        vec![
            limit("1s", "sliding-window", 5, 1_000, false),
            limit("1m", "token-bucket", 60, 60_000, false),
        ],
    )
    .unwrap();
    let paid = Plan::new(
        "paid",
        vec![
            limit("1s", "gcra", 8, 1_000, false),
            limit("burst", "sliding-window", 3, 1_000, true),
        ],
    )
    .unwrap();
    (free, paid)
}

/// Decides `requests` (already in time order) with `PlanLimiter` and
/// counts as the README's JSON schema says.
fn expected(requests: &[(String, u64)], malformed: u64) -> JsonSummary {
    let (free, paid) = plans();
    let limiter = PlanLimiter::new();
    let mut plans: BTreeMap<String, BTreeMap<String, LimitCount>> = BTreeMap::new();
    for plan in [&free, &paid] {
        let limits = plan
            .limits()
            .iter()
            .map(|l| (l.name().to_owned(), LimitCount { rejected: 0 }));
        plans.insert(plan.name().to_owned(), limits.collect());
    }
    let mut clients: HashMap<&str, ClientRow> = HashMap::new();
    let mut rejected = 0;
    for (client, time) in requests {
        let plan = if client == "c1" || client == "c2" {
            &paid
        } else {
            &free
        };
        let decision = limiter.check(plan, client, *time, 1);
        let row = clients.entry(client).or_insert_with(|| ClientRow {
            client: client.clone(),
            plan: plan.name().to_owned(),
            requests: 0,
            rejected: 0,
            first_rejected_ms: None,
        });
        row.requests += 1;
        if !decision.allowed {
            rejected += 1;
            row.rejected += 1;
            row.first_rejected_ms.get_or_insert(*time);
        }
        for limit in &decision.limits {
            if !limit.decision.allowed {
                plans
                    .get_mut(plan.name())
                    .unwrap()
                    .get_mut(&*limit.name)
                    .unwrap()
                    .rejected += 1;
            }
        }
    }
    let mut clients: Vec<ClientRow> = clients.into_values().filter(|c| c.rejected > 0).collect();
    clients.sort_by(|a, b| b.rejected.cmp(&a.rejected).then(a.client.cmp(&b.client)));
    JsonSummary {
        requests: requests.len() as u64,
        allowed: requests.len() as u64 - rejected,
        rejected,
        malformed,
        plans,
        clients,
    }
}

/// Deterministic traffic: 11 clients (c0 to c11 but c8), c0 to c2 busy,
/// times rising by 0 to `step_ms` in `unit_ms` steps.
fn traffic(count: usize, step_ms: u64, unit_ms: u64) -> Vec<(String, u64)> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        state >> 33
    };
    let mut time = 1_764_669_600_000;
    (0..count)
        .map(|_| {
            let steps = step_ms / unit_ms;
            // One step in six when steps are whole seconds: several requests a second.
            time += if steps == 1 {
                u64::from(next() % 6 == 0)
            } else {
                next() % (steps + 1)
            } * unit_ms;
            let pick = next() % 20;
            let client = if pick < 9 { pick % 3 } else { pick % 12 };
            (format!("c{client}"), time)
        })
        .collect()
}

fn tollgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .expect("the tollgate binary runs")
}

struct Dir {
    dir: tempfile::TempDir,
}

impl Dir {
    fn new() -> Self {
        let dir = Dir {
            dir: tempfile::tempdir().unwrap(),
        };
        dir.write("plans.toml", CONFIG);
        dir
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn write(&self, name: &str, text: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }
    fn simulate_json(&self, extra: &[&str]) -> (JsonSummary, String) {
        let config = self.path("plans.toml");
        let mut args = vec!["simulate", "--json", "--config", config.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = tollgate(&args);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(out.status.success(), "{stderr}");
        let text = String::from_utf8(out.stdout).unwrap();
        (
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")),
            stderr,
        )
    }
}

fn rfc3339(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// Lines with a malformed line inserted before every 500th request; returns
/// the text and the 1-based numbers of the malformed lines.
fn with_malformed(
    header: Option<&str>,
    lines: impl Iterator<Item = String>,
    bad: &str,
) -> (String, Vec<usize>) {
    let mut text = header.map(|h| format!("{h}\n")).unwrap_or_default();
    let mut number = usize::from(header.is_some());
    let mut bad_lines = Vec::new();
    for (i, line) in lines.enumerate() {
        if i % 500 == 499 {
            number += 1;
            bad_lines.push(number);
            text.push_str(bad);
            text.push('\n');
        }
        number += 1;
        text.push_str(&line);
        text.push('\n');
    }
    (text, bad_lines)
}

fn check_malformed(stderr: &str, file: &str, numbers: &[usize]) {
    let reported: Vec<usize> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("malformed: {file}:")))
        .map(|rest| rest.split(':').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(reported, numbers, "{stderr}");
}

#[test]
fn combined_logs_give_the_limiters_numbers() {
    let requests = traffic(3000, 1000, 1000);
    let (text, bad) = with_malformed(
        None,
        requests.iter().map(|(client, ms)| {
            let time = chrono::DateTime::from_timestamp_millis(*ms as i64).unwrap();
            format!(
                r#"{client} - - [{}] "GET /x HTTP/1.1" 200 5 "-" "t/1""#,
                time.format("%d/%b/%Y:%H:%M:%S +0000")
            )
        }),
        "garbage",
    );
    let dir = Dir::new();
    let log = dir.write("access.log", &text);
    let (summary, stderr) = dir.simulate_json(&[&log]);
    assert!(
        summary.rejected > 50 && summary.plans["paid"]["burst"].rejected > 0,
        "{summary:?}"
    );
    assert_eq!(summary, expected(&requests, bad.len() as u64));
    check_malformed(&stderr, &log, &bad);
}

#[test]
fn json_lines_with_every_time_form_give_the_limiters_numbers() {
    let requests = traffic(3000, 300, 1);
    let (text, bad) = with_malformed(
        None,
        requests
            .iter()
            .enumerate()
            .map(|(i, (client, ms))| match i % 3 {
                0 => format!(r#"{{"who":"{client}","path":"/x","at":{ms}}}"#),
                1 => format!(r#"{{"at":"{}","who":"{client}"}}"#, rfc3339(*ms)),
                _ => format!(
                    r#"{{"at":{}.{:03},"who":"{client}"}}"#,
                    ms / 1000,
                    ms % 1000
                ),
            }),
        r#"{"who":"c1"}"#,
    );
    let dir = Dir::new();
    let log = dir.write("access.jsonl", &text);
    let (summary, stderr) =
        dir.simulate_json(&["--format", "json", "--client", "who", "--time", "at", &log]);
    assert_eq!(summary, expected(&requests, bad.len() as u64));
    check_malformed(&stderr, &log, &bad);
    assert!(stderr.contains("no key \"at\""), "{stderr}");
}

#[test]
fn csv_logs_merged_from_two_files_give_the_limiters_numbers() {
    let requests = traffic(3000, 300, 1);
    // Alternate lines go to two files; the merge puts them back in time
    // order, ties to the file named first.
    let mut files: [Vec<(usize, &(String, u64))>; 2] = [Vec::new(), Vec::new()];
    for (i, request) in requests.iter().enumerate() {
        files[(i / 7) % 2].push((i, request));
    }
    let dir = Dir::new();
    let mut logs = Vec::new();
    let mut all_bad = Vec::new();
    for (n, file) in files.iter().enumerate() {
        let (text, bad) = with_malformed(
            Some("time,path,client"),
            file.iter()
                .map(|(_, (client, ms))| format!("{},\"/a,b\",{client}", rfc3339(*ms))),
            "1764669600000,\"unclosed,c1",
        );
        logs.push(dir.write(&format!("log{n}.csv"), &text));
        all_bad.push(bad);
    }
    let mut ordered: Vec<(u64, usize, usize, String)> = files
        .iter()
        .enumerate()
        .flat_map(|(n, file)| file.iter().map(move |(i, (c, ms))| (*ms, n, *i, c.clone())))
        .collect();
    ordered.sort();
    let in_order: Vec<(String, u64)> = ordered.into_iter().map(|(ms, _, _, c)| (c, ms)).collect();
    let (summary, stderr) = dir.simulate_json(&["--format", "csv", &logs[0], &logs[1]]);
    let malformed = (all_bad[0].len() + all_bad[1].len()) as u64;
    assert_eq!(summary, expected(&in_order, malformed));
    check_malformed(&stderr, &logs[0], &all_bad[0]);
    check_malformed(&stderr, &logs[1], &all_bad[1]);
}

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
    let out = tollgate(&[
        "simulate",
        "--format",
        "csv",
        "--config",
        config.to_str().unwrap(),
        &log,
    ]);
    assert!(out.status.success());
    let shown = String::from_utf8(out.stdout).unwrap();
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
