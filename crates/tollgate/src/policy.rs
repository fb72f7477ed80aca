//! The [`Policy`] trait and the registry of policies known by name.
//!
//! A policy is pure arithmetic: it reads its own per-client state and the time
//! it is given, and says what to answer; a store (a map entry in memory, a Lua
//! script in Redis) owns the state and applies the change. Adding a policy is
//! one new file in `policy/` plus one line in the `register_policies!` call
//! below; [`crate::RateLimiter`] does not change.

use crate::{Decision, Error};

mod gcra;
mod sliding_window;
mod token_bucket;

pub use gcra::{Gcra, GcraState};
pub use sliding_window::{SlidingLog, SlidingWindow};
pub use token_bucket::{Bucket, TokenBucket};

/// What may be done with a client's state that has gone quiet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reclaim {
    /// The state still matters: removing it would change a future answer.
    Keep,
    /// Removing the state changes no future answer (for calls not earlier
    /// than the time of the check).
    Free,
    /// Removing the state only forgets a phase (the token bucket's drip
    /// schedule): the client would start again full, anchored at its next call.
    /// Removed only when the caller opts in.
    FreeResetsPhase,
}

impl Reclaim {
    /// Whether the state may be dropped, given whether the caller accepts
    /// resetting drip phases.
    pub fn allows_removal(self, reset_phase: bool) -> bool {
        match self {
            Reclaim::Keep => false,
            Reclaim::Free => true,
            Reclaim::FreeResetsPhase => reset_phase,
        }
    }
}

/// A rate-limiting policy: pure arithmetic over one client's state.
///
/// Times passed to a policy never go backwards for one state: the store
/// clamps an earlier time to the latest one it has seen for that client.
pub trait Policy: Send + Sync + 'static {
    /// What the policy remembers about one client.
    type State: Send + 'static;

    /// The name the policy is registered under (e.g. `"token-bucket"`).
    fn name(&self) -> &'static str;

    /// Requests allowed per window, or the bucket's capacity.
    fn limit(&self) -> u32;

    /// The window length in milliseconds.
    fn window_ms(&self) -> u64;

    /// The state of a client first seen at `now_ms`.
    fn new_state(&self, now_ms: u64) -> Self::State;

    /// Whether a client's state must be stored even when its first call only
    /// asked (`remaining`) and used nothing: true when the state records
    /// something a fresh state at a later time would not (the token bucket's anchor).
    fn first_call_anchors(&self) -> bool {
        false
    }

    /// Whether `cost` units may pass at `now_ms`, and the numbers that go with
    /// the answer (as they will be after the request if it is allowed).
    /// Reads the state only; a cost of 0 asks without using anything.
    fn decide(&self, state: &Self::State, now_ms: u64, cost: u32) -> Decision;

    /// Records `cost` units used at `now_ms`. Called only right after
    /// [`Policy::decide`] allowed the same cost at the same time.
    fn consume(&self, state: &mut Self::State, now_ms: u64, cost: u32);

    /// Whether the state can be dropped at `now_ms`.
    fn reclaim(&self, state: &Self::State, now_ms: u64) -> Reclaim;

    /// How many units dropping the state at `now_ms` would give the client
    /// back: what a fresh client could use at `now_ms` beyond what this one
    /// can (0 for a client with its whole quota, `limit` for one that used it
    /// up). A capped memory store evicts the clients that give back the
    /// fewest first, so that evicting cannot hand a client its quota back.
    ///
    /// The default counts what the client lacks of `limit`, the quota of a
    /// fresh client under every registered policy; a policy whose new
    /// clients start with less overrides it.
    fn units_given_back(&self, state: &Self::State, now_ms: u64) -> u64 {
        u64::from(
            self.limit()
                .saturating_sub(self.decide(state, now_ms, 0).remaining),
        )
    }

    /// Takes `cost` units used at `used_at` back out of a state that other
    /// requests used since, when that is exact: true when done (or when
    /// nothing of that use is left in the state), false when the use must
    /// stay. A caller restores a state that nothing used since by putting
    /// the earlier state back; this is for the one used since.
    ///
    /// The default keeps the use: taking units back from a token bucket or
    /// GCRA that was used since could hand back what the cap would have
    /// wasted had the use never happened (a bucket that would have
    /// refilled to full meanwhile), which over-admits. Keeping it errs
    /// towards admitting less.
    fn take_back(&self, state: &mut Self::State, used_at: u64, cost: u32) -> bool {
        let _ = (state, used_at, cost);
        false
    }

    /// Decides and, when allowed, consumes: the whole life of one request.
    fn check(&self, state: &mut Self::State, now_ms: u64, cost: u32) -> Decision {
        let decision = self.decide(state, now_ms, cost);
        if decision.allowed && cost > 0 {
            self.consume(state, now_ms, cost);
        }
        decision
    }

    /// [`Policy::check`] for a caller that reads only `allowed`: the same
    /// answer and the same new state, without the numbers for headers. A
    /// policy overrides it when those numbers cost something to compute
    /// (the token bucket's and GCRA's 128-bit reset times).
    fn allow(&self, state: &mut Self::State, now_ms: u64, cost: u32) -> bool {
        self.check(state, now_ms, cost).allowed
    }
}

