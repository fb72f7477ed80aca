//! The proxy's client connections under `tollgate_connections`' limits:
//! slow and silent clients are closed within the header-read timeout while
//! others are served, a quiet keep-alive connection lives until the idle
//! timeout, and the thread-per-core workers share one cap.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tollgate::{AnyPolicy, Limit, ManualClock, MemoryBackend, Plan};
use tollgate_connections::Limits;
use tollgate_proxy::{bind_workers, run_workers, KeySource, Placement, ProxyConfig};
use tollgate_testkit::counting_upstream;
use tollgate_testkit::slowloris::{assert_all_closed_within, KeepAlive, SlowClients, Slowness};
use tollgate_tower::RateLimitConfig;

/// How late past its timeout a connection may be closed.
const MARGIN: Duration = Duration::from_millis(1_500);

/// The proxy, thread-per-core with `workers`, in front of a counting
/// upstream, with `limits` on its client connections. Stops when the
/// returned sender is dropped.
async fn proxy(limits: Limits, workers: usize) -> (SocketAddr, oneshot::Sender<()>) {
    let (upstream, _) = counting_upstream().await;
    let policy = AnyPolicy::from_name("sliding-window", 1_000_000, 1_000).unwrap();
    let plan = Plan::new("p", vec![Limit::new("1s", policy, false)]).unwrap();
    let rate_limits = RateLimitConfig::new(
        plan,
        Arc::new(MemoryBackend::new()),
        Arc::new(ManualClock::new(0)),
    );
    let config = ProxyConfig::new(
        &format!("http://{upstream}"),
        KeySource::Peer { trusted_proxies: 0 },
        rate_limits,
    )
    .unwrap()
    .connection_limits(limits);
    let workers = NonZeroUsize::new(workers).unwrap();
    let (addr, listeners) = bind_workers("127.0.0.1:0".parse().unwrap(), workers).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(run_workers(
        listeners,
        config,
        Placement::anywhere(),
        async {
            let _ = stopped.await;
        },
    ));
    (addr, stop)
}

fn limits(header_read_ms: u64, idle_ms: u64, max_connections: usize) -> Limits {
    Limits::new(
        Duration::from_millis(header_read_ms),
        Duration::from_millis(idle_ms),
        max_connections,
    )
    .unwrap()
}

/// Starts `count` slow clients, checks that normal clients are proxied
/// meanwhile, and returns how long each slow connection lived.
async fn slowloris(addr: SocketAddr, count: usize, slowness: Slowness) -> Vec<Option<Duration>> {
    let slow = SlowClients::start(addr, count, slowness, Duration::from_secs(5)).await;
    let mut answered = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(600) {
        let mut normal = KeepAlive::connect(addr).await;
        let status = normal.get("/", Duration::from_secs(2)).await;
        assert_eq!(status, Some(200), "a normal client was not served");
        answered += 1;
    }
    assert!(answered >= 5, "only {answered} normal requests answered");
    slow.lifetimes().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dribbling_and_silent_clients_are_closed_within_the_header_read_timeout() {
    let (addr, _stop) = proxy(limits(300, 10_000, 10_000), 2).await;
    let dribble = Slowness::Dribble {
        every: Duration::from_millis(50),
    };
    let lifetimes = slowloris(addr, 300, dribble).await;
    assert_all_closed_within(&lifetimes, Duration::from_millis(300) + MARGIN);
    let lifetimes = slowloris(addr, 300, Slowness::Silent).await;
    assert_all_closed_within(&lifetimes, Duration::from_millis(300) + MARGIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_keep_alive_connection_lives_until_the_idle_timeout() {
    let (addr, _stop) = proxy(limits(300, 1_500, 10_000), 1).await;
    let mut connection = KeepAlive::connect(addr).await;
    assert_eq!(connection.get("/", Duration::from_secs(2)).await, Some(200));
    assert!(
        !connection.closed_within(Duration::from_millis(900)).await,
        "closed by the header-read timeout"
    );
    assert_eq!(connection.get("/", Duration::from_secs(2)).await, Some(200));
    let quiet_from = Instant::now();
    assert!(
        connection
            .closed_within(Duration::from_millis(1_500) + MARGIN)
            .await,
        "never closed when idle"
    );
    assert!(
        quiet_from.elapsed() >= Duration::from_millis(1_400),
        "closed after {:?}",
        quiet_from.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_share_one_cap() {
    let (addr, _stop) = proxy(limits(10_000, 60_000, 2), 2).await;
    let mut first = KeepAlive::connect(addr).await;
    let mut second = KeepAlive::connect(addr).await;
    assert_eq!(first.get("/", Duration::from_secs(2)).await, Some(200));
    assert_eq!(second.get("/", Duration::from_secs(2)).await, Some(200));
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let mut over = KeepAlive::connect(addr).await;
        over.send("/").await;
        waiting.push(over);
    }
    for over in &mut waiting {
        assert_eq!(
            over.answer_within(Duration::from_millis(300)).await,
            None,
            "a connection over the cap was served"
        );
    }
    drop(first);
    drop(second);
    let mut served = 0;
    for over in &mut waiting {
        if over.answer_within(Duration::from_secs(3)).await == Some(200) {
            served += 1;
        }
    }
    assert_eq!(served, 2, "two slots freed, two waiting connections served");
}
