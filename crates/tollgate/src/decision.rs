//! What a limiter answers for one request.

/// The answer to one request, with the numbers that rate-limit headers need.
///
/// All waits are exact, in milliseconds, measured from the time of the call
/// (or from the latest time already seen for the client, see
/// [`crate::RateLimiter`]): waiting `retry_after_ms` and asking again with the
/// same cost is allowed, and asking one millisecond earlier is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// `true`: let the request in (and it was counted). `false`: reject it (nothing was counted).
    pub allowed: bool,
    /// The policy's limit: requests per window, or the bucket's capacity.
    pub limit: u32,
    /// Requests of cost 1 the client could still make right now, after this one if it was allowed.
    pub remaining: u32,
    /// How long until this same request (same cost) would be allowed:
    /// `Some(0)` when it was allowed, `None` when it never can be because its
    /// cost is larger than the limit.
    pub retry_after_ms: Option<u64>,
    /// How long until the client's full quota is back (0 when it already is).
    pub reset_after_ms: u64,
}

impl Decision {
    /// True when the request was rejected because its cost exceeds the limit,
    /// so no amount of waiting would let it pass.
    pub fn can_never_pass(&self) -> bool {
        self.retry_after_ms.is_none()
    }
}
