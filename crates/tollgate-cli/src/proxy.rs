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
use tollgate::{MemoryBackend, SystemClock};
use tollgate_config::store::RejectionCache;
use tollgate_config::{Config, StoreConfig, StoreHandle};
use tollgate_proxy::options::{parse_duration_ms, parse_key, single_limit_plan};
use tollgate_proxy::{Error, ProxyConfig};
use tollgate_tower::{Plans, PlansHandle, RateLimitConfig};

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
}

impl ProxyArgs {
    /// The proxy configuration these options describe (memory store, system clock).
    ///
    /// # Errors
    /// A [`tollgate_proxy::Error`] naming the option that is wrong.
    pub fn config(&self) -> Result<ProxyConfig, Error> {
        self.config_and_store().map(|(config, _)| config)
    }

    /// [`ProxyArgs::config`], with the `[store]` of the `--config` file it
    /// was built from (read once, so that reloads compare against exactly
    /// the store in use).
    fn config_and_store(&self) -> Result<(ProxyConfig, Option<RunningStore>), Error> {
        let key = parse_key(&self.key, self.trust_forwarded_for)?;
        let (limits, store) = match &self.config {
            None => {
                let plan = single_limit_plan("proxy", &self.policy, self.limit, &self.window)?;
                let limits = RateLimitConfig::new(
                    plan,
                    Arc::new(MemoryBackend::new()),
                    Arc::new(SystemClock),
                );
                (limits, None)
            }
            Some(path) => {
                let (limits, store) = plan_config(path)?;
                (limits, Some(store))
            }
        };
        let timeout = parse_duration_ms("--upstream-timeout", &self.upstream_timeout)?;
        let config = ProxyConfig::new(&self.upstream, key, limits)?
            .response_timeout(Duration::from_millis(timeout));
        Ok((config, store))
    }
}

/// The store a `--config` proxy runs on: its `[store]` section (read once,
/// so that reloads compare against exactly the store in use) and its
/// rejection cache, whose changed plans' entries a reload drops.
pub struct RunningStore {
    /// The `[store]` section in use.
    pub config: StoreConfig,
    /// The shared store's rejection cache, if on.
    pub cache: Option<Arc<RejectionCache>>,
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

/// The limits of a `tollgate serve` config file (its plans and its store),
/// and its `[store]` section.
fn plan_config(path: &Path) -> Result<(RateLimitConfig, RunningStore), Error> {
    let config = Config::load(path).map_err(|e| invalid_config(e.to_string()))?;
    let (store, cache) = StoreHandle::for_config(&config)
        .map_err(|e| invalid_config(e.to_string()))?
        .into_store(&config.store);
    let limits = RateLimitConfig::new(config.default_plan().clone(), store, Arc::new(SystemClock))
        .plans(plans_of(&config));
    Ok((
        limits,
        RunningStore {
            config: config.store,
            cache,
        },
    ))
}

/// Re-reads the config file at `path` and puts its plans in force through
/// `handle`. The store stays the one the proxy started with: a `[store]`
/// different from `running`'s is logged as waiting for a restart, and the
/// rejection cache forgets the plans whose limits changed.
///
/// # Errors
/// The file's read or config error (logged too); the running plans stay.
pub fn reload_plans(
    path: &Path,
    handle: &PlansHandle,
    running: &RunningStore,
) -> Result<(), Error> {
    match Config::load(path) {
        Ok(config) => {
            handle.replace(plans_of(&config));
            if let Some(cache) = &running.cache {
                cache.forget_changed(config.plans());
            }
            if config.store == running.config {
                tracing::info!(path = %path.display(), default_plan = config.default_plan().name(), "plans reloaded");
            } else {
                tracing::warn!(path = %path.display(), default_plan = config.default_plan().name(), "plans reloaded; the changed [store] waits for a restart");
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
    let (config, running_store) = args.config_and_store()?;
    let addr = tokio::net::lookup_host(&args.listen)
        .await
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| Error::InvalidOption {
            option: "--listen",
            reason: format!(
                "{:?} is not an address to listen on, e.g. 127.0.0.1:8082",
                args.listen
            ),
        })?;
    let workers = args
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN));
    let (addr, listeners) = tollgate_proxy::bind_workers(addr, workers)?;
    let watcher = match (&args.config, running_store) {
        (Some(path), Some(running)) => {
            let handle = config.limits().plans_handle();
            // Caught before the banner, so that a SIGHUP sent once the proxy
            // says it listens is never the default action (the end).
            let hangups = tollgate_config::signals::catch_hangups();
            let path = path.clone();
            Some(tokio::spawn(async move {
                tollgate_config::reload::watch_file(
                    &path,
                    tollgate_config::reload::POLL_INTERVAL,
                    hangups,
                    std::future::pending(),
                    || {
                        let _ = reload_plans(&path, &handle, &running);
                    },
                )
                .await;
            }))
        }
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
    println!(
        "tollgate proxy: listening on http://{addr}, forwarding to {}, {limits} per client ({}), {workers} worker thread(s)",
        config.upstream().url(),
        args.key,
    );
    let served = tollgate_proxy::run_workers(listeners, config, shutdown).await;
    if let Some(watcher) = watcher {
        watcher.abort();
    }
    served
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
        cli.proxy.config().map_err(|e| e.to_string())
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
        let cases: [(&[&str], &str); 6] = [
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
