//! The three limits, their defaults and bounds, and the shared pool of
//! connection slots that enforces the cap.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::Error;

/// Default header-read timeout: ample for any real client, short enough
/// that a slowloris holds a connection for seconds, not forever.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default idle timeout: long enough for a client's keep-alive pool to
/// reuse its connections between bursts.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default cap on open connections per listen address.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// The most a request head may take over HTTP/1, in bytes; a larger one is
/// refused (431) and its connection closed. A connection's read buffer grows
/// to its largest head and keeps that size until it closes: hyper's
/// default of about 400 KiB let one large head a minute hold 322 KB per
/// connection, gigabytes at the default cap (an audit). Twice nginx's
/// default (`large_client_header_buffers 4 8k`).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Accepted header-read timeouts: 100 ms to 10 minutes.
pub const HEADER_READ_TIMEOUT_BOUNDS: RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(600);
/// Accepted idle timeouts: 100 ms to one day.
pub const IDLE_TIMEOUT_BOUNDS: RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(86_400);
/// Accepted caps on open connections.
pub const MAX_CONNECTIONS_BOUNDS: RangeInclusive<usize> = 1..=1_000_000;

/// The limits on a listener's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long a request head may take to arrive in full.
    pub header_read_timeout: Duration,
    /// How long a connection may stay without a byte moving either way.
    pub idle_timeout: Duration,
    /// How many connections one listen address keeps open at most.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl Limits {
    /// The limits, each checked against its bounds.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] naming the first limit out of its bounds.
    pub fn new(
        header_read_timeout: Duration,
        idle_timeout: Duration,
        max_connections: usize,
    ) -> Result<Self, Error> {
        check_duration(
            "header_read_timeout",
            header_read_timeout,
            &HEADER_READ_TIMEOUT_BOUNDS,
        )?;
        check_duration("idle_timeout", idle_timeout, &IDLE_TIMEOUT_BOUNDS)?;
        if !MAX_CONNECTIONS_BOUNDS.contains(&max_connections) {
            return Err(Error::OutOfBounds {
                name: "max_connections",
                min: MAX_CONNECTIONS_BOUNDS.start().to_string(),
                max: MAX_CONNECTIONS_BOUNDS.end().to_string(),
                got: max_connections.to_string(),
            });
        }
        Ok(Self {
            header_read_timeout,
            idle_timeout,
            max_connections,
        })
    }
}

fn check_duration(
    name: &'static str,
    value: Duration,
    bounds: &RangeInclusive<Duration>,
) -> Result<(), Error> {
    if bounds.contains(&value) {
        return Ok(());
    }
    Err(Error::OutOfBounds {
        name,
        min: show(*bounds.start()),
        max: show(*bounds.end()),
        got: show(value),
    })
}

/// A duration as the config writes it: in the largest unit that is exact.
fn show(duration: Duration) -> String {
    let ms = duration.as_millis();
    let units = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ];
    for (scale, unit) in units {
        if ms >= scale && ms.is_multiple_of(scale) {
            return format!("{}{unit}", ms / scale);
        }
    }
    format!("{ms}ms")
}

/// The open-connection slots of one listen address, shared by every
/// listener on it (the proxy's workers each accept on their own socket of
/// the same address). Cloning shares the pool.
#[derive(Debug, Clone)]
pub struct Slots(Arc<Semaphore>);

impl Slots {
    /// A pool of `max_connections` slots.
    pub fn new(max_connections: usize) -> Self {
        Self(Arc::new(Semaphore::new(max_connections)))
    }

    /// How many more connections may open now.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }

    /// Waits for a free slot; the connection holds it until it closes.
    pub(crate) async fn acquire(&self) -> Option<OwnedSemaphorePermit> {
        self.0.clone().acquire_owned().await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_enforced_with_the_setting_named() {
        let ok = Limits::new(Duration::from_millis(100), Duration::from_secs(86_400), 1);
        assert!(ok.is_ok());
        let err = Limits::new(Duration::from_millis(99), DEFAULT_IDLE_TIMEOUT, 5).unwrap_err();
        assert_eq!(
            err.to_string(),
            "header_read_timeout must be between 100ms and 10m (got 99ms)"
        );
        let err =
            Limits::new(DEFAULT_HEADER_READ_TIMEOUT, Duration::from_secs(86_401), 5).unwrap_err();
        assert_eq!(
            err.to_string(),
            "idle_timeout must be between 100ms and 1d (got 86401s)"
        );
        let err = Limits::new(DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "max_connections must be between 1 and 1000000 (got 0)"
        );
        assert!(Limits::new(DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, 1_000_001).is_err());
    }
}
