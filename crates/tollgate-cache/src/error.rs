//! The crate's one error type.

/// A rejection cache that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The capacity is outside `1..=max`.
    #[error("the rejection cache's capacity must be from 1 to {max} clients (got {got})")]
    Capacity {
        /// The capacity asked for.
        got: usize,
        /// The largest accepted.
        max: usize,
    },
}
