//! `tollgate replay`: run a session of calls from a file and print each answer.
//!
//! One call per line, whitespace-separated:
//!
//! ```text
//! new POLICY LIMIT WINDOW_MS     -> ok        (a fresh limiter; earlier clients are forgotten)
//! allow CLIENT NOW_MS            -> true | false
//! remaining CLIENT NOW_MS        -> the number
//! ```
//!
//! Blank lines and lines starting with `#` print nothing; every other line
//! prints exactly one line. A line that cannot be carried out prints
//! `error: line N: ...` and the replay goes on; so does a line longer than
//! [`MAX_LINE_BYTES`], read in constant memory.

use std::io::{self, BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};

mod command;
mod redis;

pub use crate::lines::MAX_LINE_BYTES;
pub use command::{run, ReplayArgs};
pub use redis::Redis;

use crate::lines::{Line, LineReader};

use tollgate::RateLimiter;

/// Where a replay's calls go: the in-memory limiter, or another store that
/// must give the same answers.
pub trait Target {
    /// Starts a fresh limiter; calls after this see no earlier client.
    ///
    /// # Errors
    /// A message saying why the limiter cannot be built.
    fn start(&mut self, policy: &str, limit: u32, window_ms: u64) -> Result<(), String>;

    /// `allow` on the current limiter.
    ///
    /// # Errors
    /// A message when the store could not answer.
    fn allow(&mut self, client: &str, now_ms: u64) -> Result<bool, String>;

    /// `remaining` on the current limiter.
    ///
    /// # Errors
    /// A message when the store could not answer.
    fn remaining(&mut self, client: &str, now_ms: u64) -> Result<u32, String>;
}

/// The embedded in-memory target.
#[derive(Default)]
pub struct Memory {
    limiter: Option<RateLimiter>,
}

impl Target for Memory {
    fn start(&mut self, policy: &str, limit: u32, window_ms: u64) -> Result<(), String> {
        self.limiter = Some(RateLimiter::new(policy, limit, window_ms).map_err(|e| e.to_string())?);
        Ok(())
    }

    fn allow(&mut self, client: &str, now_ms: u64) -> Result<bool, String> {
        let limiter = self.limiter.as_ref().ok_or("no limiter")?;
        Ok(limiter.allow(client, now_ms))
    }

    fn remaining(&mut self, client: &str, now_ms: u64) -> Result<u32, String> {
        let limiter = self.limiter.as_ref().ok_or("no limiter")?;
        Ok(limiter.remaining(client, now_ms))
    }
}

/// One parsed line of a replay file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call<'a> {
    /// `new POLICY LIMIT WINDOW_MS`
    New {
        /// The policy name (checked when the limiter is built).
        policy: &'a str,
        /// Requests per window.
        limit: u32,
        /// Window length in milliseconds.
        window_ms: u64,
    },
    /// `allow CLIENT NOW_MS`
    Allow {
        /// The client id.
        client: &'a str,
        /// The time of the call.
        now_ms: u64,
    },
    /// `remaining CLIENT NOW_MS`
    Remaining {
        /// The client id.
        client: &'a str,
        /// The time of the call.
        now_ms: u64,
    },
}

/// Parses one line: `Ok(None)` for a blank or comment line.
///
/// # Errors
/// A message naming what is wrong with the line (its number is added by the caller).
pub fn parse_line(line: &[u8]) -> Result<Option<Call<'_>>, String> {
    // A comment is skipped before decoding: its bytes need not be UTF-8.
    if line.trim_ascii_start().starts_with(b"#") {
        return Ok(None);
    }
    let line = std::str::from_utf8(line).map_err(|e| {
        format!(
            "the line is not valid UTF-8 (bad byte at column {})",
            e.valid_up_to() + 1
        )
    })?;
    // The verb, up to three arguments, and whether there were more.
    let mut fields = [""; 4];
    let mut count = 0;
    for field in line.split_ascii_whitespace() {
        if count < fields.len() {
            fields[count] = field;
        }
        count += 1;
    }
    let verb = fields[0];
    if count == 0 || verb.starts_with('#') {
        return Ok(None);
    }
    let (arguments, usage) = match verb {
        "new" => (3, "`new POLICY LIMIT WINDOW_MS`"),
        "allow" => (2, "`allow CLIENT NOW_MS`"),
        "remaining" => (2, "`remaining CLIENT NOW_MS`"),
        other => {
            return Err(format!(
                "unknown call {:?}: expected new, allow or remaining",
                truncate(other)
            ))
        }
    };
    if count - 1 != arguments {
        return Err(format!(
            "`{verb}` takes {arguments} fields after the verb, found {}: {usage}",
            count - 1
        ));
    }
    Ok(Some(match verb {
        "new" => Call::New {
            policy: fields[1],
            limit: number("LIMIT", fields[2], u32::MAX)?,
            window_ms: number("WINDOW_MS", fields[3], u64::MAX)?,
        },
        "allow" => Call::Allow {
            client: fields[1],
            now_ms: number("NOW_MS", fields[2], u64::MAX)?,
        },
        _ => Call::Remaining {
            client: fields[1],
            now_ms: number("NOW_MS", fields[2], u64::MAX)?,
        },
    }))
}

