//! Deadlines on Redis's own clock, so that a call Redis runs too late writes
//! nothing.
//!
//! A caller gives up on a call after its timeout, but Redis may still run
//! the script later (a stopped, paused or overloaded Redis runs what waited
//! once it resumes). So every call carries a deadline: the latest Redis
//! `TIME` (in µs) at which its script may start. The script reads `TIME`
//! first and, past the deadline, writes nothing and answers "late".
//!
//! The deadline is `start + offset + timeout - slack`, where `start` is the
//! store's monotonic clock when the call began and `offset` a *lower bound*
//! of `Redis TIME - monotonic clock`. A `TIME` sent at monotonic time `s`
//! and answered at `r` was read by Redis at some moment in `[s, r]`, so
//! `TIME - r` is a lower bound of the offset. With a lower bound the
//! deadline never falls after the moment the caller gives up (as Redis's
//! clock sees it): a late script is never accepted; a script that starts in
//! time may be refused by up to the measurement's round trip, which only
//! costs a failure-policy answer. [`DEADLINE_SLACK_US`] covers the moment
//! between the caller's timer starting and the store reading its clock.
//!
//! The offset is re-measured, so that it cannot drift: every reply of the
//! plan script carries Redis's `TIME` and tightens the bound within an epoch
//! of [`EPOCH_US`]; the first measurement of a new epoch replaces the
//! bound when its round trip was quick ([`TRUSTED_ROUND_TRIP_US`]), so a
//! Redis clock that stepped back or runs slow is followed within an epoch
//! (a slow round trip only lowers the old bound by 1,000 ppm of the time
//! since). An estimate older than an epoch is measured again with a `TIME`
//! round trip in the background (`measure.rs`), while the calls go on
//! with the old one, lowered past two epochs by the drift allowed since
//! (`Offset::Aging`): a measurement that waits on a stalled
//! node (on a cluster, `TIME` asks every master, and replies do not tighten
//! the estimate) must not stall the calls of every other node. Only a store
//! with no estimate yet measures before its call, or one whose estimate is
//! so old that the drift allowed since would take half a call's time off
//! its deadline (a store idle for a while, or whose calls its rejection
//! cache answered): such a call would otherwise be refused as late
//! although Redis ran it in time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tollgate::{MonotonicClock, SystemMonotonicClock};

/// How long one estimate of the offset is tightened before the next
/// measurement replaces it: 1 s.
pub const EPOCH_US: u64 = 1_000_000;

/// Taken off every deadline: the time between the caller starting its
/// timeout and the store reading its clock (same task, no await between).
pub const DEADLINE_SLACK_US: u64 = 1_000;

/// A round trip at most this long (5 ms) starts a new epoch from its own
/// bound; a slower one keeps the old bound less the drift allowed since.
pub const TRUSTED_ROUND_TRIP_US: u64 = 5_000;

/// The largest drift allowed between the clocks, as a divisor: 1/1000 of
/// the time elapsed (1,000 ppm, twice the fastest NTP slew).
const MAX_DRIFT_DIVISOR: u64 = 1_000;

/// A lower bound of `Redis TIME - monotonic clock`, in µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Estimate {
    /// When the epoch of this estimate began (monotonic µs).
    epoch_start_us: u64,
    /// The tightest lower bound of the offset measured in this epoch.
    offset_us: i64,
}

/// What the store knows of the offset at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offset {
    /// Measured or tightened within the last epoch: use it.
    Fresh(i64),
    /// Older: use it (past two epochs, lowered by the drift allowed since,
    /// so still a lower bound), and measure again in the background.
    Aging(i64),
    /// No estimate yet: measure before the call.
    Unknown,
}

/// The store's view of Redis's clock: its monotonic clock and the offset.
pub(crate) struct RedisClock {
    monotonic: Arc<dyn MonotonicClock>,
    estimate: Mutex<Option<Estimate>>,
    /// A background measurement is running (one at a time).
    measuring: AtomicBool,
}

impl std::fmt::Debug for RedisClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClock")
            .field("estimate", &*self.lock())
            .finish_non_exhaustive()
    }
}

impl RedisClock {
    /// A clock on the system's monotonic clock, with no estimate yet.
    pub(crate) fn new() -> Self {
        Self::with_monotonic(Arc::new(SystemMonotonicClock::new()))
    }

