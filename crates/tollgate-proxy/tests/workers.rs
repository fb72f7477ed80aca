//! Thread-per-core serving: several workers listen on one address
//! (`SO_REUSEPORT`), a real upstream behind them; whichever worker a
//! connection lands on, a client has one budget, and shutdown stops them all.

use std::net::TcpStream;
use std::num::NonZeroUsize;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::HeaderName;
use tokio::sync::oneshot;
use tollgate::{AnyPolicy, Limit, ManualClock, MemoryBackend, Plan};
use tollgate_proxy::{bind_workers, run_workers, KeySource, Placement, ProxyConfig};
use tollgate_testkit::{counting_upstream, get_status};
use tollgate_tower::RateLimitConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_share_one_port_and_one_budget() {
    let (upstream, seen) = counting_upstream().await;
    let upstream_url = format!("http://{upstream}");

    let plan = Plan::new(
        "p",
        vec![Limit::new(
            "1d",
            AnyPolicy::from_name("sliding-window", 3, 86_400_000).unwrap(),
            false,
        )],
    )
    .unwrap();
    let limits = RateLimitConfig::new(
        plan,
        Arc::new(MemoryBackend::new()),
        Arc::new(ManualClock::new(0)),
    );
    let key = KeySource::Header(HeaderName::from_static("x-client-id"));
    let config = ProxyConfig::new(&upstream_url, key, limits).unwrap();

    let workers = NonZeroUsize::new(3).unwrap();
    let (addr, listeners) = bind_workers("127.0.0.1:0".parse().unwrap(), workers).unwrap();
    assert_ne!(addr.port(), 0);
    assert_eq!(listeners.len(), 3);
    for listener in &listeners {
        assert_eq!(listener.local_addr().unwrap(), addr, "one port for all");
    }
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(run_workers(
        listeners,
        config,
        Placement::anywhere(),
        async {
            let _ = stopped.await;
        },
    ));

    // Many connections, spread by the kernel over the three workers.
    let statuses = tokio::task::spawn_blocking(move || {
        let mut statuses: Vec<u16> = (0..12)
            .map(|_| get_status(addr, "/", &[("x-client-id", "alice")]))
            .collect();
        statuses.sort_unstable();
        statuses
    })
    .await
    .unwrap();
    assert_eq!(statuses, [[200; 3].as_slice(), &[429; 9]].concat());
    assert_eq!(seen.load(Ordering::SeqCst), 3, "one budget for all workers");

    let _ = stop.send(());
    serving.await.unwrap().unwrap();
    // Every worker has stopped listening.
    assert!(TcpStream::connect(addr).is_err());
}

#[test]
fn an_address_in_use_by_another_kind_of_socket_is_an_error() {
    // A plain listener (no SO_REUSEPORT) holds the port: binding fails
    // with an error, not a panic.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let error = bind_workers(addr, NonZeroUsize::new(2).unwrap()).unwrap_err();
    assert!(
        error.to_string().to_lowercase().contains("in use"),
        "{error}"
    );
}
