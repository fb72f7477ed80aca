//! An upstream that closes a kept-alive connection just as the proxy sends
//! a request on it (its idle timeout, Node's 5 s, running out as the request
//! arrives): the request went out and no answer will ever come. A request
//! that is safe to send twice (an idempotent method, no body) goes once more
//! on a new connection, as nginx and Go's client do; any other is the
//! proxy's `502`, sent once. The upstream here is a raw TCP server that
//! closes a connection at a chosen request, with a FIN (it read the
//! request) or a reset (it closed before reading it); the real proxy in
//! front, both on 127.0.0.1 port 0.

mod pool_common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use pool_common::{client, proxy_with, PATIENCE};

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

/// How the upstream closes the connection on which it will not answer.
#[derive(Clone, Copy, Debug)]
enum Close {
    /// Reads the request, then closes: the proxy reads the end of the stream.
    AfterReading,
    /// Closes as the request arrives, unread: the proxy's side is reset.
    Reset,
}

/// What the upstream did: each request line it read, in order, with the
/// number of the connection (from 0) it came on.
type Seen = Arc<Mutex<Vec<(usize, String)>>>;

/// An upstream that answers `200` to the first request of each connection
/// and closes the connection (`close`) at its second; from connection
/// `answers_until` on, it closes each at its first request instead.
async fn closing_upstream(close: Close, answers_until: usize) -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let record = seen.clone();
    tokio::spawn(async move {
        for connection in 0.. {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let answered = usize::from(connection < answers_until);
            tokio::spawn(serve(stream, connection, answered, close, record.clone()));
        }
    });
    (addr, seen)
}

/// Answers `answered` requests on `stream`, then closes it at the next.
async fn serve(
    mut stream: TcpStream,
    connection: usize,
    answered: usize,
    close: Close,
    seen: Seen,
) {
    for _ in 0..answered {
        let Some(line) = read_head(&mut stream).await else {
            return;
        };
        seen.lock().unwrap().push((connection, line));
        // No body, so that a `HEAD`'s answer is the same.
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        if stream.write_all(answer).await.is_err() {
            return;
        }
    }
    match close {
        Close::AfterReading => {
            if let Some(line) = read_head(&mut stream).await {
                seen.lock().unwrap().push((connection, line));
            }
        }
        Close::Reset => {
            // Closed as the request arrives, unread: the proxy's side is
            // reset. (A zero linger resets at once: nothing blocks on the
            // drop.)
            if stream.peek(&mut [0u8; 1]).await.is_ok_and(|n| n > 0) {
                let socket = socket2::SockRef::from(&stream);
                socket.set_linger(Some(Duration::ZERO)).unwrap();
            }
        }
    }
}

/// Reads one body-less request's head; its request line, or `None` at the
/// end of the stream.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
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

/// `method path` through the proxy, without a body: its status. One
/// client throughout a test, so that its requests come to the proxy on one
/// connection (hence to one worker, and one pool of upstream connections).
async fn send(client: &Client, proxy: SocketAddr, method: Method, path: &str) -> StatusCode {
    let request = Request::builder()
        .method(method)
        .uri(format!("http://{proxy}{path}"))
        .body(Full::<Bytes>::default())
        .unwrap();
    tokio::time::timeout(PATIENCE, async {
        let response = client.request(request).await.unwrap();
        let status = response.status();
        response.into_body().collect().await.unwrap();
        status
    })
    .await
    .expect("an answer in time")
}

/// The proxy in front of `upstream`, copying every request it may send
/// twice, however short its connection's idle time (the tests send theirs
/// one after another, at once).
async fn proxy_copying_every_request(
    upstream: SocketAddr,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    proxy_with(upstream, |config| config.resend_after_idle(Duration::ZERO)).await
}

fn lines(seen: &Seen) -> Vec<(usize, String)> {
    seen.lock().unwrap().clone()
}

fn line(connection: usize, text: &str) -> (usize, String) {
    (connection, text.to_owned())
}

