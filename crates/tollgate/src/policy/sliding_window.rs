//! Sliding-window log: the exact rolling count.
//!
//! A request at `now` is allowed when the client had fewer than `limit`
//! allowed units of cost at times `t` with `t > now - window_ms`. The log is
//! run-length encoded: one entry per distinct time at which units were
//! allowed (a request at the same millisecond as the newest entry joins it),
//! so its size follows the number of allowed requests, never their cost.
//! Rejected requests are not logged, so the log never holds more than `limit`
//! units, hence never more than `limit` entries.

use super::{check_limit_and_window, wait_until, Policy, Reclaim};
use crate::{Decision, Error};

mod buf;
mod log;

use buf::Buf;
use log::Entry;
pub use log::SlidingLog;

/// The sliding-window log policy (`"sliding-window"`).
///
/// Exact at every millisecond, at the price of one stored entry (12 bytes)
/// per distinct millisecond at which a client was allowed something within
/// the window: at most `limit` entries, and one entry whatever the cost of
/// the requests it stands for. Any `limit >= 1` and `window_ms >= 1` work:
/// the arithmetic is done so that times up to `u64::MAX` cannot overflow.
/// Deciding takes O(log n) for n entries, rejected or allowed (allowing also
/// drops the entries that left the window, amortised O(1)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingWindow {
    limit: u32,
    window_ms: u64,
}

impl SlidingWindow {
    /// A log allowing `limit` requests in any `window_ms` milliseconds.
    ///
    /// # Errors
    /// [`Error::ZeroLimit`] or [`Error::ZeroWindow`].
    pub fn new(limit: u32, window_ms: u64) -> Result<Self, Error> {
        check_limit_and_window(limit, window_ms)?;
        Ok(Self { limit, window_ms })
    }

    /// The time at which a request logged at `t` leaves the window.
    fn expiry(&self, t: u64) -> u128 {
        u128::from(t) + u128::from(self.window_ms)
    }

    /// Index of the first entry still inside the window at `now`.
    fn first_live(&self, log: &SlidingLog, now: u64) -> usize {
        log.entries()
            .partition_point(|e| self.expiry(e.time) <= u128::from(now))
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
        if cost > 0 {
            log.push(now, cost);
        }
    }

    /// Drops the expired entries first (they cannot matter again, as times
    /// never go backwards for a state), so that deciding needs no search
    /// for the first live entry.
    fn check(&self, log: &mut SlidingLog, now: u64, cost: u32) -> Decision {
        self.forget_expired(log, now);
        let decision = self.decide_from(log, 0, now, cost);
        if decision.allowed && cost > 0 {
            log.push(now, cost);
        }
        decision
    }

    /// [`SlidingWindow::check`]'s answer and log without the numbers for
    /// headers.
    fn allow(&self, log: &mut SlidingLog, now: u64, cost: u32) -> bool {
        if let (Buf::One(only), 0) = (&log.buf, log.head) {
            if self.expiry(only.time) <= u128::from(now) {
                let end = only.end;
                return self.allow_after_only_entry(log, end, now, cost);
            }
        }
        self.forget_expired(log, now);
        // Every entry left is live: the units in the window are the running
        // count of the newest past the count before the oldest.
        let used = log
            .entries()
            .last()
            .map_or(0, |newest| newest.end.wrapping_sub(log.start));
        if cost > self.limit.saturating_sub(used) {
            return false;
        }
        if cost > 0 {
            log.push(now, cost);
        }
        true
    }

    /// Exact whatever was logged since: the log has no cap, only the record
    /// of the units allowed, so taking the use's units out of the run they
    /// joined leaves the log the one that would hold everything else.
    fn take_back(&self, log: &mut SlidingLog, used_at: u64, cost: u32) -> bool {
        log.take_out(used_at, cost)
    }

    fn reclaim(&self, log: &SlidingLog, now: u64) -> Reclaim {
        match log.entries().last() {
            Some(newest) if self.expiry(newest.time) > u128::from(now) => Reclaim::Keep,
            _ => Reclaim::Free,
        }
    }
}

