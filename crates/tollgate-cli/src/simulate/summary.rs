//! What a simulation found: the JSON of `--json` (a contract, documented in
//! the README) and the text summary.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};
use tollgate::{Limit, Policy};
use tollgate_config::format_duration;
use tollgate_config::Config;

use super::engine::Simulation;
use super::source::Malformed;

/// The `--json` summary: exactly these keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonSummary {
    /// Requests decided (malformed lines excluded).
    pub requests: u64,
    /// Of them, allowed.
    pub allowed: u64,
    /// Of them, rejected.
    pub rejected: u64,
    /// Malformed lines.
    pub malformed: u64,
    /// Times a client's state in use was dropped for room (`[store]
    /// max_clients`), as `serve` would: that client was then decided
    /// afresh, so the rejections are fewer than with room for all.
    pub evicted: u64,
    /// Per plan, per limit: requests the limit said no to (for a shadow
    /// limit: would have said no to; it rejected none).
    pub plans: BTreeMap<String, BTreeMap<String, LimitCount>>,
    /// The clients with at least one rejection, by rejections (most first), then id.
    pub clients: Vec<ClientRow>,
}

/// One limit's count in [`JsonSummary::plans`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitCount {
    /// Requests this limit said no to.
    pub rejected: u64,
}

/// One client in [`JsonSummary::clients`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientRow {
    /// The client id.
    pub client: String,
    /// Its plan.
    pub plan: String,
    /// Its requests.
    pub requests: u64,
    /// Of them, rejected.
    pub rejected: u64,
    /// The log time (epoch ms) of its first rejection.
    pub first_rejected_ms: Option<u64>,
}

/// Everything a simulation found.
pub struct Outcome {
    /// The JSON summary.
    pub json: JsonSummary,
    /// The malformed lines (counted, and the first few).
    pub malformed: Malformed,
    /// Lines read, over all files.
    pub lines: u64,
    /// Distinct clients seen.
    pub client_count: usize,
    /// The earliest and latest request times.
    pub span_ms: Option<(u64, u64)>,
}

impl Outcome {
    /// Collects the counts of a finished simulation.
    pub fn new(
        simulation: &Simulation<'_>,
        config: &Config,
        malformed: Malformed,
        lines: u64,
    ) -> Self {
        let plans = config
            .plans()
            .iter()
            .zip(&simulation.plans)
            .map(|(plan, tally)| {
                let limits = plan
                    .limits()
                    .iter()
                    .zip(&tally.limit_rejections)
                    .map(|(limit, &rejected)| (limit.name().to_owned(), LimitCount { rejected }))
                    .collect();
                (plan.name().to_owned(), limits)
            })
            .collect();
        let mut clients: Vec<ClientRow> = simulation
            .clients
            .iter()
            .filter(|(_, tally)| tally.rejected > 0)
            .map(|(client, tally)| ClientRow {
                client: client.to_string(),
                plan: config.plans()[tally.plan].name().to_owned(),
                requests: tally.requests,
                rejected: tally.rejected,
                first_rejected_ms: tally.first_rejected_ms,
            })
            .collect();
        clients.sort_by(|a, b| {
            b.rejected
                .cmp(&a.rejected)
                .then_with(|| a.client.cmp(&b.client))
        });
        Self {
            json: JsonSummary {
                requests: simulation.requests,
                allowed: simulation.requests - simulation.rejected,
                rejected: simulation.rejected,
                malformed: malformed.count,
                evicted: simulation.evicted(),
                plans,
                clients,
            },
            malformed,
            lines,
            client_count: simulation.clients.len(),
            span_ms: simulation.span_ms,
        }
    }

