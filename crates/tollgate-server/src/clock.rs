//! The server's only reading of a monotonic clock: a stopwatch for the
//! decision latency histogram. Decisions never see it: they take their time
//! from the [`tollgate::Clock`] the server was given.

use std::time::{Duration, Instant};

/// Measures how long something took, for metrics only.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(Instant);

impl Stopwatch {
    /// Starts measuring.
    pub fn start() -> Self {
        Self(Instant::now())
    }

    /// Time since [`Stopwatch::start`].
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}
