//! The error type of building the core's limiters, policies and plans.
//! (A store's failure is [`crate::StoreError`]: it crosses crates, and
//! carries whether it is transient, which drives the failure policy.)

/// Why a limiter, a policy or a plan could not be built.
///
/// Decisions themselves never fail in memory: every error here is about
/// arguments, and is returned before any state is touched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The policy name is not one of [`crate::POLICY_NAMES`] (names are case-sensitive).
    #[error("unknown policy {name:?}: known policies are {}", crate::POLICY_NAMES.join(", "))]
    UnknownPolicy {
        /// The name that was asked for.
        name: String,
    },
    /// A limit of zero would reject every request; use a limit of at least 1.
    #[error("limit must be at least 1 (got 0)")]
    ZeroLimit,
    /// A window of zero milliseconds holds no request.
    #[error("window must be at least 1 ms (got 0)")]
    ZeroWindow,
    /// The token bucket drips one token every `window_ms / limit` ms, which
    /// must be a whole number of milliseconds.
    #[error("token-bucket needs the window ({window_ms} ms) to be a multiple of the limit ({limit}) so that one token drips back every whole millisecond interval")]
    WindowNotMultipleOfLimit {
        /// The limit asked for.
        limit: u32,
        /// The window asked for.
        window_ms: u64,
    },
    /// A plan must hold at least one limit.
    #[error("plan {plan:?} has no limits")]
    EmptyPlan {
        /// The plan's name.
        plan: String,
    },
    /// A plan holds more than [`crate::MAX_LIMITS_PER_PLAN`] limits: every
    /// decision reads and writes each, on Redis in one script, and the
    /// RateLimit headers name each (an audit: 8,000 limits made every Redis
    /// call time out, so the failure policy answered every request).
    #[error("plan {plan:?} has {count} limits; a plan holds at most {max}")]
    TooManyLimits {
        /// The plan's name.
        plan: String,
        /// How many limits it was given.
        count: usize,
        /// The most a plan may hold.
        max: usize,
    },
    /// Two limits of one plan share a name, so their states and headers would collide.
    #[error("plan {plan:?} names the limit {limit:?} twice")]
    DuplicateLimit {
        /// The plan's name.
        plan: String,
        /// The repeated limit name.
        limit: String,
    },
}
