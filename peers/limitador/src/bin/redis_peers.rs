//! tollgate's Redis store beside limitador's (`AsyncRedisStorage`, its
//! exact Redis store), on one Redis, under the same concurrent load:
//! `TASKS` callers on a two-worker Tokio runtime, each deciding in turn
//! until `CALLS` decisions are made, subjects alternated `ROUNDS` times.
//!
//! Workloads:
//! - `spread`: 10,000 clients taken in turn, each far under its limit
//!   (3,600,000 per hour: the token bucket wants a window that is a
//!   multiple of the limit):
//!   decisions/s, p50 and p99, and Redis calls per decision (from `INFO
//!   commandstats`);
//! - `hot`: 10 clients, each allowed 10 per hour, asked far more often
//!   than that, several requests of each in flight at once (64 callers):
//!   the requests allowed beyond the limit, over all clients (a window of
//!   an hour outlasts the run, so each client's one window holds
//!   everything it was allowed).
//!
//! tollgate: its sliding window and its token bucket (both exact), on
//! `RedisStore` as `serve` builds it (batching on), without and (token
//! bucket, `+cache`) with the rejection cache in front, as `serve` runs it
//! by default.
//! limitador: its fixed window with the client as the limit's variable, as
//! limitador-server configures it.
//!
//! Columns: decisions/s and latency; Redis calls per decision (`EVALSHA`
//! and `EVAL` sent, from `INFO commandstats`), the commands Redis ran per
//! decision (those the scripts ran included) and Redis's CPU time per
//! decision (`INFO`'s `used_cpu_user` + `used_cpu_sys`); and the requests
//! allowed beyond the limit, which must be 0.
//!
//! Usage: `redis_peers REDIS_URL [ROUNDS] [CALLS] [TASKS]`, on a private
//! Redis (`scripts/bench-limitador.sh` starts one); each run keeps its keys
//! apart (a key prefix or a namespace of its own).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use limitador::limit::{Context, Limit as LimitadorLimit, Namespace};
use limitador::storage::redis::AsyncRedisStorage;
use limitador::AsyncRateLimiter;
use tollgate::Store;
use tollgate::{AnyPolicy, Limit, Plan};
use tollgate_cache::{CachedStore, RejectionCache, DEFAULT_MAX_CLIENTS};
use tollgate_redis::{RedisStore, RedisStoreConfig};

const NAMESPACE: &str = "bench";
const HOUR_MS: u64 = 3_600_000;

/// One workload: how many clients, and each one's limit per hour.
#[derive(Clone, Copy)]
struct Workload {
    name: &'static str,
    clients: usize,
    limit: u32,
}

const SPREAD: Workload = Workload {
    name: "spread",
    clients: 10_000,
    limit: 3_600_000,
};
const HOT: Workload = Workload {
    name: "hot",
    clients: 10,
    limit: 10,
};

/// A limiter under test: decides "may client `index` pass" on Redis.
enum Subject {
    Tollgate(RedisStore, Plan),
    Cached(CachedStore<RedisStore>, Plan),
    /// The limiter, its limit's namespace, and each client's context.
    Limitador(AsyncRateLimiter, Namespace, Vec<Context<'static>>),
}

impl Subject {
    /// tollgate's store with `policy`; `cached`: with the rejection cache.
    async fn tollgate(url: &str, policy: &str, cached: bool, workload: Workload, run: u64) -> Self {
        let config = RedisStoreConfig {
            prefix: format!("tollgate-peers:{run}"),
            ..RedisStoreConfig::default()
        };
        let store = RedisStore::connect(url, config)
            .await
            .expect("tollgate connects");
        let policy = AnyPolicy::from_name(policy, workload.limit, HOUR_MS).expect("policy");
        let plan = Plan::new("bench", vec![Limit::new("1h", policy, false)]).expect("plan");
        if cached {
            let cache = RejectionCache::new(DEFAULT_MAX_CLIENTS).expect("a cap in range");
            return Subject::Cached(CachedStore::new(store, Arc::new(cache)), plan);
        }
        Subject::Tollgate(store, plan)
    }

    async fn limitador(url: &str, workload: Workload, run: u64) -> Self {
        let storage = AsyncRedisStorage::new(url)
            .await
            .expect("limitador connects");
        let limiter = AsyncRateLimiter::new_with_storage(Box::new(storage));
        // A namespace per run, so that no run sees another's counters.
        let namespace: Namespace = format!("{NAMESPACE}-{run}").as_str().into();
        let limit = LimitadorLimit::new(
            namespace.clone(),
            u64::from(workload.limit),
            HOUR_MS / 1_000,
            Vec::new(),
            vec!["client".try_into().expect("a variable")],
        );
        limiter.add_limit(limit);
        let contexts = (0..workload.clients)
            .map(|i| HashMap::from([("client".to_owned(), client_id(i))]).into())
            .collect();
        Subject::Limitador(limiter, namespace, contexts)
    }

    async fn allow(&self, index: usize) -> bool {
        match self {
            Subject::Tollgate(store, plan) => {
                let decided = store.decide(plan, &client_id(index), now_ms(), 1).await;
                decided.expect("tollgate decided").allowed
            }
            Subject::Cached(store, plan) => {
                let decided = store.check(plan, &client_id(index), now_ms(), 1).await;
                decided.expect("tollgate decided").allowed
            }
            Subject::Limitador(limiter, namespace, contexts) => {
                let decided = limiter.check_rate_limited_and_update(namespace, &contexts[index], 1);
                !decided.await.expect("limitador decided").limited
            }
        }
    }
}

/// The caller's time: tollgate's store takes it as a parameter.
fn now_ms() -> u64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH);
    since_epoch.expect("time").as_millis() as u64
}

