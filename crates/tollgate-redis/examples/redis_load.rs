//! Load benchmark: decisions per second through one Redis, with 1 and 64
//! concurrent callers, for each policy, next to `redis-benchmark` running the
//! same script with EVALSHA on the same Redis in the same run (the ceiling of
//! one Redis), as a ratio; latency median and p99 per decision. Two
//! ceilings: redis-benchmark with as many connections as callers, one
//! request in flight each (`-c N`), and one connection with as many requests
//! in flight as callers (`-c 1 -P N`, which is what tollgate's one
//! multiplexed connection does); the ratio is to the better of the two.
//! Measurements are interleaved (ours, then redis-benchmark, round after
//! round) and the median round is reported, so that load drifting on a
//! shared machine hits both sides alike.
//!
//! ```text
//! cargo run --release -p tollgate-redis --example redis_load            # spawns its own redis-server
//! cargo run --release -p tollgate-redis --example redis_load -- 20000 3  # decisions per measurement, rounds
//! ```
//!
//! Workload (both clients): 100,000 clients (12-digit ids, as
//! redis-benchmark's `__rand_int__`), a one-limit plan of 100 requests per
//! 60 s, cost 1, the same `now_ms` for every call, so the script does the
//! same work for both. One `RedisStore` (one multiplexed connection) is
//! shared by all callers (tasks on a current-thread Tokio runtime).

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::{AnyPolicy, Limit, Plan};
use tollgate_redis::testing::RedisServer;
use tollgate_redis::{RedisStore, RedisStoreConfig};

const KEYSPACE: u64 = 100_000;
const NOW_MS: u64 = 1_000_000;
const MARGIN_MS: u64 = 60_000;
/// A deadline far ahead, on Redis's clock (µs): redis-benchmark's calls
/// never start late.
const FAR_AHEAD_US: u64 = 9_000_000_000_000_000;

struct Figures {
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1_000.0
}

/// SplitMix64, one per caller, so callers pick clients independently.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

