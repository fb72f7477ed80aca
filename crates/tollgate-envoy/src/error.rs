//! The one error type of the Envoy crate.

/// Why the rate limit service could not be configured or served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The rules file is not valid TOML or has unknown or missing fields;
    /// the message names the line.
    #[error("rules: {0}")]
    Config(String),
    /// A rule is inconsistent (counted from 1 in file order).
    #[error("rule {number}: {message}")]
    Rule {
        /// The rule's position in the file, from 1.
        number: usize,
        /// What is wrong with it.
        message: String,
    },
    /// The gRPC server failed (the listener broke).
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// A worker thread or its runtime could not start, or a worker panicked.
    #[error("gRPC worker: {0}")]
    Io(#[from] std::io::Error),
}
