//! [`RedisStoreConfig`]: how a [`crate::RedisStore`] names and expires its
//! keys, reads the time, waits and batches, checked before it connects.

use std::time::Duration;

use crate::keys::KeyLayout;
use crate::replicas::ReplicaWait;
use crate::RedisStoreError;

/// Where the time of a decision comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeSource {
    /// The caller's `now_ms`, as in the in-memory limiter: answers are exact
    /// and repeatable (tests, replays), but servers sharing one Redis must
    /// keep their clocks close. A server whose clock runs ahead pushes the
    /// client's last-seen time forward, and the others are then answered at
    /// that later time (the backwards-time rule) until their clocks catch up.
    #[default]
    Caller,
    /// Redis's own clock (`TIME`, read inside the script): every server
    /// agrees whatever its clock says, at the price of the `now_ms` argument
    /// being ignored (so answers cannot be replayed or tested with a manual
    /// clock), and of waits measured on Redis's clock.
    Redis,
}

/// How a [`crate::RedisStore`] names and expires its keys and reads the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStoreConfig {
    /// Every key starts with this prefix (see [`crate::keys`]). Default `"tollgate"`.
    pub prefix: String,
    /// Where the time comes from. Default: the caller's.
    pub time_source: TimeSource,
    /// Added to every key's expiry, in ms. Expiries run on Redis's clock but
    /// are computed from decision times, so the margin covers callers whose
    /// clocks lag Redis's or each other's (a decision time ahead of Redis's
    /// clock lengthens the expiry by as much, up to a day). Default 60,000
    /// (one minute); at most [`MAX_EXPIRY_MARGIN_MS`].
    pub expiry_margin_ms: u64,
    /// How long a caller waits for a decision: the timeout of the
    /// `tollgate_guard::GuardedStore` in front (give both the same value). Every
    /// call carries a deadline this long after it began, on Redis's clock
    /// ([`crate::deadline`]): a script that starts later writes nothing and
    /// the call fails with [`RedisStoreError::DeadlinePassed`]. Default 100 ms;
    /// from [`MIN_TIMEOUT`] to [`MAX_TIMEOUT`].
    pub timeout: Duration,
    /// At most this many decisions in one script call (see [`crate::batch`]):
    /// decisions that arrive while [`RedisStoreConfig::batches_in_flight`]
    /// calls are in flight queue up, and the next call carries them all, up
    /// to this many; 1 sends every decision alone. On a cluster, per master
    /// ([`crate::masters`]): and likewise [`RedisStoreConfig::batches_in_flight`].
    /// From 1 to [`MAX_BATCH`]; default [`DEFAULT_BATCH_MAX`].
    pub batch_max: usize,
    /// At most this many script calls of batched decisions in flight at
    /// once, per node (at least 1; default [`DEFAULT_BATCHES_IN_FLIGHT`]). A decision
    /// that arrives while fewer are in flight starts a call, which carries
    /// it and what the tasks already ready queue meanwhile.
    pub batches_in_flight: usize,
    /// How many replicas must acknowledge a decision's writes (Redis's
    /// `WAIT`, within [`RedisStoreConfig::timeout`]) before it is answered
    /// as allowed: 0 (the default) answers at once, as Redis replicates
    /// asynchronously, so a master that dies before its replica received a
    /// decision loses it in the failover. With n > 0, a decision that
    /// consumed and was acknowledged by fewer is taken back and answered by
    /// the failure policy ([`crate::RedisStoreError::NotReplicated`]); see
    /// [`crate::replicas`]. At most [`MAX_REPLICAS_TO_ACK`].
    pub replicas_to_ack: u32,
}

/// The default [`RedisStoreConfig::batch_max`].
pub const DEFAULT_BATCH_MAX: usize = 64;

/// The largest [`RedisStoreConfig::batch_max`]: one script call stays short
/// (each decision runs for a few µs inside Redis).
pub const MAX_BATCH: usize = 1024;

/// The default [`RedisStoreConfig::batches_in_flight`]: 1, which made the
/// fewest Redis calls per decision in `scripts/bench-fleet.sh` (2 and 4
/// were no faster: BENCHMARKS.md, "A fleet on one Redis").
pub const DEFAULT_BATCHES_IN_FLIGHT: usize = 1;

/// The largest [`RedisStoreConfig::batches_in_flight`].
pub const MAX_BATCHES_IN_FLIGHT: usize = 64;

/// The largest [`RedisStoreConfig::replicas_to_ack`].
pub const MAX_REPLICAS_TO_ACK: u32 = 16;

/// The default [`RedisStoreConfig::timeout`]: 100 ms.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

