//! The peer's address reaches a request only through `with_connect_info`:
//! a real server on a loopback port, a real client socket whose own address
//! is the one the handler must see.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::routing::get;
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tollgate_connections::{serve, with_connect_info, AnswerRequests, Limits, Slots};

/// Answers with the peer address the request carries, or `none`.
fn peer_echo() -> Router {
    Router::new().route(
        "/",
        get(|request: Request| async move {
            match request.extensions().get::<ConnectInfo<SocketAddr>>() {
                Some(ConnectInfo(peer)) => peer.to_string(),
                None => "none".to_owned(),
            }
        }),
    )
}

/// One `GET /` from a fresh socket: (the socket's own address, the body).
async fn ask(server: SocketAddr) -> (SocketAddr, String) {
    let mut stream = TcpStream::connect(server).await.expect("connect");
    let me = stream.local_addr().expect("local address");
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .expect("send");
    let mut response = String::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_string(&mut response),
    )
    .await
    .expect("an answer within 10 s")
    .expect("read");
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    (me, body)
}

/// Serves with `service_for` on a fresh port, asks once, stops the server.
async fn served_answer<S>(
    service_for: impl Fn(SocketAddr) -> S + Send + 'static,
) -> (SocketAddr, String)
where
    S: AnswerRequests<Body>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        service_for,
        Limits::default(),
        Slots::new(8),
        async {
            let _ = stopped.await;
        },
    ));
    let answer = ask(addr).await;
    let _ = stop.send(());
    server.await.expect("the server stops");
    answer
}

#[tokio::test]
async fn with_connect_info_each_request_carries_its_connections_peer() {
    let (me, body) = served_answer(with_connect_info(peer_echo())).await;
    assert_eq!(body, me.to_string());
}

#[tokio::test]
async fn without_it_no_request_carries_a_peer() {
    let router = peer_echo();
    let (_, body) = served_answer(move |_peer| router.clone()).await;
    assert_eq!(body, "none");
}
