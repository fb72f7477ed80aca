//! Every policy against a deliberately naive model of it, over random sessions.
//!
//! The models share nothing with the library's arithmetic:
//! - sliding window: a `Vec` of allowed times, filtered on every call;
//! - token bucket: tokens counted one drip at a time (only drips into a full
//!   bucket, which change nothing but the schedule, are skipped in one step);
//! - GCRA: a continuous "leaky bucket as a meter" over exact fractions (no f64).
//!
//! A model only says how many requests of cost 1 fit at a time and how
//! a request changes it. Every field of a [`Decision`] follows from that:
//! allowed when `cost <= available`, `remaining` by asking again after
//! using, and the two waits by searching for the first millisecond at which
//! the request fits / the quota is full (availability never drops while
//! nothing is used, so a binary search finds the first one).

use std::collections::HashMap;

use proptest::prelude::*;
use tollgate::{Decision, RateLimiter};

/// One naive per-client model.
trait Model: Clone {
    /// Requests of cost 1 that fit at `now`, using none.
    fn available(&self, now: u64) -> u32;
    /// Uses `cost` at `now` (only called when it fits).
    fn use_up(&mut self, now: u64, cost: u32);
}

#[derive(Clone)]
struct NaiveLog {
    limit: u32,
    window: u64,
    times: Vec<u64>,
}

impl Model for NaiveLog {
    fn available(&self, now: u64) -> u32 {
        let inside = self
            .times
            .iter()
            .filter(|&&t| u128::from(t) + u128::from(self.window) > u128::from(now))
            .count() as u32;
        self.limit - inside
    }

    fn use_up(&mut self, now: u64, cost: u32) {
        for _ in 0..cost {
            self.times.push(now);
        }
    }
}

#[derive(Clone)]
struct NaiveBucket {
    limit: u32,
    interval: u64,
    tokens: u32,
    next_drip: u64,
}

impl NaiveBucket {
    fn new(limit: u32, window: u64, first_call: u64) -> Self {
        let interval = window / u64::from(limit);
        Self {
            limit,
            interval,
            tokens: limit,
            next_drip: first_call + interval,
        }
    }

    fn advance(&mut self, now: u64) {
        while self.next_drip <= now {
            if self.tokens == self.limit {
                // Every drip from here to `now` falls into a full bucket.
                let wasted = (now - self.next_drip) / self.interval + 1;
                self.next_drip += wasted * self.interval;
                break;
            }
            self.tokens += 1;
            self.next_drip += self.interval;
        }
    }
}

impl Model for NaiveBucket {
    fn available(&self, now: u64) -> u32 {
        let mut copy = self.clone();
        copy.advance(now);
        copy.tokens
    }

    fn use_up(&mut self, now: u64, cost: u32) {
        self.advance(now);
        self.tokens -= cost;
    }
}

/// A non-negative fraction `n / d`.
#[derive(Clone, Copy, Debug)]
struct Frac {
    n: u128,
    d: u128,
}

impl Frac {
    fn whole(n: u64) -> Self {
        Self {
            n: u128::from(n),
            d: 1,
        }
    }
    fn add(self, o: Self) -> Self {
        Self {
            n: self.n * o.d + o.n * self.d,
            d: self.d * o.d,
        }
        .reduce()
    }
    /// `max(0, self - o)`.
    fn sub_floor0(self, o: Self) -> Self {
        let (a, b) = (self.n * o.d, o.n * self.d);
        Self {
            n: a.saturating_sub(b),
            d: self.d * o.d,
        }
        .reduce()
    }
    fn mul(self, k: u64) -> Self {
        Self {
            n: self.n * u128::from(k),
            d: self.d,
        }
        .reduce()
    }
    /// `floor(self / o)`.
    fn div_floor(self, o: Self) -> u128 {
        (self.n * o.d) / (self.d * o.n)
    }
    fn reduce(self) -> Self {
        let (mut a, mut b) = (self.n, self.d);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        let g = a.max(1);
        Self {
            n: self.n / g,
            d: self.d / g,
        }
    }
}

/// GCRA as a meter: `debt` ms of emission intervals not yet drained, drained
/// at one ms per ms since `last`; a request of cost `c` adds `c * T` with
/// `T = window / limit` and fits while the debt stays within `window`.
#[derive(Clone)]
struct NaiveMeter {
    limit: u32,
    window: u64,
    debt: Frac,
    last: u64,
}

impl NaiveMeter {
    fn emission(&self) -> Frac {
        Frac {
            n: u128::from(self.window),
            d: u128::from(self.limit),
        }
        .reduce()
    }
    fn debt_at(&self, now: u64) -> Frac {
        self.debt.sub_floor0(Frac::whole(now - self.last))
    }
}

impl Model for NaiveMeter {
    fn available(&self, now: u64) -> u32 {
        let room = Frac::whole(self.window).sub_floor0(self.debt_at(now));
        room.div_floor(self.emission()) as u32
    }

    fn use_up(&mut self, now: u64, cost: u32) {
        self.debt = self.debt_at(now).add(self.emission().mul(u64::from(cost)));
        self.last = now;
    }
}

