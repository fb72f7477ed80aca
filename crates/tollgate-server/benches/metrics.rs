//! What counting one decision in the metrics costs: the calls
//! `Server::decide` makes per decision (`record_decision` for a plan of two
//! limits, then `record_latency`), on one thread and on two threads counting
//! into the same registry at once (the counters and the latency histogram
//! are shared, as they are between the server's worker threads).
//!
//! Only the metrics' public API is used, so that the same file measures an
//! older build too (`scripts/bench-metrics.sh` runs both, alternating).
//!
//! Run: `cargo bench -p tollgate-server --bench metrics -- --warm-up-time 1 --measurement-time 3`

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate::{AnyPolicy, DecidedBy, Decision, Limit, LimitDecision, Plan, PlanDecision};
use tollgate_server::metrics::{Frontend, Metrics, PlanMetrics};

fn plan() -> Plan {
    let limit = |name: &str, policy, quota, window_ms| {
        Limit::new(
            name,
            AnyPolicy::from_name(policy, quota, window_ms).unwrap(),
            false,
        )
    };
    Plan::new(
        "free",
        vec![
            limit("1s", "sliding-window", 10, 1_000),
            limit("1d", "token-bucket", 1_000, 86_400_000),
        ],
    )
    .unwrap()
}

/// An allowed decision of `plan`, as the store answers it.
fn allowed(plan: &Plan) -> PlanDecision {
    let limits = plan
        .limits()
        .iter()
        .map(|limit| LimitDecision {
            name: limit.name().into(),
            policy: "sliding-window",
            window_ms: 1_000,
            shadow: false,
            decision: Decision {
                allowed: true,
                limit: 10,
                remaining: 9,
                retry_after_ms: Some(0),
                reset_after_ms: 1_000,
            },
        })
        .collect();
    PlanDecision {
        allowed: true,
        retry_after_ms: Some(0),
        limits,
        decided_by: DecidedBy::Store,
    }
}

/// What `Server::decide` records for one decision.
fn count(metrics: &Metrics, plan: &PlanMetrics, decision: &PlanDecision, i: u64) {
    metrics.record_decision(
        Some(black_box(plan)),
        1,
        black_box(decision),
        Frontend::Http,
    );
    // Latencies spread over the low buckets, as a loaded server's are.
    metrics.record_latency(Duration::from_nanos(20_000 + (i % 64) * 1_000));
}

fn bench(c: &mut Criterion) {
    let plan = plan();
    let decision = allowed(&plan);
    let metrics = Metrics::new();
    let plan_metrics = metrics.for_plan(&plan);
    let mut group = c.benchmark_group("metrics per decision");
    group.bench_function("1 thread", |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            count(&metrics, &plan_metrics, &decision, i);
        });
    });
    group.bench_function("2 threads, shared registry", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        for i in 0..iters {
                            count(&metrics, &plan_metrics, &decision, i);
                        }
                    });
                }
            });
            start.elapsed()
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
