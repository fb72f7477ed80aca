//! The public error type of the proxy crate (its connection pool keeps a
//! private `ConnectError`, which it answers with a 502 and never hands out).

/// Why the proxy could not be configured or could not serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The upstream URL is not something the proxy can forward to.
    #[error("invalid upstream {url:?}: {reason}")]
    InvalidUpstream {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A command-line option has a value the proxy cannot use.
    #[error("invalid {option}: {reason}")]
    InvalidOption {
        /// The option (e.g. `--window`).
        option: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// A command-line option refused by a check that names the option in
    /// its own message (the Redis flags' checks, which `tollgate serve`
    /// shares: e.g. `--redis-replicas-to-ack 1 needs a Redis store`).
    #[error("{0}")]
    RefusedOption(String),
    /// The Redis store that an option names (`--redis`, `--redis-cluster`,
    /// or the `--config` file's `[store]`) could not be used at start-up: it
    /// refused the connection (a wrong password, an untrusted certificate, a
    /// database it does not have). The option's value is valid; `reason` is
    /// what `tollgate serve` says in the same case, without the password.
    #[error("cannot connect to the Redis given by {option}: {reason}")]
    RedisConnect {
        /// The option that named the Redis (e.g. `--redis`).
        option: &'static str,
        /// Why it cannot be used.
        reason: String,
    },
    /// A limit could not be built (unknown policy, zero limit, ...).
    #[error(transparent)]
    Limit(#[from] tollgate::Error),
    /// The workers could not be pinned to CPUs as asked
    /// ([`Placement::one_cpu_each`](crate::Placement::one_cpu_each)).
    #[error("cannot pin the workers to CPUs: {0}")]
    Pinning(String),
    /// The listening socket failed.
    #[error("proxy server: {0}")]
    Io(#[from] std::io::Error),
}
