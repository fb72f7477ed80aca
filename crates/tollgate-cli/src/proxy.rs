//! `tollgate proxy`: a rate-limiting reverse proxy in front of an upstream.
//!
//! Clients are limited by one limit given on the command line
//! (`--policy`, `--limit`, `--window`), or by the plans of a `tollgate
//! serve` config file (`--config`: plans, `[clients]` → plan, the default
//! plan and the `[store]`, memory or Redis). The plans of a config file are
//! reloaded on SIGHUP and when the file changes, as `tollgate serve` does:
//! limits a reload leaves unchanged keep every client's state, a broken
//! file is refused with a log line and the running plans stay, and a
//! changed `[store]` waits for a restart.
//!
//! `args.rs` holds the options and what they build (a `ProxyConfig`),
//! `plans.rs` what a `--config` file gives (plans, store) and its reloads;
//! this file runs the proxy.

mod args;
mod plans;

use std::future::Future;
use std::num::NonZeroUsize;
use std::path::PathBuf;

use tollgate::{Clock, Plan, Policy, SystemClock};
use tollgate_config::Overrides;
use tollgate_proxy::{Error, Placement};
use tollgate_tower::PlansHandle;

pub use args::ProxyArgs;
pub use plans::{reload_plans, FlaggedConnections, RestartOnly, Running, Sweep};

/// Runs the proxy until `shutdown` completes, printing where it listens.
///
/// # Errors
/// Bad options, or a listen address that cannot be bound.
pub async fn run(
    args: ProxyArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let (config, running_store, sweep) = args.config_and_store().await?;
    let addr = listen_addr(&args.listen).await?;
    let workers = args
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN));
    let placement = if args.pin_workers {
        Placement::one_cpu_each()?
    } else {
        Placement::anywhere()
    };
    let (addr, listeners) =
        tollgate_proxy::bind_workers(addr, workers).map_err(|e| naming_workers(e, workers))?;
    let watcher = match (&args.config, running_store) {
        (Some(path), Some(running)) => spawn_reloader(
            path.clone(),
            config.limits().plans_handle(),
            running,
            args.config_overrides(),
        ),
        _ => spawn_hangup_logger(),
    };
    let limits = match &args.config {
        None => flag_limit(config.limits().current_plans().default_plan()),
        Some(path) => format!(
            "plans of {} (default plan {:?})",
            path.display(),
            config.limits().current_plans().default_plan().name()
        ),
    };
    let connections = config.connections();
    println!(
        "tollgate proxy: listening on http://{addr}, forwarding to {}, {limits} per client ({}), {workers} worker thread(s){}; connections: header-read timeout {}, idle timeout {}, at most {}",
        config.upstream().url(),
        args.key,
        pinned_to(&placement, workers),
        tollgate_config::format_duration(u64::try_from(connections.header_read_timeout.as_millis()).unwrap_or(u64::MAX)),
        tollgate_config::format_duration(u64::try_from(connections.idle_timeout.as_millis()).unwrap_or(u64::MAX)),
        connections.max_connections,
    );
    let sweeper = spawn_sweeper(sweep, config.limits().plans_handle());
    let served = tollgate_proxy::run_workers(listeners, config, placement, shutdown)
        .await
        .map_err(|e| naming_workers(e, workers));
    for task in [watcher, sweeper] {
        task.abort();
    }
    served
}

/// Drops idle clients from the proxy's memory every `sweep.every` until the
/// task is aborted, as `serve` sweeps ([`tollgate_server::sweep_idle`]),
/// with the plans in force at each sweep.
fn spawn_sweeper(sweep: Sweep, plans: PlansHandle) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let pending = std::future::pending();
        tollgate_server::tasks::sweep_every(sweep.every, pending, || {
            let plans = plans.current().distinct();
            tollgate_server::sweep_idle(sweep.memory.limiter(), &plans, SystemClock.now_ms())
        })
        .await;
    })
}

/// Linux's EMFILE: the process may open no more files.
const TOO_MANY_OPEN_FILES: i32 = 24;

/// `error`, said of `--workers` when it is the limit on open files, which
/// each worker's socket, thread and event queue count against (the
/// system's bare "Too many open files" named no flag).
fn naming_workers(error: Error, workers: NonZeroUsize) -> Error {
    match &error {
        Error::Io(io) if io.raw_os_error() == Some(TOO_MANY_OPEN_FILES) => Error::InvalidOption {
            option: "--workers",
            reason: format!(
                "{workers} workers need more open files than this process may have ({io}); \
                 lower --workers, or raise the limit (ulimit -n)"
            ),
        },
        _ => error,
    }
}

/// How the start-up line says where the workers run: nothing when
/// anywhere, else `pinned to CPUs 0, 1` (worker by worker).
fn pinned_to(placement: &Placement, workers: NonZeroUsize) -> String {
    let cpus: Vec<String> = (0..workers.get())
        .filter_map(|index| placement.cpu_of(index))
        .map(|cpu| cpu.to_string())
        .collect();
    if cpus.is_empty() {
        String::new()
    } else {
        format!(" pinned to CPUs {}", cpus.join(", "))
    }
}

