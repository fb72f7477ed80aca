//! The cost of the dashboard's counters on a decision, side by side in one
//! run: `Server::decide` (memory store, the embedded default plan, 10,000
//! clients in turn, the clock moving 1 ms every 16 calls) with `[dashboard]
//! enabled = true` and `false`, and the counters' recording alone.
//!
//! Run: `cargo bench -p tollgate-server --bench dashboard_counters -- --warm-up-time 1 --measurement-time 3`

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate::{ManualClock, PlanDecision};
use tollgate_server::{Config, Observed, Server, StoreHandle};

const CLIENTS: usize = 10_000;
const CALLS_PER_MS: u64 = 16;
const EPOCH_MS: u64 = 1_700_000_000_000;

fn server(enabled: bool) -> (Server, Arc<ManualClock>) {
    let text = format!(
        "{}\n[dashboard]\nenabled = {enabled}\n",
        tollgate_server::config::EMBEDDED_DEFAULT
    );
    let config = Config::parse(&text).expect("bench config");
    let store = StoreHandle::for_config(&config).expect("memory store");
    let clock = Arc::new(ManualClock::new(EPOCH_MS));
    (Server::new(config, store, clock.clone()), clock)
}

fn decisions(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let ids: Vec<String> = (0..CLIENTS).map(|i| format!("c{i}")).collect();
    let mut group = c.benchmark_group("decide, 10k clients");
    for enabled in [true, false] {
        let (server, clock) = server(enabled);
        let mut i = 0u64;
        let name = if enabled {
            "counters on"
        } else {
            "counters off"
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                if i.is_multiple_of(CALLS_PER_MS) {
                    clock.advance(1);
                }
                let id = &ids[(i as usize) % CLIENTS];
                black_box(runtime.block_on(server.decide(id, None, 1)).is_ok())
            })
        });
    }
    group.finish();

    let observed = Observed::new(Arc::new(ManualClock::new(EPOCH_MS)));
    let (server, _) = server(false);
    let decision: PlanDecision = runtime
        .block_on(server.decide("c0", None, 1))
        .expect("decided")
        .decision;
    let mut i = 0u64;
    c.bench_function("counters alone (stats + top)", |b| {
        b.iter(|| {
            i += 1;
            let id = &ids[(i as usize) % CLIENTS];
            let now = EPOCH_MS + i / CALLS_PER_MS;
            observed.decided(now, id, "default", 1, &decision);
            observed.timed(now, 1, Duration::from_micros(3));
        })
    });
}

criterion_group!(benches, decisions);
criterion_main!(benches);