/// The shortest [`RedisStoreConfig::timeout`]: 1 ms, the unit of a call's
/// deadline (a shorter one would pass before any call could start).
pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// The longest [`RedisStoreConfig::timeout`]: an hour. A caller waiting
/// longer is not waiting for a rate limiter.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3_600);

/// The largest [`RedisStoreConfig::expiry_margin_ms`]: 30 days. A margin
/// beyond any clock skew only keeps idle keys longer, and one near 2^53
/// would leave no window servable.
pub const MAX_EXPIRY_MARGIN_MS: u64 = 30 * 86_400_000;

impl Default for RedisStoreConfig {
    fn default() -> Self {
        Self {
            prefix: "tollgate".to_owned(),
            time_source: TimeSource::Caller,
            expiry_margin_ms: 60_000,
            timeout: DEFAULT_TIMEOUT,
            batch_max: DEFAULT_BATCH_MAX,
            batches_in_flight: DEFAULT_BATCHES_IN_FLIGHT,
            replicas_to_ack: 0,
        }
    }
}

impl RedisStoreConfig {
    /// Checks what the key layout does not: the bounds of the timeout, the
    /// expiry margin, the batching and the replicas, so that a store that
    /// connects can decide.
    pub(crate) fn validate(&self) -> Result<KeyLayout, RedisStoreError> {
        if !(MIN_TIMEOUT..=MAX_TIMEOUT).contains(&self.timeout) {
            return Err(RedisStoreError::Config(format!(
                "timeout must be from {} ms to {} s, got {:?}",
                MIN_TIMEOUT.as_millis(),
                MAX_TIMEOUT.as_secs(),
                self.timeout
            )));
        }
        if self.expiry_margin_ms > MAX_EXPIRY_MARGIN_MS {
            return Err(RedisStoreError::Config(format!(
                "expiry_margin_ms must be at most {MAX_EXPIRY_MARGIN_MS} (30 days), got {}",
                self.expiry_margin_ms
            )));
        }
        if !(1..=MAX_BATCH).contains(&self.batch_max) {
            return Err(RedisStoreError::Config(format!(
                "batch_max must be from 1 to {MAX_BATCH}, got {}",
                self.batch_max
            )));
        }
        if !(1..=MAX_BATCHES_IN_FLIGHT).contains(&self.batches_in_flight) {
            return Err(RedisStoreError::Config(format!(
                "batches_in_flight must be from 1 to {MAX_BATCHES_IN_FLIGHT}, got {}",
                self.batches_in_flight
            )));
        }
        if self.replicas_to_ack > MAX_REPLICAS_TO_ACK {
            return Err(RedisStoreError::Config(format!(
                "replicas_to_ack must be from 0 to {MAX_REPLICAS_TO_ACK}, got {}",
                self.replicas_to_ack
            )));
        }
        KeyLayout::new(self.prefix.clone())
    }

    /// The `WAIT` each decision is sent with, if any: for
    /// [`RedisStoreConfig::replicas_to_ack`] replicas, as long as the caller waits.
    pub(crate) fn replica_wait(&self) -> Option<ReplicaWait> {
        (self.replicas_to_ack > 0).then(|| ReplicaWait {
            replicas: self.replicas_to_ack,
            timeout_ms: u64::try_from(self.timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(config: RedisStoreConfig) -> String {
        match config.validate() {
            Err(error) => error.to_string(),
            Ok(_) => panic!("accepted: {config:?}"),
        }
    }

    /// A store that every decision would fail (a deadline passed before any
    /// call starts, a deadline or expiry beyond what Lua holds exactly) is
    /// refused before it connects, saying which setting is wrong.
    #[test]
    fn settings_no_decision_could_be_made_with_are_refused() {
        for timeout in [
            Duration::ZERO,
            Duration::from_micros(999),
            MAX_TIMEOUT + MIN_TIMEOUT,
        ] {
            let config = RedisStoreConfig {
                timeout,
                ..RedisStoreConfig::default()
            };
            assert!(refused(config).contains("timeout must be"), "{timeout:?}");
        }
        let config = RedisStoreConfig {
            expiry_margin_ms: u64::MAX,
            ..RedisStoreConfig::default()
        };
        assert!(refused(config).contains("expiry_margin_ms must be"));
        for (timeout, expiry_margin_ms) in [(MIN_TIMEOUT, 0), (MAX_TIMEOUT, MAX_EXPIRY_MARGIN_MS)] {
            let config = RedisStoreConfig {
                timeout,
                expiry_margin_ms,
                ..RedisStoreConfig::default()
            };
            assert!(config.validate().is_ok(), "{config:?}");
        }
    }
}
