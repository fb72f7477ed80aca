//! [`SlidingLog`]: one client's sliding-window log, run-length encoded,
//! and the few operations on it that are not the policy's arithmetic
//! (which reads and trims its fields in place, in `sliding_window.rs`).

use super::buf::Buf;

/// The units allowed at one time, with the running count that makes the
/// number of units between any two entries one subtraction.
///
/// Packed to 12 bytes (a `u64` and a `u32` would otherwise take 16): the
/// fields are only ever read and written by value, never borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed)]
pub(super) struct Entry {
    /// When the units were allowed.
    pub(super) time: u64,
    /// Units logged up to and including this entry since the log was
    /// created, modulo 2^32. The log never holds more than `limit <=
    /// u32::MAX` units, so the wrapping difference of two ends is exact.
    pub(super) end: u32,
}

/// The allowed requests still inside the window, oldest first: one entry per
/// distinct time, with a running count of units.
///
/// A buffer whose dropped entries are removed in bulk, rather than a
/// `VecDeque`: 32 bytes inline with the two `u32`s below (a `VecDeque` is
/// already 32), and the entries are one slice.
#[derive(Debug, Clone, Default)]
pub struct SlidingLog {
    /// Dropped entries (`..head`), then the log's entries.
    pub(super) buf: Buf,
    /// Entries dropped but not yet removed from `buf`: fewer than the log's
    /// entries, themselves at most `limit` (see `forget_expired`), so it fits.
    pub(super) head: u32,
    /// The running count before the log's first entry (the `end` of the last
    /// entry dropped), modulo 2^32.
    pub(super) start: u32,
}

/// Two logs are equal when they hold the same entries, however stored.
impl PartialEq for SlidingLog {
    fn eq(&self, other: &Self) -> bool {
        self.start == other.start && self.entries() == other.entries()
    }
}

impl Eq for SlidingLog {}

impl SlidingLog {
    /// The logged times with the units allowed at each, oldest first (some
    /// may already have left the window). Each time appears once.
    pub fn runs(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        let mut before = self.start;
        self.entries().iter().map(move |&Entry { time, end }| {
            let count = end.wrapping_sub(before);
            before = end;
            (time, count)
        })
    }

    /// A log holding `runs`, `(time, units)` oldest first, as another store
    /// keeps them (the Redis store reads its log back into one for
    /// [`crate::inspect_plan`]). Runs with no units are left out and a run at
    /// the time of the one before joins it, so the log is one the policy
    /// could have written when the times never decrease and the units of
    /// every window add up to at most the limit (the caller checks that).
    pub fn from_runs(runs: impl IntoIterator<Item = (u64, u32)>) -> Self {
        let mut log = Self::default();
        for (time, units) in runs {
            if units > 0 {
                log.push(time, units);
            }
        }
        log
    }

    /// Heap bytes held by the log (none while it holds at most one entry).
    pub fn heap_bytes(&self) -> usize {
        self.buf.heap_bytes()
    }

    /// The entries, oldest first.
    pub(super) fn entries(&self) -> &[Entry] {
        &self.buf.as_slice()[self.head as usize..]
    }

    /// The running count before entry `index`.
    pub(super) fn end_before(&self, index: usize) -> u32 {
        match index.checked_sub(1) {
            Some(previous) => self.entries()[previous].end,
            None => self.start,
        }
    }

    /// Takes `units` out of the run logged at `time`, the later runs
    /// unchanged. Nothing to do when no run is at `time`: its units left the
    /// window and were dropped. `false`, changing nothing, when the run holds
    /// fewer than `units`: it cannot hold the use, so the log is not the one
    /// the use was logged in (the Redis script answers the same).
    pub(super) fn take_out(&mut self, time: u64, units: u32) -> bool {
        match self.runs().find(|&(t, _)| t == time) {
            None => return true,
            Some((_, count)) if count < units => return false,
            Some(_) => {}
        }
        let runs: Vec<(u64, u32)> = self
            .runs()
            .map(|(t, count)| (t, if t == time { count - units } else { count }))
            .collect();
        *self = Self::from_runs(runs);
        true
    }

    /// Appends `cost > 0` units at `now`, not earlier than the newest entry.
    pub(super) fn push(&mut self, now: u64, cost: u32) {
        let empty = self.entries().is_empty();
        match self.buf.last_mut().filter(|_| !empty) {
            Some(newest) if newest.time == now => newest.end = newest.end.wrapping_add(cost),
            _ => {
                let end = self.end_before(self.entries().len()).wrapping_add(cost);
                self.buf.push(Entry { time: now, end });
            }
        }
    }
}
