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
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use pool_common::{client, proxy_with, read_head, PATIENCE};

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
    /// Reads the request, writes these bytes (the start of an answer),
    /// then closes.
    AfterWriting(&'static [u8]),
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
        Close::AfterWriting(bytes) => {
            if let Some(line) = read_head(&mut stream).await {
                seen.lock().unwrap().push((connection, line));
                let _ = stream.write_all(bytes).await;
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

/// `method path` through the proxy, without a body: its status.
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

/// What two requests one after another through the proxy came to: `method
/// /a`, then `method /b` on the upstream connection `/a` left kept, with
/// the proxy copying requests on connections idle `resend_after_idle` or
/// more, in front of [`closing_upstream`]`(close, answers_until)`: the two
/// statuses, and the request lines the upstream read.
struct TwoRequests {
    close: Close,
    answers_until: usize,
    resend_after_idle: Duration,
    method: Method,
}

impl TwoRequests {
    /// Every connection answers once then closes after reading; every
    /// request the proxy may send twice is copied.
    fn of(method: Method) -> Self {
        Self {
            close: Close::AfterReading,
            answers_until: usize::MAX,
            resend_after_idle: Duration::ZERO,
            method,
        }
    }

    async fn run(self) -> (StatusCode, StatusCode, Vec<(usize, String)>) {
        let (upstream, seen) = closing_upstream(self.close, self.answers_until).await;
        let idle = self.resend_after_idle;
        let (proxy, _stop) = proxy_with(upstream, |config| config.resend_after_idle(idle)).await;
        // One client, so that both requests come to the proxy on one
        // connection: one worker, one pool of upstream connections.
        let client = client();
        let first = send(&client, proxy, self.method.clone(), "/a").await;
        let second = send(&client, proxy, self.method, "/b").await;
        let seen = seen.lock().unwrap().clone();
        (first, second, seen)
    }
}

fn line(connection: usize, text: &str) -> (usize, String) {
    (connection, text.to_owned())
}

const OK: StatusCode = StatusCode::OK;
const BAD_GATEWAY: StatusCode = StatusCode::BAD_GATEWAY;

#[tokio::test]
async fn a_get_on_a_connection_the_upstream_closed_goes_again_on_a_new_one() {
    for close in [Close::Reset, Close::AfterReading] {
        let (first, second, seen) = TwoRequests {
            close,
            ..TwoRequests::of(Method::GET)
        }
        .run()
        .await;
        let mut expected = vec![line(0, "GET /a HTTP/1.1")];
        if matches!(close, Close::AfterReading) {
            expected.push(line(0, "GET /b HTTP/1.1"));
        }
        expected.push(line(1, "GET /b HTTP/1.1"));
        assert_eq!((first, second, seen), (OK, OK, expected), "{close:?}");
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
        let (first, second, seen) = TwoRequests::of(method.clone()).run().await;
        let expected = vec![
            line(0, &format!("{method} /a HTTP/1.1")),
            line(0, &format!("{method} /b HTTP/1.1")),
            line(1, &format!("{method} /b HTTP/1.1")),
        ];
        assert_eq!((first, second, seen), (OK, OK, expected), "{method}");
    }
    // Sent once, and lost with its connection: the upstream may have acted
    // on it, so it is not sent twice.
    for method in [Method::POST, Method::PATCH] {
        let (first, second, seen) = TwoRequests::of(method.clone()).run().await;
        let expected = vec![
            line(0, &format!("{method} /a HTTP/1.1")),
            line(0, &format!("{method} /b HTTP/1.1")),
        ];
        assert_eq!(
            (first, second, seen),
            (OK, BAD_GATEWAY, expected),
            "{method}"
        );
    }
}

/// An upstream that began answering acted on the request, however broken
/// its answer (audit: a GET whose answer's head was cut off, or not HTTP,
/// went to the upstream twice).
#[tokio::test]
async fn a_request_the_upstream_began_answering_is_not_sent_again() {
    for begun in [
        &b"HTTP/1.1 200 OK\r\nContent-Le"[..],
        b"HTTX/1.1 2x0\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\n",
    ] {
        let close = Close::AfterWriting(begun);
        let run = TwoRequests {
            close,
            ..TwoRequests::of(Method::GET)
        };
        let expected = vec![line(0, "GET /a HTTP/1.1"), line(0, "GET /b HTTP/1.1")];
        let begun = String::from_utf8_lossy(begun);
        assert_eq!(run.run().await, (OK, BAD_GATEWAY, expected), "{begun:?}");
    }
}

#[tokio::test]
async fn a_request_goes_again_once_at_most() {
    // The first connection answers once; every later one closes at its
    // first request: the second try fails too, and that is the answer.
    let run = TwoRequests {
        answers_until: 1,
        ..TwoRequests::of(Method::GET)
    };
    let expected = vec![
        line(0, "GET /a HTTP/1.1"),
        line(0, "GET /b HTTP/1.1"),
        line(1, "GET /b HTTP/1.1"),
    ];
    assert_eq!(run.run().await, (OK, BAD_GATEWAY, expected));
}

#[tokio::test]
async fn a_request_on_a_new_connection_the_upstream_closes_is_not_sent_again() {
    // No connection answers: `/a` is on a new one, whose loss says the
    // upstream itself fails, not that a kept one went stale; `/b` too.
    let run = TwoRequests {
        answers_until: 0,
        ..TwoRequests::of(Method::GET)
    };
    let expected = vec![line(0, "GET /a HTTP/1.1"), line(1, "GET /b HTTP/1.1")];
    assert_eq!(run.run().await, (BAD_GATEWAY, BAD_GATEWAY, expected));
}

#[tokio::test]
async fn a_request_on_a_connection_idle_for_less_than_resend_after_idle_is_not_copied() {
    let run = TwoRequests {
        resend_after_idle: Duration::from_secs(3600),
        ..TwoRequests::of(Method::GET)
    };
    let expected = vec![line(0, "GET /a HTTP/1.1"), line(0, "GET /b HTTP/1.1")];
    assert_eq!(run.run().await, (OK, BAD_GATEWAY, expected));
}
