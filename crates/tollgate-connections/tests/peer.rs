//! Each connection's service is made for that connection's peer, and no
//! request carries the peer in its extensions: a real server on a loopback
//! port, real client sockets whose own addresses are the peers.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::routing::get;
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tollgate_connections::{serve, AnswerRequests, Limits, Slots};

/// A service made for `peer`: answers `peer`, then the peer address the
/// request itself carries, or `none`.
fn made_for(peer: SocketAddr) -> Router {
    Router::new().route(
        "/",
        get(move |request: Request| async move {
            let carried = match request.extensions().get::<ConnectInfo<SocketAddr>>() {
                Some(ConnectInfo(carried)) => carried.to_string(),
                None => "none".to_owned(),
            };
            format!("{peer} {carried}")
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

/// Serves with `service_for` on a fresh port, asks from `clients` sockets
/// one after another, stops the server.
async fn answers<S>(
    service_for: impl Fn(SocketAddr) -> S + Send + 'static,
    clients: usize,
) -> Vec<(SocketAddr, String)>
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
    let mut answers = Vec::new();
    for _ in 0..clients {
        answers.push(ask(addr).await);
    }
    let _ = stop.send(());
    server.await.expect("the server stops");
    answers
}

#[tokio::test]
async fn each_connections_service_is_made_for_its_own_peer() {
    let answers = answers(made_for, 3).await;
    for (me, body) in &answers {
        assert_eq!(body.split(' ').next(), Some(me.to_string().as_str()));
    }
    // Three sockets, three ports: not one service made for the first.
    assert_ne!(answers[0].0, answers[1].0);
}

#[tokio::test]
async fn no_request_carries_the_peer_in_its_extensions() {
    let answers = answers(made_for, 1).await;
    assert_eq!(answers[0].1.split(' ').nth(1), Some("none"));
}
