//! The one place where tollgate reads the time (and the monotonic clock).
//!
//! Everything else takes `now_ms` as a parameter; a server asks a [`Clock`]
//! once per request, and tests use a [`ManualClock`] that they move by hand.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of "now" in milliseconds.
pub trait Clock: Send + Sync {
    /// The current time in milliseconds.
    fn now_ms(&self) -> u64;
}

/// Wall-clock milliseconds since the Unix epoch.
///
/// Wall time (not a monotonic clock) so that several servers sharing one
/// Redis agree on what "now" means; a clock that steps backwards is handled
/// by the limiter's rule for times earlier than one already seen.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // A system clock set before 1970 reads as 0 rather than panicking.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told to: for tests and for replaying traffic.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicU64,
}

impl ManualClock {
    /// A clock showing `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self {
            now_ms: AtomicU64::new(now_ms),
        }
    }

    /// Sets the time.
    pub fn set(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `ms` (saturating at `u64::MAX`).
    pub fn advance(&self, ms: u64) {
        let _ = self
            .now_ms
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(ms))
            });
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}

/// A monotonic clock in microseconds: never goes back and ignores steps of
/// the wall clock. For measuring how long something takes or when it was
/// sent (e.g. the Redis store's deadlines), never for decision times, which
/// come from a [`Clock`].
pub trait MonotonicClock: Send + Sync {
    /// Microseconds since a fixed, arbitrary start.
    fn now_us(&self) -> u64;
}

/// The operating system's monotonic clock, counted from when this value was made.
#[derive(Debug, Clone, Copy)]
pub struct SystemMonotonicClock {
    start: std::time::Instant,
}

impl SystemMonotonicClock {
    /// A clock reading 0 now.
    pub fn new() -> Self {
        Self {
            start: std::time::Instant::now(),
        }
    }
}

impl Default for SystemMonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl MonotonicClock for SystemMonotonicClock {
    fn now_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}
