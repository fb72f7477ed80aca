//! The `tollgate` binary: parses arguments and hands over to the library.

use std::fs::File;
use std::io::{self, BufReader};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tollgate_cli::{proxy, replay};

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
    },
    /// Rate-limit an HTTP API: forward allowed requests to the upstream, answer the rest with 429.
    Proxy(proxy::ProxyArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Replay { file } => run_replay(file),
        Command::Proxy(args) => run_proxy(args),
    }
}

fn run_proxy(args: proxy::ProxyArgs) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tollgate proxy: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(proxy::run(args, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tollgate proxy: {e}");
            ExitCode::from(2)
        }
    }
}

/// Completes on ctrl-c or (on Unix) SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn run_replay(file: Option<PathBuf>) -> ExitCode {
    let stdout = io::stdout().lock();
    let mut target = replay::Memory::default();
    let result = match file.filter(|f| f.as_os_str() != "-") {
        None => replay::replay(io::stdin().lock(), stdout, &mut target),
        Some(path) => match File::open(&path) {
            Ok(f) => replay::replay(BufReader::with_capacity(1 << 16, f), stdout, &mut target),
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