/// The address `--listen` names (a host name is looked up).
async fn listen_addr(listen: &str) -> Result<std::net::SocketAddr, Error> {
    tokio::net::lookup_host(listen)
        .await
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| Error::InvalidOption {
            option: "--listen",
            reason: format!("{listen:?} is not an address to listen on, e.g. 127.0.0.1:8082"),
        })
}

/// Without a config file, logs each SIGHUP (nothing to reload) until the
/// task is aborted: caught, as with one, so that a `kill -HUP` sent to a
/// fleet's processes does not end this one by the default action.
fn spawn_hangup_logger() -> tokio::task::JoinHandle<()> {
    let hangups = tollgate_config::signals::catch_hangups();
    tokio::spawn(tollgate_config::signals::log_hangups_without_config(
        hangups,
        std::future::pending(),
    ))
}

/// Reloads the plans of the config file at `path` on SIGHUP and when the
/// file changes, until the task is aborted. Hangups are caught now, before
/// the banner, so that a SIGHUP sent once the proxy says it listens is
/// never the default action (the end).
fn spawn_reloader(
    path: PathBuf,
    handle: PlansHandle,
    running: Running,
    overrides: Overrides,
) -> tokio::task::JoinHandle<()> {
    let hangups = tollgate_config::signals::catch_hangups();
    tokio::spawn(async move {
        tollgate_config::reload::watch_file(
            &path,
            tollgate_config::reload::POLL_INTERVAL,
            hangups,
            std::future::pending(),
            || {
                let _ = reload_plans(&path, &handle, &running, &overrides);
            },
        )
        .await;
    })
}

/// The limit the flags made (`plan`'s one limit), as the start-up line
/// says it: the policy, the limit and the window as a config writes it
/// (`--window 250` is `250ms`).
fn flag_limit(plan: &Plan) -> String {
    let limits = plan.limits().iter().map(|limit| {
        let policy = limit.policy();
        let window = tollgate_config::format_duration(policy.window_ms());
        format!("{} {} per {window}", policy.name(), policy.limit())
    });
    limits.collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::args::tests::Cli;
    use super::*;
    use clap::Parser;

    /// The window as the proxy read it, not as typed (audit: `--window
    /// 250` was said as `per 250`, `" 1s"` as `per  1s`).
    #[tokio::test]
    async fn the_start_up_line_says_the_window_as_read() {
        for (window, said) in [("250", "250ms"), (" 1s", "1s"), ("60000", "1m")] {
            let cli = Cli::try_parse_from([
                "proxy",
                "--upstream",
                "http://127.0.0.1:3000",
                "--limit",
                "7",
                "--window",
                window,
            ])
            .unwrap();
            let (config, _, _) = cli.proxy.config_and_store().await.unwrap();
            let plan = config.limits().current_plans().default_plan().clone();
            assert_eq!(flag_limit(&plan), format!("sliding-window 7 per {said}"));
        }
    }

    #[tokio::test]
    async fn a_listen_address_that_is_not_one_is_refused_by_name() {
        let cli = Cli::try_parse_from([
            "proxy",
            "--upstream",
            "http://127.0.0.1:3000",
            "--listen",
            "nonsense",
        ])
        .unwrap();
        let error = run(cli.proxy, std::future::pending()).await.unwrap_err();
        assert!(
            error.to_string().contains("--listen") && error.to_string().contains("nonsense"),
            "{error}"
        );
    }

    /// Without `--config`, the proxy's memory store is capped as `serve`'s
    /// embedded default is, and swept of idle clients: it kept every client
    /// id ever seen (an audit's flood of 557,000 ids held 185 MB long after
    /// every window had closed).
    #[tokio::test]
    async fn the_flags_only_memory_store_is_capped_and_swept() {
        let cli = Cli::try_parse_from([
            "proxy",
            "--upstream",
            "http://127.0.0.1:3000",
            "--window",
            "1s",
        ])
        .unwrap();
        let (config, _, sweep) = cli.proxy.config_and_store().await.unwrap();
        assert_eq!(
            sweep.memory.limiter().store().max_clients(),
            Some(tollgate_config::DEFAULT_MAX_CLIENTS)
        );
        assert_eq!(
            sweep.every,
            std::time::Duration::from_millis(tollgate_config::DEFAULT_SWEEP_INTERVAL_MS)
        );
        let plans = config.limits().plans_handle();
        let plan = plans.current().default_plan().clone();
        let memory = sweep.memory.clone();
        // Clients last seen a minute ago, on a window of 1 s: idle.
        let then = SystemClock.now_ms() - 60_000;
        for client in 0..300 {
            memory
                .limiter()
                .check(&plan, &format!("c{client}"), then, 1);
        }
        assert_eq!(memory.limiter().clients(), 300);
        // Swept every few ms here, to see a sweep within a bounded wait.
        let every = std::time::Duration::from_millis(5);
        let sweeper = spawn_sweeper(Sweep { every, ..sweep }, plans);
        for _ in 0..400 {
            if memory.limiter().clients() == 0 {
                break;
            }
            tokio::time::sleep(every).await;
        }
        assert_eq!(memory.limiter().clients(), 0, "swept");
        sweeper.abort();
    }
}
