//! The one error type of the config crate.

use std::path::PathBuf;

/// Why a config could not be read, checked or wired to its store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The config file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config is not valid: `line` and `column` (1-based) point at the mistake.
    #[error("{}line {line}, column {column}: {message}\n{snippet}", origin.as_deref().map(|o| format!("{o}: ")).unwrap_or_default())]
    InvalidConfig {
        /// Where the text came from (a file name), when known.
        origin: Option<String>,
        /// The line of the mistake, from 1.
        line: usize,
        /// The column of the mistake, from 1, counted in characters.
        column: usize,
        /// What is wrong.
        message: String,
        /// The offending line with a caret under the column, for humans.
        snippet: String,
    },
    /// The Redis store could not be set up (a URL the Redis client refuses,
    /// a bad key prefix, or, at a start-up check, a wrong password or an
    /// untrusted certificate). Redis being down is not this error: the
    /// server starts and its failure policy answers until Redis is up.
    #[error("cannot use the redis store at {url}: {reason}")]
    Redis {
        /// The Redis URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The private CA for the Redis store's TLS (`[store] tls_ca` or
    /// `--redis-ca`) cannot work: its file cannot be read, holds no PEM
    /// certificate, or is given for a URL without TLS.
    #[error("cannot use the redis store at {url}: {reason}")]
    RedisCa {
        /// The Redis URL, without its password.
        url: String,
        /// Why.
        reason: String,
    },
    /// The CA file `--redis-ca` gives cannot work ([`Error::RedisCa`],
    /// named by its flag).
    #[error("invalid --redis-ca {path}: {reason}")]
    InvalidRedisCaFlag {
        /// The file as given.
        path: String,
        /// Why it cannot work.
        reason: String,
    },
    /// A flag that only a Redis store uses (`--redis-ca`,
    /// `--redis-replicas-to-ack`) for a store that is not Redis (no
    /// `--redis`, `--redis-cluster`, `[store] url` or `cluster`): it would
    /// be ignored.
    #[error("{flag} needs a Redis store: --redis, --redis-cluster, or [store] url or cluster")]
    FlagWithoutRedis {
        /// The flag and its value as given, e.g. `--redis-ca ca.pem`.
        flag: String,
    },
    /// `--redis-replicas-to-ack` above the Redis store's bound.
    #[error("invalid --redis-replicas-to-ack {value}: must be from 0 to {max}")]
    InvalidReplicasToAck {
        /// The number as given.
        value: u32,
        /// The largest accepted (`tollgate_redis::MAX_REPLICAS_TO_ACK`).
        max: u32,
    },
    /// A Redis URL that is not one ([`crate::check_redis_url`]).
    #[error("invalid redis URL {url:?}: {reason}")]
    InvalidRedisUrl {
        /// The URL as given, its password masked
        /// ([`tollgate_redis::redact_url`]): this error is printed and logged.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A Redis URL given by a flag (`--redis`, `--redis-cluster`) that is
    /// not one: [`Error::InvalidRedisUrl`] with the flag named, since the
    /// command line may hold several URLs and a config file another.
    #[error("invalid {flag} URL {url:?}: {reason}")]
    InvalidRedisFlag {
        /// The flag, e.g. `--redis`.
        flag: &'static str,
        /// The URL as given, its password masked.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A seed of `--redis-cluster` after a comma that has no scheme: not
    /// quoted, since it may be the end of a password that held a comma.
    #[error("invalid --redis-cluster: seed number {number} is not a redis:// or rediss:// URL; commas separate the seeds, so write a comma inside a password as %2C")]
    InvalidClusterSeed {
        /// Which seed, from 1.
        number: usize,
    },
    /// A listen address that is not `IP:PORT` (given by `--listen`).
    #[error("invalid --listen address {addr:?}: expected IP:PORT, e.g. 127.0.0.1:8080")]
    InvalidListen {
        /// The address as given.
        addr: String,
    },
    /// A gRPC listen address that is neither `IP:PORT` nor `off` (given on
    /// the command line).
    #[error(
        "invalid --grpc-listen address {addr:?}: expected IP:PORT, e.g. 127.0.0.1:8081, or off"
    )]
    InvalidGrpcListen {
        /// The address as given.
        addr: String,
    },
    /// Two of serve's addresses (HTTP or gRPC) on one socket, one of them
    /// given on the command line (in the file, it is an
    /// [`Error::InvalidConfig`] at its line).
    #[error("{detail}")]
    AddressesCollide {
        /// Which addresses, from which keys or flags.
        detail: String,
    },
}
