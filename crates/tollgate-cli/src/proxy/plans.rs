//! What a `--config` file gives the proxy (the plans of a `tollgate serve`
//! config, its store) and the reload of its plans.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tollgate::{Store, SystemClock};
use tollgate_config::store::RejectionCache;
use tollgate_config::{
    ClientMemory, Config, Error as ConfigError, Overrides, StoreConfig, StoreHandle,
};
use tollgate_connections::Limits;
use tollgate_proxy::Error;
use tollgate_tower::{Plans, PlansHandle, RateLimitConfig};

/// What a `--config` file sets that only a restart puts in force: its
/// `[store]`, `[connections]` and `sweep_interval`, as written in the file
/// (flags aside), so that a reload compares like with like.
#[derive(Debug, Clone, PartialEq)]
pub struct RestartOnly {
    pub(super) store: StoreConfig,
    pub(super) connections: Limits,
    pub(super) sweep_interval_ms: u64,
}

/// What a `--config` proxy runs with that a reload does not replace: its
/// restart-only settings, and the shared store's rejection cache, whose
/// changed plans' entries a reload drops.
pub struct Running {
    /// `[store]`, `[connections]` and `sweep_interval` as the proxy started
    /// with them.
    pub restart_only: RestartOnly,
    /// The shared store's rejection cache, if on.
    pub cache: Option<Arc<RejectionCache>>,
    /// The `[connections]` keys a flag replaces, whose changes in the file
    /// wait for nothing: a restart would take the flag's value again.
    pub flagged: FlaggedConnections,
}

/// Which `[connections]` keys the proxy's flags replace
/// (`--header-read-timeout`, `--idle-timeout`, `--max-connections`).
#[derive(Debug, Clone, Copy, Default)]
pub struct FlaggedConnections {
    /// `--header-read-timeout` was given.
    pub header_read_timeout: bool,
    /// `--idle-timeout` was given.
    pub idle_timeout: bool,
    /// `--max-connections` was given.
    pub max_connections: bool,
}

impl FlaggedConnections {
    /// `file`'s limits with each key a flag replaces taken from `running`
    /// instead: what differs from `running` then is what a restart would
    /// change.
    fn unflagged(self, file: Limits, running: Limits) -> Limits {
        let mut limits = file;
        if self.header_read_timeout {
            limits.header_read_timeout = running.header_read_timeout;
        }
        if self.idle_timeout {
            limits.idle_timeout = running.idle_timeout;
        }
        if self.max_connections {
            limits.max_connections = running.max_connections;
        }
        limits
    }
}

/// Where the proxy keeps clients in memory (the memory store, or a Redis
/// store's local fallback), and how often it sweeps them of idle ones: what
/// `serve` does with its `sweep_interval`, so that memory holds the clients
/// of the last windows, not every client ever seen.
pub struct Sweep {
    /// The memory to sweep.
    pub memory: ClientMemory,
    /// How often.
    pub every: Duration,
}

/// The store of `config` through the one wiring of `tollgate-config`:
/// memory, or Redis checked at start-up behind its guard and rejection
/// cache (returned too, for reloads), and the memory to sweep. `config` is
/// already checked, so a failure here is the Redis refusing the
/// connection: [`Error::RedisConnect`], naming the option that gave the
/// Redis (see [`redis_option`]).
pub(super) async fn connect_store(
    config: &Config,
    option: &'static str,
) -> Result<(Arc<dyn Store>, Option<Arc<RejectionCache>>, Sweep), Error> {
    let handle = StoreHandle::connect(config)
        .await
        .map_err(|e| Error::RedisConnect {
            option,
            reason: e.to_string(),
        })?;
    let (store, cache, memory) = handle.into_store(&config.store);
    let every = Duration::from_millis(config.sweep_interval_ms);
    Ok((store, cache, Sweep { memory, every }))
}

