//! The `tollgate` binary: parses arguments and hands over to the library.

use std::fs::File;
use std::io::{self, BufReader};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tollgate_cli::replay;

/// tollgate: exact per-client rate limiting.
#[derive(Parser)]
#[command(name = "tollgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a session of calls (`new`, `allow`, `remaining`) and print each answer.
    Replay {
        /// The session file; standard input when absent or `-`.
        file: Option<PathBuf>,
        /// Replay against this Redis (`redis://host:port`) instead of memory;
        /// each `new` starts a fresh key space.
        #[arg(long, value_name = "URL")]
        redis: Option<String>,
        /// With --redis: share state with other replays using the same prefix
        /// (the n-th `new` of the session uses `<PREFIX>:<n>`) instead of a
        /// fresh random key space.
        #[arg(long, value_name = "PREFIX", requires = "redis")]
        redis_prefix: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Replay {
            file,
            redis,
            redis_prefix,
        } => match redis {
            None => run_replay(file, &mut replay::Memory::default()),
            Some(url) => match replay::Redis::connect(&url, redis_prefix.as_deref()) {
                Ok(mut target) => run_replay(file, &mut target),
                Err(e) => {
                    eprintln!("tollgate replay: {e}");
                    ExitCode::from(2)
                }
            },
        },
    }
}

fn run_replay<T: replay::Target>(file: Option<PathBuf>, target: &mut T) -> ExitCode {
    let stdout = io::stdout().lock();
    let result = match file.filter(|f| f.as_os_str() != "-") {
        None => replay::replay(io::stdin().lock(), stdout, target),
        Some(path) => match File::open(&path) {
            Ok(f) => replay::replay(BufReader::with_capacity(1 << 16, f), stdout, target),
            Err(e) => {
                eprintln!("tollgate replay: cannot open {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    match result {
        Ok(summary) if summary.failed == 0 => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("tollgate replay: {e}");
            ExitCode::from(2)
        }
    }
}
