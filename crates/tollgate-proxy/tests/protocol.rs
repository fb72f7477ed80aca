//! HTTP/1.1 at the edges of what the proxy passes on, byte for byte: a raw
//! upstream on 127.0.0.1 records each request head it gets and answers as
//! a test asks (even malformed), and raw clients send what a library
//! client would not. A request the proxy cannot forward is refused before
//! its decision (it uses no quota); a message is passed on with the framing
//! its body really has.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate::{AnyPolicy, Limit, ManualClock, MemoryBackend, Plan};
use tollgate_proxy::{KeySource, ProxyConfig};
use tollgate_tower::RateLimitConfig;

/// Every request head the upstream read, in order.
type Heads = Arc<Mutex<Vec<String>>>;

/// The upstream. `GET /chunked-with-length` is answered with both framings
/// (the body is the chunks' `abcdef`); `GET /http10` in HTTP/1.0 (as
/// `python3 -m http.server` answers); a `POST` is never answered (it waits
/// for a body to end); anything else gets `200 ok`.
async fn raw_upstream() -> (SocketAddr, Heads) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Heads::default();
    let seen = heads.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer_each(stream, seen.clone()));
        }
    });
    (addr, heads)
}

async fn answer_each(mut stream: TcpStream, heads: Heads) {
    let mut buffer = Vec::new();
    let mut chunk = [0; 4096];
    loop {
        let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        buffer.drain(..end + 4);
        heads.lock().unwrap().push(head.clone());
        let answer: &[u8] = if head.starts_with("POST") {
            // Read on until the client's side goes away.
            while matches!(stream.read(&mut chunk).await, Ok(n) if n > 0) {}
            return;
        } else if head.starts_with("GET /http10") {
            b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"
        } else if head.starts_with("GET /chunked-with-length") {
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n0\r\n\r\n"
        } else {
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        };
        if stream.write_all(answer).await.is_err() {
            return;
        }
    }
}

/// The proxy in front of `upstream`: 2 requests a day per `X-Client-Id`.
async fn proxy(upstream: SocketAddr) -> SocketAddr {
    let plan = Plan::new(
        "proxy",
        vec![Limit::new(
            "1d",
            AnyPolicy::from_name("sliding-window", 2, 86_400_000).unwrap(),
            false,
        )],
    )
    .unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let limits = RateLimitConfig::new(plan, Arc::new(MemoryBackend::new()), clock);
    let key = KeySource::Header(HeaderName::from_static("x-client-id"));
    let config = ProxyConfig::new(&format!("http://{upstream}"), key, limits)
        .unwrap()
        .response_timeout(Duration::from_secs(5));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(tollgate_proxy::run(
        listener,
        config,
        std::future::pending(),
    ));
    addr
}

/// Sends `request` on a connection of its own and reads the answer until
/// the proxy closes it (every request here says `Connection: close`, or is
/// refused), within 5 s.
async fn exchange(proxy: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer));
    read.await.expect("an answer within 5 s").unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

fn status(answer: &str) -> &str {
    answer.split(' ').nth(1).unwrap_or("none")
}