async fn run_store(store: &RedisStore, plan: &Arc<Plan>, callers: usize, total: usize) -> Figures {
    let per_caller = total / callers;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for caller in 0..callers {
        let store = store.clone();
        let plan = plan.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_caller);
            let mut rng = caller as u64 * 7_919 + 1;
            for _ in 0..per_caller {
                let client = format!("{:012}", next(&mut rng) % KEYSPACE);
                let t = Instant::now();
                store
                    .decide(&plan, &client, NOW_MS, 1)
                    .await
                    .expect("decision");
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::with_capacity(total);
    for task in tasks {
        latencies.extend(task.await.expect("caller"));
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    Figures {
        rate: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
    }
}

/// redis-benchmark running the same EVALSHA; parses its CSV line.
fn run_redis_benchmark(
    port: u16,
    sha: &str,
    prefix: &str,
    plan: &Plan,
    callers: usize,
    pipeline: usize,
    total: usize,
) -> Figures {
    let limit = &plan.limits()[0];
    let policy = limit.policy();
    use tollgate::Policy;
    let code = match policy.name() {
        "sliding-window" => "s",
        "token-bucket" => "t",
        _ => "g",
    };
    let output = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &callers.to_string(), "-n", &total.to_string()])
        .args(["-P", &pipeline.to_string()])
        .args(["-r", &KEYSPACE.to_string(), "--csv", "EVALSHA", sha, "3"])
        // The plan script's KEYS and ARGV (`tollgate_redis::scripts`): each
        // `__rand_int__` is drawn anew, so a call's keys are of random
        // clients, as its receipt id is random.
        .arg(format!("{prefix}:{{c:__rand_int__}}:seen"))
        .arg(format!("{prefix}:{{c:__rand_int__}}:{:016x}", limit.id()))
        .arg(format!("{prefix}:{{c:__rand_int__}}:receipts"))
        .args([
            NOW_MS.to_string(),
            "1".into(),
            MARGIN_MS.to_string(),
            FAR_AHEAD_US.to_string(),
            code.into(),
            policy.limit().to_string(),
            policy.window_ms().to_string(),
            "0".into(),
            "ab:__rand_int__".into(),
            // A watermark above every id: each call drops its client's
            // earlier receipt, as the store's calls do once answered
            // (with 0, every client's receipts would pile up).
            FAR_AHEAD_US.to_string(),
        ])
        .output()
        .expect("run redis-benchmark");
    let text = String::from_utf8_lossy(&output.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let line = text
        .lines()
        .find(|l| l.starts_with("\"EVALSHA"))
        .unwrap_or_else(|| panic!("no redis-benchmark result in {text:?}"));
    let fields: Vec<f64> = line
        .split(',')
        .skip(1)
        .map(|f| f.trim_matches('"').parse().expect("number"))
        .collect();
    Figures {
        rate: fields[0],
        p50_ms: fields[3],
        p99_ms: fields[5],
    }
}

/// The median of three or more figures, by rate (latencies from the same run).
fn median(mut runs: Vec<Figures>) -> Figures {
    runs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    let middle = runs.len() / 2;
    runs.swap_remove(middle)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let total: usize = args
        .next()
        .map(|n| n.parse().expect("decisions per measurement"))
        .unwrap_or(20_000);
    let rounds: usize = args.next().map(|n| n.parse().expect("rounds")).unwrap_or(3);
    let server = RedisServer::spawn("redis_load").expect("redis-server is needed");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("{total} decisions per measurement, median of {rounds} interleaved rounds\n");
    println!("| policy | callers | tollgate-redis decisions/s | redis-benchmark -c N EVALSHA/s | redis-benchmark -c 1 -P N EVALSHA/s | ratio to the best ceiling | tollgate p50 / p99 ms | redis-benchmark -c N p50 / p99 ms |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for name in tollgate::POLICY_NAMES {
        for callers in [1usize, 64] {
            let policy = AnyPolicy::from_name(name, 100, 60_000).expect("policy");
            let plan =
                Arc::new(Plan::new("bench", vec![Limit::new("l", policy, false)]).expect("plan"));
            let prefix = format!("bench-{name}-{callers}");
            let config = RedisStoreConfig {
                prefix: prefix.clone(),
                expiry_margin_ms: MARGIN_MS,
                ..RedisStoreConfig::default()
            };
            let store = runtime.block_on(async {
                let store = RedisStore::connect(&server.url(), config)
                    .await
                    .expect("connect");
                // Warm up: loads the script, fills some state.
                run_store(&store, &plan, callers, total / 10).await;
                store
            });
            let sha = store.script_sha().to_owned();
            let rb_prefix = format!("{prefix}-rb");
            let (mut ours, mut separate, mut pipelined) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..rounds {
                ours.push(runtime.block_on(run_store(&store, &plan, callers, total)));
                separate.push(run_redis_benchmark(
                    server.port(),
                    &sha,
                    &rb_prefix,
                    &plan,
                    callers,
                    1,
                    total,
                ));
                if callers > 1 {
                    pipelined.push(run_redis_benchmark(
                        server.port(),
                        &sha,
                        &rb_prefix,
                        &plan,
                        1,
                        callers,
                        total,
                    ));
                }
            }
            let (ours, separate) = (median(ours), median(separate));
            let pipelined = (!pipelined.is_empty()).then(|| median(pipelined));
            let best = pipelined
                .as_ref()
                .map_or(separate.rate, |p| p.rate.max(separate.rate));
            println!(
                "| {name} | {callers} | {:.0} | {:.0} | {} | {:.2} | {:.3} / {:.3} | {:.3} / {:.3} |",
                ours.rate,
                separate.rate,
                pipelined.map_or("-".to_owned(), |p| format!("{:.0}", p.rate)),
                ours.rate / best,
                ours.p50_ms,
                ours.p99_ms,
                separate.p50_ms,
                separate.p99_ms
            );
        }
    }
}