/// Whether a line is a `new` call, even one that does not parse: a failed
/// `new` of any kind stops the session until the next good one.
fn is_new(line: &[u8]) -> bool {
    line.split(|b| b.is_ascii_whitespace())
        .find(|field| !field.is_empty())
        .is_some_and(|verb| verb == b"new")
}

/// Shortens a field for an error message, so one absurd line cannot flood the output.
fn truncate(field: &str) -> String {
    const MAX: usize = 64;
    match field.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &field[..cut]),
        None => field.to_owned(),
    }
}

/// Parses a whole number in `0..=max`, or says what is wrong with it.
fn number<T: std::str::FromStr + std::fmt::Display>(
    name: &str,
    field: &str,
    max: T,
) -> Result<T, String> {
    if !field.bytes().all(|b| b.is_ascii_digit()) {
        let what = if field.starts_with('-') && field.len() > 1 {
            "is negative"
        } else {
            "is not a whole number"
        };
        return Err(format!("{name} {:?} {what}", truncate(field)));
    }
    field
        .parse()
        .map_err(|_| format!("{name} {:?} is too large (at most {max})", truncate(field)))
}

/// How a replay went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// Lines read, blank, comment and failed ones included.
    pub lines: u64,
    /// Lines that printed an answer.
    pub answered: u64,
    /// Lines that printed an error.
    pub failed: u64,
    /// `allow` calls answered `true`.
    pub allowed: u64,
    /// `allow` calls answered `false`.
    pub rejected: u64,
    /// Whether the replay stopped early, asked to (ctrl-c, SIGTERM), after
    /// the line [`Summary::lines`] counts; every answer is printed.
    pub interrupted: bool,
}

/// How often (in lines) [`replay_with`] reports progress.
pub const PROGRESS_EVERY_LINES: u64 = 4096;

/// Replays every line of `input` against `target`, writing one output line
/// per call line. Lines longer than [`MAX_LINE_BYTES`] are refused one by
/// one (`error: line N: line longer than 65536 bytes`) in constant memory.
///
/// # Errors
/// Only I/O errors reading the input or writing the output; errors in lines
/// are printed and counted in the [`Summary`].
pub fn replay<T: Target>(
    input: impl BufRead,
    output: impl Write,
    target: &mut T,
) -> io::Result<Summary> {
    let never = Interrupt::default();
    replay_with(
        input,
        output,
        target,
        MAX_LINE_BYTES,
        &mut |_, _| {},
        &never,
    )
}

/// What a replay and whoever may stop it (a signal handler) share, so that
/// a replay asked to stop prints every answer it gave: it stops before its
/// next line, or, while it waits for input (its output flushed first), the
/// one who asked may end the process at once.
#[derive(Debug, Default)]
pub struct Interrupt {
    requested: AtomicBool,
    waiting: AtomicBool,
}

impl Interrupt {
    /// Asks the replay to stop. True when it is waiting for input, with
    /// every answer printed: then it would not see the request until a
    /// line came, and the caller may end the process.
    pub fn request(&self) -> bool {
        // Sequentially consistent, with `wait_for_input`'s pair: one of the
        // two sees the other's store.
        self.requested.store(true, Ordering::SeqCst);
        self.waiting.load(Ordering::SeqCst)
    }

    /// Whether a stop was asked for.
    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// Marks the replay as waiting for input; false when a stop was asked
    /// for (then it must not wait).
    fn wait_for_input(&self) -> bool {
        self.waiting.store(true, Ordering::SeqCst);
        !self.requested.load(Ordering::SeqCst)
    }

    fn line_came(&self) {
        self.waiting.store(false, Ordering::SeqCst);
    }
}