#[tokio::test]
async fn requests_the_proxy_cannot_forward_are_refused_before_their_decision() {
    let (upstream, heads) = raw_upstream().await;
    let proxy = proxy(upstream).await;
    for (request, why) in [
        (
            "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nX-Client-Id: c\r\nConnection: close\r\n\r\n",
            "CONNECT is not supported",
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\nX-Client-Id: c\r\nConnection: close\r\n\r\n",
            "more than once",
        ),
        (
            "GET / HTTP/1.1\r\nHost: u@h\r\nX-Client-Id: c\r\nConnection: close\r\n\r\n",
            "is not a host",
        ),
        (
            "POST / HTTP/1.1\r\nHost: h\r\nX-Client-Id: c\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            "\"gzip, chunked\" is not supported",
        ),
        (
            "POST / HTTP/1.1\r\nHost: h\r\nX-Client-Id: c\r\nTransfer-Encoding: chunked, chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            "\"chunked, chunked\" is not supported",
        ),
        (
            "GET / HTTP/1.1\r\nX-Client-Id: c\r\nConnection: close\r\n\r\n",
            "Host header is missing",
        ),
        (
            "GET / HTTP/1.1\r\nHost: h:1:2\r\nX-Client-Id: c\r\nConnection: close\r\n\r\n",
            "is not a host",
        ),
        (
            "GET http://a.example/x HTTP/1.1\r\nHost: b.example\r\nX-Client-Id: c\r\nConnection: close\r\n\r\n",
            "names another host",
        ),
    ] {
        let answer = exchange(proxy, request.as_bytes()).await;
        assert_eq!(status(&answer), "400", "{request:?}: {answer}");
        assert!(answer.contains(why), "{request:?}: {answer}");
    }
    assert!(
        heads.lock().unwrap().is_empty(),
        "{:?}",
        heads.lock().unwrap()
    );
    // None of them used any of the client's 2 requests.
    let fine = "GET / HTTP/1.1\r\nHost: h\r\nX-Client-Id: c\r\nConnection: close\r\n\r\n";
    for expected in ["200", "200", "429"] {
        let answer = exchange(proxy, fine.as_bytes()).await;
        assert_eq!(status(&answer), expected, "{answer}");
    }
    assert_eq!(heads.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn an_answer_framed_by_chunks_goes_on_whole_whatever_length_it_names() {
    let (upstream, _) = raw_upstream().await;
    let proxy = proxy(upstream).await;
    let request =
        "GET /chunked-with-length HTTP/1.1\r\nHost: h\r\nX-Client-Id: c\r\nConnection: close\r\n\r\n";
    let answer = exchange(proxy, request.as_bytes()).await;
    assert_eq!(status(&answer), "200", "{answer}");
    assert!(
        !answer
            .to_ascii_lowercase()
            .contains("content-length: 1\r\n"),
        "{answer}"
    );
    assert!(answer.contains("abcdef"), "the body cut short: {answer}");
}

/// The proxy speaks its own HTTP to its client: an HTTP/1.0 upstream does
/// not turn a 1.1 client's answer into 1.0 (which ends its keep-alive);
/// a 1.0 client still gets 1.0.
#[tokio::test]
async fn an_http10_upstream_answers_a_11_client_in_11() {
    let (upstream, _) = raw_upstream().await;
    let proxy = proxy(upstream).await;
    let request = "GET /http10 HTTP/1.1\r\nHost: h\r\nX-Client-Id: c\r\nConnection: close\r\n\r\n";
    let answer = exchange(proxy, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.ends_with("ok"), "{answer}");
    let request = "GET /http10 HTTP/1.0\r\nHost: h\r\nX-Client-Id: c\r\n\r\n";
    let answer = exchange(proxy, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.0 200 OK\r\n"), "{answer}");
}

#[tokio::test]
async fn connection_naming_host_does_not_take_the_host_away() {
    let (upstream, heads) = raw_upstream().await;
    let proxy = proxy(upstream).await;
    let request = "GET /named HTTP/1.1\r\nHost: api.example\r\nX-Client-Id: c\r\nConnection: Host, close\r\n\r\n";
    let answer = exchange(proxy, request.as_bytes()).await;
    assert_eq!(status(&answer), "200", "{answer}");
    let heads = heads.lock().unwrap();
    assert!(
        heads[0]
            .to_ascii_lowercase()
            .contains("\r\nhost: api.example"),
        "{heads:?}"
    );
}

#[tokio::test]
async fn a_request_body_that_breaks_off_is_the_clients_error_not_the_upstreams() {
    let (upstream, _) = raw_upstream().await;
    let proxy = proxy(upstream).await;
    // A chunk size line that is not one.
    let request = "POST /x HTTP/1.1\r\nHost: h\r\nX-Client-Id: c\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n";
    let answer = exchange(proxy, request.as_bytes()).await;
    assert_eq!(status(&answer), "400", "{answer}");
    assert!(answer.contains("could not be passed on"), "{answer}");
}
