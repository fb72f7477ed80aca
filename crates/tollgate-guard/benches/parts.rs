//! What a guarded check costs with a circuit breaker per part of the store
//! (a Redis Cluster's masters) against one breaker for the whole store: the
//! same memory-backed store, naming each client's part (one of three) or
//! none. The difference is the breaker's own work per call: finding the
//! part's breaker (a lock and a map lookup) and its reference count. What
//! the Redis store spends naming the part (the client's key, its slot, the
//! map's lookup) is not in it.
//!
//! Run: `cargo bench -p tollgate-guard --bench parts -- --warm-up-time 1 --measurement-time 3`

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate::{
    AnyPolicy, FailurePolicy, Limit, MemoryBackend, Plan, PlanDecision, Store, StoreFuture,
};
use tollgate_guard::GuardedStore;

/// A memory store that names each client's part, or none.
struct Parts {
    memory: MemoryBackend,
    parts: Option<[Arc<str>; 3]>,
}

impl Store for Parts {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        self.memory.check(plan, client, now_ms, cost)
    }

    fn failure_domain(&self, client: &str) -> Option<Arc<str>> {
        let parts = self.parts.as_ref()?;
        Some(parts[client.len() % 3].clone())
    }
}

fn plan() -> Plan {
    let policy = AnyPolicy::from_name("token-bucket", 1_000, 1_000_000).unwrap();
    Plan::new("p", vec![Limit::new("l", policy, false)]).unwrap()
}

fn guarded(parts: Option<[Arc<str>; 3]>) -> GuardedStore<Parts> {
    let store = Parts {
        memory: MemoryBackend::new(),
        parts,
    };
    GuardedStore::new(store, Duration::from_secs(1), FailurePolicy::FailOpen)
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let plan = plan();
    let clients: Vec<String> = (0..1_000).map(|i| format!("client-{i}")).collect();
    let masters = ["10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"].map(Arc::from);
    let mut group = c.benchmark_group("guarded-check");
    for (name, guard) in [
        ("one-breaker", guarded(None)),
        ("a-breaker-per-part", guarded(Some(masters))),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let started = Instant::now();
                    for i in 0..iters {
                        let client = &clients[i as usize % clients.len()];
                        let decision = guard.check(&plan, client, 0, 1).await;
                        black_box(decision.unwrap().allowed);
                    }
                    started.elapsed()
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