/// [`replay`] with another cap on line length, telling `on_progress` the
/// bytes read so far and the summary every [`PROGRESS_EVERY_LINES`] lines
/// and once at the end, and stopping before the next line once `interrupt`
/// is requested (by a signal handler, say): what was answered is printed,
/// and the summary says [`Summary::interrupted`]. On Redis, a call already
/// sent is answered first, so the output holds every call Redis counted.
/// Before each read of the input that may wait, the output is flushed.
///
/// # Errors
/// As [`replay`].
pub fn replay_with<T: Target>(
    input: impl BufRead,
    output: impl Write,
    target: &mut T,
    max_line_bytes: usize,
    on_progress: &mut dyn FnMut(u64, &Summary),
    interrupt: &Interrupt,
) -> io::Result<Summary> {
    let mut input = LineReader::new(input, max_line_bytes);
    let mut output = io::BufWriter::with_capacity(1 << 16, output);
    let mut summary = Summary::default();
    // The number of the line whose `new` failed, or 0 before any `new`.
    let mut active: Result<(), u64> = Err(0);
    let mut line = Vec::with_capacity(256);
    loop {
        if interrupt.is_requested() {
            break;
        }
        let mut before_reading = || -> io::Result<bool> {
            output.flush()?;
            Ok(interrupt.wait_for_input())
        };
        let read = input.next_line_or_stop(&mut line, &mut before_reading)?;
        interrupt.line_came();
        let Some(read) = read else { break };
        let number = input.lines_read();
        summary.lines = number;
        if number.is_multiple_of(PROGRESS_EVERY_LINES) {
            on_progress(input.bytes_read(), &summary);
        }
        let parsed = match read {
            Line::Read => parse_line(&line),
            Line::TooLong => Err(format!("line longer than {max_line_bytes} bytes")),
        };
        let result = match parsed {
            Ok(None) => continue,
            Ok(Some(call)) => run_call(target, &mut active, number, call),
            Err(message) => {
                if is_new(&line) {
                    active = Err(number);
                }
                Err(message)
            }
        };
        match result {
            Ok(answer) => {
                summary.answered += 1;
                match answer {
                    Answer::Bool(true) => summary.allowed += 1,
                    Answer::Bool(false) => summary.rejected += 1,
                    _ => {}
                }
                writeln!(output, "{answer}")?;
            }
            Err(message) => {
                summary.failed += 1;
                writeln!(output, "error: line {number}: {message}")?;
            }
        }
    }
    output.flush()?;
    summary.interrupted = interrupt.is_requested();
    on_progress(input.bytes_read(), &summary);
    Ok(summary)
}

impl Summary {
    /// The `--summary` text: counts and the rate over `elapsed_ms` (none
    /// under a millisecond, which the clock cannot time).
    pub fn render(&self, elapsed_ms: u64) -> String {
        let rate = match elapsed_ms {
            0 => "under a millisecond: too fast to give a rate".to_owned(),
            _ => format!(
                "{} lines/s",
                u128::from(self.lines) * 1000 / u128::from(elapsed_ms)
            ),
        };
        format!(
            "replay: {} lines, {} allowed, {} rejected, {} errors in {}.{:03} s ({rate})\n",
            self.lines,
            self.allowed,
            self.rejected,
            self.failed,
            elapsed_ms / 1000,
            elapsed_ms % 1000,
        )
    }
}

/// The answer to one call, as printed.
enum Answer {
    Ok,
    Bool(bool),
    Number(u32),
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Ok => f.write_str("ok"),
            Answer::Bool(b) => write!(f, "{b}"),
            Answer::Number(n) => write!(f, "{n}"),
        }
    }
}

/// Carries out one call. `active` is `Ok` while a limiter is in force, or
/// the number of the line whose `new` failed (0 before any `new`).
fn run_call<T: Target>(
    target: &mut T,
    active: &mut Result<(), u64>,
    line_number: u64,
    call: Call<'_>,
) -> Result<Answer, String> {
    let check_active = |active: &Result<(), u64>| match *active {
        Ok(()) => Ok(()),
        Err(0) => {
            Err("no limiter yet: start the session with `new POLICY LIMIT WINDOW_MS`".to_owned())
        }
        Err(failed) => Err(format!("no limiter: the `new` on line {failed} failed")),
    };
    match call {
        Call::New {
            policy,
            limit,
            window_ms,
        } => {
            let started = target.start(policy, limit, window_ms);
            *active = started.as_ref().map(|_| ()).map_err(|_| line_number);
            started.map(|()| Answer::Ok)
        }
        Call::Allow { client, now_ms } => {
            check_active(active)?;
            target.allow(client, now_ms).map(Answer::Bool)
        }
        Call::Remaining { client, now_ms } => {
            check_active(active)?;
            target.remaining(client, now_ms).map(Answer::Number)
        }
    }
}