impl SlidingWindow {
    /// Drops the entries that have left the window at `now`, oldest first,
    /// and removes the dropped ones from the buffer once they are at least
    /// as many as those left: amortised O(1) per call, since each entry is
    /// dropped once and moved at most once per entry dropped.
    fn forget_expired(&self, log: &mut SlidingLog, now: u64) {
        let mut head = log.head as usize;
        while let Some(&Entry { time, end }) = log.buf.as_slice().get(head) {
            if self.expiry(time) > u128::from(now) {
                break;
            }
            log.start = end;
            head += 1;
        }
        if head > 0 && head * 2 >= log.buf.as_slice().len() {
            log.buf.drain_front(head);
            head = 0;
        }
        // Fewer than the live entries, which are at most `limit`.
        log.head = head as u32;
    }

    /// [`Policy::allow`] for a log whose one entry, kept in place, has left
    /// the window: the whole work for a client that sends about one request
    /// per window, so it skips the general path's scan, drain and push. The
    /// log ends as the general path leaves it: the entry (whose running
    /// count is `end`) forgotten, even on a rejection, and the request's
    /// units, if allowed, its one entry.
    fn allow_after_only_entry(&self, log: &mut SlidingLog, end: u32, now: u64, cost: u32) -> bool {
        log.start = end;
        let allowed = cost <= self.limit;
        log.buf = if allowed && cost > 0 {
            Buf::One(Entry {
                time: now,
                end: end.wrapping_add(cost),
            })
        } else {
            Buf::default()
        };
        allowed
    }

