//! Where the proxy's worker threads run (`Placement`): each pinned to a
//! CPU of its own, in turn, or anywhere the process may run, read back from
//! Linux's /proc while a real upstream is served through them. A file of
//! its own: no other test's workers run in this process meanwhile.

use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::HeaderName;
use tokio::sync::oneshot;
use tollgate::{AnyPolicy, Limit, ManualClock, MemoryBackend, Plan};
use tollgate_proxy::{bind_workers, run_workers, KeySource, Placement, ProxyConfig};
use tollgate_testkit::cpus::{allowed_cpus, wait_for_thread_cpus};
use tollgate_testkit::{counting_upstream, get_status};
use tollgate_tower::RateLimitConfig;

/// Runs `workers` workers placed by `placement` in front of a counting
/// upstream, checks that they answer, and hands their threads' CPUs to
/// `check` while they run.
async fn serve_placed(workers: usize, placement: Placement, check: impl FnOnce() + Send + 'static) {
    let (upstream, seen) = counting_upstream().await;
    let limits = RateLimitConfig::new(
        Plan::new(
            "p",
            vec![Limit::new(
                "1s",
                AnyPolicy::from_name("gcra", 1_000, 1_000).unwrap(),
                false,
            )],
        )
        .unwrap(),
        Arc::new(MemoryBackend::new()),
        Arc::new(ManualClock::new(0)),
    );
    let key = KeySource::Header(HeaderName::from_static("x-client-id"));
    let config = ProxyConfig::new(&format!("http://{upstream}"), key, limits).unwrap();
    let workers = NonZeroUsize::new(workers).unwrap();
    let (addr, listeners) = bind_workers("127.0.0.1:0".parse().unwrap(), workers).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(run_workers(listeners, config, placement, async {
        let _ = stopped.await;
    }));
    tokio::task::spawn_blocking(move || {
        assert_eq!(get_status(addr, "/", &[("x-client-id", "alice")]), 200);
        check();
    })
    .await
    .unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_workers_each_run_on_a_cpu_of_their_own_and_the_others_anywhere() {
    // One test, not two: the threads of workers that another test in this
    // binary ran at the same time would be counted with these.
    pinned_workers_each_run_on_a_cpu_of_their_own_in_turn().await;
    workers_placed_anywhere_may_run_on_every_cpu_of_the_process().await;
}

/// The workers' threads and the CPUs each may run on, by name.
fn expected_workers(
    cpus: impl Fn(usize) -> Vec<usize>,
    workers: usize,
) -> Vec<(String, Vec<usize>)> {
    let mut expected: Vec<_> = (0..workers)
        .map(|index| (format!("proxy-worker-{index}"), cpus(index)))
        .collect();
    expected.sort();
    expected
}

async fn pinned_workers_each_run_on_a_cpu_of_their_own_in_turn() {
    let placement = Placement::one_cpu_each().unwrap();
    // One more worker than CPUs: the last one shares the first one's CPU.
    let workers = std::thread::available_parallelism().unwrap().get() + 1;
    let expected = expected_workers(|index| vec![placement.cpu_of(index).unwrap()], workers);
    serve_placed(workers, placement, move || {
        assert_eq!(
            wait_for_thread_cpus("self", "proxy-worker-", &expected),
            expected
        );
    })
    .await;
}

async fn workers_placed_anywhere_may_run_on_every_cpu_of_the_process() {
    let process = allowed_cpus(Path::new("/proc/self")).unwrap();
    let expected = expected_workers(|_| process.clone(), 2);
    serve_placed(2, Placement::anywhere(), move || {
        assert_eq!(
            wait_for_thread_cpus("self", "proxy-worker-", &expected),
            expected
        );
    })
    .await;
}
