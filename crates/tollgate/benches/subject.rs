//! The limiters the core's benchmarks compare, shared by the criterion bench
//! `decisions` and the example `decide_count` (a fixed number of decisions,
//! for instruction counts under callgrind): tollgate's policies and
//! governor's keyed limiter on the same workload (see `decisions.rs`).

// Each of the two users takes what it needs.
#![allow(dead_code)]

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use governor::state::keyed::DefaultKeyedStateStore;
use tollgate::RateLimiter;

/// Requests per window, for every subject.
pub const LIMIT: u32 = 100;
/// The window, in ms (governor: one cell back every `WINDOW_MS / LIMIT` ms).
pub const WINDOW_MS: u64 = 1_000;
/// Calls per simulated millisecond.
pub const CALLS_PER_MS: u64 = 16;
/// A start time like a real Unix clock in ms.
pub const EPOCH_MS: u64 = 1_700_000_000_000;

/// governor's keyed limiter on the store behind `RateLimiter::keyed`, with a clock we move.
pub type Governor = governor::RateLimiter<
    String,
    DefaultKeyedStateStore<String>,
    FakeRelativeClock,
    governor::middleware::NoOpMiddleware<governor::nanos::Nanos>,
>;

/// One of the limiters under test, deciding "may `id` pass at call number `i`".
pub enum Subject {
    /// tollgate's limiter with one policy.
    Tollgate(RateLimiter),
    /// governor keyed, and its clock.
    Governor(Governor, FakeRelativeClock),
}

impl Subject {
    /// The subject called `name` (one of [`SUBJECTS`]).
    pub fn new(name: &str) -> Self {
        if name == "governor-keyed" {
            let quota =
                governor::Quota::with_period(Duration::from_millis(WINDOW_MS / u64::from(LIMIT)))
                    .expect("non-zero period")
                    .allow_burst(NonZeroU32::new(LIMIT).expect("non-zero limit"));
            let clock = FakeRelativeClock::default();
            // The same store as `RateLimiter::keyed` (a DashMap with the
            // default hasher), with a clock we move.
            Subject::Governor(Governor::dashmap_with_clock(quota, clock.clone()), clock)
        } else {
            Subject::Tollgate(RateLimiter::new(name, LIMIT, WINDOW_MS).expect("valid limiter"))
        }
    }

    /// Decides call number `i` for `id`. The clock moves on at every
    /// `CALLS_PER_MS`-th call (for governor, whichever thread gets there).
    #[inline]
    pub fn decide(&self, id: &String, i: u64) -> bool {
        match self {
            Subject::Tollgate(l) => l.allow(id, EPOCH_MS + i / CALLS_PER_MS),
            Subject::Governor(g, clock) => {
                if i.is_multiple_of(CALLS_PER_MS) {
                    clock.advance(Duration::from_millis(1));
                }
                g.check_key(id).is_ok()
            }
        }
    }
}

/// Every subject, by name: tollgate's policies, then governor.
pub const SUBJECTS: [&str; 4] = ["sliding-window", "token-bucket", "gcra", "governor-keyed"];

/// `n` client ids, `client-000000` on.
pub fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("client-{i:06}")).collect()
}
