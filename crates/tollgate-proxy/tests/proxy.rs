//! A real upstream (a small axum server) behind the real proxy, both on
//! 127.0.0.1 port 0; clients send bursts; time moved by hand.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::Response;
use axum::Router;
use http::{HeaderName, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tollgate::{AnyPolicy, Limit, ManualClock, MemoryBackend, Plan};
use tollgate_proxy::{KeySource, ProxyConfig};
use tollgate_tower::RateLimitConfig;

/// A background server, stopped (and awaited) on `stop`.
struct Running {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
    }
}

/// The upstream: counts requests and echoes what it got.
async fn upstream(count: Arc<AtomicUsize>) -> Running {
    let app = Router::new().fallback(move |request: Request| {
        let count = count.clone();
        async move {
            count.fetch_add(1, Ordering::SeqCst);
            let (parts, body) = request.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            let echo = format!(
                "{} {} x-test={:?} host={:?} connection={:?} len={}",
                parts.method,
                parts.uri,
                parts.headers.get("x-test"),
                parts.headers.get("host"),
                parts.headers.get("x-private"),
                body.len()
            );
            Response::builder()
                .status(StatusCode::CREATED)
                .header("x-upstream", "yes")
                .body(Body::from(echo))
                .unwrap()
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    Running { addr, stop, task }
}

async fn proxy(upstream: &str, key: KeySource, clock: Arc<ManualClock>) -> Running {
    proxy_with_timeout(upstream, key, clock, std::time::Duration::from_secs(30)).await
}

async fn proxy_with_timeout(
    upstream: &str,
    key: KeySource,
    clock: Arc<ManualClock>,
    timeout: std::time::Duration,
) -> Running {
    let plan = Plan::new(
        "proxy",
        vec![Limit::new(
            "1s",
            AnyPolicy::from_name("sliding-window", 3, 1_000).unwrap(),
            false,
        )],
    )
    .unwrap();
    let limits = RateLimitConfig::new(plan, Arc::new(MemoryBackend::new()), clock);
    let config = ProxyConfig::new(upstream, key, limits)
        .unwrap()
        .response_timeout(timeout);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        tollgate_proxy::run(listener, config, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    Running { addr, stop, task }
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    request: http::Request<Full<Bytes>>,
) -> (StatusCode, http::HeaderMap, String) {
    let response = client.request(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

fn get(addr: SocketAddr, client_id: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(format!("http://{addr}/items?page=2"))
        .header("x-client-id", client_id)
        .body(Full::default())
        .unwrap()
}

fn by_header() -> KeySource {
    KeySource::Header(HeaderName::from_static("x-client-id"))
}

#[tokio::test]
async fn the_upstream_sees_exactly_the_allowed_requests() {
    let count = Arc::new(AtomicUsize::new(0));
    let up = upstream(count.clone()).await;
    let clock = Arc::new(ManualClock::new(0));
    let proxy = proxy(&format!("http://{}", up.addr), by_header(), clock.clone()).await;
    let client = client();

    let mut allowed = 0;
    for _ in 0..10 {
        let (status, headers, body) = send(&client, get(proxy.addr, "alice")).await;
        match status {
            StatusCode::CREATED => {
                allowed += 1;
                assert_eq!(headers["x-upstream"], "yes");
                assert!(headers.contains_key("ratelimit"));
            }
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(headers["ratelimit-policy"], r#""proxy-1s";q=3;w=1"#);
                assert_eq!(headers["retry-after"], "1");
                assert!(!headers.contains_key("x-upstream"));
                assert!(body.starts_with("rate limit exceeded"), "{body}");
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(allowed, 3);
    assert_eq!(count.load(Ordering::SeqCst), 3);

    // A burst from another client, and one more second: 3 + 3 more.
    for _ in 0..5 {
        send(&client, get(proxy.addr, "bob")).await;
    }
    clock.advance(1_000);
    for _ in 0..5 {
        send(&client, get(proxy.addr, "alice")).await;
    }
    assert_eq!(count.load(Ordering::SeqCst), 9);

    // Concurrent burst: still exactly the limit.
    clock.advance(1_000);
    let burst = (0..12).map(|_| {
        let client = client.clone();
        let addr = proxy.addr;
        tokio::spawn(async move { send(&client, get(addr, "carol")).await.0 })
    });
    let mut statuses = Vec::new();
    for task in burst {
        statuses.push(task.await.unwrap());
    }
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == StatusCode::CREATED)
            .count(),
        3
    );
    assert_eq!(count.load(Ordering::SeqCst), 12);

    // No key: 400 naming the header, and the upstream never sees it.
    let anonymous = http::Request::get(format!("http://{}/", proxy.addr))
        .body(Full::default())
        .unwrap();
    let (status, _, body) = send(&client, anonymous).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        "missing x-client-id header: it carries the client id\n"
    );
    // A key given twice names no client: 400, neither is charged.
    clock.advance(1_000);
    let twice = http::Request::get(format!("http://{}/", proxy.addr))
        .header("x-client-id", "alice")
        .header("x-client-id", "dave")
        .body(Full::default())
        .unwrap();
    let (status, _, body) = send(&client, twice).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("given more than once"), "{body}");
    assert_eq!(count.load(Ordering::SeqCst), 12);
    let (_, headers, _) = send(&client, get(proxy.addr, "alice")).await;
    assert_eq!(headers["ratelimit"], r#""proxy-1s";r=2;t=1"#);

    proxy.stop().await;
    up.stop().await;
}

#[tokio::test]
async fn requests_are_forwarded_unchanged() {
    let count = Arc::new(AtomicUsize::new(0));
    let up = upstream(count.clone()).await;
    let proxy = proxy(
        &format!("http://{}", up.addr),
        by_header(),
        Arc::new(ManualClock::new(0)),
    )
    .await;
    let client = client();
    let body = Bytes::from(vec![b'x'; 1 << 20]);
    let request = http::Request::post(format!("http://{}/upload/a%20b?x=1&y=%2F", proxy.addr))
        .header("x-client-id", "alice")
        .header("x-test", "kept")
        .header("connection", "x-private")
        .header("x-private", "hop-by-hop")
        .body(Full::new(body))
        .unwrap();
    let (status, _, echo) = send(&client, request).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        echo,
        format!(
            "POST /upload/a%20b?x=1&y=%2F x-test=Some(\"kept\") host=Some(\"{}\") connection=None len=1048576",
            proxy.addr
        )
    );
    proxy.stop().await;
    up.stop().await;
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_502_with_a_clear_body() {
    // A port that was free a moment ago and has nobody listening now.
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = proxy(
        &format!("http://{closed}"),
        by_header(),
        Arc::new(ManualClock::new(0)),
    )
    .await;
    let client = client();
    for _ in 0..2 {
        let (status, headers, body) = send(&client, get(proxy.addr, "alice")).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert!(
            body.starts_with(&format!(
                "tollgate proxy: upstream http://{closed} unreachable: cannot connect: "
            )),
            "{body}"
        );
        // The cause, said once: each error of the chain adds only its own words.
        assert_eq!(body.to_lowercase().matches("refused").count(), 1, "{body}");
        assert_eq!(body.matches("os error").count(), 1, "{body}");
        // The decision was still made and counted.
        assert!(headers.contains_key("ratelimit"));
    }
    proxy.stop().await;
}

#[tokio::test]
async fn peer_keys_trust_forwarded_for_only_when_configured() {
    let count = Arc::new(AtomicUsize::new(0));
    let up = upstream(count.clone()).await;
    let clock = Arc::new(ManualClock::new(0));
    let upstream_url = format!("http://{}", up.addr);
    let client = client();
    let forwarded = |addr: SocketAddr, ip: &str| {
        http::Request::get(format!("http://{addr}/"))
            .header("x-forwarded-for", ip)
            .body(Full::default())
            .unwrap()
    };

    let trusting = proxy(
        &upstream_url,
        KeySource::Peer { trusted_proxies: 1 },
        clock.clone(),
    )
    .await;
    for ip in ["198.51.100.1", "198.51.100.2"] {
        for _ in 0..4 {
            send(&client, forwarded(trusting.addr, ip)).await;
        }
    }
    assert_eq!(count.load(Ordering::SeqCst), 6);
    trusting.stop().await;

    count.store(0, Ordering::SeqCst);
    let direct = proxy(&upstream_url, KeySource::Peer { trusted_proxies: 0 }, clock).await;
    for ip in [
        "198.51.100.1",
        "198.51.100.2",
        "198.51.100.3",
        "198.51.100.4",
    ] {
        send(&client, forwarded(direct.addr, ip)).await;
    }
    assert_eq!(count.load(Ordering::SeqCst), 3);
    direct.stop().await;
    up.stop().await;
}

/// Bodies stream through the proxy in both directions: the upstream gets the
/// first request chunk before the client has sent the rest, and the client
/// gets the first response chunk before the upstream has written the rest.
/// A proxy that buffered whole bodies would never get past the first step
/// (the timeout only bounds that failure).
#[tokio::test]
async fn bodies_stream_both_ways() {
    use http_body_util::channel::Channel;
    use std::time::Duration;
    use tokio::sync::{mpsc, Mutex};
    use tokio::time::timeout;

    // Upstream: reports the first request chunk, answers with one chunk at
    // once and the second when the test says so.
    let (first_in_tx, mut first_in) = mpsc::channel::<Bytes>(1);
    let (go_tx, go_rx) = oneshot::channel::<()>();
    let go_rx = Arc::new(Mutex::new(Some(go_rx)));
    let app = Router::new().fallback(move |request: Request| {
        let first_in_tx = first_in_tx.clone();
        let go_rx = go_rx.clone();
        async move {
            let mut body = request.into_body();
            let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
            first_in_tx.send(first).await.unwrap();
            let (mut out, response_body) = Channel::<Bytes>::new(1);
            tokio::spawn(async move {
                out.send_data(Bytes::from_static(b"head;")).await.unwrap();
                let go = go_rx.lock().await.take().unwrap();
                let _ = go.await;
                // Drain the rest of the request, then finish.
                while let Some(Ok(_)) = body.frame().await {}
                out.send_data(Bytes::from_static(b"tail")).await.unwrap();
            });
            Response::new(Body::new(response_body))
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    let up = Running {
        addr: up_addr,
        stop,
        task,
    };
    let proxy = proxy(
        &format!("http://{}", up.addr),
        by_header(),
        Arc::new(ManualClock::new(0)),
    )
    .await;

    let client: Client<HttpConnector, Channel<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let (mut request_tx, request_body) = Channel::<Bytes>::new(1);
    let request = http::Request::post(format!("http://{}/stream", proxy.addr))
        .header("x-client-id", "alice")
        .body(request_body)
        .unwrap();
    let pending = tokio::spawn(async move { client.request(request).await });
    request_tx
        .send_data(Bytes::from_static(b"part1"))
        .await
        .unwrap();
    let bound = Duration::from_secs(10);
    let first = timeout(bound, first_in.recv()).await.unwrap().unwrap();
    assert_eq!(first, "part1");

    let response = timeout(bound, pending).await.unwrap().unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let head = timeout(bound, body.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(head.into_data().unwrap(), "head;");

    request_tx
        .send_data(Bytes::from_static(b"part2"))
        .await
        .unwrap();
    drop(request_tx);
    go_tx.send(()).unwrap();
    let rest = timeout(bound, body.collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    assert_eq!(rest, "tail");

    proxy.stop().await;
    up.stop().await;
}

/// An HTTP/2 client (cleartext, prior knowledge) is forwarded over HTTP/1.1,
/// with its `:authority` as the upstream's `Host`.
#[tokio::test]
async fn http2_clients_are_forwarded_over_http1_with_their_authority_as_host() {
    let count = Arc::new(AtomicUsize::new(0));
    let up = upstream(count.clone()).await;
    let proxy = proxy(
        &format!("http://{}", up.addr),
        by_header(),
        Arc::new(ManualClock::new(0)),
    )
    .await;
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let request = http::Request::put(format!("http://{}/h2?v=1", proxy.addr))
        .header("x-client-id", "alice")
        .header("x-test", "h2")
        .body(Full::new(Bytes::from_static(b"abc")))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), StatusCode::CREATED);
    let echo = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        String::from_utf8_lossy(&echo),
        format!(
            "PUT /h2?v=1 x-test=Some(\"h2\") host=Some(\"{}\") connection=None len=3",
            proxy.addr
        )
    );
    assert_eq!(count.load(Ordering::SeqCst), 1);
    proxy.stop().await;
    up.stop().await;
}

/// An upstream that accepts connections and never answers: 504 once the
/// response timeout passes (the timeout is real time: a network wait, not a
/// rate-limit clock), and the proxy keeps serving.
#[tokio::test]
async fn a_silent_upstream_is_a_504() {
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let proxy = proxy_with_timeout(
        &format!("http://{addr}"),
        by_header(),
        Arc::new(ManualClock::new(0)),
        std::time::Duration::from_millis(100),
    )
    .await;
    let client = client();
    for _ in 0..2 {
        let (status, _, body) = send(&client, get(proxy.addr, "alice")).await;
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(
            body,
            format!("tollgate proxy: upstream http://{addr} did not answer within 100 ms\n")
        );
    }
    proxy.stop().await;
    holder.abort();
}
