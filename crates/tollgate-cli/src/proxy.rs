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

use std::future::Future;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tollgate::{MemoryBackend, Store, SystemClock};
use tollgate_config::store::RejectionCache;
use tollgate_config::{Config, Overrides, StoreConfig, StoreHandle};
use tollgate_connections::Limits;
use tollgate_proxy::options::{connection_limits, parse_duration_ms, parse_key, single_limit_plan};
use tollgate_proxy::{Error, ProxyConfig};
use tollgate_tower::{Plans, PlansHandle, RateLimitConfig};

use crate::redis_args::RedisArgs;

/// The options of `tollgate proxy`.
#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    /// The API to protect, e.g. http://127.0.0.1:3000 (a path is prefixed to every request).
    #[arg(long)]
    pub upstream: String,
    /// Where the proxy listens.
    #[arg(long, default_value = "127.0.0.1:8082")]
    pub listen: String,
    /// Who a client is: `peer` (its IP address), `api-key` (Authorization: Bearer or X-API-Key),
    /// or `header:NAME` (e.g. header:X-Client-Id).
    #[arg(long, default_value = "peer")]
    pub key: String,
    /// With `--key peer`: how many trusted proxies in front append to X-Forwarded-For
    /// (0: ignore X-Forwarded-For, which any client can forge).
    #[arg(long, default_value_t = 0)]
    pub trust_forwarded_for: usize,
    /// A `tollgate serve` config file: its plans, `[clients]` (client key →
    /// plan), default plan and `[store]` replace --policy/--limit/--window.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["policy", "limit", "window"])]
    pub config: Option<PathBuf>,
    /// Where the limit state lives (default: this process's memory, or the
    /// `--config` file's `[store]`, which these flags replace).
    #[command(flatten)]
    pub redis: RedisArgs,
    /// The policy: sliding-window, token-bucket or gcra.
    #[arg(long, default_value = "sliding-window")]
    pub policy: String,
    /// Requests per window for each client.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    /// The window, e.g. 1s, 15m, 1d (or milliseconds).
    #[arg(long, default_value = "1s")]
    pub window: String,
    /// How long the upstream may take to start answering before the client gets a 504.
    #[arg(long, default_value = "30s")]
    pub upstream_timeout: String,
    /// Serving threads, each with its own listener on the address (SO_REUSEPORT)
    /// and its own upstream connections [default: the number of CPUs].
    #[arg(long, value_name = "N")]
    pub workers: Option<NonZeroUsize>,
    /// How long a client may take to send a request head, from its first
    /// byte (from the connection's opening for the first request) [default:
    /// the --config file's `[connections]`, else 10s].
    #[arg(long, value_name = "DURATION")]
    pub header_read_timeout: Option<String>,
    /// Close a client connection on which no byte moves either way for this
    /// long [default: the --config file's `[connections]`, else 60s].
    #[arg(long, value_name = "DURATION")]
    pub idle_timeout: Option<String>,
    /// Open client connections at most (all workers together); past it, new
    /// ones wait in the listen backlog [default: the --config file's
    /// `[connections]`, else 10000].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
}

/// What a `--config` file sets that only a restart puts in force: its
/// `[store]` and `[connections]`, as written in the file (flags aside), so
/// that a reload compares like with like.
#[derive(Debug, Clone, PartialEq)]
pub struct RestartOnly {
    store: StoreConfig,
    connections: Limits,
}

impl ProxyArgs {
    /// The proxy configuration these options describe (system clock). A
    /// Redis store is checked now: see [`StoreHandle::connect`].
    ///
    /// # Errors
    /// A [`tollgate_proxy::Error`] naming the option that is wrong, or the
    /// Redis that refused the connection.
    pub async fn config(&self) -> Result<ProxyConfig, Error> {
        self.config_and_store().await.map(|(config, _)| config)
    }

    /// [`ProxyArgs::config`], with what the `--config` file it was built
    /// from runs with that a reload does not replace (read once, so that
    /// reloads compare against exactly the settings in use).
    async fn config_and_store(&self) -> Result<(ProxyConfig, Option<Running>), Error> {
        let key = parse_key(&self.key, self.trust_forwarded_for)?;
        let overrides = self.redis.overrides();
        let (limits, store) = match &self.config {
            None => {
                let plan = single_limit_plan("proxy", &self.policy, self.limit, &self.window)?;
                let store: Arc<dyn Store> = if self.redis.is_empty() {
                    Arc::new(MemoryBackend::new())
                } else {
                    let mut config = Config::embedded_default();
                    overrides.apply(&mut config).map_err(invalid_redis)?;
                    connect_store(&config, invalid_redis).await?.0
                };
                (
                    RateLimitConfig::new(plan, store, Arc::new(SystemClock)),
                    None,
                )
            }
            Some(path) => {
                let (limits, store) = plan_config(path, &overrides).await?;
                (limits, Some(store))
            }
        };
        let timeout = parse_duration_ms("--upstream-timeout", &self.upstream_timeout)?;
        let from_file = store
            .as_ref()
            .map_or_else(Limits::default, |s| s.restart_only.connections);
        let connections = connection_limits(
            from_file,
            self.header_read_timeout.as_deref(),
            self.idle_timeout.as_deref(),
            self.max_connections,
        )?;
        let config = ProxyConfig::new(&self.upstream, key, limits)?
            .response_timeout(Duration::from_millis(timeout))
            .connection_limits(connections);
        Ok((config, store))
    }
}

