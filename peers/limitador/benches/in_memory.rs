//! Decisions per second of the in-memory cores, tollgate's and limitador's,
//! in the same run on the same workload: a limit of 100 requests per
//! second per client, clients taken round-robin from pre-generated ids.
//!
//! limitador's limit is a fixed window (its only kind: a counter per client
//! that expires after the window), with the client as its one variable, as
//! limitador-server configures a per-client limit. Its per-client contexts
//! (`Context`, the request's values) are built before the timed loop, once
//! per client, so limitador is timed on its decision alone, not on building
//! the request's values; tollgate takes the id as a `&str`. tollgate's time
//! is the caller's (moved 1 ms every 16 calls), limitador's its own clock.
//!
//! Run: `scripts/bench-limitador.sh` (or `cargo bench --bench in_memory` in
//! `peers/limitador`).

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use limitador::limit::{Context, Limit};
use limitador::RateLimiter as Limitador;

const LIMIT: u32 = 100;
const WINDOW_MS: u64 = 1_000;
const CALLS_PER_MS: u64 = 16;
const EPOCH_MS: u64 = 1_700_000_000_000;
const NAMESPACE: &str = "bench";

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("client-{i:06}")).collect()
}

fn limitador(clients: usize) -> Limitador {
    // Its in-memory store keeps at most this many counters: room for all.
    let limiter = Limitador::new(clients as u64 * 2);
    let per_client = Limit::new(
        NAMESPACE,
        u64::from(LIMIT),
        WINDOW_MS / 1_000,
        Vec::new(),
        vec!["client".try_into().expect("a variable")],
    );
    limiter.add_limit(per_client);
    limiter
}

fn contexts(ids: &[String]) -> Vec<Context<'static>> {
    ids.iter()
        .map(|id| HashMap::from([("client".to_owned(), id.clone())]).into())
        .collect()
}

fn single_thread(c: &mut Criterion) {
    for (label, clients) in [("1k-clients", 1_000), ("100k-clients", 100_000)] {
        let ids = ids(clients);
        let mut group = c.benchmark_group(format!("single-thread/{label}"));
        group.throughput(Throughput::Elements(1));
        for policy in ["token-bucket", "sliding-window"] {
            let limiter = tollgate::RateLimiter::new(policy, LIMIT, WINDOW_MS).expect("limiter");
            let mut i: u64 = 0;
            group.bench_function(
                BenchmarkId::from_parameter(format!("tollgate-{policy}")),
                |b| {
                    b.iter(|| {
                        i += 1;
                        let id = &ids[(i % clients as u64) as usize];
                        black_box(limiter.allow(black_box(id), EPOCH_MS + i / CALLS_PER_MS))
                    })
                },
            );
        }
        let limiter = limitador(clients);
        let contexts = contexts(&ids);
        let namespace = NAMESPACE.into();
        let mut i: u64 = 0;
        group.bench_function(BenchmarkId::from_parameter("limitador-fixed-window"), |b| {
            b.iter(|| {
                i += 1;
                let context = &contexts[(i % clients as u64) as usize];
                let answer = limiter.check_rate_limited_and_update(&namespace, context, 1);
                black_box(answer.expect("limitador decided").limited)
            })
        });
        group.finish();
    }
}

criterion_group!(benches, single_thread);
criterion_main!(benches);