    /// A clock on `monotonic` (tests move it by hand).
    pub(crate) fn with_monotonic(monotonic: Arc<dyn MonotonicClock>) -> Self {
        Self {
            monotonic,
            estimate: Mutex::new(None),
            measuring: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Estimate>> {
        self.estimate.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The monotonic clock, in µs.
    pub(crate) fn now_us(&self) -> u64 {
        self.monotonic.now_us()
    }

    /// The offset to use at monotonic time `now_us` for a call of
    /// `timeout`. An estimate so old that the drift allowed since would
    /// take half the call's time off its deadline (a store idle for a while:
    /// 50 s at a timeout of 100 ms) is as good as none: the call would be
    /// refused as late although Redis ran it in time, so it measures first,
    /// as with no estimate (one `TIME` round trip after the idle spell).
    pub(crate) fn offset_at(&self, now_us: u64, timeout: Duration) -> Offset {
        let Some(estimate) = *self.lock() else {
            return Offset::Unknown;
        };
        let age = now_us.saturating_sub(estimate.epoch_start_us);
        if age < EPOCH_US {
            return Offset::Fresh(estimate.offset_us);
        }
        if age < 2 * EPOCH_US {
            return Offset::Aging(estimate.offset_us);
        }
        let drift = age / MAX_DRIFT_DIVISOR + 1;
        let timeout_us = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX);
        if drift.saturating_mul(2) > timeout_us.saturating_sub(DEADLINE_SLACK_US) {
            return Offset::Unknown;
        }
        Offset::Aging(estimate.offset_us.saturating_sub(signed(drift)))
    }

    /// Claims the one background measurement: false when one is running.
    /// [`RedisClock::done_measuring`] gives it back.
    pub(crate) fn start_measuring(&self) -> bool {
        // Read first: while a measurement runs, every decision finds the
        // estimate aging, and a swap would write the shared line each time.
        !self.measuring.load(Ordering::Acquire) && !self.measuring.swap(true, Ordering::AcqRel)
    }

    /// Ends the measurement claimed by [`RedisClock::start_measuring`].
    pub(crate) fn done_measuring(&self) {
        self.measuring.store(false, Ordering::Release);
    }

    /// Records that Redis's clock read `redis_us` at some moment between
    /// `sent_us` and `received_us` (monotonic). Returns the offset now in force.
    pub(crate) fn record(&self, sent_us: u64, received_us: u64, redis_us: u64) -> i64 {
        let bound = signed(redis_us) - signed(received_us);
        let mut estimate = self.lock();
        let next = match *estimate {
            Some(e) if sent_us.saturating_sub(e.epoch_start_us) < EPOCH_US => Estimate {
                epoch_start_us: e.epoch_start_us,
                offset_us: e.offset_us.max(bound),
            },
            // A new epoch: a quick round trip replaces the bound (following
            // a Redis clock that stepped back); a slow one (a loaded
            // machine) may only lower the old bound by the drift allowed
            // since, so one slow sample does not make every deadline early.
            Some(e) if received_us.saturating_sub(sent_us) > TRUSTED_ROUND_TRIP_US => {
                let drift = signed(sent_us.saturating_sub(e.epoch_start_us) / MAX_DRIFT_DIVISOR);
                Estimate {
                    epoch_start_us: sent_us,
                    offset_us: bound.max(e.offset_us.saturating_sub(drift + 1)),
                }
            }
            _ => Estimate {
                epoch_start_us: sent_us,
                offset_us: bound,
            },
        };
        *estimate = Some(next);
        next.offset_us
    }
}

fn signed(us: u64) -> i64 {
    i64::try_from(us).unwrap_or(i64::MAX)
}

/// The deadline, in Redis `TIME` µs, of a call that began at monotonic
/// `start_us` with `offset_us` in force and `timeout` to run: at least 0.
pub(crate) fn deadline_us(start_us: u64, offset_us: i64, timeout: Duration) -> u64 {
    let timeout_us = i64::try_from(timeout.as_micros()).unwrap_or(i64::MAX);
    let deadline = signed(start_us)
        .saturating_add(offset_us)
        .saturating_add(timeout_us)
        .saturating_sub(signed(DEADLINE_SLACK_US));
    u64::try_from(deadline).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Manual(AtomicU64);

    impl MonotonicClock for Manual {
        fn now_us(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// A timeout long enough that no estimate in these tests goes stale.
    const T: Duration = Duration::from_secs(1);

    fn clock() -> RedisClock {
        RedisClock::with_monotonic(Arc::new(Manual(AtomicU64::new(0))))
    }

    #[test]
    fn the_offset_is_a_lower_bound_from_the_reply_time() {
        let clock = clock();
        assert_eq!(clock.offset_at(0, T), Offset::Unknown);
        // Redis read 5_000_300 somewhere between 100 and 400: at 400 it
        // was at least 5_000_300, so the offset is at least 4_999_900.
        assert_eq!(clock.record(100, 400, 5_000_300), 4_999_900);
        assert_eq!(clock.offset_at(500, T), Offset::Fresh(4_999_900));
        // A tighter measurement in the same epoch raises the bound; a looser
        // one (a slow round trip) does not lower it.
        assert_eq!(clock.record(1_000, 1_050, 5_001_000), 4_999_950);
        assert_eq!(clock.record(2_000, 90_000, 5_002_000), 4_999_950);
    }

    #[test]
    fn a_new_epoch_replaces_the_bound_and_an_old_one_expires() {
        let clock = clock();
        clock.record(0, 10, 1_000_010);
        assert_eq!(clock.offset_at(10, T), Offset::Fresh(1_000_000));
        // Redis's clock stepped back by 300 µs: the next epoch follows it.
        assert_eq!(
            clock.record(EPOCH_US, EPOCH_US + 10, 1_000_000 + EPOCH_US - 290),
            999_700
        );
        assert_eq!(clock.offset_at(2 * EPOCH_US - 1, T), Offset::Fresh(999_700));
        assert_eq!(clock.offset_at(2 * EPOCH_US, T), Offset::Aging(999_700));
        assert_eq!(clock.offset_at(3 * EPOCH_US - 1, T), Offset::Aging(999_700));
        // Past two epochs, lowered by the drift allowed since (1,000 ppm of
        // the estimate's age, plus 1 µs).
        assert_eq!(
            clock.offset_at(3 * EPOCH_US, T),
            Offset::Aging(999_700 - 2_000 - 1)
        );
        assert_eq!(
            clock.offset_at(EPOCH_US + 60 * EPOCH_US, T),
            Offset::Aging(999_700 - 60_000 - 1)
        );
        // A slow round trip (80 ms) in the next epoch lowers the bound only
        // by the drift allowed for one epoch (1 ms), plus 1 µs.
        let sent = 2 * EPOCH_US;
        assert_eq!(
            clock.record(sent, sent + 80_000, 999_700 + sent + 1_000),
            999_700 - 1_000 - 1
        );
    }

    #[test]
    fn an_estimate_whose_drift_would_eat_half_the_timeout_is_measured_again() {
        let clock = clock();
        clock.record(0, 10, 1_000_010);
        let timeout = Duration::from_millis(100);
        // Drift allowed after age a: a / 1000 + 1 µs (integer division);
        // stale once twice that passes the timeout less the slack (99,000
        // µs): from a = 49,500,000 on.
        assert_eq!(
            clock.offset_at(49_499_999, timeout),
            Offset::Aging(1_000_000 - 49_499 - 1)
        );
        assert_eq!(clock.offset_at(49_500_000, timeout), Offset::Unknown);
        // The shorter the timeout, the sooner: 10 ms goes stale after 4.5 s.
        let short = Duration::from_millis(10);
        assert!(matches!(
            clock.offset_at(4_000_000, short),
            Offset::Aging(_)
        ));
        assert_eq!(clock.offset_at(5_000_000, short), Offset::Unknown);
        // Measured again, the estimate is fresh.
        clock.record(60_000_000, 60_000_010, 61_000_010);
        assert_eq!(
            clock.offset_at(60_000_020, timeout),
            Offset::Fresh(1_000_000)
        );
    }

    #[test]
    fn one_background_measurement_at_a_time() {
        let clock = clock();
        assert!(clock.start_measuring());
        assert!(!clock.start_measuring());
        clock.done_measuring();
        assert!(clock.start_measuring());
    }

    #[test]
    fn deadlines_are_the_start_plus_offset_plus_timeout_less_the_slack() {
        let timeout = Duration::from_millis(50);
        assert_eq!(
            deadline_us(2_000, 1_000_000, timeout),
            2_000 + 1_000_000 + 50_000 - DEADLINE_SLACK_US
        );
        assert_eq!(deadline_us(0, -10_000_000, timeout), 0);
        assert_eq!(
            deadline_us(u64::MAX, i64::MAX, Duration::MAX),
            u64::try_from(i64::MAX).unwrap() - DEADLINE_SLACK_US
        );
    }
}
