//! `[connections]` on a real server: slow and silent clients are closed
//! within the header-read timeout while others are served, a quiet
//! keep-alive connection lives until the idle timeout (not the header-read
//! one), and connections past the cap wait until a slot frees.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::TestServer;
use tokio::time::Instant;
use tollgate_connections::MAX_HEAD_BYTES;
use tollgate_testkit::slowloris::{assert_all_closed_within, KeepAlive, SlowClients, Slowness};

const PLAN: &str = "default_plan = \"free\"\n[[plans.free]]\nname = \"1s\"\npolicy = \"sliding-window\"\nlimit = 1000000\nwindow = \"1s\"\n";

/// How late past its timeout a connection may be closed (a loaded 2-core
/// machine runs other builds meanwhile).
const MARGIN: Duration = Duration::from_millis(1_500);

fn config(connections: &str) -> String {
    format!("{PLAN}[connections]\n{connections}")
}

fn addr(t: &TestServer) -> SocketAddr {
    t.base.trim_start_matches("http://").parse().unwrap()
}

/// Starts `count` slow clients of `slowness`, checks that a normal client
/// is answered meanwhile, and returns how long each slow connection lived.
async fn slowloris(t: &TestServer, count: usize, slowness: Slowness) -> Vec<Option<Duration>> {
    let give_up = Duration::from_secs(5);
    let slow = SlowClients::start(addr(t), count, slowness, give_up).await;
    let mut answered = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(600) {
        let answer = tokio::time::timeout(Duration::from_secs(2), t.check("normal", 1))
            .await
            .expect("a normal client waited over 2 s while slow clients were connected");
        assert_eq!(answer.status, 200, "{}", answer.body);
        answered += 1;
    }
    assert!(answered >= 5, "only {answered} normal checks answered");
    slow.lifetimes().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dribbling_heads_are_closed_within_the_header_read_timeout() {
    let t = TestServer::start(&config(
        "header_read_timeout = \"300ms\"\nidle_timeout = \"10s\"\n",
    ))
    .await;
    let dribble = Slowness::Dribble {
        every: Duration::from_millis(50),
    };
    let lifetimes = slowloris(&t, 300, dribble).await;
    assert_all_closed_within(&lifetimes, Duration::from_millis(300) + MARGIN);
    let closed_early = lifetimes
        .iter()
        .flatten()
        .filter(|l| **l < Duration::from_millis(250))
        .count();
    assert_eq!(closed_early, 0, "closed before the timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_within_the_header_read_timeout() {
    let t = TestServer::start(&config(
        "header_read_timeout = \"300ms\"\nidle_timeout = \"10s\"\n",
    ))
    .await;
    let lifetimes = slowloris(&t, 300, Slowness::Silent).await;
    assert_all_closed_within(&lifetimes, Duration::from_millis(300) + MARGIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_keep_alive_connection_lives_until_the_idle_timeout() {
    let t = TestServer::start(&config(
        "header_read_timeout = \"300ms\"\nidle_timeout = \"1500ms\"\n",
    ))
    .await;
    let mut connection = KeepAlive::connect(addr(&t)).await;
    assert_eq!(
        connection.get("/healthz", Duration::from_secs(2)).await,
        Some(200)
    );
    // Quiet for three header-read timeouts: still open, still served.
    assert!(
        !connection.closed_within(Duration::from_millis(900)).await,
        "closed by the header-read timeout"
    );
    assert_eq!(
        connection.get("/healthz", Duration::from_secs(2)).await,
        Some(200)
    );
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
async fn connections_past_the_cap_wait_until_a_slot_frees() {
    let t = TestServer::start(&config("max_connections = 2\n")).await;
    let mut first = KeepAlive::connect(addr(&t)).await;
    let mut second = KeepAlive::connect(addr(&t)).await;
    assert_eq!(
        first.get("/healthz", Duration::from_secs(2)).await,
        Some(200)
    );
    assert_eq!(
        second.get("/healthz", Duration::from_secs(2)).await,
        Some(200)
    );
    let mut third = KeepAlive::connect(addr(&t)).await;
    third.send("/healthz").await;
    assert_eq!(
        third.answer_within(Duration::from_millis(700)).await,
        None,
        "the connection over the cap was served"
    );
    drop(first);
    assert_eq!(
        third.answer_within(Duration::from_secs(3)).await,
        Some(200),
        "not served after a slot freed"
    );
    assert_eq!(
        second.get("/healthz", Duration::from_secs(2)).await,
        Some(200)
    );
}

#[tokio::test]
async fn a_changed_connections_section_is_announced_as_needing_a_restart() {
    let t = TestServer::start(&config("max_connections = 2\n")).await;
    t.write_config(&config("max_connections = 2\n"));
    assert!(t.server.reload().unwrap().needs_restart.is_empty());
    t.write_config(&config("max_connections = 3\n"));
    let report = t.server.reload().unwrap();
    assert_eq!(report.needs_restart, ["connections"], "{report}");
    t.write_config(&config("max_connections = 0\n"));
    let refused = t.server.reload().unwrap_err().to_string();
    assert!(
        refused.contains("[connections] max_connections must be between 1 and 1000000 (got 0)"),
        "{refused}"
    );
}

/// Shutdown closes quiet connections at once and lets a request in flight
/// (its head read, its body still coming) finish and be answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_requests_in_flight_and_closes_quiet_connections() {
    let t = TestServer::start(&config("idle_timeout = \"1m\"\n")).await;
    let mut quiet = KeepAlive::connect(addr(&t)).await;
    assert_eq!(
        quiet.get("/healthz", Duration::from_secs(2)).await,
        Some(200)
    );
    let mut in_flight = KeepAlive::connect(addr(&t)).await;
    let body = br#"{"client":"late","cost":1}"#;
    // `Expect: 100-continue`: the server's "100 Continue" says it is in the
    // handler, reading the body, so the stop below comes with this request
    // in flight (not before the server has even read its head).
    let head = format!(
        "POST /v1/check HTTP/1.1\r\nHost: tollgate\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    in_flight.send_bytes(head.as_bytes()).await;
    assert_eq!(
        in_flight.answer_within(Duration::from_secs(3)).await,
        Some(100)
    );
    in_flight.send_bytes(&body[..5]).await;
    let stopping = tokio::spawn(t.stop());
    assert!(
        quiet.closed_within(Duration::from_secs(3)).await,
        "a quiet connection kept the server from stopping"
    );
    assert!(
        !stopping.is_finished(),
        "stopped before the request in flight was answered"
    );
    in_flight.send_bytes(&body[5..]).await;
    assert_eq!(
        in_flight.answer_within(Duration::from_secs(3)).await,
        Some(200)
    );
    tokio::time::timeout(Duration::from_secs(3), stopping)
        .await
        .expect("the server did not stop after its last request")
        .unwrap();
}

/// A client sending its body a byte at a time is never idle, so the idle
/// timeout alone never closed it, and it held the shutdown for as long as
/// it kept sending (an audit: 25 s and counting). The drain now ends
/// `idle_timeout` after the stop, closing what is still open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_trickled_through_the_shutdown_holds_it_for_the_idle_timeout_at_most() {
    let t = TestServer::start(&config("idle_timeout = \"2s\"\n")).await;
    let mut trickling = KeepAlive::connect(addr(&t)).await;
    let head = "POST /v1/check HTTP/1.1\r\nHost: tollgate\r\nContent-Type: application/json\r\n\
                Expect: 100-continue\r\nContent-Length: 10000\r\n\r\n";
    trickling.send_bytes(head.as_bytes()).await;
    assert_eq!(
        trickling.answer_within(Duration::from_secs(3)).await,
        Some(100)
    );
    let stopping = tokio::spawn(t.stop());
    // A byte every 100 ms, for 30 s at the most: far inside the idle
    // timeout (a stall of 2 s would be needed to close it idle), and far
    // past the drain's end.
    let mut sent = 0;
    while sent < 300 && !stopping.is_finished() {
        if !trickling.try_send_bytes(b" ").await {
            break;
        }
        sent += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .unwrap_or_else(|_| panic!("still serving a trickled body after {sent} bytes"))
        .unwrap();
    assert!(sent < 300, "the body was sent whole: the drain never ended");
}

/// A body sent a byte at a time is never idle, so the idle timeout alone
/// let it hold its connection, and the memory behind it, for as long as it
/// kept sending (an audit: 20 such connections held a server capped at 20
/// for as long as they trickled). A body must come whole within the
/// header-read timeout of its head: then it is refused (408) and its
/// connection closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_trickled_a_byte_at_a_time_is_refused_within_the_header_read_timeout() {
    let t = TestServer::start(&config(
        "header_read_timeout = \"1s\"\nidle_timeout = \"5s\"\n",
    ))
    .await;
    let mut trickling = KeepAlive::connect(addr(&t)).await;
    let head = "POST /v1/check HTTP/1.1\r\nHost: tollgate\r\nContent-Type: application/json\r\n\
                Content-Length: 10000\r\n\r\n";
    trickling.send_bytes(head.as_bytes()).await;
    let started = Instant::now();
    // A byte every 100 ms, for 30 s at the most: far inside the idle
    // timeout, and far past the header-read timeout.
    let mut sent = 0;
    while sent < 300 && trickling.try_send_bytes(b" ").await {
        sent += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lived = started.elapsed();
    assert!(sent < 300, "the body was sent whole: never refused");
    assert!(
        lived < Duration::from_secs(1) + MARGIN,
        "closed {lived:?} after its head"
    );
    let metrics = t.get("/metrics").await.body;
    assert!(
        metrics.contains("tollgate_bad_requests_total{status=\"408\"} 1\n"),
        "{metrics}"
    );
    t.stop().await;
}

/// A request head over [`MAX_HEAD_BYTES`] is refused (431): a connection's
/// read buffer keeps the size of its largest head until it closes, so
/// hyper's own bound of about 400 KiB let each connection hold that much
/// (an audit: 322 KB each, one large head a minute). One under it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_over_its_bound_is_refused_and_one_under_it_served() {
    let t = TestServer::start(&config("")).await;
    for (header_bytes, status) in [
        (MAX_HEAD_BYTES - 1_024, Some(200)),
        (MAX_HEAD_BYTES + 1, Some(431)),
        (300 * 1_024, Some(431)),
    ] {
        let mut connection = KeepAlive::connect(addr(&t)).await;
        let filler = "a".repeat(header_bytes);
        let head = format!("GET /healthz HTTP/1.1\r\nHost: tollgate\r\nX-Filler: {filler}\r\n\r\n");
        connection.send_bytes(head.as_bytes()).await;
        assert_eq!(
            connection.answer_within(Duration::from_secs(5)).await,
            status,
            "a header of {header_bytes} bytes"
        );
    }
    t.stop().await;
}