    /// [`Policy::decide`] given the index of the first entry still in the window.
    fn decide_from(&self, log: &SlidingLog, first: usize, now: u64, cost: u32) -> Decision {
        let base = log.end_before(first);
        // Every entry holds at least one unit, so the newest entry is live
        // exactly when some entry is.
        let entries = log.entries();
        let newest = entries.last().map(|&Entry { time, end }| (time, end));
        let (used, newest_live) = match newest {
            Some((time, end)) if first < entries.len() => (end.wrapping_sub(base), Some(time)),
            _ => (0, None),
        };
        let available = self.limit.saturating_sub(used);
        if cost <= available {
            let newest = if cost > 0 { Some(now) } else { newest_live };
            return Decision {
                allowed: true,
                limit: self.limit,
                remaining: available - cost,
                retry_after_ms: Some(0),
                reset_after_ms: newest.map_or(0, |t| wait_until(self.expiry(t), now)),
            };
        }
        // Rejected: the request fits once `excess` of the live units have
        // left, the last of them in the first entry whose running count
        // reaches `excess` past `base`. The live running counts past `base`
        // increase from the first live entry on (they are at most `used`, so
        // never wrap), hence the binary search over that range.
        let retry_after_ms = (cost <= self.limit).then(|| {
            let excess = cost - available;
            let short = |i: usize| entries[i].end.wrapping_sub(base) < excess;
            let (mut lo, mut hi) = (first, entries.len() - 1);
            // The common case, a client at its limit asking for a little
            // more, ends at the oldest live entry: no search then.
            if short(lo) {
                lo += 1;
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if short(mid) {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
            }
            let Entry { time, .. } = entries[lo];
            wait_until(self.expiry(time), now)
        });
        Decision {
            allowed: false,
            limit: self.limit,
            remaining: available,
            retry_after_ms,
            reset_after_ms: newest_live.map_or(0, |t| wait_until(self.expiry(t), now)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_costs_take_one_entry_each() {
        let policy = SlidingWindow::new(u32::MAX, 1_000).unwrap();
        let mut log = policy.new_state(0);
        let half = u32::MAX / 2;
        assert!(policy.check(&mut log, 0, half).allowed);
        assert!(policy.check(&mut log, 0, 1).allowed);
        assert!(policy.check(&mut log, 10, half).allowed);
        let full = policy.check(&mut log, 20, 1);
        assert!(!full.allowed);
        assert_eq!(full.remaining, 0);
        assert_eq!(full.retry_after_ms, Some(980));
        assert_eq!(full.reset_after_ms, 990);
        // A cost that needs both early runs to leave waits for the later one.
        let big = policy.check(&mut log, 20, half + 2);
        assert_eq!(big.retry_after_ms, Some(990));
        assert_eq!(log.runs().collect::<Vec<_>>(), [(0, half + 1), (10, half)]);
        // Half the limit every half window: the running counts wrap past
        // 2^32 every few steps while the log stays two entries long.
        let mut log = policy.new_state(0);
        for step in 0..10u64 {
            let now = 500 * step;
            assert!(policy.check(&mut log, now, half).allowed, "at {now}");
            let left = if step == 0 { half + 1 } else { 1 };
            assert_eq!(policy.decide(&log, now, 0).remaining, left, "at {now}");
            let over = policy.check(&mut log, now, left + 1);
            assert!(!over.allowed, "at {now}");
            let retry = if step == 0 { 1_000 } else { 500 };
            assert_eq!(over.retry_after_ms, Some(retry), "at {now}");
        }
        assert!(log.entries().len() <= 2);
        assert!(log.heap_bytes() <= 4 * 12, "{} bytes", log.heap_bytes());
        // One request, one entry, kept in place; a second goes to the heap.
        let mut log = policy.new_state(0);
        policy.check(&mut log, 0, u32::MAX);
        assert_eq!(log.heap_bytes(), 0);
        policy.check(&mut log, 1_000, 1);
        assert_eq!(log.heap_bytes(), 0, "the first left the window");
        policy.check(&mut log, 1_001, 1);
        assert_eq!(log.heap_bytes(), 4 * 12);
    }

    /// A use taken back from a run that holds fewer units than it cost
    /// cannot have been logged there: nothing changes, and the answer says
    /// so, as the Redis script's `undo` does. Under the old `saturating_sub`
    /// the run was emptied and the take-back reported done.
    #[test]
    fn a_take_back_larger_than_its_run_changes_nothing() {
        let policy = SlidingWindow::new(10, 1_000).unwrap();
        let mut log = policy.new_state(0);
        assert!(policy.check(&mut log, 100, 2).allowed);
        assert!(policy.check(&mut log, 200, 3).allowed);
        assert!(!policy.take_back(&mut log, 100, 3));
        assert_eq!(log.runs().collect::<Vec<_>>(), [(100, 2), (200, 3)]);
        assert!(policy.take_back(&mut log, 100, 2));
        assert_eq!(log.runs().collect::<Vec<_>>(), [(200, 3)]);
        // A run that left the window: nothing to take, and done.
        assert!(policy.take_back(&mut log, 50, 1));
        assert_eq!(log.runs().collect::<Vec<_>>(), [(200, 3)]);
    }

    #[test]
    fn requests_at_the_same_millisecond_share_an_entry() {
        let policy = SlidingWindow::new(10, 100).unwrap();
        let mut log = policy.new_state(0);
        for cost in [1, 2, 3] {
            assert!(policy.check(&mut log, 5, cost).allowed);
        }
        assert!(policy.check(&mut log, 7, 4).allowed);
        assert!(!policy.check(&mut log, 7, 1).allowed);
        assert_eq!(log.runs().collect::<Vec<_>>(), [(5, 6), (7, 4)]);
        // Six units leave at 105, all at once.
        let d = policy.decide(&log, 104, 6);
        assert_eq!((d.allowed, d.retry_after_ms), (false, Some(1)));
        assert_eq!(policy.decide(&log, 105, 0).remaining, 6);
        assert_eq!(policy.decide(&log, 105, 7).retry_after_ms, Some(2));
    }

    #[test]
    fn entries_are_twelve_bytes_and_the_log_is_four_words() {
        assert_eq!(std::mem::size_of::<Entry>(), 12);
        assert_eq!(std::mem::size_of::<SlidingLog>(), 32);
    }
}