fn client_id(index: usize) -> String {
    format!("client-{index:05}")
}

/// What one run measured.
struct Measured {
    per_second: f64,
    p50_us: u64,
    p99_us: u64,
    over: u64,
}

/// What Redis did meanwhile, from `INFO`: the calls it was sent (scripts
/// and commands, not the commands scripts ran), every command it ran
/// (scripts' included), and its CPU time in µs.
#[derive(Clone, Copy)]
struct RedisWork {
    calls: u64,
    commands: u64,
    cpu_us: u64,
}

impl RedisWork {
    fn read(connection: &mut redis::Connection) -> Self {
        let info: String = redis::cmd("INFO")
            .arg("all")
            .query(connection)
            .expect("INFO");
        let mut work = RedisWork {
            calls: 0,
            commands: 0,
            cpu_us: 0,
        };
        for line in info.lines() {
            if let Some(stat) = line.strip_prefix("cmdstat_") {
                let (name, fields) = stat.split_once(':').unwrap_or_default();
                let calls = field(fields, "calls=");
                if name != "info" {
                    work.commands += calls;
                }
                if matches!(name, "evalsha" | "eval") {
                    work.calls += calls;
                }
            }
            for cpu in ["used_cpu_user:", "used_cpu_sys:"] {
                if let Some(seconds) = line.strip_prefix(cpu) {
                    work.cpu_us += (seconds.trim().parse::<f64>().unwrap_or(0.0) * 1e6) as u64;
                }
            }
        }
        work
    }
}

/// The number after `name` in `calls=1,usec=2,...`.
fn field(fields: &str, name: &str) -> u64 {
    fields
        .split(',')
        .find_map(|f| f.strip_prefix(name)?.parse().ok())
        .unwrap_or(0)
}

/// `calls` decisions of `subject` by `tasks` callers, clients in turn.
async fn run(subject: Arc<Subject>, workload: Workload, calls: u64, tasks: u64) -> Measured {
    let next = Arc::new(AtomicU64::new(0));
    let allowed: Arc<Vec<AtomicU32>> =
        Arc::new((0..workload.clients).map(|_| AtomicU32::new(0)).collect());
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (subject, next, allowed) = (subject.clone(), next.clone(), allowed.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= calls {
                        return latencies;
                    }
                    let index = (i % workload.clients as u64) as usize;
                    let call = Instant::now();
                    if subject.allow(index).await {
                        allowed[index].fetch_add(1, Ordering::Relaxed);
                    }
                    latencies.push(call.elapsed().as_micros() as u64);
                }
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(calls as usize);
    for handle in handles {
        latencies.extend(handle.await.expect("a caller"));
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    let over = allowed
        .iter()
        .map(|n| u64::from(n.load(Ordering::Relaxed).saturating_sub(workload.limit)))
        .sum();
    Measured {
        per_second: calls as f64 / elapsed.as_secs_f64(),
        p50_us: at(0.5),
        p99_us: at(0.99),
        over,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .get(1)
        .expect("usage: redis_peers REDIS_URL [ROUNDS] [CALLS] [TASKS]")
        .clone();
    let number = |i: usize, default: u64| {
        args.get(i)
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let (rounds, calls, tasks) = (number(2, 3), number(3, 100_000), number(4, 64));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut info = redis::Client::open(url.as_str())
        .expect("url")
        .get_connection()
        .expect("Redis");
    println!("| workload | round | subject | decisions/s | p50 µs | p99 µs | Redis calls / decision | commands run / decision | Redis CPU µs / decision | allowed over the limit |");
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut run_number = 0;
    for workload in [SPREAD, HOT] {
        for round in 1..=rounds {
            for name in [
                "tollgate-sliding-window",
                "tollgate-token-bucket",
                "tollgate-token-bucket+cache",
                "limitador-fixed-window",
            ] {
                run_number += 1;
                let subject = runtime.block_on(async {
                    match name.strip_prefix("tollgate-") {
                        Some(policy) => {
                            let (policy, cached) = match policy.strip_suffix("+cache") {
                                Some(policy) => (policy, true),
                                None => (policy, false),
                            };
                            Subject::tollgate(&url, policy, cached, workload, run_number).await
                        }
                        None => Subject::limitador(&url, workload, run_number).await,
                    }
                });
                let before = RedisWork::read(&mut info);
                let measured = runtime.block_on(run(Arc::new(subject), workload, calls, tasks));
                let after = RedisWork::read(&mut info);
                let per_decision = |a: u64, b: u64| (a - b) as f64 / calls as f64;
                println!(
                    "| {} | {round} | {name} | {:.0} | {} | {} | {:.3} | {:.2} | {:.1} | {} |",
                    workload.name,
                    measured.per_second,
                    measured.p50_us,
                    measured.p99_us,
                    per_decision(after.calls, before.calls),
                    per_decision(after.commands, before.commands),
                    per_decision(after.cpu_us, before.cpu_us),
                    measured.over,
                );
            }
        }
    }
}
