//! `[store]`: where limit state lives and what to answer when it fails.

use std::path::PathBuf;

use tollgate_guard::BreakerConfig;
use tollgate_redis::{RedisStoreError, RedisTarget};

pub use super::redis_url::check_redis_url;
use super::DEFAULT_MAX_CLIENTS;
use crate::Error;

mod build;
pub(super) use build::{build_store, check_redis_only_settings};

/// What the service answers when the store cannot decide: the core's one
/// definition, named here because `[store] failure_policy` is parsed here.
pub use tollgate::FailurePolicy;

/// Where limit state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// In this process's memory.
    Memory,
    /// In Redis, shared by every instance pointed at it.
    Redis {
        /// The URL (`redis://` or `rediss://`, with an ACL user and a
        /// database number if any), checked for form only.
        url: String,
    },
    /// In a Redis Cluster, reached through these seed nodes.
    RedisCluster {
        /// The seed nodes' URLs (all `redis://` or all `rediss://`).
        seeds: Vec<String>,
    },
}

/// `[store]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Memory or Redis.
    pub kind: StoreKind,
    /// What to answer when the store fails.
    pub failure_policy: FailurePolicy,
    /// Cap on clients tracked in memory (idle ones are evicted beyond it).
    pub max_clients: usize,
    /// Every Redis key starts with this prefix (instances that share limits
    /// must use the same one).
    pub prefix: String,
    /// How long one store call may take before the failure policy answers, in ms.
    pub timeout_ms: u64,
    /// The shared store's circuit breaker (`breaker_failures`,
    /// `breaker_probe_interval`): one for one node, one per master of a
    /// cluster (each with these settings).
    pub breaker: BreakerConfig,
    /// A PEM file of the certificate authority to trust for `rediss://`
    /// (instead of the system's roots).
    pub tls_ca: Option<PathBuf>,
    /// The exact rejection cache as configured (`rejection_cache`,
    /// `rejection_cache_max_clients`): its cap, or `None` when turned off.
    /// On by default, whatever the store: the store may become Redis by a
    /// flag (`--redis`) after the file is read. See
    /// [`StoreConfig::shared_rejection_cache`] for whether it applies.
    pub rejection_cache: Option<usize>,
    /// Decisions batched into one Redis script call at most (`batch_max`,
    /// 1 = every decision alone; per master on a cluster), and the batched
    /// calls in flight at once (`batches_in_flight`): see
    /// `tollgate_redis::RedisStoreConfig::batch_max`.
    pub batching: Batching,
    /// Replicas that must acknowledge a decision's writes before it is
    /// answered (`replicas_to_ack`, 0 = none): see
    /// `tollgate_redis::RedisStoreConfig::replicas_to_ack`.
    pub replicas_to_ack: u32,
    /// Whose clock times a shared store's decisions (`clock`): the
    /// caller's, or Redis's. See `tollgate_redis::TimeSource`.
    pub clock: tollgate_redis::TimeSource,
}

/// `batch_max` and `batches_in_flight`, checked against the Redis store's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// `tollgate_redis::RedisStoreConfig::batch_max`.
    pub batch_max: usize,
    /// `tollgate_redis::RedisStoreConfig::batches_in_flight`.
    pub batches_in_flight: usize,
}

impl Default for Batching {
    fn default() -> Self {
        Self {
            batch_max: tollgate_redis::DEFAULT_BATCH_MAX,
            batches_in_flight: tollgate_redis::DEFAULT_BATCHES_IN_FLIGHT,
        }
    }
}

/// The default Redis key prefix.
pub const DEFAULT_PREFIX: &str = "tollgate";

/// The default per-call store timeout, in ms.
pub const DEFAULT_TIMEOUT_MS: u64 = 100;

impl StoreConfig {
    /// The in-memory store with every default.
    pub fn memory() -> Self {
        Self {
            kind: StoreKind::Memory,
            failure_policy: FailurePolicy::FailOpen,
            max_clients: DEFAULT_MAX_CLIENTS,
            prefix: DEFAULT_PREFIX.to_owned(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            breaker: BreakerConfig::default(),
            tls_ca: None,
            rejection_cache: Some(tollgate_cache::DEFAULT_MAX_CLIENTS),
            batching: Batching::default(),
            replicas_to_ack: 0,
            clock: tollgate_redis::TimeSource::Caller,
        }
    }

    /// The rejection cache's cap where it applies: on a shared store
    /// (Redis, Redis Cluster) with the cache on. `None` for the memory
    /// store, which decides locally and would gain nothing from it.
    pub fn shared_rejection_cache(&self) -> Option<usize> {
        match self.kind {
            StoreKind::Memory => None,
            StoreKind::Redis { .. } | StoreKind::RedisCluster { .. } => self.rejection_cache,
        }
    }

    /// Where the Redis store connects, or `None` for the memory store. The
    /// CA file, if any, is read now.
    ///
    /// # Errors
    /// [`Error::RedisCa`] for the CA, [`Error::Redis`] for the rest (never
    /// showing a password), when the target cannot work: see
    /// [`RedisTarget::validate`].
    pub fn redis_target(&self) -> Result<Option<RedisTarget>, Error> {
        let target = match &self.kind {
            StoreKind::Memory => return Ok(None),
            StoreKind::Redis { url } => RedisTarget::single(url.clone()),
            StoreKind::RedisCluster { seeds } => RedisTarget::cluster(seeds.iter().cloned()),
        };
        let refused = |target: &RedisTarget, e: RedisStoreError| match e {
            RedisStoreError::Ca(reason) => Error::RedisCa {
                url: target.redacted(),
                reason,
            },
            _ => Error::Redis {
                url: target.redacted(),
                reason: e.to_string(),
            },
        };
        let target = match &self.tls_ca {
            None => target,
            Some(path) => target
                .clone()
                .with_ca_file(path)
                .map_err(|e| refused(&target, e))?,
        };
        target.validate().map_err(|e| refused(&target, e))?;
        Ok(Some(target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_urls() {
        assert!(check_redis_url("redis://127.0.0.1:6379/0").is_ok());
        assert!(check_redis_url("redis://:pw@host").is_ok());
        assert!(check_redis_url("unix:///tmp/redis.sock").is_ok());
        assert!(check_redis_url("http://x").is_err());
        assert!(check_redis_url("redis://").is_err());
        assert!(check_redis_url("redis://host:notaport").is_err());
    }
}
