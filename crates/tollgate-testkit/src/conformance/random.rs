//! The random cases: seeded sessions and plans (so a failure reproduces),
//! the largest numbers a store must take, and huge costs, each compared
//! decision by decision with the naive reference.

use tollgate::{AnyPolicy, Limit, Plan, Policy, POLICY_NAMES};

use super::{block_on, run_session, same_as_naive, MakeStore};
use crate::reference::NaiveStore;

/// The largest integer every store must decide exactly with: 2^53 - 1, the
/// Redis store's range (Lua numbers are doubles; `tollgate_redis::bounds::MAX_EXACT`,
/// whose tests check that the two agree). [`extremes`] runs just inside it.
pub const EXACT_RANGE: u64 = (1 << 53) - 1;

/// SplitMix64: a small seeded generator, so failures reproduce.
pub struct Rng(u64);

impl Rng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
    /// True `percent` times out of 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.range(1, 100) <= percent
    }
    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.range(0, items.len() as u64 - 1) as usize]
    }
}

/// A limit and window for `policy`, mostly small so limits are hit.
fn random_limit(rng: &mut Rng, policy: &str) -> (u32, u64) {
    let limit = if rng.chance(80) {
        rng.range(1, 5)
    } else {
        rng.range(1, 60)
    };
    let window = if policy == "token-bucket" {
        limit * rng.range(1, 400)
    } else {
        rng.range(limit.max(1), 3_000)
    };
    (limit as u32, window)
}

/// The next call time: mostly small steps, sometimes the same
/// millisecond, a step back, or a huge jump (times stay <= 2x10^12).
fn next_time(rng: &mut Rng, now: u64, window: u64) -> u64 {
    match rng.range(1, 100) {
        1..=15 => now,
        16..=22 => now.saturating_sub(rng.range(1, window * 2)),
        23..=24 => (now + rng.range(1, 1_000_000_000_000)).min(2_000_000_000_000),
        _ => (now + rng.range(0, window)).min(2_000_000_000_000),
    }
}

/// A random session of `lines` calls over a few clients, with several `new`s.
fn random_session(rng: &mut Rng, lines: usize) -> String {
    let mut session = String::new();
    let mut now = 0;
    let mut window = 1;
    for i in 0..lines {
        if i == 0 || rng.chance(2) {
            let policy = *rng.pick(POLICY_NAMES);
            let (limit, w) = random_limit(rng, policy);
            window = w;
            now = if rng.chance(20) {
                rng.range(0, 2_000_000_000_000)
            } else {
                rng.range(0, 5_000)
            };
            session.push_str(&format!("new {policy} {limit} {window}\n"));
        }
        now = next_time(rng, now, window);
        let client = rng.pick(&["a", "b", "{c}"]);
        let verb = if rng.chance(65) { "allow" } else { "remaining" };
        session.push_str(&format!("{verb} {client} {now}\n"));
    }
    session
}

/// Random one-limit sessions of every policy, with backwards times and
/// huge jumps: every decision must be the naive model's.
pub fn random_sessions(make_store: &dyn MakeStore) {
    let mut rng = Rng::new(0x7011_6a7e);
    block_on(async {
        for _ in 0..24 {
            let session = random_session(&mut rng, 250);
            run_session(make_store, &session).await;
        }
    });
}

/// A random plan of one to three limits, some shadow.
fn random_plan(rng: &mut Rng, name: &str) -> Plan {
    let count = rng.range(1, 3);
    let limits = (0..count)
        .map(|i| {
            let policy = *rng.pick(POLICY_NAMES);
            let (limit, window) = random_limit(rng, policy);
            let policy = AnyPolicy::from_name(policy, limit, window).expect("valid policy");
            Limit::new(format!("l{i}"), policy, rng.chance(20))
        })
        .collect();
    Plan::new(name, limits).expect("valid plan")
}

