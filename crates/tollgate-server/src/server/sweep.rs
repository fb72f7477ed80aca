//! Sweeping idle clients from the memory stores, a little behind the clock.

use std::sync::atomic::Ordering;

use tollgate::{Clock, Plan, PlanLimiter};

use super::Server;

/// How far behind the clock a sweep judges whether a client is idle (ms).
///
/// A sweep drops a state that changes no answer for calls at or after the
/// time it is given. A request reads the clock before it reaches the store,
/// so one read just before a sweep (its thread descheduled), or after the
/// wall clock stepped back, arrives with an earlier time: swept at the
/// clock's own reading, a log that had just left its window would be gone
/// for a call one millisecond earlier, and the client's quota back whole.
/// Ten seconds behind covers both; idle clients stay that much longer.
pub const SWEEP_BEHIND_MS: u64 = 10_000;

/// Drops from `limiter` the state of clients idle at `clock_now_ms` (and
/// state of limits in none of `plans`), judged [`SWEEP_BEHIND_MS`] behind
/// it: the one sweep of `serve`'s memory stores and of the proxy's.
/// Returns how many clients were dropped.
pub fn sweep_idle(limiter: &PlanLimiter, plans: &[Plan], clock_now_ms: u64) -> usize {
    limiter.sweep(plans, clock_now_ms.saturating_sub(SWEEP_BEHIND_MS), false)
}

impl Server {
    /// Drops the state of idle clients from the memory stores (and state of
    /// limits no longer in the config), judged [`SWEEP_BEHIND_MS`] behind the
    /// clock ([`sweep_idle`]). Returns how many clients were dropped.
    pub fn sweep(&self) -> usize {
        let config = self.config();
        let now = self.inner.clock.now_ms();
        let mut dropped = 0;
        if let Some(guarded) = &self.inner.guarded {
            dropped += sweep_idle(guarded.fallback().limiter(), config.plans(), now);
        }
        if let Some(memory) = &self.inner.memory {
            dropped += sweep_idle(memory.limiter(), config.plans(), now);
        }
        self.inner
            .swept
            .fetch_add(dropped as u64, Ordering::Relaxed);
        dropped
    }
}
