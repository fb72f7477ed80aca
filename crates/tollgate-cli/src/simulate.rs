//! `tollgate simulate`: what-if on real traffic. Reads access logs, decides
//! every request in time order as `tollgate serve` with a given config would
//! have (its plans, `[clients]`, default plan; shadow limits reported apart)
//! on the in-memory store at each request's log time, and says who would
//! have been rejected, by which limit, and when.
//!
//! The logs are streamed (one bounded line per file in memory); memory grows
//! with the number of distinct clients, not with the number of lines.

mod chart;
mod combined;
mod csv;
mod engine;
mod format;
mod jsonl;
mod report;
mod source;
mod summary;
mod time;
mod timeline;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

pub use engine::{ClientTally, PlanTally, Simulation};
pub use format::{Format, LineError, LineParser, Parsed};
pub use source::{Malformed, MalformedLine, Merge, Request, SHOWN_MALFORMED};
pub use summary::{ClientRow, JsonSummary, LimitCount, Outcome};
pub use time::parse_time;
pub use timeline::{Timelines, MAX_BUCKETS};

use crate::progress::Progress;
use tollgate_config::Config;

/// How many clients the text summary lists.
pub const SHOWN_CLIENTS: usize = 20;

/// The arguments of `tollgate simulate`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// The `tollgate serve` config whose plans decide.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The log format.
    #[arg(long, value_enum, default_value = "combined")]
    pub format: Format,
    /// The field holding the client id: a JSON key, a CSV column, or a
    /// combined-log field name or position (default: `remote_addr` for
    /// combined, `client` otherwise).
    #[arg(long, value_name = "FIELD")]
    pub client: Option<String>,
    /// The field holding the time (default: `time_local` for combined,
    /// `time` otherwise): epoch ms, epoch seconds with a fraction, RFC 3339
    /// or the common log format.
    #[arg(long, value_name = "FIELD")]
    pub time: Option<String>,
    /// Print the summary as one JSON object on standard output.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML report with charts to this file.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// The access logs, merged in time order.
    #[arg(required = true, value_name = "ACCESS_LOG")]
    pub logs: Vec<PathBuf>,
}

/// Runs `tollgate simulate`: 0 when done (malformed lines included), 2 when
/// the config or a log cannot be read or the report cannot be written.
pub fn run(args: SimulateArgs) -> ExitCode {
    match simulate(&args, &mut io::stdout().lock()) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tollgate simulate: {e}");
            ExitCode::from(2)
        }
    }
}

/// Simulates, writes the summary (text or JSON) to `out` and the report if
/// asked, and returns what was found.
///
/// # Errors
/// A message saying which file could not be read or written, and why.
pub fn simulate(args: &SimulateArgs, out: &mut dyn Write) -> Result<Outcome, String> {
    let config = Config::load(&args.config).map_err(|e| e.to_string())?;
    if !matches!(config.store.kind, tollgate_config::StoreKind::Memory) {
        eprintln!("tollgate simulate: the config's store is not memory; simulating on the in-memory store (the same answers)");
    }
    let mut simulation = Simulation::new(&config);
    let mut malformed = Malformed::default();
    let lines = decide_all(args, &mut simulation, &mut malformed)?;
    let outcome = Outcome::new(&simulation, &config, malformed, lines);
    let written = if args.json {
        serde_json::to_writer(&mut *out, &outcome.json)
            .map_err(io::Error::from)
            .and_then(|()| writeln!(out))
            .and_then(|()| {
                let mut err = io::stderr().lock();
                for line in &outcome.malformed.shown {
                    writeln!(
                        err,
                        "malformed: {}:{}: {}",
                        line.file, line.line, line.reason
                    )?;
                }
                let note = outcome.malformed_cap_note();
                if !note.is_empty() {
                    let count = outcome.malformed.count;
                    writeln!(err, "malformed: {count} lines in all{note}")?;
                }
                Ok(())
            })
    } else {
        out.write_all(
            outcome
                .render_text(&config, &simulation, SHOWN_CLIENTS)
                .as_bytes(),
        )
    };
    written.map_err(|e| format!("cannot write the summary: {e}"))?;
    if let Some(path) = &args.report {
        // The charted clients are known only at the end: a second pass over
        // the same logs gives the same decisions and records their timelines.
        let clients = report::top_clients(&simulation);
        let mut again = Simulation::new(&config);
        again.watch(&clients, &simulation.timelines);
        decide_all(args, &mut again, &mut Malformed::default())?;
        let page = report::html(
            &config,
            &simulation,
            &outcome,
            &clients,
            &again.watched_timelines,
        )?;
        std::fs::write(path, page).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(outcome)
}

/// One pass over the logs: every request decided; returns the lines read.
fn decide_all(
    args: &SimulateArgs,
    simulation: &mut Simulation<'_>,
    malformed: &mut Malformed,
) -> Result<u64, String> {
    let mut merge = Merge::open(
        &args.logs,
        args.format,
        args.client.as_deref(),
        args.time.as_deref(),
        malformed,
    )?;
    let progress = Progress::on_stderr(Some(merge.total_bytes()));
    let mut decided: u64 = 0;
    while let Some(request) = merge.next_request(malformed)? {
        simulation.decide(request.client, request.time_ms);
        decided += 1;
        if decided.is_multiple_of(1 << 16) {
            progress.update(merge.bytes_read(), merge.lines_read());
        }
    }
    progress.finish();
    Ok(merge.lines_read())
}
