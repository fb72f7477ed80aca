//! Where the proxy's worker threads run (`Placement`): each pinned to a
//! CPU of its own, in turn, or anywhere the process may run, read back from
//! Linux's /proc while a real upstream is served through them. A file of
//! its own: no other test's workers run in this process meanwhile.

use std::num::NonZeroUsize;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::HeaderName;
use tokio::sync::oneshot;
use tollgate::{AnyPolicy, Limit, ManualClock, MemoryBackend, Plan};
use tollgate_proxy::{bind_workers, run_workers, KeySource, Placement, ProxyConfig};
use tollgate_testkit::{counting_upstream, get_status};
use tollgate_tower::RateLimitConfig;

/// The CPUs a thread of this process may run on, as Linux lists them
/// (`Cpus_allowed_list` of /proc: `0-1`, `3`), by thread name; the worker
/// threads are named `proxy-worker-N`.
fn cpus_by_thread_name() -> Vec<(String, String)> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let task = task.unwrap().path();
        let (Ok(name), Ok(status)) = (
            std::fs::read_to_string(task.join("comm")),
            std::fs::read_to_string(task.join("status")),
        ) else {
            continue; // the thread ended meanwhile
        };
        let cpus = status
            .lines()
            .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_owned();
        threads.push((name.trim().to_owned(), cpus));
    }
    threads.sort();
    threads
}

/// The workers' threads and their CPUs, once all `workers` have started
/// and moved (polled, at most 5 s).
fn worker_cpus(workers: usize, expected: &[(String, String)]) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    for _ in 0..500 {
        seen = cpus_by_thread_name()
            .into_iter()
            .filter(|(name, _)| name.starts_with("proxy-worker-"))
            .collect();
        if seen.len() == workers && seen == expected {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    seen
}

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

async fn pinned_workers_each_run_on_a_cpu_of_their_own_in_turn() {
    let placement = Placement::one_cpu_each().unwrap();
    // One more worker than CPUs: the last one shares the first one's CPU.
    let cpus = std::thread::available_parallelism().unwrap().get();
    let workers = cpus + 1;
    let expected: Vec<(String, String)> = {
        let mut expected: Vec<_> = (0..workers)
            .map(|index| {
                let cpu = placement.cpu_of(index).unwrap();
                (format!("proxy-worker-{index}"), cpu.to_string())
            })
            .collect();
        expected.sort();
        expected
    };
    serve_placed(workers, placement, move || {
        assert_eq!(worker_cpus(workers, &expected), expected);
    })
    .await;
}

async fn workers_placed_anywhere_may_run_on_every_cpu_of_the_process() {
    let process: String = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_owned();
    let expected: Vec<(String, String)> = (0..2)
        .map(|index| (format!("proxy-worker-{index}"), process.clone()))
        .collect();
    serve_placed(2, Placement::anywhere(), move || {
        assert_eq!(worker_cpus(2, &expected), expected);
    })
    .await;
}
