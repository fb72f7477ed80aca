//! One conformance suite, written once, run against every store: the
//! in-memory limiter, one Redis node and a Redis Cluster of three masters.
//!
//! Each part is a function over a [`Backend`] (a replay target factory plus a
//! [`Store`] factory); the `conformance!` macro instantiates them per
//! backend. The parts: the worked sessions of the contract, the edge cases of
//! the core issue (with hand-computed answers), random sessions compared line
//! by line with the in-memory replay, and random plans with several limits,
//! costs, shadows and backwards times compared decision by decision with the
//! in-memory plan limiter. Redis backends spawn their own `redis-server`
//! (skipped, with a message, when it is not installed, unless
//! `TOLLGATE_REQUIRE_REDIS=1`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tollgate::{AnyPolicy, Limit, Plan, PlanLimiter, Policy, Store, POLICY_NAMES};
use tollgate_cli::replay::{self, Memory, Target};
use tollgate_redis::testing::{RedisCluster, RedisServer};
use tollgate_redis::{RedisStore, RedisStoreConfig};

/// What the suite needs from a store under test.
trait Backend {
    /// The replay target.
    type T: Target;
    /// A fresh replay target.
    fn target(&self) -> Self::T;
    /// A fresh store (its own key space), built inside the test's runtime.
    fn store(&self) -> Pin<Box<dyn Future<Output = Arc<dyn Store>> + '_>>;
}

struct InMemory;

impl Backend for InMemory {
    type T = Memory;
    fn target(&self) -> Memory {
        Memory::default()
    }
    fn store(&self) -> Pin<Box<dyn Future<Output = Arc<dyn Store>> + '_>> {
        Box::pin(async { Arc::new(tollgate::MemoryBackend::new()) as Arc<dyn Store> })
    }
}

struct OneRedis {
    server: RedisServer,
}

impl OneRedis {
    fn spawn(test: &str) -> Option<Self> {
        RedisServer::spawn(test).map(|server| Self { server })
    }
}

/// A key prefix no other store of this test process uses.
fn fresh_prefix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("conformance:{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn test_config() -> RedisStoreConfig {
    RedisStoreConfig {
        prefix: fresh_prefix(),
        // Replayed times run far faster than Redis's clock: keep keys for
        // the whole test whatever the windows.
        expiry_margin_ms: 600_000,
        ..RedisStoreConfig::default()
    }
}

impl Backend for OneRedis {
    type T = replay::Redis;
    fn target(&self) -> replay::Redis {
        replay::Redis::connect(&self.server.url(), None).expect("connect the replay target")
    }
    fn store(&self) -> Pin<Box<dyn Future<Output = Arc<dyn Store>> + '_>> {
        Box::pin(async {
            let store = RedisStore::connect(&self.server.url(), test_config())
                .await
                .expect("connect the store");
            Arc::new(store) as Arc<dyn Store>
        })
    }
}

struct Cluster {
    cluster: RedisCluster,
}

impl Backend for Cluster {
    type T = replay::Redis;
    fn target(&self) -> replay::Redis {
        let urls = self.cluster.urls();
        let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
        replay::Redis::connect_cluster(&nodes, None).expect("connect the cluster target")
    }
    fn store(&self) -> Pin<Box<dyn Future<Output = Arc<dyn Store>> + '_>> {
        Box::pin(async {
            let urls = self.cluster.urls();
            let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
            let store = RedisStore::connect_cluster(&nodes, test_config())
                .await
                .expect("connect the cluster store");
            Arc::new(store) as Arc<dyn Store>
        })
    }
}

/// Replays `session` on `target` and returns the output.
fn run<T: Target>(target: &mut T, session: &str) -> String {
    let mut out = Vec::new();
    replay::replay(session.as_bytes(), &mut out, target).expect("replay");
    String::from_utf8(out).expect("utf-8 output")
}

