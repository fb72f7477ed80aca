//! The Redis flags of `serve`, `proxy` and `replay`, defined once: each
//! command flattens [`RedisArgs`] into its own arguments and hands them to
//! `tollgate-config` as [`Overrides`], the one place that turns them into a
//! store.

use std::path::PathBuf;

use tollgate_config::Overrides;

/// `--redis URL`, `--redis-cluster URL[,URL...]`, `--redis-ca FILE` and
/// `--redis-replicas-to-ack N`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RedisArgs {
    /// Keep limit state in Redis, shared by every instance:
    /// `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS;
    /// in `serve` and `proxy`, replaces the config's `[store] url`.
    #[arg(long, value_name = "URL", conflicts_with = "redis_cluster")]
    pub redis: Option<String>,
    /// Keep limit state in a Redis Cluster, reached through these seed
    /// nodes (comma-separated `redis://` or `rediss://` URLs: write a comma
    /// inside a password as `%2C`); in `serve` and `proxy`, replaces the config's
    /// `[store] cluster`.
    #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',')]
    pub redis_cluster: Vec<String>,
    /// A PEM file of the CA that signed the Redis servers' certificates
    /// (for `rediss://`; default: the system's trusted roots); in `serve` and
    /// `proxy`, replaces the config's `[store] tls_ca`.
    #[arg(long, value_name = "FILE")]
    pub redis_ca: Option<PathBuf>,
    /// Answer a decision that consumed only once this many replicas hold
    /// it (Redis's `WAIT`), so that a failover loses none; with fewer, it
    /// is taken back and answered by the failure policy (default 0: do not
    /// wait); in `serve` and `proxy`, replaces the config's
    /// `[store] replicas_to_ack`.
    #[arg(long, value_name = "N")]
    pub redis_replicas_to_ack: Option<u32>,
}

impl RedisArgs {
    /// True when no Redis flag is given.
    pub fn is_empty(&self) -> bool {
        self.redis.is_none()
            && self.redis_cluster.is_empty()
            && self.redis_ca.is_none()
            && self.redis_replicas_to_ack.is_none()
    }

    /// These flags as overrides of a config's keys (and nothing else).
    pub fn overrides(&self) -> Overrides {
        Overrides {
            redis: self.redis.clone(),
            redis_cluster: self.redis_cluster.clone(),
            redis_ca: self.redis_ca.clone(),
            redis_replicas_to_ack: self.redis_replicas_to_ack,
            ..Overrides::default()
        }
    }
}