/// What a `--config` proxy runs with that a reload does not replace: its
/// restart-only settings, and the shared store's rejection cache, whose
/// changed plans' entries a reload drops.
pub struct Running {
    /// `[store]` and `[connections]` as the proxy started with them.
    pub restart_only: RestartOnly,
    /// The shared store's rejection cache, if on.
    pub cache: Option<Arc<RejectionCache>>,
}

/// The store of `config` through the one wiring of `tollgate-config`:
/// memory, or Redis checked at start-up behind its guard and rejection
/// cache (returned too, for reloads).
async fn connect_store(
    config: &Config,
    error: fn(String) -> Error,
) -> Result<(Arc<dyn Store>, Option<Arc<RejectionCache>>), Error> {
    let handle = StoreHandle::connect(config)
        .await
        .map_err(|e| error(e.to_string()))?;
    Ok(handle.into_store(&config.store))
}

fn invalid_redis(reason: impl ToString) -> Error {
    Error::InvalidOption {
        option: "--redis",
        reason: reason.to_string(),
    }
}

fn invalid_config(reason: String) -> Error {
    Error::InvalidOption {
        option: "--config",
        reason,
    }
}

/// The plans of a `tollgate serve` config: the default plan and each listed
/// client's own plan.
fn plans_of(config: &Config) -> Plans {
    let by_key = config
        .client_plans()
        .map(|(client, plan)| (client.to_owned(), plan.clone()))
        .collect();
    Plans::new(config.default_plan().clone()).with_keys(by_key)
}

/// The limits of a `tollgate serve` config file with the Redis flags
/// applied (its plans and its store), and what it runs with.
async fn plan_config(
    path: &Path,
    overrides: &Overrides,
) -> Result<(RateLimitConfig, Running), Error> {
    let config = Config::load_with(path, overrides).map_err(|e| invalid_config(e.to_string()))?;
    let (store, cache) = connect_store(&config, invalid_config).await?;
    let limits = RateLimitConfig::new(config.default_plan().clone(), store, Arc::new(SystemClock))
        .plans(plans_of(&config));
    let restart_only = RestartOnly {
        store: config.store,
        connections: config.connections,
    };
    Ok((
        limits,
        Running {
            restart_only,
            cache,
        },
    ))
}

/// Re-reads the config file at `path` and puts its plans in force through
/// `handle`, with the same flag `overrides` as at start-up. The store and
/// the connection limits stay the ones the proxy started with: a `[store]`
/// or `[connections]` different from `running`'s is logged as waiting for a
/// restart, and the rejection cache forgets the plans whose limits changed.
///
/// # Errors
/// The file's read or config error (logged too); the running plans stay.
pub fn reload_plans(
    path: &Path,
    handle: &PlansHandle,
    running: &Running,
    overrides: &Overrides,
) -> Result<(), Error> {
    match Config::load_with(path, overrides) {
        Ok(config) => {
            handle.replace(plans_of(&config));
            if let Some(cache) = &running.cache {
                cache.forget_changed(config.plans());
            }
            let running = &running.restart_only;
            let mut waiting = Vec::new();
            if config.store != running.store {
                waiting.push("[store]");
            }
            if config.connections != running.connections {
                waiting.push("[connections]");
            }
            let default_plan = config.default_plan().name();
            if waiting.is_empty() {
                tracing::info!(path = %path.display(), default_plan, "plans reloaded");
            } else {
                let waiting = waiting.join(" and ");
                tracing::warn!(path = %path.display(), default_plan, "plans reloaded; the changed {waiting} waits for a restart");
            }
            Ok(())
        }
        Err(error) => {
            tracing::error!(path = %path.display(), %error, "config reload refused; the running plans stay");
            Err(invalid_config(error.to_string()))
        }
    }
}

