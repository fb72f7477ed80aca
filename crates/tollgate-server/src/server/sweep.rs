//! Sweeping idle clients from the memory stores, a little behind the clock.

use std::sync::atomic::Ordering;

use tollgate::{Clock, Plan, PlanLimiter, RECLAIM_BEHIND_MS};

use super::Server;

/// Drops from `limiter` the state of clients idle at `clock_now_ms` (and
/// state of limits in none of `plans`), judged [`RECLAIM_BEHIND_MS`] behind
/// it, as a full shard judges its clients behind a newcomer's time (see
/// there why): the one sweep of `serve`'s memory stores and of the proxy's.
/// Returns how many clients were dropped.
pub fn sweep_idle(limiter: &PlanLimiter, plans: &[Plan], clock_now_ms: u64) -> usize {
    limiter.sweep(plans, clock_now_ms.saturating_sub(RECLAIM_BEHIND_MS), false)
}

impl Server {
    /// Drops the state of idle clients from the memory stores (and state of
    /// limits no longer in the config), judged [`RECLAIM_BEHIND_MS`] behind the
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
