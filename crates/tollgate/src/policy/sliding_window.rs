//! Sliding-window log: the exact rolling count.
//!
//! A request at `now` is allowed when the client had fewer than `limit`
//! allowed requests at times `t` with `t > now - window_ms`. Each allowed unit
//! of cost is logged with its time; rejected requests are not logged, so the
//! log never holds more than `limit` times.

use std::collections::VecDeque;

use super::{wait_until, Policy, Reclaim};
use crate::{Decision, Error};

/// The sliding-window log policy (`"sliding-window"`).
///
/// Exact at every millisecond, at the price of up to `limit` stored times per
/// client (8 bytes each). Any `limit >= 1` and `window_ms >= 1` work: the
/// arithmetic is done so that times up to `u64::MAX` cannot overflow, and the
/// log grows only with requests actually allowed. The real bound on the
/// limit is memory: one allowed unit of cost is one stored time, so a
/// client using a limit of `n` in one window holds `8 * n` bytes (a limit
/// of `u32::MAX` fully used would need 32 GiB).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingWindow {
    limit: u32,
    window_ms: u64,
}

/// Times of the allowed requests still inside the window, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingLog {
    times: VecDeque<u64>,
}

impl SlidingLog {
    /// The logged times, oldest first (some may already have left the window).
    pub fn times(&self) -> impl Iterator<Item = u64> + '_ {
        self.times.iter().copied()
    }

    /// Heap bytes held by the log.
    pub fn heap_bytes(&self) -> usize {
        self.times.capacity() * std::mem::size_of::<u64>()
    }
}

impl SlidingWindow {
    /// A log allowing `limit` requests in any `window_ms` milliseconds.
    ///
    /// # Errors
    /// [`Error::ZeroLimit`] or [`Error::ZeroWindow`].
    pub fn new(limit: u32, window_ms: u64) -> Result<Self, Error> {
        if limit == 0 {
            return Err(Error::ZeroLimit);
        }
        if window_ms == 0 {
            return Err(Error::ZeroWindow);
        }
        Ok(Self { limit, window_ms })
    }

    /// The time at which a request logged at `t` leaves the window.
    fn expiry(&self, t: u64) -> u128 {
        u128::from(t) + u128::from(self.window_ms)
    }

    /// Index of the first logged time still inside the window at `now`.
    fn first_live(&self, log: &SlidingLog, now: u64) -> usize {
        log.times
            .partition_point(|&t| self.expiry(t) <= u128::from(now))
    }
}

impl Policy for SlidingWindow {
    type State = SlidingLog;

    fn name(&self) -> &'static str {
        "sliding-window"
    }

    fn limit(&self) -> u32 {
        self.limit
    }

    fn window_ms(&self) -> u64 {
        self.window_ms
    }

    fn new_state(&self, _now_ms: u64) -> SlidingLog {
        SlidingLog::default()
    }

    fn decide(&self, log: &SlidingLog, now: u64, cost: u32) -> Decision {
        self.decide_from(log, self.first_live(log, now), now, cost)
    }

    fn consume(&self, log: &mut SlidingLog, now: u64, cost: u32) {
        self.forget_expired(log, now);
        log.times.extend(std::iter::repeat_n(now, cost as usize));
    }

    /// Drops the expired times first (they cannot matter again, as times
    /// never go backwards for a state), so that deciding needs no search.
    fn check(&self, log: &mut SlidingLog, now: u64, cost: u32) -> Decision {
        self.forget_expired(log, now);
        let decision = self.decide_from(log, 0, now, cost);
        if decision.allowed {
            log.times.extend(std::iter::repeat_n(now, cost as usize));
        }
        decision
    }

    fn reclaim(&self, log: &SlidingLog, now: u64) -> Reclaim {
        match log.times.back() {
            Some(&t) if self.expiry(t) > u128::from(now) => Reclaim::Keep,
            _ => Reclaim::Free,
        }
    }
}

impl SlidingWindow {
    /// Removes the times that have left the window at `now`, oldest first:
    /// amortised O(1) per call, since each time is removed once.
    fn forget_expired(&self, log: &mut SlidingLog, now: u64) {
        while log
            .times
            .front()
            .is_some_and(|&t| self.expiry(t) <= u128::from(now))
        {
            log.times.pop_front();
        }
    }

    /// [`Policy::decide`] given the index of the first time still in the window.
    fn decide_from(&self, log: &SlidingLog, first: usize, now: u64, cost: u32) -> Decision {
        // The log never holds more than `limit` entries, so this fits in u32.
        let used = (log.times.len() - first) as u32;
        let available = self.limit.saturating_sub(used);
        if cost <= available {
            let newest = if cost > 0 {
                Some(now)
            } else {
                log.times.back().copied().filter(|_| used > 0)
            };
            return Decision {
                allowed: true,
                limit: self.limit,
                remaining: available - cost,
                retry_after_ms: Some(0),
                reset_after_ms: newest.map_or(0, |t| wait_until(self.expiry(t), now)),
            };
        }
        // Rejected: the request fits once `cost - available` of the live
        // entries have left, the last of them being the one at `first + excess - 1`.
        let retry_after_ms = (cost <= self.limit).then(|| {
            let excess = (cost - available) as usize;
            wait_until(self.expiry(log.times[first + excess - 1]), now)
        });
        let reset_after_ms = match log.times.back() {
            Some(&newest) if used > 0 => wait_until(self.expiry(newest), now),
            _ => 0,
        };
        Decision {
            allowed: false,
            limit: self.limit,
            remaining: available,
            retry_after_ms,
            reset_after_ms,
        }
    }
}