/// The option that names the Redis store: `--redis` or `--redis-cluster`
/// when given (they replace the file's `[store]`), else `otherwise` (the
/// `--config` file).
pub(super) fn redis_option(overrides: &Overrides, otherwise: &'static str) -> &'static str {
    if overrides.redis.is_some() {
        "--redis"
    } else if !overrides.redis_cluster.is_empty() {
        "--redis-cluster"
    } else {
        otherwise
    }
}

/// Whether `error` is a check of a Redis flag that names the flag itself
/// (one that only a Redis store uses, given without one or out of its
/// range; a URL, a cluster seed, a CA file), as `tollgate serve` prints it.
fn names_its_flag(error: &ConfigError) -> bool {
    matches!(
        error,
        ConfigError::FlagWithoutRedis { .. }
            | ConfigError::InvalidReplicasToAck { .. }
            | ConfigError::InvalidClusterSeed { .. }
            | ConfigError::InvalidRedisFlag { .. }
            | ConfigError::InvalidRedisCaFlag { .. }
    )
}

/// The Redis flags of `overrides` refused with `error`: a check that names
/// its flag says so itself ([`names_its_flag`]); otherwise the flag that
/// names the Redis store is named.
pub(super) fn invalid_redis(overrides: &Overrides, error: &ConfigError) -> Error {
    let reason = error.to_string();
    if names_its_flag(error) {
        return Error::RefusedOption(reason);
    }
    let option = redis_option(overrides, "--redis");
    Error::InvalidOption { option, reason }
}

/// A `--config` file refused with `error`, or a Redis flag refused with it
/// ([`invalid_redis`]): each named by what is at fault.
fn refused_config(overrides: &Overrides, error: &ConfigError) -> Error {
    if names_its_flag(error) {
        invalid_redis(overrides, error)
    } else {
        invalid_config(error.to_string())
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
pub(super) async fn plan_config(
    path: &Path,
    overrides: &Overrides,
) -> Result<(RateLimitConfig, Running, Sweep), Error> {
    let config = Config::load_with(path, overrides).map_err(|e| refused_config(overrides, &e))?;
    let (store, cache, sweep) = connect_store(&config, redis_option(overrides, "--config")).await?;
    let limits = RateLimitConfig::new(config.default_plan().clone(), store, Arc::new(SystemClock))
        .plans(plans_of(&config));
    let restart_only = RestartOnly {
        store: config.store,
        connections: config.connections,
        sweep_interval_ms: config.sweep_interval_ms,
    };
    let running = Running {
        restart_only,
        cache,
        flagged: FlaggedConnections::default(),
    };
    Ok((limits, running, sweep))
}

/// Re-reads the config file at `path` and puts its plans in force through
/// `handle`, with the same flag `overrides` as at start-up. The store and
/// the connection limits stay the ones the proxy started with: a `[store]`,
/// `[connections]` (but for the keys a flag replaces) or `sweep_interval`
/// different from `running`'s is logged as waiting for a restart, and the
/// rejection cache forgets the plans
/// whose limits changed.
/// So the new limits must be ones the running store can serve, whatever
/// store the file names ([`Config::load_for_reload`]).
///
/// # Errors
/// The file's read or config error (logged too); the running plans stay.
pub fn reload_plans(
    path: &Path,
    handle: &PlansHandle,
    running: &Running,
    overrides: &Overrides,
) -> Result<(), Error> {
    match Config::load_for_reload(path, overrides, &running.restart_only.store) {
        Ok(config) => {
            handle.replace(plans_of(&config));
            if let Some(cache) = &running.cache {
                cache.forget_changed(config.plans());
            }
            let flagged = running.flagged;
            let running = &running.restart_only;
            let mut waiting = Vec::new();
            if config.store != running.store {
                waiting.push("[store]");
            }
            if flagged.unflagged(config.connections, running.connections) != running.connections {
                waiting.push("[connections]");
            }
            if config.sweep_interval_ms != running.sweep_interval_ms {
                waiting.push("sweep_interval");
            }
            let default_plan = config.default_plan().name();
            if waiting.is_empty() {
                tracing::info!(path = %path.display(), default_plan, "plans reloaded");
            } else {
                let waiting = match waiting.split_last() {
                    Some((last, [])) => (*last).to_owned(),
                    Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
                    None => String::new(),
                };
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
