//! The `tollgate` binary: parses arguments and hands over to the library.

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tollgate_cli::{logging, proxy, redis_args, replay, simulate};

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
    Replay(replay::ReplayArgs),
    /// Run the rate-limit service (HTTP decision API). Without flags: the
    /// embedded default, 100 requests per second per client on a sliding
    /// window, in memory, on 127.0.0.1:8080, and Envoy's rate limit service
    /// over gRPC on 127.0.0.1:8081.
    Serve {
        /// The TOML config file (reloaded on SIGHUP and when it changes).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Address to listen on, IP:PORT (repeatable); replaces the config's `listen`.
        #[arg(long, value_name = "ADDR")]
        listen: Vec<String>,
        #[command(flatten)]
        redis: redis_args::RedisArgs,
        /// Address of the gRPC rate limit service for Envoy, IP:PORT, or
        /// `off`; replaces the config's `[envoy] grpc_listen` (default 127.0.0.1:8081).
        #[arg(long, value_name = "ADDR")]
        grpc_listen: Option<String>,
    },
    /// Check a config file: exit 0 with a summary, or 1 with the line and column of the mistake.
    Check {
        /// The TOML config file.
        file: PathBuf,
    },
    /// What-if on real traffic: decide every request of access logs as
    /// `serve` with a config would, and say who would have been rejected.
    Simulate(simulate::SimulateArgs),
    /// Rate-limit an HTTP API: forward allowed requests to the upstream, answer the rest with 429.
    Proxy(proxy::ProxyArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Replay(args) => replay::run(args, &tollgate::SystemClock),
        Command::Serve {
            config,
            listen,
            redis,
            grpc_listen,
        } => run_serve(tollgate_server::Options {
            config,
            flags: tollgate_config::Overrides {
                listen,
                grpc_listen,
                ..redis.overrides()
            },
        }),
        Command::Check { file } => run_check(&file),
        Command::Simulate(args) => simulate::run(args),
        Command::Proxy(args) => run_proxy(args),
    }
}

fn run_proxy(args: proxy::ProxyArgs) -> ExitCode {
    init_logging();
    // Signals, reloads and a Redis store (its connections and the tasks of
    // its calls run on the runtime it is made on): the proxy's worker
    // threads run their own.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tollgate proxy: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    // The signals are caught inside the runtime, before the proxy binds and
    // prints its banner.
    let served = runtime.block_on(async {
        let shutdown = tollgate_config::signals::shutdown_signal();
        proxy::run(args, shutdown).await
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tollgate proxy: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_check(file: &std::path::Path) -> ExitCode {
    match tollgate_config::Config::load(file) {
        Ok(config) => {
            // A reader gone (`| head -1`) changes no verdict: the summary is
            // for people, the exit code for scripts.
            let summary = format!("{}: ok\n{}", file.display(), config.summary());
            match io::Write::write_all(&mut io::stdout().lock(), summary.as_bytes()) {
                Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
                    eprintln!("tollgate check: cannot write the summary: {e}");
                    ExitCode::from(1)
                }
                _ => ExitCode::SUCCESS,
            }
        }
        Err(e) => {
            eprintln!("tollgate check: {e}");
            ExitCode::from(1)
        }
    }
}

/// Structured logs on standard error (`RUST_LOG` filters; default `info`,
/// the Redis client's own lines at `error`: `tollgate_cli::logging`).
fn init_logging() {
    let rust_log = std::env::var("RUST_LOG").ok();
    let directives = logging::directives(rust_log.as_deref());
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&directives)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(logging::directives(None))),
        )
        .with_writer(io::stderr)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .init();
}

fn run_serve(options: tollgate_server::Options) -> ExitCode {
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tollgate serve: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async {
        let prepared = tollgate_server::prepare(options).await?;
        // Caught before the banner: a SIGTERM sent once serve says it is up
        // must stop it gracefully.
        let shutdown = tollgate_config::signals::shutdown_signal();
        print!("{}", prepared.banner());
        use std::io::Write;
        let _ = io::stdout().flush();
        prepared.run(shutdown).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tollgate serve: {e}");
            ExitCode::from(1)
        }
    }
}
