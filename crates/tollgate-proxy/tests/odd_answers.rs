//! Answers an upstream may give that the proxy cannot pass on as they are:
//! a `101` nobody asked for (the proxy passes no `Upgrade` on), and
//! `Content-Length`s that do not frame a body (a `HEAD`'s answer) and that
//! disagree or do not parse. Each is the proxy's `502`, and the client's
//! connection serves its next request; repeated equal lengths are made one.
//! The upstream is a raw TCP server writing the bytes given, the real proxy
//! in front, both on 127.0.0.1 port 0.

mod pool_common;

use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use pool_common::{client, proxy, read_head, PATIENCE};

/// An upstream answering every request with `odd` for `/odd`, and an
/// empty `200` for anything else.
async fn upstream_answering(odd: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                while let Some(line) = read_head(&mut stream).await {
                    let answer = if line.contains(" /odd ") {
                        odd
                    } else {
                        &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..]
                    };
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

/// `method path` through the proxy: the status, the headers and the body.
async fn send(
    client: &Client,
    proxy: SocketAddr,
    method: Method,
    path: &str,
) -> (StatusCode, HeaderMap, Bytes) {
    let request = Request::builder()
        .method(method)
        .uri(format!("http://{proxy}{path}"))
        .body(Full::default())
        .unwrap();
    tokio::time::timeout(PATIENCE, async {
        let response = client.request(request).await.expect("an answer");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        (parts.status, parts.headers, body)
    })
    .await
    .expect("an answer in time")
}

/// The proxy's answer to `method /odd` when the upstream writes `odd`,
/// checking that the same client connection then serves another request.
async fn odd_answer(odd: &'static [u8], method: Method) -> (StatusCode, HeaderMap, Bytes) {
    let (proxy, _stop) = proxy(upstream_answering(odd).await).await;
    let client = client();
    let answer = send(&client, proxy, method, "/odd").await;
    let next = send(&client, proxy, Method::GET, "/next").await;
    assert_eq!(next.0, StatusCode::OK, "the request after it");
    answer
}

#[tokio::test]
async fn a_switch_of_protocols_nobody_asked_for_is_a_502() {
    let odd = b"HTTP/1.1 101 Switching Protocols\r\n\r\nraw bytes";
    let (status, _, body) = odd_answer(odd, Method::GET).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("switched protocols"), "{body}");
}

#[tokio::test]
async fn repeated_equal_lengths_are_made_one() {
    for (odd, method) in [
        (
            &b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\n"[..],
            Method::HEAD,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 5, 05\r\n\r\n",
            Method::HEAD,
        ),
        // hyper's client reads the list as 5; its server would pass the
        // list on (audit).
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\n\r\nhello",
            Method::GET,
        ),
    ] {
        let (status, headers, _) = odd_answer(odd, method).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(odd));
        let lengths: Vec<_> = headers.get_all("content-length").iter().collect();
        assert_eq!(lengths, ["5"], "{}", String::from_utf8_lossy(odd));
    }
}

#[tokio::test]
async fn an_answer_that_is_not_http_says_so() {
    let (status, _, body) = odd_answer(b"HTTX/1.1 2x0\r\n\r\n", Method::GET).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.contains("answered what the proxy cannot read"),
        "{body}"
    );
}

/// An answer refused while the request's body is still on its way up: the
/// rest of the body is not read, so the client's connection ends with the
/// answer, and says so (audit: it ended without a word).
#[tokio::test]
async fn an_answer_refused_mid_upload_closes_the_clients_connection() {
    let odd = b"HTTP/1.1 101 Switching Protocols\r\n\r\n";
    let (proxy, _stop) = proxy(upstream_answering(odd).await).await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::channel::Channel<Bytes, std::convert::Infallible>>();
    let (mut upload, body) = http_body_util::channel::Channel::new(1);
    let request = Request::post(format!("http://{proxy}/odd"))
        .body(body)
        .unwrap();
    upload
        .send_data(Bytes::from_static(b"a first part"))
        .await
        .unwrap();
    // The body never ends: `upload` is held until the answer came.
    let response = tokio::time::timeout(PATIENCE, client.request(request))
        .await
        .expect("an answer in time")
        .expect("an answer");
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(response.headers()["connection"], "close");
    drop(upload);
}

#[tokio::test]
async fn a_head_answered_with_lengths_that_disagree_or_are_not_numbers_is_a_502() {
    for (odd, says) in [
        (
            &b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 5\r\n\r\n"[..],
            "Content-Length values that disagree",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: abc\r\n\r\n",
            "a Content-Length that is not a number",
        ),
    ] {
        let (status, _, body) = odd_answer(odd, Method::HEAD).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{says}");
        // A HEAD's answer has no body: the reason is not read here.
        assert!(body.is_empty());
    }
}
