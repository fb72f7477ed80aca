//! Limiters: a policy plus the in-memory store of every client's state.

use crate::policy::{AnyLimiter, AnyPolicy, Policy};
use crate::store::MemoryStore;
use crate::{Decision, Error};

/// One policy applied to every client separately, with state in memory.
///
/// Generic over the policy so that a program that knows its policy at compile
/// time pays no dispatch; [`RateLimiter`] is the same thing with the policy
/// chosen by name.
///
/// Times earlier than one already seen for a client (by any call: allowed,
/// rejected, or only asking) are answered as if made at that latest time, so
/// out-of-order calls from many threads never corrupt state and never get
/// more than the limit. To remember that time, every call stores the client,
/// even one that only asks; [`Limiter::sweep`] reclaims such entries.
pub struct Limiter<P: Policy> {
    policy: P,
    store: MemoryStore<P::State>,
}

impl<P: Policy> Limiter<P> {
    /// A limiter with no clients yet.
    pub fn new(policy: P) -> Self {
        Self {
            policy,
            store: MemoryStore::new(),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &P {
        &self.policy
    }

    /// Decides a request of `cost` units for `client` at `now_ms`, and counts
    /// it if allowed. A cost of 0 only asks (see [`Limiter::peek`]); a cost
    /// larger than the limit is always rejected with `retry_after_ms: None`.
    pub fn check(&self, client: &str, now_ms: u64, cost: u32) -> Decision {
        let policy = &self.policy;
        self.store.with_entry(
            client,
            now_ms,
            |now| policy.new_state(now),
            |access| policy.check(access.state, access.now_ms, cost),
        )
    }

    /// Lets a request of cost 1 from `client` at `now_ms` in (`true`, and it
    /// counts) or rejects it: [`Limiter::check`]'s `allowed`, without
    /// computing the numbers for headers.
    pub fn allow(&self, client: &str, now_ms: u64) -> bool {
        let policy = &self.policy;
        self.store.with_entry(
            client,
            now_ms,
            |now| policy.new_state(now),
            |access| policy.allow(access.state, access.now_ms, 1),
        )
    }

    /// The numbers for `client` at `now_ms` without using anything: `remaining`
    /// is how many requests of cost 1 would be allowed right now.
    pub fn peek(&self, client: &str, now_ms: u64) -> Decision {
        self.check(client, now_ms, 0)
    }

    /// Drops the state of clients whose removal changes no future answer
    /// (for calls at or after `now_ms`), and, when `reset_phase` is true, also
    /// full token buckets, which then forget their drip phase: such a client
    /// starts full again with its drips anchored at its next call, which may
    /// let its next refill arrive up to one interval earlier or later than
    /// it would have. Returns how many clients were dropped.
    pub fn sweep(&self, now_ms: u64, reset_phase: bool) -> usize {
        self.store.sweep_with(now_ms, |state, now| {
            self.policy.reclaim(state, now).allows_removal(reset_phase)
        })
    }

    /// Number of clients with stored state.
    pub fn clients(&self) -> usize {
        self.store.len()
    }

    /// The store, for inspection.
    pub fn store(&self) -> &MemoryStore<P::State> {
        &self.store
    }
}

/// A per-client rate limiter with the policy chosen by name.
///
/// ```
/// use tollgate::RateLimiter;
///
/// let limiter = RateLimiter::new("sliding-window", 2, 1_000).unwrap();
/// assert!(limiter.allow("app-1", 0));
/// assert!(limiter.allow("app-1", 10));
/// assert!(!limiter.allow("app-1", 20)); // two already in (-980, 20]
/// assert!(limiter.allow("app-2", 20)); // every client has its own limit
/// assert_eq!(limiter.remaining("app-1", 1_000), 1); // the call at 0 has left
/// ```
///
/// `RateLimiter` is `Send + Sync`: share it with an `Arc`. Clients live in a
/// sharded map, so threads working on different clients do not wait on one
/// lock, and threads racing on one client are allowed exactly `limit` in total.
pub struct RateLimiter {
    policy: AnyPolicy,
    inner: AnyLimiter,
}

impl RateLimiter {
    /// A limiter applying `policy` (one of [`crate::POLICY_NAMES`]) to every
    /// client: `limit` requests per `window_ms` milliseconds.
    ///
    /// # Errors
    /// [`Error::UnknownPolicy`] for an unknown name (case matters),
    /// [`Error::ZeroLimit`], [`Error::ZeroWindow`], and for `"token-bucket"`
    /// [`Error::WindowNotMultipleOfLimit`].
    pub fn new(policy: &str, limit: u32, window_ms: u64) -> Result<RateLimiter, Error> {
        Ok(Self::with_policy(AnyPolicy::from_name(
            policy, limit, window_ms,
        )?))
    }

    /// A limiter applying an already built policy.
    pub fn with_policy(policy: AnyPolicy) -> Self {
        Self {
            inner: AnyLimiter::new(policy.clone()),
            policy,
        }
    }

    /// Lets a request from `client` at `now_ms` in (`true`, and it counts) or
    /// rejects it (`false`, and it does not count).
    pub fn allow(&self, client_id: &str, now_ms: u64) -> bool {
        self.inner.allow(client_id, now_ms)
    }

    /// How many requests `client` could make right now, using none.
    pub fn remaining(&self, client_id: &str, now_ms: u64) -> u32 {
        self.inner.check(client_id, now_ms, 0).remaining
    }

    /// Decides a request of `cost` units, with the numbers for headers.
    /// See [`Limiter::check`].
    pub fn check(&self, client_id: &str, now_ms: u64, cost: u32) -> Decision {
        self.inner.check(client_id, now_ms, cost)
    }

    /// The numbers for `client` without using anything. See [`Limiter::peek`].
    pub fn peek(&self, client_id: &str, now_ms: u64) -> Decision {
        self.inner.check(client_id, now_ms, 0)
    }

    /// Reclaims idle clients. See [`Limiter::sweep`].
    pub fn sweep(&self, now_ms: u64, reset_phase: bool) -> usize {
        self.inner.sweep(now_ms, reset_phase)
    }

    /// Number of clients with stored state.
    pub fn clients(&self) -> usize {
        self.inner.clients()
    }

    /// The policy in force.
    pub fn policy(&self) -> &AnyPolicy {
        &self.policy
    }
}
