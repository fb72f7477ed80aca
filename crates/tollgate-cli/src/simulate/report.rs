//! `--report FILE`: one self-contained HTML page (inline SVG and CSS, no
//! script, no URL of any kind), so it opens anywhere, offline.

use std::fmt::Write;

use tollgate_config::Config;

use super::chart;
use super::engine::Simulation;
use super::summary::{describe_limit, format_ms, Outcome};
use super::timeline::Timelines;

/// How many clients get a chart of their own.
pub const TOP_CLIENTS: usize = 6;

/// How many clients the report's table lists.
pub const TABLE_CLIENTS: usize = 100;

const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#222}\
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}\
td:first-child,th:first-child{text-align:left}figure{margin:0 0 1em}.shadow{color:#666}";

/// The clients to chart: those with the most rejections (then the most
/// requests, then by id), at most [`TOP_CLIENTS`].
pub fn top_clients(simulation: &Simulation<'_>) -> Vec<String> {
    let mut all: Vec<(&str, u64, u64)> = simulation
        .clients
        .iter()
        .map(|(client, tally)| (&**client, tally.rejected, tally.requests))
        .collect();
    let order = |a: &(&str, u64, u64), b: &(&str, u64, u64)| {
        b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(b.0))
    };
    if all.len() > TOP_CLIENTS {
        all.select_nth_unstable_by(TOP_CLIENTS - 1, order);
        all.truncate(TOP_CLIENTS);
    }
    all.sort_by(order);
    all.into_iter()
        .map(|(client, ..)| client.to_owned())
        .collect()
}

/// The whole page. `clients` are the charted clients, their series in
/// `client_timelines`.
///
/// # Errors
/// A message when a chart cannot be drawn.
pub fn html(
    config: &Config,
    simulation: &Simulation<'_>,
    outcome: &Outcome,
    clients: &[String],
    client_timelines: &Timelines,
) -> Result<String, String> {
    let mut page = heading(outcome);
    charts(&mut page, config, simulation, clients, client_timelines)?;
    plans_table(&mut page, config, simulation);
    clients_table(&mut page, outcome);
    malformed_list(&mut page, outcome);
    page.push_str("</body></html>\n");
    Ok(page)
}

/// The page's head, title and totals.
fn heading(outcome: &Outcome) -> String {
    let json = &outcome.json;
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tollgate simulate</title><style>{STYLE}</style></head><body>\n\
         <h1>tollgate simulate</h1>\n<p id=\"totals\">{} requests: {} allowed, {} rejected; {} malformed lines; {} clients{}.</p>\n",
        json.requests,
        json.allowed,
        json.rejected,
        json.malformed,
        outcome.client_count,
        outcome.span_ms.map(|(a, b)| format!(", {} to {}", format_ms(a), format_ms(b))).unwrap_or_default()
    )
}

/// One chart per plan, then one per charted client.
fn charts(
    page: &mut String,
    config: &Config,
    simulation: &Simulation<'_>,
    clients: &[String],
    client_timelines: &Timelines,
) -> Result<(), String> {
    page.push_str("<h2>Allowed and rejected per plan</h2>\n");
    for (index, plan) in config.plans().iter().enumerate() {
        let svg = chart::svg(
            &format!("plan {}", plan.name()),
            &simulation.timelines,
            index,
        )?;
        let _ = writeln!(
            page,
            "<figure class=\"chart plan\" data-plan=\"{}\">{}</figure>",
            escape(plan.name()),
            neutralize(&svg)
        );
    }
    page.push_str("<h2>Top clients</h2>\n");
    for (index, client) in clients.iter().enumerate() {
        let svg = chart::svg(&format!("client {client}"), client_timelines, index)?;
        let _ = writeln!(
            page,
            "<figure class=\"chart client\" data-client=\"{}\">{}</figure>",
            escape(client),
            neutralize(&svg)
        );
    }
    Ok(())
}

/// The malformed lines shown, if any.
fn malformed_list(page: &mut String, outcome: &Outcome) {
    if outcome.malformed.shown.is_empty() {
        return;
    }
    let _ = writeln!(
        page,
        "<h2>Malformed lines: {}{}</h2>\n<ul>",
        outcome.malformed.count,
        outcome.malformed_cap_note()
    );
    for line in &outcome.malformed.shown {
        let _ = writeln!(
            page,
            "<li>{}:{}: {}</li>",
            escape(&line.file),
            line.line,
            escape(&line.reason)
        );
    }
    page.push_str("</ul>\n");
}

fn plans_table(page: &mut String, config: &Config, simulation: &Simulation<'_>) {
    page.push_str("<h2>Plans and limits</h2>\n<table id=\"plans\"><tr><th>plan / limit</th><th>policy</th><th>requests</th><th>rejected</th></tr>\n");
    for (plan, tally) in config.plans().iter().zip(&simulation.plans) {
        let _ = writeln!(
            page,
            "<tr><th>{}</th><td></td><td>{}</td><td>{}</td></tr>",
            escape(plan.name()),
            tally.requests,
            tally.rejected
        );
        for (limit, rejected) in plan.limits().iter().zip(&tally.limit_rejections) {
            let (class, note) = if limit.is_shadow() {
                (" class=\"shadow\"", " (shadow: would have rejected)")
            } else {
                ("", "")
            };
            let _ = writeln!(
                page,
                "<tr{class}><td>{} / {}{note}</td><td>{}</td><td></td><td>{rejected}</td></tr>",
                escape(plan.name()),
                escape(limit.name()),
                describe_limit(limit)
            );
        }
    }
    page.push_str("</table>\n");
}

fn clients_table(page: &mut String, outcome: &Outcome) {
    let clients = &outcome.json.clients;
    let _ = writeln!(
        page,
        "<h2>Clients that would have been rejected: {}{}</h2>",
        clients.len(),
        if clients.len() > TABLE_CLIENTS {
            format!(" (the first {TABLE_CLIENTS})")
        } else {
            String::new()
        }
    );
    page.push_str("<table id=\"clients\"><tr><th>client</th><th>plan</th><th>requests</th><th>rejected</th><th>first rejected (UTC)</th></tr>\n");
    for row in clients.iter().take(TABLE_CLIENTS) {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&row.client),
            escape(&row.plan),
            row.requests,
            row.rejected,
            row.first_rejected_ms.map(format_ms).unwrap_or_default()
        );
    }
    page.push_str("</table>\n");
}

/// Text from the log or the config, safe in HTML; `:` too is written as a
/// character reference, so that no text (a client id, a log line's reason)
/// can put a URL in the page.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            ':' => out.push_str("&#58;"),
            c => out.push(c),
        }
    }
    out
}

/// SVG text that plotters escaped for XML: any `://` left (a title naming
/// a client such as `http://x`) gets its colon as a character reference.
fn neutralize(svg: &str) -> String {
    svg.replace("://", "&#58;//")
}
