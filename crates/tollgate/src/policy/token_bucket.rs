//! Token bucket with whole-millisecond drips anchored at the client's first call.
//!
//! The bucket holds up to `limit` tokens and starts full. A request uses one
//! token per unit of cost. One token drips back every
//! `interval = window_ms / limit` ms, at `anchor + k * interval` for
//! `k = 1, 2, ...`, where `anchor` is the time of the client's first call
//! (an `allow` or a `remaining`). A drip into a full bucket is wasted.
//!
//! The state is two numbers. Rather than tokens and a refill time, it keeps
//! `full_at`: the drip index at which the bucket would be full again if no
//! more tokens were used. At drip index `k` the bucket holds
//! `limit - max(0, full_at - k)` tokens, and using `c` tokens moves `full_at`
//! to `max(full_at, k) + c`. This is the same bucket (wasted drips included)
//! with refill computed by one division, whatever the gap between calls.
//!
//! When tokens are used, the state is rebased onto the latest drip at or
//! before `now` (`anchor += k * interval`, `full_at -= k`): the drip times are
//! unchanged, `full_at` stays at most `limit`, and no number can overflow even
//! at times near `u64::MAX`.

use super::{check_limit_and_window, wait_until, Policy, Reclaim};
use crate::{Decision, Error};

/// The token-bucket policy (`"token-bucket"`).
///
/// Needs `window_ms` to be a multiple of `limit`; any such pair up to
/// `u32::MAX` / `u64::MAX` works, with times up to `u64::MAX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    limit: u32,
    interval_ms: u64,
}

/// One client's bucket: 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// A drip time: the client's first call, moved forward by whole
    /// intervals as tokens are used; drips fall at `anchor + k * interval`.
    pub anchor: u64,
    /// Drip index (counted from `anchor`) at which the bucket is full again
    /// (see the module doc). At any drip `k` at or after the last use,
    /// `full_at - k <= limit`. `full_at` itself may be far above `limit`:
    /// this policy moves `anchor` up to each use, but the Redis script counts
    /// drips from the client's first call, and its states decode as they
    /// are. The arithmetic here takes both.
    pub full_at: u64,
}

impl TokenBucket {
    /// A bucket of `limit` tokens refilling one token every `window_ms / limit` ms.
    ///
    /// # Errors
    /// [`Error::ZeroLimit`], [`Error::ZeroWindow`], or
    /// [`Error::WindowNotMultipleOfLimit`].
    pub fn new(limit: u32, window_ms: u64) -> Result<Self, Error> {
        check_limit_and_window(limit, window_ms)?;
        if !window_ms.is_multiple_of(u64::from(limit)) {
            return Err(Error::WindowNotMultipleOfLimit { limit, window_ms });
        }
        Ok(Self {
            limit,
            interval_ms: window_ms / u64::from(limit),
        })
    }

    /// Milliseconds between two drips.
    pub fn interval_ms(&self) -> u64 {
        self.interval_ms
    }

    /// Index of the last drip at or before `now`.
    fn drips(&self, bucket: &Bucket, now: u64) -> u64 {
        now.saturating_sub(bucket.anchor) / self.interval_ms
    }

    /// Time of drip number `k`.
    fn drip_time(&self, bucket: &Bucket, k: u128) -> u128 {
        u128::from(bucket.anchor) + k * u128::from(self.interval_ms)
    }

    /// Uses `cost` tokens at drip index `k`, where at least `cost` are left.
    fn use_tokens(&self, bucket: &mut Bucket, k: u64, cost: u32) {
        // At least `cost` tokens at `k`, so the new `full_at` is at most
        // `k + limit`, which keeps the invariant `full_at - k <= limit`.
        // Rebase onto drip `k` (same drip times) so that `full_at` stays
        // small: `max(full_at, k) + cost - k`, at most `limit`.
        let behind = bucket.full_at.saturating_sub(k);
        // `k * interval <= now - anchor`, so the new anchor is at most `now`.
        bucket.anchor += k * self.interval_ms;
        bucket.full_at = behind.saturating_add(u64::from(cost));
    }

    /// Tokens in the bucket at drip index `k` (never more than `limit`).
    fn tokens(&self, bucket: &Bucket, k: u64) -> u32 {
        // `full_at - k <= limit` always holds, see `use_tokens`.
        let missing = bucket.full_at.saturating_sub(k).min(u64::from(self.limit));
        self.limit - missing as u32
    }
}

impl Policy for TokenBucket {
    type State = Bucket;

    fn name(&self) -> &'static str {
        "token-bucket"
    }

    fn limit(&self) -> u32 {
        self.limit
    }

    fn window_ms(&self) -> u64 {
        // Cannot overflow: `new` built interval from a window that fit in u64.
        self.interval_ms * u64::from(self.limit)
    }

    fn new_state(&self, now_ms: u64) -> Bucket {
        Bucket {
            anchor: now_ms,
            full_at: 0,
        }
    }

    fn first_call_anchors(&self) -> bool {
        true
    }

    fn decide(&self, bucket: &Bucket, now: u64, cost: u32) -> Decision {
        let k = self.drips(bucket, now);
        let tokens = self.tokens(bucket, k);
        if cost <= tokens {
            // In u128: `k + cost` may pass `u64::MAX` near the end of time.
            let full_at = if cost > 0 {
                u128::from(bucket.full_at.max(k)) + u128::from(cost)
            } else {
                u128::from(bucket.full_at)
            };
            return Decision {
                allowed: true,
                limit: self.limit,
                remaining: tokens - cost,
                retry_after_ms: Some(0),
                reset_after_ms: wait_until(self.drip_time(bucket, full_at), now),
            };
        }
        // Rejected: enough tokens are back at drip `full_at - (limit - cost)`,
        // which lies after `k` because fewer than `cost` tokens are there now
        // (and so cannot underflow).
        let retry_after_ms = (cost <= self.limit).then(|| {
            let k_enough = bucket.full_at - u64::from(self.limit - cost);
            wait_until(self.drip_time(bucket, u128::from(k_enough)), now)
        });
        Decision {
            allowed: false,
            limit: self.limit,
            remaining: tokens,
            retry_after_ms,
            reset_after_ms: wait_until(self.drip_time(bucket, u128::from(bucket.full_at)), now),
        }
    }

    fn consume(&self, bucket: &mut Bucket, now: u64, cost: u32) {
        self.use_tokens(bucket, self.drips(bucket, now), cost);
    }

    fn allow(&self, bucket: &mut Bucket, now: u64, cost: u32) -> bool {
        // `decide` and `consume` in one, with the drip index computed once.
        let k = self.drips(bucket, now);
        if cost > self.tokens(bucket, k) {
            return false;
        }
        if cost > 0 {
            self.use_tokens(bucket, k, cost);
        }
        true
    }

    fn reclaim(&self, bucket: &Bucket, now: u64) -> Reclaim {
        if bucket.full_at <= self.drips(bucket, now) {
            Reclaim::FreeResetsPhase
        } else {
            Reclaim::Keep
        }
    }
}
