//! The options of `tollgate proxy`, and the proxy configuration they
//! build: the client key, one limit or a `--config` file's plans, the
//! store, the upstream and its timeout, the connection limits.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tollgate::{Plan, Policy, SystemClock};
use tollgate_config::{Config, Overrides};
use tollgate_connections::Limits;
use tollgate_proxy::options::{connection_limits, parse_duration_ms, parse_key, single_limit_plan};
use tollgate_proxy::{Error, ProxyConfig};
use tollgate_tower::RateLimitConfig;

use super::plans::{
    connect_store, invalid_redis, plan_config, redis_option, FlaggedConnections, Running, Sweep,
};
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
    /// How long the upstream may take to start answering before the client gets a 504,
    /// counted from the end of the request's upload (its start, without a body); also
    /// how long an upload may stop moving (504 for the upstream's stop, 408 for the client's).
    #[arg(long, default_value = "30s")]
    pub upstream_timeout: String,
    /// Serving threads, each with its own listener on the address (SO_REUSEPORT)
    /// and its own upstream connections [default: the number of CPUs].
    #[arg(long, value_name = "N", value_parser = parse_workers)]
    pub workers: Option<NonZeroUsize>,
    /// Pin each worker thread to a CPU of its own, among those this process
    /// may run on (in turn, when there are more workers than CPUs), as
    /// nginx's `worker_cpu_affinity auto`: on a host whose cores other
    /// processes also keep busy, it keeps the scheduler from running two
    /// workers on one core, which shows as a p99 several times the median.
    #[arg(long)]
    pub pin_workers: bool,
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

impl ProxyArgs {
    /// The proxy configuration these options describe (system clock). A
    /// Redis store is checked now: see
    /// [`StoreHandle::connect`](tollgate_config::StoreHandle::connect).
    ///
    /// # Errors
    /// A [`tollgate_proxy::Error`] naming the option that is wrong, or the
    /// Redis that refused the connection.
    pub async fn config(&self) -> Result<ProxyConfig, Error> {
        self.config_and_store().await.map(|(config, ..)| config)
    }

    /// The flags that replace keys of the `--config` file: the Redis ones,
    /// and `grpc_listen` off. The proxy opens neither of `serve`'s ports (it
    /// listens on its own `--listen`), so a file whose `listen` is on the
    /// default gRPC port, which `serve` would refuse, is the proxy's to use.
    pub(super) fn config_overrides(&self) -> Overrides {
        Overrides {
            grpc_listen: Some("off".to_owned()),
            ..self.redis.overrides()
        }
    }

    /// [`ProxyArgs::config`], with what the `--config` file it was built
    /// from runs with that a reload does not replace (read once, so that
    /// reloads compare against exactly the settings in use), and the memory
    /// to sweep: without `--config`, `serve`'s embedded default (capped at
    /// the default `max_clients`).
    pub(super) async fn config_and_store(
        &self,
    ) -> Result<(ProxyConfig, Option<Running>, Sweep), Error> {
        let key = parse_key(&self.key, self.trust_forwarded_for)?;
        let overrides = self.config_overrides();
        let (limits, mut store, sweep) = match &self.config {
            None => {
                let plan = single_limit_plan("proxy", &self.policy, self.limit, &self.window)?;
                let mut config = Config::embedded_default();
                overrides
                    .apply(&mut config)
                    .map_err(|e| invalid_redis(&overrides, &e))?;
                if !self.redis.is_empty() {
                    check_redis_range(&plan, self.window.trim())?;
                }
                let (store, _, sweep) =
                    connect_store(&config, redis_option(&overrides, "--redis")).await?;
                let limits = RateLimitConfig::new(plan, store, Arc::new(SystemClock));
                (limits, None, sweep)
            }
            Some(path) => {
                let (limits, store, sweep) = plan_config(path, &overrides).await?;
                (limits, Some(store), sweep)
            }
        };
        let timeout = parse_duration_ms("--upstream-timeout", &self.upstream_timeout)?;
        if let Some(running) = &mut store {
            running.flagged = FlaggedConnections {
                header_read_timeout: self.header_read_timeout.is_some(),
                idle_timeout: self.idle_timeout.is_some(),
                max_connections: self.max_connections.is_some(),
            };
        }
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
        Ok((config, store, sweep))
    }
}

/// Checks the limits of `plan` (made from `--policy`, `--limit` and
/// `window`) against the Redis store's exact range with
/// `tollgate_redis::check_limit`, the check `tollgate check`, `serve` and
/// `proxy --config` run on a config file's limits when the store is Redis:
/// a limit the store could never answer exactly is refused at start-up
/// rather than answered by the failure policy on every request. The flag
/// named is the one to change, as the file's check points at its value:
/// `--window` when the window alone is out of range, else `--limit`.
///
/// # Errors
/// [`Error::InvalidOption`] naming that flag, its value and the bound.
fn check_redis_range(plan: &Plan, window: &str) -> Result<(), Error> {
    for limit in plan.limits() {
        let policy = limit.policy();
        let (name, count, window_ms) = (policy.name(), policy.limit(), policy.window_ms());
        let Err(error) = tollgate_redis::check_limit(name, count, window_ms) else {
            continue;
        };
        let (option, value) =
            if matches!(error, tollgate_redis::RedisStoreError::UnsupportedPolicy(_)) {
                ("--policy", format!("{name:?}"))
            } else {
                match tollgate_redis::at_fault(name, window_ms) {
                    tollgate_redis::AtFault::Limit => {
                        ("--limit", format!("{count} ({name}, --window {window:?})"))
                    }
                    tollgate_redis::AtFault::Window => {
                        ("--window", format!("{window:?} ({name}, --limit {count})"))
                    }
                }
            };
        return Err(Error::InvalidOption {
            option,
            reason: format!("{value}: the redis store cannot serve it exactly: {error}"),
        });
    }
    Ok(())
}

/// The most serving threads `--workers` takes: each is a thread and a
/// listening socket of its own, so a mistyped count would otherwise end in
/// the system's "Too many open files", naming no flag.
pub const MAX_WORKERS: usize = 1024;

/// `--workers N`: a whole number from 1 to [`MAX_WORKERS`].
fn parse_workers(text: &str) -> Result<NonZeroUsize, String> {
    let count: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number of threads"))?;
    NonZeroUsize::new(count)
        .filter(|count| count.get() <= MAX_WORKERS)
        .ok_or_else(|| format!("{count} is out of range: 1 to {MAX_WORKERS} worker threads"))
}

#[cfg(test)]
pub(super) mod tests;