    /// The text summary; `shown_clients` caps the client list.
    pub fn render_text(
        &self,
        config: &Config,
        simulation: &Simulation<'_>,
        shown_clients: usize,
    ) -> String {
        let json = &self.json;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "requests: {} from {} lines ({} malformed), {} clients{}",
            json.requests,
            self.lines,
            json.malformed,
            self.client_count,
            self.span_ms
                .map(|(a, b)| format!(", {} to {}", format_ms(a), format_ms(b)))
                .unwrap_or_default()
        );
        let _ = writeln!(
            out,
            "allowed: {}, rejected: {}{}",
            json.allowed,
            json.rejected,
            percent(json.rejected, json.requests)
        );
        if json.evicted > 0 {
            let _ = writeln!(
                out,
                "evicted: {} times a client's state was dropped for room ([store] max_clients = {}, as serve \
                 would), and that client decided afresh: fewer rejections than with room for every client",
                json.evicted, config.store.max_clients
            );
        }
        render_plans(&mut out, config, simulation);
        self.render_clients(&mut out, shown_clients);
        self.render_malformed(&mut out);
        out
    }

    fn render_clients(&self, out: &mut String, shown: usize) {
        let clients = &self.json.clients;
        let _ = writeln!(
            out,
            "\nclients that would have been rejected: {}{}",
            clients.len(),
            if clients.len() > shown {
                format!(" (the first {shown} by rejections)")
            } else {
                String::new()
            }
        );
        if clients.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "  {:<24} {:<12} {:>10} {:>10}  first rejected",
            "client", "plan", "requests", "rejected"
        );
        for row in clients.iter().take(shown) {
            let first = row.first_rejected_ms.map(format_ms).unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:<24} {:<12} {:>10} {:>10}  {first}",
                terminal_safe(&row.client),
                terminal_safe(&row.plan),
                row.requests,
                row.rejected
            );
        }
    }

    fn render_malformed(&self, out: &mut String) {
        if self.malformed.count == 0 {
            return;
        }
        let _ = writeln!(
            out,
            "\nmalformed lines: {}{}",
            self.malformed.count,
            self.malformed_cap_note()
        );
        for line in &self.malformed.shown {
            let _ = writeln!(out, "  {}:{}: {}", line.file, line.line, line.reason);
        }
    }

    /// Says when only the first malformed lines are listed.
    pub fn malformed_cap_note(&self) -> String {
        if self.malformed.count > self.malformed.shown.len() as u64 {
            format!(" (the first {} shown)", self.malformed.shown.len())
        } else {
            String::new()
        }
    }
}

/// `text` (a client id from a log, a plan name) as the table shows it: as
/// it is when Debug formatting would escape nothing in it but quotes and
/// backslashes and it does not begin with a quote, so that an ordinary id
/// keeps its column; else quoted and escaped by Debug formatting, as the
/// summary writes plan and limit names and malformed lines their fields
/// (`{:?}`), so that an id holding ESC, CR or LF cannot clear the terminal,
/// move the cursor or start a forged row. An id shown quoted is always an
/// escaped one: an id that begins with a quote is quoted too, so that the
/// id `"\u{1b}"`, written with its quotes, cannot pass for the one holding
/// ESC; and so is one that begins or ends with white space, which would
/// read as the id without it.
fn terminal_safe(text: &str) -> Cow<'_, str> {
    let quoted = format!("{text:?}");
    let only_quotes_escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
    let as_it_is = !text.starts_with('"') && text.trim() == text;
    if as_it_is && quoted.get(1..quoted.len() - 1) == Some(&only_quotes_escaped) {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(quoted)
    }
}

/// A limit's rule in words: `sliding-window 10 per 1s`.
pub fn describe_limit(limit: &Limit) -> String {
    let policy = limit.policy();
    format!(
        "{} {} per {}",
        policy.name(),
        policy.limit(),
        format_duration(policy.window_ms())
    )
}

/// ` (1.23%)`, or nothing of nothing.
fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return String::new();
    }
    format!(" ({:.2}%)", part as f64 * 100.0 / whole as f64)
}

/// An epoch-ms time as RFC 3339 UTC with milliseconds.
pub fn format_ms(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || format!("{ms} ms"),
            |t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        )
}

/// The would-be rejections of every plan and limit; shadow limits apart.
fn render_plans(out: &mut String, config: &Config, simulation: &Simulation<'_>) {
    let _ = writeln!(out, "\nwould-be rejections per plan and limit:");
    let mut shadows = String::new();
    for (plan, tally) in config.plans().iter().zip(&simulation.plans) {
        let _ = writeln!(
            out,
            "  plan {:?}: {} requests, {} rejected{}",
            plan.name(),
            tally.requests,
            tally.rejected,
            percent(tally.rejected, tally.requests)
        );
        for (limit, rejected) in plan.limits().iter().zip(&tally.limit_rejections) {
            let line = format!(
                "limit {:?} ({}): {rejected}",
                limit.name(),
                describe_limit(limit)
            );
            if limit.is_shadow() {
                let _ = writeln!(
                    shadows,
                    "  plan {:?}, {line} would have been rejected",
                    plan.name()
                );
            } else {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    if !shadows.is_empty() {
        let _ = write!(out, "\nshadow limits (decided, never reject):\n{shadows}");
    }
}
