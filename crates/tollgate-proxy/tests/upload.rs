//! A request's body on its way to the upstream, and how long the proxy
//! waits for what (`src/upload.rs`): slow uploads, silent upstreams,
//! stalled clients, early answers, and the upstream connections each leaves
//! behind. Real upstreams (hyper, or raw TCP where hyper would not misbehave
//! as needed) behind the real proxy, on 127.0.0.1 port 0.

mod pool_common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::channel::Channel;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use pool_common::*;

/// `POST path` through the proxy with a body of `pieces` KiB sent one KiB
/// every `every`, as a slow client uploads: the status, the body, and when
/// the last piece was sent.
async fn upload(
    proxy: SocketAddr,
    path: &str,
    pieces: usize,
    every: Duration,
) -> (StatusCode, Bytes, std::time::Instant) {
    let client: Client<HttpConnector, Channel<Bytes, Infallible>> =
        Client::builder(TokioExecutor::new()).build_http();
    let (mut tx, body) = Channel::<Bytes, Infallible>::new(1);
    let request = Request::post(format!("http://{proxy}{path}"))
        .body(body)
        .unwrap();
    let sending = tokio::spawn(async move {
        for _ in 0..pieces {
            // The client's own pace, not a stand-in for a clock.
            tokio::time::sleep(every).await;
            if tx.send_data(Bytes::from(vec![b'u'; 1024])).await.is_err() {
                break;
            }
        }
        std::time::Instant::now()
    });
    tokio::time::timeout(PATIENCE, async {
        let response = client.request(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, body, sending.await.unwrap())
    })
    .await
    .expect("the proxy answers in time")
}

/// The upstream's time to answer is counted once the request has been sent
/// in full: an upload longer than the timeout, moving all along, reaches
/// the upstream whole and gets its answer (it was a 504 with half the body
/// passed on, the upload timed as the upstream's silence).
#[tokio::test]
async fn a_slow_upload_is_not_the_upstreams_silence() {
    let upstream = upstream(Arc::new(AtomicUsize::new(0))).await;
    let (proxy, _stop) = proxy_with_timeout(upstream, Duration::from_millis(200)).await;
    let (status, body, _) = upload(proxy, "/upload", 6, Duration::from_millis(100)).await;
    assert_eq!((status, body), (StatusCode::OK, Bytes::from("6144")));
}

/// Once the upload has ended, the upstream has the timeout to answer, and
/// no more.
#[tokio::test]
async fn a_silent_answer_after_an_upload_is_a_504_after_the_timeout() {
    let timeout = Duration::from_millis(200);
    let upstream = upstream(Arc::new(AtomicUsize::new(0))).await;
    let (proxy, _stop) = proxy_with_timeout(upstream, timeout).await;
    let (status, _, uploaded) =
        upload(proxy, "/upload-silent", 4, Duration::from_millis(100)).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    // A lower bound only: a late answer cannot make it fail.
    assert!(uploaded.elapsed() >= timeout, "{:?}", uploaded.elapsed());
}

/// An upstream that stops taking the body (it does not read its socket)
/// has the timeout from the body's last move: `504`. (Timed from the
/// upload's end alone, it had none: the upload never ended, and only the
/// client connection's idle timeout, or nothing over HTTP/2, ended the
/// request; review.)
#[tokio::test]
async fn an_upstream_that_stops_taking_the_body_is_a_504() {
    let timeout = Duration::from_millis(300);
    let upstream = upstream(Arc::new(AtomicUsize::new(0))).await;
    let (proxy, _stop) = proxy_with_timeout(upstream, timeout).await;
    let asked = std::time::Instant::now();
    let response = post_large(proxy, "/stuck").await;
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(response.headers()["connection"], "close");
    assert!(asked.elapsed() >= timeout, "{:?}", asked.elapsed());
}

/// A client that stops sending its body, the proxy waiting for it, is
/// answered `408` once it has been silent for the timeout.
#[tokio::test]
async fn a_client_that_stops_sending_its_body_gets_a_408() {
    let timeout = Duration::from_millis(200);
    let upstream = upstream(Arc::new(AtomicUsize::new(0))).await;
    let (proxy, _stop) = proxy_with_timeout(upstream, timeout).await;
    let (response, first_part) = post_stalled(proxy, "/upload").await;
    let stalled = first_part
        .expect("the first part went before the answer")
        .elapsed();
    assert!(stalled >= timeout, "{stalled:?}");
    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    // The rest of the body is never read: the connection ends, and says so.
    assert_eq!(response.headers()["connection"], "close");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        body,
        "tollgate proxy: the request's body stopped arriving for 200 ms\n"
    );
}