/// Random plans (two per round, sharing clients, as after a config
/// change) with costs from 0 to above the limits.
pub fn plans(make_store: &dyn MakeStore) {
    block_on(async {
        let mut rng = Rng::new(0x91a5);
        for round in 0..12 {
            let store = make_store.fresh().await;
            let naive = NaiveStore::new();
            let plans = [
                random_plan(&mut rng, &format!("p{round}a")),
                random_plan(&mut rng, &format!("p{round}b")),
            ];
            let mut now = rng.range(0, 5_000);
            for step in 0..150 {
                let plan = &plans[usize::from(rng.chance(25))];
                let window = plan.limits()[0].policy().window_ms();
                now = next_time(&mut rng, now, window);
                let max_limit = plan.limits().iter().map(|l| l.policy().limit()).max();
                let cost = rng.range(0, u64::from(max_limit.unwrap_or(1)) + 1) as u32;
                let client = *rng.pick(&["x", "y", "", "z:{}"]);
                let context = || format!("round {round} step {step} on {plan:?}");
                same_as_naive(&*store, &naive, (plan, client, now, cost), &context).await;
            }
        }
    });
}

/// The largest numbers a store must take: the contract's extremes and
/// times just inside [`EXACT_RANGE`] - window, where a double quotient
/// would be off by one without exact correction.
pub fn extremes(make_store: &dyn MakeStore) {
    let max = EXACT_RANGE;
    let cases: &[(&str, u32, u64, u64)] = &[
        ("gcra", 1_000, 1_000_000_000, 2_000_000_000_000),
        (
            "gcra",
            7,
            999_999_937,
            (max / 7) - 2 * 999_999_937 - 4_000_000_000,
        ),
        ("token-bucket", 1_000, 1_000_000_000, 2_000_000_000_000),
        (
            "token-bucket",
            7,
            7 * 999_999_937,
            max - 7 * 999_999_937 - 4_000_000_000,
        ),
        ("sliding-window", 1_000, 1_000_000_000, 2_000_000_000_000),
        (
            "sliding-window",
            3,
            999_999_937,
            max - 999_999_937 - 4_000_000_000,
        ),
    ];
    block_on(async {
        let mut rng = Rng::new(0xe47);
        for &(name, limit, window, start) in cases {
            let store = make_store.fresh().await;
            let naive = NaiveStore::new();
            let policy = AnyPolicy::from_name(name, limit, window).expect("policy");
            let plan = Plan::new("x", vec![Limit::new("l", policy, false)]).expect("plan");
            let mut now = start;
            for step in 0..120 {
                now += match rng.range(0, 3) {
                    0 => 0,
                    1 => rng.range(1, 1_000),
                    _ => rng.range(1, window / u64::from(limit)),
                };
                now = now.min(start + 4_000_000_000);
                let cost = rng.range(0, u64::from(limit.min(5)) + 1) as u32;
                let context = || format!("{name} {limit} per {window} ms, step {step}");
                same_as_naive(&*store, &naive, (&plan, "big", now, cost), &context).await;
            }
        }
    });
}

/// Sliding windows whose limit counts bytes, not requests: limits of
/// 10^9 and `u32::MAX`, costs up to 10^9, many at one millisecond.
pub fn huge_costs(make_store: &dyn MakeStore) {
    block_on(async {
        let mut rng = Rng::new(0xb17e5);
        let store = make_store.fresh().await;
        let naive = NaiveStore::new();
        let sliding =
            |limit, window| AnyPolicy::from_name("sliding-window", limit, window).expect("policy");
        let plan = Plan::new(
            "bytes",
            vec![
                Limit::new("per-second", sliding(1_000_000_000, 1_000), false),
                Limit::new("per-3s", sliding(u32::MAX, 3_000), false),
            ],
        )
        .expect("plan");
        let mut now = 1_700_000_000_000;
        let mut answers = [0u32; 2];
        for step in 0..300 {
            // No huge jumps: the logs rarely empty, so their running
            // counts of units pass 2^32 (a store must not wrap them).
            now = match rng.range(0, 9) {
                0..=2 => now,
                3 => now - rng.range(1, 500),
                _ => now + rng.range(1, 700),
            };
            let cost = match rng.range(0, 3) {
                0 => rng.range(0, 10),
                1 => rng.range(0, 1_000_000_000),
                _ => rng.range(0, 300_000_000),
            } as u32;
            let client = *rng.pick(&["big", "bigger"]);
            let context = || format!("step {step}");
            let got = same_as_naive(&*store, &naive, (&plan, client, now, cost), &context).await;
            answers[usize::from(got.allowed)] += 1;
        }
        // Both answers occur often, or the case checked little.
        assert!(answers.iter().all(|&n| n >= 30), "{answers:?}");
    });
}