/// Exact wait from `now` until `at` (0 when `at` has passed), saturating at `u64::MAX`.
pub(crate) fn wait_until(at: u128, now: u64) -> u64 {
    u64::try_from(at.saturating_sub(u128::from(now))).unwrap_or(u64::MAX)
}

/// The bounds every policy shares: a limit and a window of at least 1.
pub(crate) fn check_limit_and_window(limit: u32, window_ms: u64) -> Result<(), Error> {
    if limit == 0 {
        return Err(Error::ZeroLimit);
    }
    if window_ms == 0 {
        return Err(Error::ZeroWindow);
    }
    Ok(())
}

/// Declares every policy known by name: the [`AnyPolicy`] and [`AnyState`]
/// enums, the name table and the dispatch. One line per policy.
macro_rules! register_policies {
    ($($variant:ident($ty:ty) = $name:literal),+ $(,)?) => {
        /// Names of all registered policies, as accepted by [`AnyPolicy::from_name`].
        pub const POLICY_NAMES: &[&str] = &[$($name),+];

        /// Any registered policy, chosen by name at run time.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum AnyPolicy {
            $(
                #[doc = concat!("The `", $name, "` policy.")]
                $variant($ty),
            )+
        }

        /// The per-client state of an [`AnyPolicy`].
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum AnyState {
            $(
                #[doc = concat!("State of the `", $name, "` policy.")]
                $variant(<$ty as Policy>::State),
            )+
        }

        /// A [`crate::Limiter`] for any registered policy, each keeping its
        /// own state type in its store: a client costs what its policy
        /// needs (an [`AnyState`] is as large as the largest state), and the
        /// policy is matched once per call rather than inside the lock.
        pub(crate) enum AnyLimiter {
            $($variant(crate::Limiter<$ty>),)+
        }

        impl AnyLimiter {
            pub(crate) fn new(policy: AnyPolicy) -> Self {
                match policy { $(AnyPolicy::$variant(p) => Self::$variant(crate::Limiter::new(p)),)+ }
            }

            #[inline]
            pub(crate) fn check(&self, client: &str, now_ms: u64, cost: u32) -> Decision {
                match self { $(Self::$variant(l) => l.check(client, now_ms, cost),)+ }
            }

            #[inline]
            pub(crate) fn allow(&self, client: &str, now_ms: u64) -> bool {
                match self { $(Self::$variant(l) => l.allow(client, now_ms),)+ }
            }

            pub(crate) fn sweep(&self, now_ms: u64, reset_phase: bool) -> usize {
                match self { $(Self::$variant(l) => l.sweep(now_ms, reset_phase),)+ }
            }

            pub(crate) fn clients(&self) -> usize {
                match self { $(Self::$variant(l) => l.clients(),)+ }
            }
        }

        impl AnyPolicy {
            /// Builds the policy registered as `name`.
            ///
            /// # Errors
            /// [`Error::UnknownPolicy`] for a name not in [`POLICY_NAMES`]
            /// (names are case-sensitive), or the policy's own error for a
            /// limit or window it cannot work with.
            pub fn from_name(name: &str, limit: u32, window_ms: u64) -> Result<Self, Error> {
                match name {
                    $($name => Ok(Self::$variant(<$ty>::new(limit, window_ms)?)),)+
                    _ => Err(Error::UnknownPolicy { name: name.to_owned() }),
                }
            }
        }

        impl Policy for AnyPolicy {
            type State = AnyState;

            fn name(&self) -> &'static str {
                match self { $(Self::$variant(p) => p.name(),)+ }
            }

            fn limit(&self) -> u32 {
                match self { $(Self::$variant(p) => p.limit(),)+ }
            }

            fn window_ms(&self) -> u64 {
                match self { $(Self::$variant(p) => p.window_ms(),)+ }
            }

            fn new_state(&self, now_ms: u64) -> AnyState {
                match self { $(Self::$variant(p) => AnyState::$variant(p.new_state(now_ms)),)+ }
            }

            fn first_call_anchors(&self) -> bool {
                match self { $(Self::$variant(p) => p.first_call_anchors(),)+ }
            }

            fn decide(&self, state: &AnyState, now_ms: u64, cost: u32) -> Decision {
                match (self, state) {
                    $((Self::$variant(p), AnyState::$variant(s)) => p.decide(s, now_ms, cost),)+
                    // A state of another policy cannot come from this one; if it
                    // ever did, answer as for a new client rather than panic.
                    #[allow(unreachable_patterns)]
                    _ => self.decide(&self.new_state(now_ms), now_ms, cost),
                }
            }

            fn consume(&self, state: &mut AnyState, now_ms: u64, cost: u32) {
                match (self, &mut *state) {
                    $((Self::$variant(p), AnyState::$variant(s)) => p.consume(s, now_ms, cost),)+
                    #[allow(unreachable_patterns)]
                    _ => {
                        *state = self.new_state(now_ms);
                        self.consume(state, now_ms, cost);
                    }
                }
            }

            fn allow(&self, state: &mut AnyState, now_ms: u64, cost: u32) -> bool {
                match (self, &mut *state) {
                    $((Self::$variant(p), AnyState::$variant(s)) => p.allow(s, now_ms, cost),)+
                    #[allow(unreachable_patterns)]
                    _ => self.check(state, now_ms, cost).allowed,
                }
            }

            fn reclaim(&self, state: &AnyState, now_ms: u64) -> Reclaim {
                match (self, state) {
                    $((Self::$variant(p), AnyState::$variant(s)) => p.reclaim(s, now_ms),)+
                    #[allow(unreachable_patterns)]
                    _ => Reclaim::Free,
                }
            }

            fn take_back(&self, state: &mut AnyState, used_at: u64, cost: u32) -> bool {
                match (self, state) {
                    $((Self::$variant(p), AnyState::$variant(s)) => p.take_back(s, used_at, cost),)+
                    // A state of another policy holds no use of this one.
                    #[allow(unreachable_patterns)]
                    _ => false,
                }
            }

            fn units_given_back(&self, state: &AnyState, now_ms: u64) -> u64 {
                match (self, state) {
                    $((Self::$variant(p), AnyState::$variant(s)) => p.units_given_back(s, now_ms),)+
                    // Answered as for a new client (see `decide`): nothing to give back.
                    #[allow(unreachable_patterns)]
                    _ => 0,
                }
            }
        }
    };
}

register_policies! {
    SlidingWindow(SlidingWindow) = "sliding-window",
    TokenBucket(TokenBucket) = "token-bucket",
    Gcra(Gcra) = "gcra",
}
