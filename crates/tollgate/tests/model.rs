//! Every policy against a deliberately naive model of it, over random sessions.
//!
//! The models (in `tollgate_testkit::models`, shared with the conformance
//! suite) share nothing with the library's arithmetic:
//! - sliding window: a `Vec` of allowed times, filtered on every call;
//! - token bucket: tokens counted one drip at a time (only drips into a full
//!   bucket, which change nothing but the schedule, are skipped in one step);
//! - GCRA: a continuous "leaky bucket as a meter" over exact fractions (no f64).
//!
//! A model only says how many requests of cost 1 fit at a time and how
//! a request changes it. Every field of a `tollgate::Decision` follows from that:
//! allowed when `cost <= available`, `remaining` by asking again after
//! using, and the two waits by searching for the first millisecond at which
//! the request fits / the quota is full (availability never drops while
//! nothing is used, so a binary search finds the first one).

use std::collections::HashMap;

use proptest::prelude::*;
use tollgate::RateLimiter;
use tollgate_testkit::models::{decide, Model, NaiveBucket, NaiveLog, NaiveMeter};

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
                let expected = decide(model, now, 1).allowed;
                prop_assert_eq!(
                    limiter.allow(&client, asked),
                    expected,
                    "call {}: {:?}",
                    i,
                    c
                );
            }
            Op::Remaining => {
                let expected = decide(model, now, 0);
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
                let expected = decide(model, now, cost);
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
        compare("sliding-window", limit, window, start, &calls, |_| NaiveLog::new(limit, window))?;
    }

    #[test]
    fn sliding_window_runs_at_one_millisecond_match_a_filtered_list((limit, _, start, calls) in dense_session(), window in 1..=12u64) {
        compare("sliding-window", limit, window, start, &calls, |_| NaiveLog::new(limit, window))?;
    }

    #[test]
    fn token_bucket_matches_dripping_one_at_a_time((limit, window, start, calls) in session()) {
        compare("token-bucket", limit, window, start, &calls, |first| NaiveBucket::new(limit, window, first))?;
    }

    #[test]
    fn gcra_matches_a_meter_over_fractions((limit, window, start, calls) in session(), extra in 0..=7u64) {
        let window = window + extra;
        compare("gcra", limit, window, start, &calls, |first| NaiveMeter::new(limit, window, first))?;
    }
}