/// The proxy's connections to `upstream` that are still established, read
/// from the kernel's table (the proxy runs in this process).
fn established_to(upstream: SocketAddr) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let port = format!(":{:04X}", upstream.port());
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // Remote address, then the state: 01 is ESTABLISHED.
            fields.len() > 3 && fields[2].ends_with(&port) && fields[3] == "01"
        })
        .count()
}

/// `POST` of a 64 MiB body through the proxy, more than the sockets'
/// buffers hold: the answer's head, bounded by `PATIENCE`.
async fn post_large(proxy: SocketAddr, path: &str) -> Response<Incoming> {
    let request = Request::post(format!("http://{proxy}{path}"))
        .body(Full::new(Bytes::from(vec![b'u'; 64 << 20])))
        .unwrap();
    tokio::time::timeout(PATIENCE, client().request(request))
        .await
        .expect("the proxy answers in time")
        .unwrap()
}

/// Waits, bounded by `PATIENCE`, for the kernel to show no connection of
/// the proxy's to `upstream` established.
async fn wait_until_closed(upstream: SocketAddr) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while established_to(upstream) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the upstream connection is still open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An upstream on `listener` that keeps every connection open from its
/// side and never reads it again, after answering `answer` to the head
/// when there is one.
fn holding_upstream(listener: TcpListener, answer: Option<&'static [u8]>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            if let Some(answer) = answer {
                let mut head = [0u8; 1024];
                let _ = stream.read(&mut head).await;
                let _ = stream.write_all(answer).await;
            }
            held.push(stream);
        }
    })
}

/// `POST path` through the proxy with a body whose first part is sent and
/// whose rest never comes (the sender kept open): the answer, bounded by
/// `PATIENCE`, and when the first part went, if it went before the answer.
async fn post_stalled(
    proxy: SocketAddr,
    path: &str,
) -> (Response<Incoming>, Option<std::time::Instant>) {
    let client: Client<HttpConnector, Channel<Bytes, Infallible>> =
        Client::builder(TokioExecutor::new()).build_http();
    let (mut tx, body) = Channel::<Bytes, Infallible>::new(1);
    let (sent, first_part) = oneshot::channel();
    let sending = tokio::spawn(async move {
        tx.send_data(Bytes::from_static(b"first part"))
            .await
            .unwrap();
        let _ = sent.send(std::time::Instant::now());
        std::future::pending::<()>().await;
        drop(tx);
    });
    let request = Request::post(format!("http://{proxy}{path}"))
        .body(body)
        .unwrap();
    let response = tokio::time::timeout(PATIENCE, client.request(request))
        .await
        .expect("the proxy answers in time")
        .unwrap();
    sending.abort();
    (response, first_part.await.ok())
}

/// A request whose upstream stopped taking its body, answered `504`, does
/// not leave its upstream connection behind: the task driving it, blocked
/// writing, is ended with it. (It held the socket, and the body's buffers,
/// until the upstream closed it, long after the request; re-check audit.)
#[tokio::test]
async fn a_connection_blocked_writing_an_ended_request_is_closed() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let held = holding_upstream(listener, None);
    let (proxy, _stop) = proxy_with_timeout(upstream, Duration::from_millis(300)).await;
    let response = post_large(proxy, "/").await;
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    wait_until_closed(upstream).await;
    held.abort();
}

/// An upstream that answers before reading the body and then stops reading
/// it: its answer reaches the client, and the connection, still sending the
/// body, is closed once the timeout has passed rather than kept waiting for
/// as long as the upstream keeps it open (re-check audit: 30 such sockets
/// and 26 MB held for the upstream's 150 s).
#[tokio::test]
async fn a_connection_still_sending_after_an_early_answer_is_closed_after_the_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    // Reads a little, answers 413 at once, then never reads again.
    let early = b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 3\r\n\r\nbig";
    let held = holding_upstream(listener, Some(early));
    let (proxy, _stop) = proxy_with_timeout(upstream, Duration::from_millis(300)).await;
    let response = post_large(proxy, "/").await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "big");
    wait_until_closed(upstream).await;
    held.abort();
}