/// The first `w` in `0..=bound` with `ok(now + w)`, by binary search over a
/// predicate that never turns false again once true.
fn first_ok(now: u64, bound: u64, ok: impl Fn(u64) -> bool) -> Option<u64> {
    if !ok(now + bound) {
        return None;
    }
    let (mut lo, mut hi) = (0, bound);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if ok(now + mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

/// The decision a model implies for `cost` at `now` (and the state after it).
fn model_decide<M: Model>(m: &mut M, limit: u32, window: u64, now: u64, cost: u32) -> Decision {
    let available = m.available(now);
    let allowed = cost <= available;
    if allowed && cost > 0 {
        m.use_up(now, cost);
    }
    let retry_after_ms = if allowed {
        Some(0)
    } else if cost > limit {
        None
    } else {
        let w = first_ok(now, window, |t| m.available(t) >= cost);
        Some(w.expect("every request of cost <= limit fits within a window"))
    };
    let reset_after_ms = first_ok(now, window, |t| m.available(t) == limit)
        .expect("the quota is full again within a window");
    Decision {
        allowed,
        limit,
        remaining: m.available(now),
        retry_after_ms,
        reset_after_ms,
    }
}

#[derive(Debug, Clone)]
enum Op {
    Allow,
    Remaining,
    Check(u32),
}

#[derive(Debug, Clone)]
struct Call {
    op: Op,
    client: usize,
    /// Time step before the call (the session's clock only moves forward).
    step: u64,
    /// Some calls come in late: their time is this much before the session's clock.
    late: u64,
}

fn call(limit: u32, window: u64) -> impl Strategy<Value = Call> {
    let op = prop_oneof![
        4 => Just(Op::Allow),
        2 => Just(Op::Remaining),
        2 => (0..=limit + 2).prop_map(Op::Check),
    ];
    let step = prop_oneof![
        6 => 0..=window / 4 + 1,
        3 => 0..=3 * window,
        1 => prop_oneof![Just(1_000_000_000_000u64), 1..=2_000_000_000u64],
    ];
    let late = prop_oneof![9 => Just(0u64), 1 => 1..=window];
    (op, 0..3usize, step, late).prop_map(|(op, client, step, late)| Call {
        op,
        client,
        step,
        late,
    })
}

/// Runs `calls` on the real limiter and on fresh models (made by `make` at the
/// client's first call), comparing every answer.
fn compare<M: Model>(
    policy: &str,
    limit: u32,
    window: u64,
    start: u64,
    calls: &[Call],
    make: impl Fn(u64) -> M,
) -> Result<(), TestCaseError> {
    let limiter = RateLimiter::new(policy, limit, window).expect("valid in the contract domain");
    let mut models: HashMap<usize, (M, u64)> = HashMap::new();
    let mut clock = start;
    for (i, c) in calls.iter().enumerate() {
        clock += c.step;
        let asked = clock.saturating_sub(c.late);
        let client = format!("client-{}", c.client);
        // The documented rule: a time earlier than the latest seen for this
        // client is answered as at that latest time.
        let (model, seen) = models
            .entry(c.client)
            .or_insert_with(|| (make(asked), asked));
        *seen = (*seen).max(asked);
        let now = *seen;
        match c.op {
            Op::Allow => {
                let expected = model_decide(model, limit, window, now, 1).allowed;
                prop_assert_eq!(
                    limiter.allow(&client, asked),
                    expected,
                    "call {}: {:?}",
                    i,
                    c
                );
            }
            Op::Remaining => {
                let expected = model_decide(model, limit, window, now, 0);
                prop_assert_eq!(
                    limiter.peek(&client, asked),
                    expected,
                    "call {}: {:?}",
                    i,
                    c
                );
                prop_assert_eq!(limiter.remaining(&client, asked), expected.remaining);
            }
            Op::Check(cost) => {
                let expected = model_decide(model, limit, window, now, cost);
                prop_assert_eq!(
                    limiter.check(&client, asked, cost),
                    expected,
                    "call {}: {:?}",
                    i,
                    c
                );
            }
        }
    }
    Ok(())
}

/// Limit mostly small, window a multiple of the limit (the token bucket's
/// domain, fine for the others), a session of calls, and a start time.
fn session() -> impl Strategy<Value = (u32, u64, u64, Vec<Call>)> {
    let limit = prop_oneof![8 => 1..=20u32, 1 => 21..=200u32];
    (limit, 1..=50u64, 0..=2_000_000_000_000u64).prop_flat_map(|(limit, interval, start)| {
        let window = u64::from(limit) * interval;
        (
            Just(limit),
            Just(window),
            Just(start),
            proptest::collection::vec(call(limit, window), 1..80),
        )
    })
}

/// Like [`session`], with the clock moving by 0 to 2 ms per call: many
/// requests, of many costs, share a millisecond (the sliding log merges them
/// into one run) and leave the window together.
fn dense_session() -> impl Strategy<Value = (u32, u64, u64, Vec<Call>)> {
    session().prop_map(|(limit, window, start, calls)| {
        let calls = calls
            .into_iter()
            .map(|c| Call {
                step: c.step % 3,
                ..c
            })
            .collect();
        (limit, window, start, calls)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn sliding_window_matches_a_filtered_list((limit, window, start, calls) in session(), extra in 0..=7u64) {
        // The log takes any window, not only multiples of the limit.
        let window = window + extra;
        compare("sliding-window", limit, window, start, &calls, |_| NaiveLog { limit, window, times: Vec::new() })?;
    }

    #[test]
    fn sliding_window_runs_at_one_millisecond_match_a_filtered_list((limit, _, start, calls) in dense_session(), window in 1..=12u64) {
        compare("sliding-window", limit, window, start, &calls, |_| NaiveLog { limit, window, times: Vec::new() })?;
    }

    #[test]
    fn token_bucket_matches_dripping_one_at_a_time((limit, window, start, calls) in session()) {
        compare("token-bucket", limit, window, start, &calls, |first| NaiveBucket::new(limit, window, first))?;
    }

    #[test]
    fn gcra_matches_a_meter_over_fractions((limit, window, start, calls) in session(), extra in 0..=7u64) {
        let window = window + extra;
        compare("gcra", limit, window, start, &calls, |first| NaiveMeter { limit, window, debt: Frac::whole(0), last: first })?;
    }
}