#[tokio::test]
async fn a_get_on_a_connection_the_upstream_closed_goes_again_on_a_new_one() {
    for close in [Close::Reset, Close::AfterReading] {
        let (upstream, seen) = closing_upstream(close, usize::MAX).await;
        let (proxy, _stop) = proxy_copying_every_request(upstream).await;
        let client = client();
        assert_eq!(
            send(&client, proxy, Method::GET, "/a").await,
            StatusCode::OK
        );
        // Kept; the upstream closes it at this request, which goes again.
        assert_eq!(
            send(&client, proxy, Method::GET, "/b").await,
            StatusCode::OK,
            "{close:?}"
        );
        let mut expected = vec![line(0, "GET /a HTTP/1.1")];
        if matches!(close, Close::AfterReading) {
            expected.push(line(0, "GET /b HTTP/1.1"));
        }
        expected.push(line(1, "GET /b HTTP/1.1"));
        assert_eq!(lines(&seen), expected, "{close:?}");
    }
}

#[tokio::test]
async fn every_idempotent_method_goes_again_and_a_post_does_not() {
    let idempotent = [
        Method::GET,
        Method::HEAD,
        Method::OPTIONS,
        Method::PUT,
        Method::DELETE,
        Method::TRACE,
    ];
    for method in idempotent {
        let (upstream, seen) = closing_upstream(Close::AfterReading, usize::MAX).await;
        let (proxy, _stop) = proxy_copying_every_request(upstream).await;
        let client = client();
        assert_eq!(
            send(&client, proxy, method.clone(), "/a").await,
            StatusCode::OK
        );
        assert_eq!(
            send(&client, proxy, method.clone(), "/b").await,
            StatusCode::OK,
            "{method}"
        );
        assert_eq!(lines(&seen).len(), 3, "{method}: {:?}", lines(&seen));
    }
    // Sent once, and lost with its connection: the upstream may have acted
    // on it, so it is not sent twice.
    for method in [Method::POST, Method::PATCH] {
        let (upstream, seen) = closing_upstream(Close::AfterReading, usize::MAX).await;
        let (proxy, _stop) = proxy_copying_every_request(upstream).await;
        let client = client();
        assert_eq!(
            send(&client, proxy, method.clone(), "/a").await,
            StatusCode::OK
        );
        assert_eq!(
            send(&client, proxy, method.clone(), "/b").await,
            StatusCode::BAD_GATEWAY
        );
        let expected = [
            line(0, &format!("{method} /a HTTP/1.1")),
            line(0, &format!("{method} /b HTTP/1.1")),
        ];
        assert_eq!(lines(&seen), expected);
    }
}

#[tokio::test]
async fn a_request_goes_again_once_at_most() {
    // The first connection answers once; every later one closes at its
    // first request: the second try fails too, and that is the answer.
    let (upstream, seen) = closing_upstream(Close::AfterReading, 1).await;
    let (proxy, _stop) = proxy_copying_every_request(upstream).await;
    let client = client();
    assert_eq!(
        send(&client, proxy, Method::GET, "/a").await,
        StatusCode::OK
    );
    assert_eq!(
        send(&client, proxy, Method::GET, "/b").await,
        StatusCode::BAD_GATEWAY
    );
    let expected = [
        line(0, "GET /a HTTP/1.1"),
        line(0, "GET /b HTTP/1.1"),
        line(1, "GET /b HTTP/1.1"),
    ];
    assert_eq!(lines(&seen), expected);
}

#[tokio::test]
async fn a_request_on_a_new_connection_the_upstream_closes_is_not_sent_again() {
    // No connection answers: the first request is on a new one, whose
    // loss says the upstream itself fails, not that a kept one went stale.
    let (upstream, seen) = closing_upstream(Close::AfterReading, 0).await;
    let (proxy, _stop) = proxy_copying_every_request(upstream).await;
    let client = client();
    assert_eq!(
        send(&client, proxy, Method::GET, "/a").await,
        StatusCode::BAD_GATEWAY
    );
    assert_eq!(lines(&seen), [line(0, "GET /a HTTP/1.1")]);
}

#[tokio::test]
async fn a_request_on_a_connection_idle_for_less_than_resend_after_idle_is_not_copied() {
    let (upstream, seen) = closing_upstream(Close::AfterReading, usize::MAX).await;
    let (proxy, _stop) = proxy_with(upstream, |config| {
        config.resend_after_idle(Duration::from_secs(3600))
    })
    .await;
    let client = client();
    assert_eq!(
        send(&client, proxy, Method::GET, "/a").await,
        StatusCode::OK
    );
    assert_eq!(
        send(&client, proxy, Method::GET, "/b").await,
        StatusCode::BAD_GATEWAY
    );
    assert_eq!(
        lines(&seen),
        [line(0, "GET /a HTTP/1.1"), line(0, "GET /b HTTP/1.1")]
    );
}
