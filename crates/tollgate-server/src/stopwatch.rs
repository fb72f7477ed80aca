//! A stopwatch for the decision latency histogram. Decisions never see it:
//! they take their time from the [`tollgate::Clock`] the server was given.
//! (The server's other monotonic readings are timeouts: the shutdown's
//! deadline in `settle`, and the connections' in `tollgate-connections`.)

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