/// Runs the proxy until `shutdown` completes, printing where it listens.
///
/// # Errors
/// Bad options, or a listen address that cannot be bound.
pub async fn run(
    args: ProxyArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let (config, running_store) = args.config_and_store().await?;
    let addr = listen_addr(&args.listen).await?;
    let workers = args
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN));
    let (addr, listeners) = tollgate_proxy::bind_workers(addr, workers)?;
    let watcher = match (&args.config, running_store) {
        (Some(path), Some(running)) => Some(spawn_reloader(
            path.clone(),
            config.limits().plans_handle(),
            running,
            args.redis.overrides(),
        )),
        _ => None,
    };
    let limits = match &args.config {
        None => format!("{} {} per {}", args.policy, args.limit, args.window),
        Some(path) => format!(
            "plans of {} (default plan {:?})",
            path.display(),
            config.limits().current_plans().default_plan().name()
        ),
    };
    let connections = config.connections();
    println!(
        "tollgate proxy: listening on http://{addr}, forwarding to {}, {limits} per client ({}), {workers} worker thread(s); connections: header-read timeout {}, idle timeout {}, at most {}",
        config.upstream().url(),
        args.key,
        tollgate_config::format_duration(u64::try_from(connections.header_read_timeout.as_millis()).unwrap_or(u64::MAX)),
        tollgate_config::format_duration(u64::try_from(connections.idle_timeout.as_millis()).unwrap_or(u64::MAX)),
        connections.max_connections,
    );
    let served = tollgate_proxy::run_workers(listeners, config, shutdown).await;
    if let Some(watcher) = watcher {
        watcher.abort();
    }
    served
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use tollgate::Policy;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        proxy: ProxyArgs,
    }

    fn config(args: &[&str]) -> Result<ProxyConfig, String> {
        let cli = Cli::try_parse_from(std::iter::once("proxy").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime
            .block_on(cli.proxy.config())
            .map_err(|e| e.to_string())
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

    #[test]
    fn defaults_give_a_working_config() {
        let config = config(&["--upstream", "http://127.0.0.1:3000"]).unwrap();
        assert_eq!(config.upstream().url(), "http://127.0.0.1:3000");
        let plans = config.limits().current_plans();
        let limit = &plans.default_plan().limits()[0];
        assert_eq!(
            (
                limit.policy().name(),
                limit.policy().limit(),
                limit.policy().window_ms()
            ),
            ("sliding-window", 100, 1_000)
        );
    }

    #[test]
    fn a_serve_config_gives_each_client_its_plan() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tollgate.toml");
        std::fs::write(
            &path,
            "default_plan = \"free\"\n[clients]\nacme = \"paid\"\n\
             [[plans.free]]\nname = \"1s\"\npolicy = \"gcra\"\nlimit = 2\nwindow = \"1s\"\n\
             [[plans.paid]]\nname = \"1s\"\npolicy = \"token-bucket\"\nlimit = 50\nwindow = \"1s\"\n",
        )
        .unwrap();
        let path = path.to_str().unwrap();
        let config = config(&[
            "--upstream",
            "http://127.0.0.1:3000",
            "--key",
            "header:X-Client-Id",
            "--config",
            path,
        ])
        .unwrap();
        let limits = config.limits();
        let plans = limits.current_plans();
        assert_eq!(plans.default_plan().name(), "free");
        assert_eq!(plans.plan_for("acme").name(), "paid");
        assert_eq!(plans.plan_for("acme").limits()[0].policy().limit(), 50);
        assert_eq!(plans.plan_for("someone").name(), "free");
        // --config replaces the one-limit options; a broken file is named.
        let both = config_err(&["--upstream", "http://h", "--config", path, "--limit", "5"]);
        assert!(both.contains("--limit"), "{both}");
        std::fs::write(path, "[[plans.free]\n").unwrap();
        let broken = config_err(&["--upstream", "http://h", "--config", path]);
        assert!(
            broken.contains("invalid --config") || broken.contains("--config"),
            "{broken}"
        );
        assert!(broken.contains("line 1"), "{broken}");
    }

    fn config_err(args: &[&str]) -> String {
        config(args).err().unwrap_or_default()
    }

    #[test]
    fn each_bad_option_is_named() {
        let cases: [(&[&str], &str); 7] = [
            (
                &["--upstream", "http://h", "--redis-ca", "/tmp/ca.pem"],
                "--redis-ca /tmp/ca.pem needs a Redis store",
            ),
            (&["--upstream", "ftp://x"], "invalid upstream"),
            (
                &["--upstream", "http://h", "--window", "1w"],
                "invalid --window",
            ),
            (
                &["--upstream", "http://h", "--key", "cookie"],
                "invalid --key",
            ),
            (
                &["--upstream", "http://h", "--policy", "leaky"],
                "unknown policy",
            ),
            (
                &["--upstream", "http://h", "--limit", "0"],
                "limit must be at least 1",
            ),
            (
                &["--upstream", "http://h", "--upstream-timeout", "0s"],
                "invalid --upstream-timeout",
            ),
        ];
        for (args, expected) in cases {
            let err = config(args).err().unwrap_or_default();
            assert!(err.contains(expected), "{args:?}: {err}");
        }
    }
}