/// Reads an HTTP/1.1 request's head from `stream`, then its chunked body to
/// the last chunk or the connection's end: whether the last chunk came.
async fn read_chunked_to_its_end(stream: &mut tokio::net::TcpStream, answer: &[u8]) -> bool {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 8192];
    let mut answered = false;
    loop {
        let read = match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return false,
            Ok(read) => read,
        };
        seen.extend_from_slice(&buffer[..read]);
        if !answered && seen.windows(4).any(|w| w == b"\r\n\r\n") {
            answered = true;
            let _ = stream.write_all(answer).await;
        }
        if seen.ends_with(b"\r\n0\r\n\r\n") {
            return true;
        }
    }
}

/// An upstream that answers at once (a `202`) and goes on reading the
/// body: the body, moving all along, reaches it whole, for longer than the
/// timeout (it was cut when the timeout had passed since the answer, the
/// connection closed under a body still moving; review).
#[tokio::test]
async fn an_upload_still_moving_after_an_early_answer_reaches_the_upstream_whole() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let (whole, got_whole) = oneshot::channel();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let answer = b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n";
        let _ = whole.send(read_chunked_to_its_end(&mut stream, answer).await);
    });
    let (proxy, _stop) = proxy_with_timeout(upstream, Duration::from_millis(200)).await;
    let (status, _, _) = upload(proxy, "/", 6, Duration::from_millis(100)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let whole = tokio::time::timeout(PATIENCE, got_whole)
        .await
        .unwrap()
        .unwrap();
    assert!(
        whole,
        "the upstream's connection closed before the body's end"
    );
}

/// An upstream that answers early and will close its connection: the
/// client's connection ends too (no one reads the body's rest), and the
/// answer says so, though the proxy drops the upstream's own
/// `Connection` header.
#[tokio::test]
async fn an_early_answer_from_an_upstream_that_closes_says_connection_close() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = [0u8; 1024];
        let _ = stream.read(&mut head).await;
        let _ = stream
            .write_all(b"HTTP/1.1 413 Payload Too Large\r\nconnection: close\r\ncontent-length: 3\r\n\r\nbig")
            .await;
    });
    let (proxy, _stop) = proxy_with_timeout(upstream, Duration::from_millis(300)).await;
    let (response, _) = post_stalled(proxy, "/").await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(response.headers()["connection"], "close");
}

/// A body sent with trailers has ended with them: a silent upstream's 504
/// then leaves nothing unread, and the client's connection is kept (no
/// `Connection: close`).
#[tokio::test]
async fn a_body_ended_by_trailers_has_ended() {
    let upstream = upstream(Arc::new(AtomicUsize::new(0))).await;
    let (proxy, _stop) = proxy_with_timeout(upstream, Duration::from_millis(200)).await;
    let (mut tx, body) = Channel::<Bytes, Infallible>::new(1);
    let client: Client<HttpConnector, Channel<Bytes, Infallible>> =
        Client::builder(TokioExecutor::new()).build_http();
    let sending = tokio::spawn(async move {
        tx.send_data(Bytes::from_static(b"all of it"))
            .await
            .unwrap();
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-checksum", http::HeaderValue::from_static("1"));
        tx.send_trailers(trailers).await.unwrap();
    });
    let request = Request::post(format!("http://{proxy}/upload-silent"))
        .header("te", "trailers")
        .body(body)
        .unwrap();
    let response = tokio::time::timeout(PATIENCE, client.request(request))
        .await
        .expect("the proxy answers in time")
        .unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(response.headers().get("connection").is_none());
    sending.await.unwrap();
}

/// A small body never asked for (the upstream unreachable): hyper reads it
/// whole after the `502`, and the client's connection is kept.
#[tokio::test]
async fn a_502_before_the_body_was_asked_for_keeps_the_connection() {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = closed.local_addr().unwrap();
    drop(closed);
    let (proxy, _stop) = proxy_with_timeout(upstream, Duration::from_millis(300)).await;
    let request = Request::post(format!("http://{proxy}/"))
        .body(Full::new(Bytes::from_static(b"small")))
        .unwrap();
    let response = tokio::time::timeout(PATIENCE, client().request(request))
        .await
        .expect("the proxy answers in time")
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert!(response.headers().get("connection").is_none());
}
