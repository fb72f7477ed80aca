//! Decisions per second: tollgate's three policies and governor's keyed
//! limiter, in the same run, on the same workload.
//!
//! Workload: a quota of 100 requests per 1,000 ms (governor: a burst of 100,
//! one cell back every 10 ms, which is GCRA with the same numbers); the clock
//! moves 1 ms every 16 calls. With 1 client almost every call is rejected
//! (a hot client); with 1,000 clients (single thread only) the table fits in
//! cache; with 100,000 clients taken round-robin from pre-generated
//! ids almost every call is allowed and stored. Both libraries read the same
//! ids (`&String`) and see the same times: governor through a
//! `FakeRelativeClock` advanced by hand, tollgate through `now_ms`.
//!
//! Run: `cargo bench -p tollgate --bench decisions -- --warm-up-time 1 --measurement-time 3`

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

#[path = "subject.rs"]
mod subject;
use subject::{ids, Subject, CALLS_PER_MS, EPOCH_MS, LIMIT, SUBJECTS};

fn single_thread(c: &mut Criterion) {
    let sizes = [
        ("1-client", 1),
        ("1k-clients", 1_000),
        ("100k-clients", 100_000),
    ];
    for (label, clients) in sizes {
        let ids = ids(clients);
        let mut group = c.benchmark_group(format!("single-thread/{label}"));
        group.throughput(Throughput::Elements(1));
        for name in SUBJECTS {
            let subject = Subject::new(name);
            let mut i: u64 = 0;
            group.bench_function(BenchmarkId::from_parameter(name), |b| {
                b.iter(|| {
                    i += 1;
                    let id = &ids[(i % clients as u64) as usize];
                    black_box(subject.decide(black_box(id), i))
                })
            });
        }
        group.finish();
    }
}

fn two_threads(c: &mut Criterion) {
    const THREADS: u64 = 2;
    for (label, clients) in [("1-client", 1), ("100k-clients", 100_000)] {
        let ids = ids(clients);
        let mut group = c.benchmark_group(format!("two-threads/{label}"));
        group.throughput(Throughput::Elements(1));
        for name in SUBJECTS {
            let subject = Subject::new(name);
            let mut round: u64 = 0;
            group.bench_function(BenchmarkId::from_parameter(name), |b| {
                b.iter_custom(|iters| {
                    // Each thread makes half the calls; the time reported is
                    // the wall time for all `iters` decisions.
                    let per_thread = iters.div_ceil(THREADS);
                    let base = round;
                    round += per_thread * THREADS;
                    let start = Instant::now();
                    std::thread::scope(|s| {
                        for t in 0..THREADS {
                            let (subject, ids) = (&subject, &ids);
                            s.spawn(move || {
                                for k in 0..per_thread {
                                    let i = base + k * THREADS + t;
                                    let id = &ids[(i % clients as u64) as usize];
                                    black_box(subject.decide(black_box(id), i));
                                }
                            });
                        }
                    });
                    start.elapsed()
                })
            });
        }
        group.finish();
    }
}

/// The capped plan limiter of `serve`'s memory store (`max_clients` = 64,000,
/// 1,000 per shard) with a daily quota, so that nothing expires and a full
/// shard must evict: `flood` sends every call under an id not seen for
/// 1,000,000 calls (the store is full after the first 64,000 and makes room
/// once per 125 new clients per shard); `known` cycles over 50,000 ids that
/// all fit. The two rows show what judging evictions costs per decision.
fn capped_plan(c: &mut Criterion) {
    const DAY_MS: u64 = 86_400_000;
    let policy = tollgate::AnyPolicy::from_name("sliding-window", LIMIT, DAY_MS).expect("valid");
    let plan = tollgate::Plan::new("daily", vec![tollgate::Limit::new("1d", policy, false)])
        .expect("valid plan");
    let mut group = c.benchmark_group("capped-plan/64k-cap");
    group.throughput(Throughput::Elements(1));
    for (label, clients) in [("flood", 1_000_000), ("known", 50_000)] {
        let ids = ids(clients);
        let limiter = tollgate::PlanLimiter::with_max_clients(64_000);
        let mut i: u64 = 0;
        group.bench_function(BenchmarkId::from_parameter(label), |b| {
            b.iter(|| {
                i += 1;
                let id = &ids[(i % clients as u64) as usize];
                let decision = limiter.check(&plan, black_box(id), EPOCH_MS + i / CALLS_PER_MS, 1);
                black_box(decision.allowed)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, single_thread, two_threads, capped_plan);
criterion_main!(benches);
