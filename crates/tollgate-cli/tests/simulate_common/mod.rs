//! Shared by the `simulate_*` tests: a config, the same plans built with
//! the core library, deterministic traffic, and the summary that
//! `tollgate::PlanLimiter` run directly gives for it.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Command, Output};

use tollgate::{AnyPolicy, Limit, Plan, PlanLimiter};
use tollgate_cli::simulate::{ClientRow, JsonSummary, LimitCount};

pub const CONFIG: &str = r#"
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
pub fn plans() -> (Plan, Plan) {
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
pub fn expected(requests: &[(String, u64)], malformed: u64) -> JsonSummary {
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
        // A dozen clients, far under the default max_clients: none evicted.
        evicted: 0,
        plans,
        clients,
    }
}

/// Deterministic traffic: 11 clients (c0 to c11 but c8), c0 to c2 busy,
/// times rising by 0 to `step_ms` in `unit_ms` steps.
pub fn traffic(count: usize, step_ms: u64, unit_ms: u64) -> Vec<(String, u64)> {
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

pub fn tollgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .expect("the tollgate binary runs")
}

pub struct Dir {
    dir: tempfile::TempDir,
}

impl Dir {
    pub fn new() -> Self {
        let dir = Dir {
            dir: tempfile::tempdir().unwrap(),
        };
        dir.write("plans.toml", CONFIG);
        dir
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }
    pub fn simulate_json(&self, extra: &[&str]) -> (JsonSummary, String) {
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

pub fn rfc3339(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// Lines with a malformed line inserted before every 500th request; returns
/// the text and the 1-based numbers of the malformed lines.
pub fn with_malformed(
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

pub fn check_malformed(stderr: &str, file: &str, numbers: &[usize]) {
    let reported: Vec<usize> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("malformed: {file}:")))
        .map(|rest| rest.split(':').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(reported, numbers, "{stderr}");
}
