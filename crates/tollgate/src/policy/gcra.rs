//! GCRA, the generic cell rate algorithm: a token bucket with continuous refill.
//!
//! Where the token bucket drips whole tokens on a schedule anchored at the
//! first call, GCRA refills smoothly: one request's worth every
//! `window_ms / limit` ms (a fraction of a millisecond is fine), with a burst
//! of up to `limit`. Its state is one number, the theoretical arrival time
//! (TAT): the time at which the client's quota would be full again.
//!
//! To stay exact with fractional emission intervals, times are scaled by
//! `limit` inside the policy: one request costs `window_ms` scaled units and
//! the burst allowance is `window_ms * limit` scaled units. A request of cost
//! `c` at `now` is allowed when `max(tat, now) + c * window_ms - now <= window_ms * limit`
//! (all scaled), and moves `tat` there. `remaining` is rounded down.

use super::{check_limit_and_window, wait_until, Policy, Reclaim};
use crate::{Decision, Error};

/// The GCRA policy (`"gcra"`).
///
/// Any `limit >= 1` and `window_ms >= 1` work, with times up to `u64::MAX`
/// (the scaled arithmetic is done in `u128`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gcra {
    limit: u32,
    window_ms: u64,
}

/// One client's theoretical arrival time, in milliseconds scaled by the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcraState {
    /// When the client's quota is full again, times `limit`.
    pub tat_scaled: u128,
}

impl Gcra {
    /// GCRA allowing `limit` requests per `window_ms`, in a burst or spread out.
    ///
    /// # Errors
    /// [`Error::ZeroLimit`] or [`Error::ZeroWindow`].
    pub fn new(limit: u32, window_ms: u64) -> Result<Self, Error> {
        check_limit_and_window(limit, window_ms)?;
        Ok(Self { limit, window_ms })
    }

    fn scale(&self, ms: u64) -> u128 {
        u128::from(ms) * u128::from(self.limit)
    }

    /// The burst allowance, scaled: a full window.
    fn tolerance(&self) -> u128 {
        self.scale(self.window_ms)
    }

    /// The cost of `cost` requests, scaled.
    fn cost_scaled(&self, cost: u32) -> u128 {
        u128::from(cost) * u128::from(self.window_ms)
    }

    /// The first whole millisecond at or after the scaled time `t`.
    fn unscale_up(&self, t: u128) -> u128 {
        t.div_ceil(u128::from(self.limit))
    }

    /// Whole requests that fit between `base` (scaled) and the tolerance.
    fn fit(&self, base: u128, now_scaled: u128) -> u32 {
        // Saturating: a state built by hand (its field is public) may lie
        // further ahead than the policy ever puts it.
        let headroom = self.tolerance().saturating_sub(base - now_scaled);
        // At most `limit`: the headroom never exceeds the tolerance.
        (headroom / u128::from(self.window_ms)) as u32
    }
}

impl Policy for Gcra {
    type State = GcraState;

    fn name(&self) -> &'static str {
        "gcra"
    }

    fn limit(&self) -> u32 {
        self.limit
    }

    fn window_ms(&self) -> u64 {
        self.window_ms
    }

    fn new_state(&self, now_ms: u64) -> GcraState {
        GcraState {
            tat_scaled: self.scale(now_ms),
        }
    }

    fn decide(&self, state: &GcraState, now: u64, cost: u32) -> Decision {
        let now_scaled = self.scale(now);
        let base = state.tat_scaled.max(now_scaled);
        let new_tat = base + self.cost_scaled(cost);
        if new_tat - now_scaled <= self.tolerance() {
            return Decision {
                allowed: true,
                limit: self.limit,
                remaining: self.fit(new_tat, now_scaled),
                retry_after_ms: Some(0),
                reset_after_ms: wait_until(self.unscale_up(new_tat), now),
            };
        }
        // Rejected (so `tat > now`): allowed from the first millisecond at
        // which `tat + cost - t <= tolerance`, which is before `tat` itself.
        let retry_after_ms = (cost <= self.limit).then(|| {
            let earliest = new_tat - self.tolerance();
            wait_until(self.unscale_up(earliest), now)
        });
        Decision {
            allowed: false,
            limit: self.limit,
            remaining: self.fit(base, now_scaled),
            retry_after_ms,
            reset_after_ms: wait_until(self.unscale_up(base), now),
        }
    }

    fn consume(&self, state: &mut GcraState, now: u64, cost: u32) {
        state.tat_scaled = state.tat_scaled.max(self.scale(now)) + self.cost_scaled(cost);
    }

    fn allow(&self, state: &mut GcraState, now: u64, cost: u32) -> bool {
        // `decide`'s test and `consume`, without the numbers for headers.
        let now_scaled = self.scale(now);
        let new_tat = state.tat_scaled.max(now_scaled) + self.cost_scaled(cost);
        if new_tat - now_scaled > self.tolerance() {
            return false;
        }
        if cost > 0 {
            state.tat_scaled = new_tat;
        }
        true
    }

    fn reclaim(&self, state: &GcraState, now: u64) -> Reclaim {
        if state.tat_scaled <= self.scale(now) {
            Reclaim::Free
        } else {
            Reclaim::Keep
        }
    }
}
