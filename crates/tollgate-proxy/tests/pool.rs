//! The proxy's upstream connections: kept and reused between requests,
//! never reused when a response was not read to its end, and each request
//! on a kept one timed from its own start. A real upstream
//! (hyper, counting the connections it accepts) behind the real proxy,
//! both on 127.0.0.1 port 0.

mod pool_common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};

use pool_common::*;

#[tokio::test]
async fn requests_one_after_another_share_one_upstream_connection() {
    let accepted = Arc::new(AtomicUsize::new(0));
    let (proxy, _stop) = proxy(upstream(accepted.clone()).await).await;
    let client = client();
    for _ in 0..5 {
        assert_eq!(
            get(&client, proxy, "/a").await,
            (StatusCode::OK, Bytes::from_static(b"ok"))
        );
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_response_left_unread_closes_its_connection_and_the_next_request_gets_another() {
    let accepted = Arc::new(AtomicUsize::new(0));
    let (proxy, _stop) = proxy(upstream(accepted.clone()).await).await;
    let client = client();
    // The head and a first chunk arrive; then the client walks away.
    let request = Request::get(format!("http://{proxy}/endless"))
        .body(Full::default())
        .unwrap();
    let mut response = tokio::time::timeout(PATIENCE, client.request(request))
        .await
        .expect("a head in time")
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let first = tokio::time::timeout(PATIENCE, response.body_mut().frame())
        .await
        .expect("a chunk in time");
    assert!(first.is_some_and(|frame| frame.is_ok()));
    drop(response);
    // The upstream connection still carries that body: the next request
    // must not wait behind it, and gets a connection of its own.
    assert_eq!(
        get(&client, proxy, "/b").await,
        (StatusCode::OK, Bytes::from_static(b"ok"))
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    // Which is then kept.
    assert_eq!(
        get(&client, proxy, "/c").await,
        (StatusCode::OK, Bytes::from_static(b"ok"))
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// A kept connection times each request from that request's start: the
/// third request on one connection, silent, gets its 504 after the whole
/// timeout (not at a deadline left by an earlier request), and a new
/// connection then does the same.
#[tokio::test]
async fn a_silent_answer_on_a_kept_connection_is_a_504_after_the_timeout() {
    let timeout = Duration::from_millis(200);
    let accepted = Arc::new(AtomicUsize::new(0));
    let upstream = upstream(accepted.clone()).await;
    let (proxy, _stop) = proxy_with_timeout(upstream, timeout).await;
    let client = client();
    let late = (
        StatusCode::GATEWAY_TIMEOUT,
        Bytes::from(format!(
            "tollgate proxy: upstream http://{upstream} did not answer within 200 ms\n"
        )),
    );
    let ok = (StatusCode::OK, Bytes::from_static(b"ok"));
    for connections in [1, 2] {
        assert_eq!(get(&client, proxy, "/a").await, ok);
        assert_eq!(get(&client, proxy, "/b").await, ok);
        let asked = std::time::Instant::now();
        assert_eq!(get(&client, proxy, "/silent").await, late);
        // A lower bound only: a late answer cannot make it fail.
        assert!(asked.elapsed() >= timeout, "{:?}", asked.elapsed());
        // All three on one connection, which the 504 closed.
        assert_eq!(accepted.load(Ordering::SeqCst), connections);
    }
}
