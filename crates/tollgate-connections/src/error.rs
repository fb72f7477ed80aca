//! The one error type of the connections crate.

/// A connection limit out of its bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A limit is outside the range tollgate accepts.
    #[error("{name} must be between {min} and {max} (got {got})")]
    OutOfBounds {
        /// The setting (`header_read_timeout`, `idle_timeout`, `max_connections`).
        name: &'static str,
        /// The smallest accepted value, as written in a config.
        min: String,
        /// The largest accepted value, as written in a config.
        max: String,
        /// The value given.
        got: String,
    },
}