/// Replays on the backend and on the in-memory limiter; the outputs must
/// match line by line (and `expected`, when given).
fn same_as_memory<B: Backend>(backend: &B, session: &str, expected: Option<&str>) {
    let got = run(&mut backend.target(), session);
    let reference = run(&mut Memory::default(), session);
    for (n, (g, r)) in got.lines().zip(reference.lines()).enumerate() {
        assert_eq!(
            g,
            r,
            "output line {} differs from memory\nsession:\n{session}",
            n + 1
        );
    }
    assert_eq!(got.lines().count(), reference.lines().count(), "line count");
    if let Some(expected) = expected {
        assert_eq!(got, expected, "session:\n{session}");
    }
}

mod suite {
    use super::*;

    pub fn worked_sessions<B: Backend>(backend: &B) {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/");
        for name in ["session1", "session2"] {
            let session = std::fs::read_to_string(format!("{root}{name}.replay")).expect("session");
            let expected =
                std::fs::read_to_string(format!("{root}{name}.expected")).expect("expected");
            same_as_memory(backend, &session, Some(&expected));
        }
    }

    /// The edge cases of the core issue, each with hand-computed answers.
    pub const EDGE_CASES: &[(&str, &str, &str)] = &[
        (
            "limit 1, a request at exactly now - window",
            "new sliding-window 1 1000\nallow a 0\nallow a 999\nremaining a 999\nallow a 1000\nremaining a 1999\nremaining a 2000\n",
            "ok\ntrue\nfalse\n0\ntrue\n0\n1\n",
        ),
        (
            "remaining anchors the bucket; a full bucket wastes drips",
            "new token-bucket 2 1000\nremaining b 100\nallow b 550\nallow b 560\nallow b 599\nallow b 600\nremaining b 1099\nremaining b 1100\nremaining b 5000\nallow b 5000\nallow b 5001\nallow b 5002\nremaining b 5099\nremaining b 5100\n",
            "ok\n2\ntrue\ntrue\nfalse\ntrue\n0\n1\n2\ntrue\ntrue\nfalse\n0\n1\n",
        ),
        (
            "GCRA near 2x10^12, then a time going backwards",
            "new gcra 2 1000\nallow c 1999999999000\nallow c 1999999999000\nallow c 1999999999000\nremaining c 1999999999499\nremaining c 1999999999500\nremaining c 2000000000000\nallow c 999999999000\nremaining c 999999999000\n",
            "ok\ntrue\ntrue\nfalse\n0\n1\n2\ntrue\n1\n",
        ),
        (
            "a gap of 10^12 ms in the sliding log",
            "new sliding-window 2 1000\nallow d 1000\nallow d 1000\nallow d 1000\nremaining d 1000000001000\nallow d 1000000001000\nremaining d 5\n",
            "ok\ntrue\ntrue\nfalse\n2\ntrue\n1\n",
        ),
        (
            "a gap of 10^12 ms in the token bucket",
            "new token-bucket 3 3000\nallow e 7\nallow e 7\nallow e 7\nallow e 8\nremaining e 1000000000007\nallow e 1000000000007\nremaining e 1000000000007\n",
            "ok\ntrue\ntrue\ntrue\nfalse\n3\ntrue\n2\n",
        ),
        (
            "a time going backwards is answered, and logged, at the latest time",
            "new sliding-window 2 1000\nallow f 5000\nallow f 100\nallow f 200\nremaining f 5999\nremaining f 6000\n",
            "ok\ntrue\ntrue\nfalse\n0\n2\n",
        ),
        (
            "client ids that look like key syntax stay separate clients",
            "new sliding-window 1 1000\nallow {x} 0\nallow {x} 1\nallow x 1\nallow %7Bx%7D 1\nallow : 1\nallow :seen 1\nallow \u{e9} 1\nallow \u{e9} 2\nallow } 2\n",
            "ok\ntrue\nfalse\ntrue\ntrue\ntrue\ntrue\ntrue\nfalse\ntrue\n",
        ),
        (
            "each new starts afresh; a failed new stops the calls",
            "new sliding-window 1 1000\nallow g 0\nnew sliding-window 1 1000\nallow g 0\nnew token-bucket 2 999\nallow g 1\nnew gcra 1 10\nallow g 0\nallow g 9\nallow g 10\n",
            "ok\ntrue\nok\ntrue\nerror: line 5: token-bucket needs the window (999 ms) to be a multiple of the limit (2) so that one token drips back every whole millisecond interval\nerror: line 6: no limiter: the `new` on line 5 failed\nok\ntrue\nfalse\ntrue\n",
        ),
    ];

