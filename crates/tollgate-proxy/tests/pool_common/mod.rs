//! What the tests of the proxy's upstream connections and uploads share:
//! an upstream, the proxy in front of it, a client.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::channel::Channel;
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tollgate::{AnyPolicy, Limit, MemoryBackend, Plan, SystemClock};
use tollgate_proxy::{KeySource, ProxyConfig};
use tollgate_tower::RateLimitConfig;

/// How long any one exchange may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// The upstream: `/endless` answers with a body that goes on for as long as
/// it is read, `/silent` never answers, `/upload` answers the length of the
/// body it read to its end, `/upload-silent` reads it and never answers,
/// `/stuck` never reads its body nor answers, anything else answers `ok`;
/// counts the connections it accepts.
pub async fn upstream(accepted: Arc<AtomicUsize>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            accepted.fetch_add(1, Ordering::SeqCst);
            let service = hyper::service::service_fn(|request: Request<Incoming>| async move {
                let path = request.uri().path().to_owned();
                if path == "/stuck" {
                    let _unread = request;
                    return std::future::pending().await;
                }
                if path.starts_with("/upload") {
                    let body = request.into_body().collect().await.unwrap().to_bytes();
                    if path == "/upload-silent" {
                        std::future::pending::<()>().await;
                    }
                    return Ok(Response::new(Either::Left(Full::new(Bytes::from(
                        body.len().to_string(),
                    )))));
                }
                if path == "/silent" {
                    std::future::pending::<()>().await;
                }
                if path != "/endless" {
                    return Ok::<_, Infallible>(Response::new(Either::Left(Full::new(
                        Bytes::from_static(b"ok"),
                    ))));
                }
                let (mut tx, body) = Channel::<Bytes, Infallible>::new(1);
                // Ends when the reader goes away (the send fails).
                tokio::spawn(async move {
                    while tx.send_data(Bytes::from(vec![b'x'; 1024])).await.is_ok() {}
                });
                Ok(Response::new(Either::Right(body)))
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// The proxy in front of `upstream`, with a limit nobody reaches; stopped
/// when the returned sender is dropped.
pub async fn proxy(upstream: SocketAddr) -> (SocketAddr, oneshot::Sender<()>) {
    proxy_with_timeout(upstream, Duration::from_secs(30)).await
}

/// [`proxy`], giving the upstream `response_timeout` to start answering.
pub async fn proxy_with_timeout(
    upstream: SocketAddr,
    response_timeout: Duration,
) -> (SocketAddr, oneshot::Sender<()>) {
    proxy_with(upstream, |config| config.response_timeout(response_timeout)).await
}

/// [`proxy`], its config then changed by `configure`.
pub async fn proxy_with(
    upstream: SocketAddr,
    configure: impl FnOnce(ProxyConfig) -> ProxyConfig,
) -> (SocketAddr, oneshot::Sender<()>) {
    let plan = Plan::new(
        "proxy",
        vec![Limit::new(
            "1s",
            AnyPolicy::from_name("gcra", 1_000_000, 1_000).unwrap(),
            false,
        )],
    )
    .unwrap();
    let limits = RateLimitConfig::new(plan, Arc::new(MemoryBackend::new()), Arc::new(SystemClock));
    let config = ProxyConfig::new(
        &format!("http://{upstream}"),
        KeySource::Peer { trusted_proxies: 0 },
        limits,
    )
    .unwrap();
    let config = configure(config);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(tollgate_proxy::run(listener, config, async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// `GET path` through the proxy: the status, and the body read to its end.
pub async fn get(
    client: &Client<HttpConnector, Full<Bytes>>,
    proxy: SocketAddr,
    path: &str,
) -> (StatusCode, Bytes) {
    let request = Request::get(format!("http://{proxy}{path}"))
        .body(Full::default())
        .unwrap();
    tokio::time::timeout(PATIENCE, async {
        let response = client.request(request).await.unwrap();
        let status = response.status();
        (
            status,
            response.into_body().collect().await.unwrap().to_bytes(),
        )
    })
    .await
    .expect("an answer in time")
}

/// Reads one body-less request's head; its request line, or `None` at the
/// end of the stream.
pub async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    Some(head.lines().next().unwrap().to_owned())
}
