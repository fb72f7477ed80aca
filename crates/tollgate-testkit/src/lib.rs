//! # tollgate-testkit
//!
//! What the end-to-end tests of the proxy, the service and the binary all
//! need around tollgate: a real upstream that counts the requests reaching
//! it (so a test can assert that the upstream saw exactly the allowed
//! ones), a plain HTTP/1.1 request on a fresh connection (so that requests
//! are not pooled onto one connection, and one thread, by a client
//! library), and one series read from `/metrics` text. A dev-dependency
//! only.
//!
//! Also the checks every store shares: the [`conformance`] suite, written
//! once against [`tollgate::Store`] and called from each store's own tests,
//! the naive [`models`] of the three policies and the naive plan store
//! ([`reference::NaiveStore`]) it compares with; and [`skip`], which says on
//! the terminal that a test could not run (a missing Envoy, Chromium, ...).
//!
//! And [`slowloris`]: slow, silent and keep-alive clients on real sockets,
//! for the tests of the HTTP connection limits; [`cpus`]: which CPUs a
//! thread may run on, read from /proc, for the tests of the proxy's
//! `--pin-workers`; [`process::ChildGuard`]: a process a test started,
//! stopped when the test ends, passed or failed.

pub mod conformance;
pub mod cpus;
pub mod models;
pub mod process;
pub mod reference;
pub mod slowloris;

#[cfg(feature = "browser")]
pub mod browser;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The body every request to a [`counting_upstream`] gets.
pub const UPSTREAM_BODY: &str = "hello from the upstream";

/// Starts an HTTP server on a free loopback port, on the current Tokio
/// runtime, answering `200` with [`UPSTREAM_BODY`] to every method and path
/// and counting the requests. It runs until the runtime ends.
///
/// # Panics
/// When no loopback port can be bound (the test cannot run).
pub async fn counting_upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let app = axum::Router::new().fallback(move || {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            UPSTREAM_BODY
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port for the upstream");
    let addr = listener.local_addr().expect("the upstream's address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

/// Sends `GET path` with `headers` to `addr` on a fresh connection
/// (`Connection: close`) and returns the response's status code. Blocking:
/// call it from a test thread or `spawn_blocking`.
///
/// # Panics
/// When the connection fails, no answer comes within 10 s, or the answer
/// is not HTTP: the test fails, saying which.
pub fn get_status(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> u16 {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("set a read timeout");
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: api\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the response");
    response
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"))
}

/// The value of one series (e.g. `tollgate_requests_total{plan="free",outcome="allowed"}`)
/// in Prometheus text format.
///
/// # Panics
/// When the series is not in `metrics` or its value is not a whole number:
/// the test fails, showing the text.
pub fn metric(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
        .parse()
        .unwrap_or_else(|_| panic!("{series} is not a whole number in\n{metrics}"))
}

/// Reports that `test` cannot run here because of `why` (e.g. "no Envoy
/// binary"), where a person sees it, and returns so the caller can skip;
/// panics instead when the environment variable `require_var` is `1` (CI
/// sets it, so a missing component fails the suite rather than passing it).
///
/// The message goes to the process's standard error directly: the test
/// harness captures `eprintln!` of passing tests, which would hide the skip.
///
/// # Panics
/// When `require_var=1`.
pub fn skip(test: &str, why: &str, require_var: &str) {
    let required = std::env::var(require_var).is_ok_and(|v| v == "1");
    assert!(!required, "{test}: {why}, but {require_var}=1");
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why} (set {require_var}=1 to fail instead)"
    );
}
