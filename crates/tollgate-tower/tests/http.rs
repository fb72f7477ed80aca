//! The layer in a real axum server on 127.0.0.1 port 0, called over HTTP.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tollgate::{AnyPolicy, Limit, ManualClock, MemoryBackend, Plan};
use tollgate_tower::{PeerIp, RateLimitConfig, RateLimitLayer};

struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

async fn start(clock: Arc<ManualClock>, key: PeerIp) -> Server {
    let plan = Plan::new(
        "api",
        vec![
            Limit::new(
                "1s",
                AnyPolicy::from_name("sliding-window", 3, 1_000).unwrap(),
                false,
            ),
            Limit::new(
                "1m",
                AnyPolicy::from_name("token-bucket", 5, 60_000).unwrap(),
                false,
            ),
        ],
    )
    .unwrap();
    let config = RateLimitConfig::new(plan, Arc::new(MemoryBackend::new()), clock);
    let app = Router::new()
        .route("/hello", get(|| async { "hello" }))
        .layer(RateLimitLayer::new(config, key));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    Server {
        addr,
        stop: Some(stop),
        task,
    }
}

impl Server {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap();
    }
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn get_status(
    client: &HttpClient,
    addr: SocketAddr,
    forwarded_for: Option<&str>,
) -> (StatusCode, http::HeaderMap, String) {
    let mut builder = Request::get(format!("http://{addr}/hello"));
    if let Some(ip) = forwarded_for {
        builder = builder.header("x-forwarded-for", ip);
    }
    let response = client
        .request(builder.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn a_burst_over_http_gets_exactly_the_limit_then_429() {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let server = start(clock.clone(), PeerIp::direct()).await;
    let client = client();
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(get_status(&client, server.addr, None).await.0);
    }
    assert_eq!(statuses.iter().filter(|s| **s == StatusCode::OK).count(), 3);
    assert_eq!(&statuses[3..], [StatusCode::TOO_MANY_REQUESTS; 2]);

    let (status, headers, body) = get_status(&client, server.addr, None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        headers["ratelimit-policy"],
        r#""api-1s";q=3;w=1, "api-1m";q=5;w=60"#
    );
    assert_eq!(headers["retry-after"], "1");
    assert!(body.starts_with("rate limit exceeded"));

    // A second later the per-second limit is free again, but the bucket
    // (one token back every 12 s from the first call) is down to 1 of 5:
    // four drips, the first in 11 s, make it full in 47 s.
    clock.advance(1_000);
    let (status, headers, body) = get_status(&client, server.addr, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "hello");
    assert_eq!(
        headers["ratelimit"],
        r#""api-1s";r=2;t=1, "api-1m";r=1;t=47"#
    );
    server.stop().await;
}

#[tokio::test]
async fn forwarded_for_keys_clients_only_when_trusted() {
    let clock = Arc::new(ManualClock::new(0));
    let trusting = start(clock.clone(), PeerIp::behind_proxies(1)).await;
    let client = client();
    // Each forwarded address has its own budget of 3 per second.
    for ip in ["192.0.2.1", "192.0.2.2"] {
        for _ in 0..3 {
            let (status, ..) = get_status(&client, trusting.addr, Some(ip)).await;
            assert_eq!(status, StatusCode::OK);
        }
    }
    let (status, ..) = get_status(&client, trusting.addr, Some("192.0.2.1")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    trusting.stop().await;

    // Not trusted: the header changes nothing, everyone is 127.0.0.1.
    let direct = start(clock, PeerIp::direct()).await;
    let mut ok = 0;
    for ip in ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"] {
        if get_status(&client, direct.addr, Some(ip)).await.0 == StatusCode::OK {
            ok += 1;
        }
    }
    assert_eq!(ok, 3);
    direct.stop().await;
}
