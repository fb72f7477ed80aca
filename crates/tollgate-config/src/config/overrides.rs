//! Command-line flags that replace keys of the config file (`--listen`,
//! `--grpc-listen`, `--redis`, `--redis-cluster`, `--redis-ca`,
//! `--redis-replicas-to-ack`). They are applied to the file's config at
//! start-up and again to every reloaded one, so that a reload compares like
//! with like: a key a flag replaces is unchanged on reload, whatever the
//! file says.

use super::envoy::parse_grpc_listen;
use super::{check_redis_url, Config, StoreConfig, StoreKind};
use crate::Error;

/// Flags that replace keys of the config file. Empty ones replace nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--listen ADDR` (repeatable): replaces `listen`.
    pub listen: Vec<String>,
    /// `--grpc-listen ADDR|off`: replaces `[envoy] grpc_listen`.
    pub grpc_listen: Option<String>,
    /// `--redis URL`: replaces `[store] url`.
    pub redis: Option<String>,
    /// `--redis-cluster URL[,URL...]`: replaces `[store] url` by a cluster's seeds.
    pub redis_cluster: Vec<String>,
    /// `--redis-ca FILE`: replaces `[store] tls_ca`.
    pub redis_ca: Option<std::path::PathBuf>,
    /// `--redis-replicas-to-ack N`: replaces `[store] replicas_to_ack`.
    pub redis_replicas_to_ack: Option<u32>,
}

impl Overrides {
    /// Replaces the keys of `config` that these flags name.
    ///
    /// # Errors
    /// [`Error::InvalidListen`], [`Error::InvalidGrpcListen`],
    /// [`Error::InvalidRedisFlag`] or [`Error::InvalidClusterSeed`] for a
    /// flag's value that is not one,
    /// [`Error::InvalidRedisCaFlag`] for a `--redis-ca` that cannot work
    /// (an unreadable file, a CA without `rediss://`; [`Error::RedisCa`]
    /// for the config file's), [`Error::Redis`] for the rest of a Redis
    /// target that cannot work, [`Error::FlagWithoutRedis`]
    /// for `--redis-ca` or `--redis-replicas-to-ack` on a memory store,
    /// [`Error::InvalidReplicasToAck`] for more replicas than the Redis
    /// store can wait for;
    /// `config` is unchanged then.
    pub fn apply(&self, config: &mut Config) -> Result<(), Error> {
        let listen = self
            .listen
            .iter()
            .map(|addr| {
                addr.parse()
                    .map_err(|_| Error::InvalidListen { addr: addr.clone() })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let grpc_listen = match &self.grpc_listen {
            None => None,
            Some(addr) => Some(
                parse_grpc_listen(addr)
                    .ok_or_else(|| Error::InvalidGrpcListen { addr: addr.clone() })?,
            ),
        };
        let redis = self
            .redis
            .as_deref()
            .map(|url| check_flag_url("--redis", url))
            .transpose()?;
        check_cluster_seeds(&self.redis_cluster)?;
        let mut store = config.store.clone();
        if let Some(url) = &redis {
            store.kind = StoreKind::Redis { url: url.clone() };
        }
        if !self.redis_cluster.is_empty() {
            store.kind = StoreKind::RedisCluster {
                seeds: self.redis_cluster.clone(),
            };
        }
        if let Some(ca) = &self.redis_ca {
            needs_redis(&store, || format!("--redis-ca {}", ca.display()))?;
            store.tls_ca = Some(ca.clone());
        }
        if let Some(replicas) = self.redis_replicas_to_ack {
            needs_redis(&store, || format!("--redis-replicas-to-ack {replicas}"))?;
            let max = tollgate_redis::MAX_REPLICAS_TO_ACK;
            if replicas > max {
                return Err(Error::InvalidReplicasToAck {
                    value: replicas,
                    max,
                });
            }
            store.replicas_to_ack = replicas;
        }
        let url_flag = match (&redis, self.redis_cluster.is_empty()) {
            (Some(_), _) => Some("--redis"),
            (None, false) => Some("--redis-cluster"),
            (None, true) => None,
        };
        store
            .redis_target()
            .map_err(|error| match (error, &self.redis_ca, url_flag) {
                (Error::RedisCa { reason, .. }, Some(path), _) => Error::InvalidRedisCaFlag {
                    path: path.display().to_string(),
                    reason,
                },
                // The file's CA, under a flag's URL: say whose each is.
                (Error::RedisCa { url, reason }, None, Some(flag)) => Error::RedisCa {
                    url,
                    reason: format!(
                        "{reason} (the CA is the config file's [store] tls_ca, the URL {flag}'s)"
                    ),
                },
                (error, _, _) => error,
            })?;
        if !listen.is_empty() {
            config.listen = listen;
        }
        if let Some(addr) = grpc_listen {
            config.envoy.grpc_listen = addr;
        }
        config.store = store;
        Ok(())
    }

    /// The Redis that the Redis flags name on their own, without a config
    /// file (as `tollgate replay` takes them), checked as `[store]` is:
    /// `None` when no Redis flag is given.
    ///
    /// # Errors
    /// As [`Overrides::apply`].
    pub fn redis_target(&self) -> Result<Option<tollgate_redis::RedisTarget>, Error> {
        let mut config = Config::embedded_default();
        self.apply(&mut config)?;
        let target = config.store.redis_target()?;
        Ok(target)
    }
}

/// Checks `--redis-cluster`'s seeds. Its value is split at commas, so a raw
/// comma in a password cuts a URL in two, neither half to be shown: a seed
/// after the first that has no scheme is refused by its number alone,
/// before any seed's error could quote the other half.
fn check_cluster_seeds(seeds: &[String]) -> Result<(), Error> {
    if let Some(i) = seeds.iter().skip(1).position(|seed| !seed.contains("://")) {
        return Err(Error::InvalidClusterSeed { number: i + 2 });
    }
    seeds
        .iter()
        .try_for_each(|seed| check_flag_url("--redis-cluster", seed).map(drop))
}

/// [`check_redis_url`] of a URL given by `flag`, whose error names it.
fn check_flag_url(flag: &'static str, url: &str) -> Result<String, Error> {
    check_redis_url(url).map_err(|error| match error {
        Error::InvalidRedisUrl { url, reason } => Error::InvalidRedisFlag { flag, url, reason },
        other => other,
    })
}

/// [`Error::FlagWithoutRedis`] for the flag `flag()` names when `store` is
/// not Redis, which would ignore it.
fn needs_redis(store: &StoreConfig, flag: impl FnOnce() -> String) -> Result<(), Error> {
    if store.kind == StoreKind::Memory {
        return Err(Error::FlagWithoutRedis { flag: flag() });
    }
    Ok(())
}
