//! `tollgate replay` as a command: its arguments, and a run that opens the
//! input, picks the target, draws the progress bar and prints `--summary`.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use tollgate::Clock;
use tollgate_config::Error as ConfigError;
use tollgate_redis::RedisTarget;

use super::{replay_with, Interrupt, Memory, Redis, Summary, Target, MAX_LINE_BYTES};
use crate::progress::Progress;
use crate::redis_args::RedisArgs;

/// The arguments of `tollgate replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The session file; standard input when absent or `-`.
    pub file: Option<PathBuf>,
    /// Replay against Redis instead of memory; each `new` starts a fresh
    /// key space.
    #[command(flatten)]
    pub redis: RedisArgs,
    /// With --redis or --redis-cluster: share state with other replays using the same prefix
    /// (the n-th `new` of the session uses `<PREFIX>:<n>`) instead of a
    /// fresh random key space.
    #[arg(long, value_name = "PREFIX")]
    pub redis_prefix: Option<String>,
    /// At the end, print on standard error the number of lines, allowed,
    /// rejected and errors, and the rate (standard output is unchanged).
    #[arg(long)]
    pub summary: bool,
}

/// The Redis the flags name, if any, checked by `tollgate-config` as a
/// config's `[store]` is.
fn redis_target(args: &ReplayArgs) -> Result<Option<RedisTarget>, String> {
    let target = (args.redis.overrides().redis_target()).map_err(|e| match e {
        // replay has no config file: its Redis is a flag's.
        ConfigError::FlagWithoutRedis { flag } => {
            format!("{flag} needs --redis or --redis-cluster")
        }
        e => format!("cannot use Redis: {e}"),
    })?;
    if target.is_none() && args.redis_prefix.is_some() {
        return Err("--redis-prefix needs --redis or --redis-cluster".into());
    }
    Ok(target)
}

/// Runs a replay: exit 0 when no line failed, 1 when some did, 2 when the
/// input cannot be read or the target reached, 130 or 143 when ctrl-c or SIGTERM
/// stopped it (a second one ends it at once). `clock` times the run for
/// `--summary`.
pub fn run(args: ReplayArgs, clock: &dyn Clock) -> ExitCode {
    let started_ms = clock.now_ms();
    let interrupt = catch_interrupts();
    let result = match redis_target(&args) {
        Ok(None) => replay_input(&args, &mut Memory::default(), &interrupt),
        Ok(Some(target)) => {
            let replicas_to_ack = args.redis.redis_replicas_to_ack.unwrap_or(0);
            match Redis::connect_target(&target, args.redis_prefix.as_deref(), replicas_to_ack) {
                Ok(mut target) => replay_input(&args, &mut target, &interrupt),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(summary) => {
            if args.summary {
                let elapsed_ms = clock.now_ms().saturating_sub(started_ms);
                eprint!("{}", summary.render(elapsed_ms));
            }
            if summary.interrupted {
                eprintln!(
                    "tollgate replay: interrupted after line {}; every answer given is printed",
                    summary.lines
                );
                ExitCode::from(status_of(STOPPED_BY.load(Ordering::SeqCst)))
            } else if summary.failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("tollgate replay: {e}");
            ExitCode::from(2)
        }
    }
}

/// The signal that stopped the replay (0: none yet); its exit status is
/// 128 plus its number, as a shell reports a process the signal ended.
static STOPPED_BY: AtomicI32 = AtomicI32::new(0);

/// The exit status of a replay the signal `signal` stopped.
fn status_of(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}

/// Catches ctrl-c and SIGTERM on a thread of their own, which asks the
/// replay to stop: it stops before its next line with every answer printed
/// (its output is buffered: killed by the signal's default action, it lost
/// up to 64 KiB of answers, calls Redis had counted), or, when it is
/// waiting for input (output flushed), the process ends at once. A second
/// signal ends it at once in any case.
fn catch_interrupts() -> Arc<Interrupt> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use signal_hook::iterator::Signals;
    let interrupt = Arc::new(Interrupt::default());
    let mut signals = match Signals::new([SIGINT, SIGTERM]) {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!(
                "tollgate replay: cannot catch ctrl-c ({error}); it will end the replay unprinted"
            );
            return interrupt;
        }
    };
    let asked = interrupt.clone();
    let watching = std::thread::Builder::new()
        .name("replay-signals".into())
        .spawn(move || {
            let mut arrived = signals.forever();
            let Some(first) = arrived.next() else { return };
            STOPPED_BY.store(first, Ordering::SeqCst);
            if asked.request() {
                eprintln!("tollgate replay: interrupted while waiting for input; every answer given is printed");
                std::process::exit(status_of(first).into());
            }
            if let Some(second) = arrived.next() {
                std::process::exit(status_of(second).into());
            }
        });
    if let Err(error) = watching {
        eprintln!(
            "tollgate replay: cannot catch ctrl-c ({error}); it will end the replay unprinted"
        );
    }
    interrupt
}

/// Replays the file (or standard input) of `args` on `target`, until the
/// input ends or `interrupt` is set.
fn replay_input<T: Target>(
    args: &ReplayArgs,
    target: &mut T,
    interrupt: &Interrupt,
) -> Result<Summary, String> {
    let stdout = io::stdout().lock();
    let path = args.file.as_ref().filter(|f| f.as_os_str() != "-");
    let result = match path {
        None => {
            let progress = Progress::on_stderr(None);
            let result = replay_with(
                io::stdin().lock(),
                stdout,
                target,
                MAX_LINE_BYTES,
                &mut |bytes, s| progress.update(bytes, s.lines),
                interrupt,
            );
            progress.finish();
            result
        }
        Some(path) => {
            let file =
                File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            let length = file.metadata().ok().map(|m| m.len());
            let progress = Progress::on_stderr(length);
            let input = BufReader::with_capacity(1 << 16, NamedFile { file, path });
            let result = replay_with(
                input,
                stdout,
                target,
                MAX_LINE_BYTES,
                &mut |bytes, s| progress.update(bytes, s.lines),
                interrupt,
            );
            progress.finish();
            result
        }
    };
    result.map_err(|e| e.to_string())
}

/// A file whose read errors name it (`cannot read PATH: ...`, as `tollgate
/// check` says), so that a read failing after the open (a directory, an I/O
/// error) is told apart from a failed write of the answers.
struct NamedFile<'a> {
    file: File,
    path: &'a Path,
}

impl Read for NamedFile<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read(buf).map_err(|e| {
            if e.kind() == io::ErrorKind::Interrupted {
                // Retried by the reader: not a failure.
                return e;
            }
            io::Error::new(
                e.kind(),
                format!("cannot read {}: {e}", self.path.display()),
            )
        })
    }
}