    pub fn edge_cases<B: Backend>(backend: &B) {
        for (what, session, expected) in EDGE_CASES {
            eprintln!("edge case: {what}");
            same_as_memory(backend, session, Some(expected));
        }
    }

    /// SplitMix64: a small seeded generator, so failures reproduce.
    pub struct Rng(u64);

    impl Rng {
        pub fn new(seed: u64) -> Self {
            Self(seed)
        }
        pub fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        /// Uniform in `lo..=hi`.
        pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
            lo + self.next() % (hi - lo + 1)
        }
        pub fn chance(&mut self, percent: u64) -> bool {
            self.range(1, 100) <= percent
        }
    }

    /// A limit and window for `policy`, mostly small so limits are hit.
    pub fn random_limit(rng: &mut Rng, policy: &str) -> (u32, u64) {
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
    pub fn next_time(rng: &mut Rng, now: u64, window: u64) -> u64 {
        match rng.range(1, 100) {
            1..=15 => now,
            16..=22 => now.saturating_sub(rng.range(1, window * 2)),
            23..=24 => (now + rng.range(1, 1_000_000_000_000)).min(2_000_000_000_000),
            _ => (now + rng.range(0, window)).min(2_000_000_000_000),
        }
    }

    /// A random session of `lines` calls over a few clients, with several `new`s.
    pub fn random_session(rng: &mut Rng, lines: usize) -> String {
        let mut session = String::new();
        let mut now = 0;
        let mut window = 1;
        for i in 0..lines {
            if i == 0 || rng.chance(2) {
                let policy = POLICY_NAMES[rng.range(0, POLICY_NAMES.len() as u64 - 1) as usize];
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
            let client = ["a", "b", "{c}"][rng.range(0, 2) as usize];
            let verb = if rng.chance(65) { "allow" } else { "remaining" };
            session.push_str(&format!("{verb} {client} {now}\n"));
        }
        session
    }

    pub fn random_sessions<B: Backend>(backend: &B) {
        let mut rng = Rng::new(0x7011_6a7e);
        for _ in 0..24 {
            let session = random_session(&mut rng, 250);
            same_as_memory(backend, &session, None);
        }
    }

    /// A random plan of one to three limits, some shadow.
    pub fn random_plan(rng: &mut Rng, name: &str) -> Plan {
        let count = rng.range(1, 3);
        let limits = (0..count)
            .map(|i| {
                let policy = POLICY_NAMES[rng.range(0, POLICY_NAMES.len() as u64 - 1) as usize];
                let (limit, window) = random_limit(rng, policy);
                let policy = AnyPolicy::from_name(policy, limit, window).expect("valid policy");
                Limit::new(format!("l{i}"), policy, rng.chance(20))
            })
            .collect();
        Plan::new(name, limits).expect("valid plan")
    }

    /// Random plans (two per round, sharing clients, as after a config
    /// change) with costs from 0 to above the limits: every decision, with
    /// all its numbers, must equal the in-memory plan limiter's.
    pub fn plans<B: Backend>(backend: &B) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let mut rng = Rng::new(0x91a5);
            for round in 0..12 {
                let store = backend.store().await;
                let reference = PlanLimiter::new();
                let plans = [
                    random_plan(&mut rng, &format!("p{round}a")),
                    random_plan(&mut rng, &format!("p{round}b")),
                ];
                let mut now = rng.range(0, 5_000);
                for step in 0..150 {
                    let plan = &plans[usize::from(rng.chance(25))];
                    let window = plan.limits()[0].policy().window_ms();
                    now = next_time(&mut rng, now, window);
                    let max_limit = plan
                        .limits()
                        .iter()
                        .map(|l| l.policy().limit())
                        .max()
                        .unwrap_or(1);
                    let cost = rng.range(0, u64::from(max_limit) + 1) as u32;
                    let client = ["x", "y", "", "z:{}"][rng.range(0, 3) as usize];
                    let want = reference.check(plan, client, now, cost);
                    let got = store
                        .check(plan, client, now, cost)
                        .await
                        .expect("store answers");
                    assert_eq!(
                        got, want,
                        "round {round} step {step}: {client:?} at {now} cost {cost} on {plan:?}"
                    );
                }
            }
        });
    }

    /// The largest numbers the Redis store takes (see `tollgate_redis::bounds`):
    /// the contract's extremes and times just inside 2^53 - window, where a
    /// double quotient would be off by one without exact correction.
    pub fn extremes<B: Backend>(backend: &B) {
        let max = tollgate_redis::bounds::MAX_EXACT;
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
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let mut rng = Rng::new(0xe47);
            for &(name, limit, window, start) in cases {
                let store = backend.store().await;
                let reference = PlanLimiter::new();
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
                    let want = reference.check(&plan, "big", now, cost);
                    let got = store
                        .check(&plan, "big", now, cost)
                        .await
                        .expect("in range");
                    assert_eq!(got, want, "{name} step {step} at {now} cost {cost}");
                }
            }
        });
    }

    /// Sliding windows whose limit counts bytes, not requests: limits of
    /// 10^9 and `u32::MAX`, costs up to 10^9, many at one millisecond.
    /// The log holds one entry (one list element) per allowed time, so this
    /// runs instantly while one entry per unit would not fit in memory.
    pub fn huge_costs<B: Backend>(backend: &B) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let mut rng = Rng::new(0xb17e5);
            let store = backend.store().await;
            let reference = PlanLimiter::new();
            let sliding = |limit, window| {
                AnyPolicy::from_name("sliding-window", limit, window).expect("policy")
            };
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
                // counts of units pass 2^32 and wrap.
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
                let client = ["big", "bigger"][rng.range(0, 1) as usize];
                let want = reference.check(&plan, client, now, cost);
                let got = store
                    .check(&plan, client, now, cost)
                    .await
                    .expect("store answers");
                assert_eq!(got, want, "step {step}: {client} at {now} cost {cost}");
                answers[usize::from(got.allowed)] += 1;
            }
            eprintln!("huge costs: {answers:?} (rejected, allowed)");
            assert!(answers.iter().all(|&n| n >= 30), "{answers:?}");
        });
    }

    pub fn all<B: Backend>(backend: &B) {
        worked_sessions(backend);
        edge_cases(backend);
        random_sessions(backend);
        plans(backend);
        extremes(backend);
        huge_costs(backend);
    }
}

/// One test per part of the suite for a backend.
macro_rules! conformance {
    ($module:ident, $backend:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn worked_sessions() {
                if let Some(backend) = $backend {
                    suite::worked_sessions(&backend);
                }
            }

            #[test]
            fn edge_cases() {
                if let Some(backend) = $backend {
                    suite::edge_cases(&backend);
                }
            }

            #[test]
            fn random_sessions() {
                if let Some(backend) = $backend {
                    suite::random_sessions(&backend);
                }
            }

            #[test]
            fn plans() {
                if let Some(backend) = $backend {
                    suite::plans(&backend);
                }
            }

            #[test]
            fn extremes() {
                if let Some(backend) = $backend {
                    suite::extremes(&backend);
                }
            }

            #[test]
            fn huge_costs() {
                if let Some(backend) = $backend {
                    suite::huge_costs(&backend);
                }
            }
        }
    };
}

conformance!(memory, Some(InMemory));
conformance!(redis, OneRedis::spawn(module_path!()));

/// The whole suite through the cluster client, on one three-master cluster
/// (one test, so the cluster is formed once).
#[test]
fn redis_cluster_conformance() {
    if let Some(cluster) = RedisCluster::spawn("redis_cluster_conformance") {
        let backend = Cluster { cluster };
        suite::all(&backend);
        // The clients' keys really were spread over the three masters.
        for node in backend.cluster.nodes() {
            let keys: u64 = node.cli(&["DBSIZE"]).trim().parse().expect("DBSIZE");
            assert!(keys > 0, "node {} holds no key", node.port());
        }
    }
}
