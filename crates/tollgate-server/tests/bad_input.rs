//! Every kind of bad input gets a 4xx with a JSON error naming the problem,
//! and changes no state.

mod common;

use std::io::{Read, Write};

use common::{TestServer, CONFIG};
use reqwest::StatusCode;

/// Sends `body` to `/v1/check` and expects `status` with an error containing `needle`.
async fn refused(t: &TestServer, body: impl Into<reqwest::Body>, status: StatusCode, needle: &str) {
    let a = t.post_check(body).await;
    assert_eq!(a.status, status, "{}", a.body);
    assert_eq!(a.header("content-type"), Some("application/json"));
    let error = a.error();
    assert!(
        error.contains(needle),
        "{error:?} should mention {needle:?}"
    );
    assert!(a.header("ratelimit").is_none());
}

#[tokio::test]
async fn bad_check_bodies_are_named_and_change_nothing() {
    let t = TestServer::start(CONFIG).await;
    assert_eq!(t.check("victim", 1).await.json()["allowed"], true);
    let before = (
        t.remaining("victim", 0).await,
        t.remaining("victim", 1).await,
    );

    let bad = StatusCode::BAD_REQUEST;
    refused(&t, "", bad, "body is empty").await;
    refused(&t, "{\"client\": \"victim\"", bad, "malformed JSON").await;
    refused(&t, "client=victim", bad, "must be a JSON object").await;
    // An array is not a check, whatever it holds: serde would read a
    // struct from a sequence of its fields.
    refused(&t, "[\"victim\"]", bad, "must be a JSON object").await;
    refused(&t, "[\"victim\", 1, null]", bad, "must be a JSON object").await;
    let bom = "\u{feff}{\"client\": \"victim\"}";
    refused(&t, bom, bad, "byte-order mark").await;
    refused(
        &t,
        " [\"victim\", 1, \"free\"]",
        bad,
        "must be a JSON object",
    )
    .await;
    refused(&t, "\"victim\"", bad, "must be a JSON object").await;
    refused(&t, "{\"cost\": 1}", bad, "missing field \"client\"").await;
    refused(&t, "{\"client\": \"\"}", bad, "client id is empty").await;
    // A null is not a value, nor a field left out.
    refused(&t, "{\"client\": null}", bad, "\"client\" is null").await;
    refused(
        &t,
        "{\"client\": \"victim\", \"cost\": null}",
        bad,
        "\"cost\" is null: give a whole number from 1 to",
    )
    .await;
    refused(
        &t,
        "{\"client\": \"victim\", \"plan\": null}",
        bad,
        "\"plan\" is null",
    )
    .await;
    refused(&t, "{\"client\": 42}", bad, "invalid type").await;
    let long = format!("{{\"client\": \"{}\"}}", "v".repeat(257));
    refused(&t, long, bad, "257 bytes long, over the limit of 256").await;
    refused(
        &t,
        "{\"client\": \"victim\", \"cost\": 0}",
        bad,
        "cost must be at least 1",
    )
    .await;
    refused(
        &t,
        "{\"client\": \"victim\", \"cost\": 1001}",
        bad,
        "over the maximum of 1000",
    )
    .await;
    refused(
        &t,
        "{\"client\": \"victim\", \"cost\": 4294967296}",
        bad,
        "over the maximum",
    )
    .await;
    refused(
        &t,
        "{\"client\": \"victim\", \"cost\": -1}",
        bad,
        "\"cost\" is -1: give a whole number from 1 to",
    )
    .await;
    refused(
        &t,
        "{\"client\": \"victim\", \"cost\": 2.5}",
        bad,
        "\"cost\" is 2.5: give a whole number from 1 to",
    )
    .await;
    refused(
        &t,
        "{\"client\": \"victim\", \"cost\": \"1\"}",
        bad,
        "invalid request body: invalid type: string \"1\", expected \"cost\"",
    )
    .await;
    refused(
        &t,
        "{\"client\": \"victim\", \"plan\": \"gold\"}",
        bad,
        "unknown plan \"gold\": known plans are dark, free, paid",
    )
    .await;
    refused(
        &t,
        "{\"client\": \"victim\", \"plan\": \"\"}",
        bad,
        "\"plan\" is empty",
    )
    .await;
    refused(
        &t,
        "{\"client\": \"victim\", \"cots\": 1}",
        bad,
        "unknown field `cots`",
    )
    .await;
    refused(
        &t,
        b"{\"client\": \"vi\xffctim\"}".to_vec(),
        bad,
        "malformed JSON",
    )
    .await;
    let huge = format!(
        "{{\"client\": \"victim\", \"pad\": \"{}\"}}",
        "x".repeat(64 * 1024)
    );
    refused(
        &t,
        huge,
        StatusCode::PAYLOAD_TOO_LARGE,
        "over the limit of 65536 bytes",
    )
    .await;

    // The check reads no query: a plan asked for there is refused, not
    // silently replaced by the client's own.
    let a = t
        .post_json("/v1/check?plan=gold", "{\"client\": \"victim\"}")
        .await;
    assert_eq!(a.status, bad, "{}", a.body);
    assert!(
        a.error().contains("reads no query string (got ?plan=gold)"),
        "{}",
        a.body
    );

    // A client id of exactly 256 bytes is fine.
    let fits = format!("{{\"client\": \"{}\"}}", "v".repeat(256));
    assert_eq!(t.post_check(fits).await.status, StatusCode::OK);

    assert_eq!(
        (
            t.remaining("victim", 0).await,
            t.remaining("victim", 1).await
        ),
        before
    );
    let metrics = t.get("/metrics").await.body;
    assert!(
        metrics.contains("tollgate_bad_requests_total{status=\"400\"} 26\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tollgate_bad_requests_total{status=\"413\"} 1\n"),
        "{metrics}"
    );
    t.stop().await;
}

#[tokio::test]
async fn bad_remaining_and_auth_requests_are_named() {
    let t = TestServer::start(CONFIG).await;
    let a = t.get(&format!("/v1/remaining/{}", "w".repeat(300))).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("300 bytes"));
    let a = t.get("/v1/remaining/w?plan=gold").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("unknown plan \"gold\""));
    let a = t.get("/v1/remaining/w?plan=").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("empty"));
    let a = t.get("/v1/remaining/w?color=red").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("plan=NAME"), "{}", a.body);
    let a = t.get("/v1/remaining/%FF").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("path"), "{}", a.body);

    let a = t.get_with("/v1/auth", &[("X-Client-Id", "")]).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("empty"));
    let long = "w".repeat(257);
    let a = t
        .get_with("/v1/auth", &[("X-Client-Id", long.as_str())])
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("257 bytes"));
    let a = t
        .get_with("/v1/auth?plan=gold", &[("X-Client-Id", "w")])
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("unknown plan"));

    // Two client ids in one request: neither is charged.
    let a = t
        .get_with("/v1/auth", &[("X-Client-Id", "w"), ("X-Client-Id", "w2")])
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.body);
    assert!(
        a.error()
            .contains("x-client-id header is given more than once"),
        "{}",
        a.body
    );
    assert_eq!(t.remaining("w2", 0).await, 2);

    // None of it touched client "w".
    assert_eq!(t.remaining("w", 0).await, 2);
    let metrics = t.get("/metrics").await.body;
    assert!(
        metrics.contains("tollgate_requests_total{plan=\"free\",outcome=\"allowed\"} 0\n"),
        "{metrics}"
    );
    t.stop().await;
}

/// A query string whose percent-escapes are not UTF-8 is refused naming
/// the escape: axum's `Query` decoded `?client=caf%E9` as "caf\u{FFFD}",
/// another client, and showed that one's state, where the path form
/// `/v1/clients/caf%E9` is refused (an audit).
#[tokio::test]
async fn a_query_that_is_not_utf8_is_refused_not_read_as_another_client() {
    let t = TestServer::start(CONFIG).await;
    t.server
        .decide("caf\u{FFFD}", None, 1)
        .await
        .expect("decided");
    for path in [
        "/v1/clients?client=caf%E9",
        "/v1/clients?client=%FF",
        "/v1/clients/w?plan=%FF",
        "/v1/remaining/w?plan=fr%E9e",
        "/v1/top?by=%E9",
    ] {
        let a = t.get(path).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{path}: {}", a.body);
        assert!(a.error().contains("not UTF-8"), "{path}: {}", a.body);
    }
    let a = t
        .get_with("/v1/auth?plan=fr%E9e", &[("X-Client-Id", "w")])
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.body);
    assert!(a.error().contains("not UTF-8"), "{}", a.body);
    assert_eq!(t.remaining("w", 0).await, 2, "nothing consumed");
    // The same id written as UTF-8 is read as it is.
    let a = t.get("/v1/clients?client=caf%EF%BF%BD").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.json()["client"], "caf\u{FFFD}");
    t.stop().await;
}

/// A body sent in a transfer coding other than one `chunked` (`gzip,
/// chunked`, `chunked` twice, on one line or two): hyper takes one chunked
/// coding off and hands on the rest, which serve would read as JSON; it is
/// refused with 501 (RFC 9112 §6.1), decided for nothing (an audit and a
/// review: both were decided and charged).
#[tokio::test]
async fn a_body_in_a_transfer_coding_besides_chunked_is_refused() {
    let t = TestServer::start(CONFIG).await;
    let body = r#"{"client":"gz"}"#;
    let codings = [
        "Transfer-Encoding: gzip, chunked\r\n",
        "Transfer-Encoding: chunked, chunked\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
    ];
    for coding in codings {
        let addr = t.base.trim_start_matches("http://").to_owned();
        let request = format!(
            "POST /v1/check HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{coding}\r\n\
             {:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        );
        let answer = raw_exchange(addr, request).await;
        assert!(answer.starts_with("HTTP/1.1 501"), "{coding}: {answer}");
        assert!(answer.contains("Transfer-Encoding"), "{coding}: {answer}");
    }
    assert_eq!(t.remaining("gz", 0).await, 2, "nothing charged");
    t.stop().await;
}

/// `request` sent as it is on a new connection to `addr`, and all that
/// comes back until the server closes it.
async fn raw_exchange(addr: String, request: String) -> String {
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(&addr).expect("connect");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("a read timeout");
        stream.write_all(request.as_bytes()).expect("sent");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("an answer");
        answer
    })
    .await
    .expect("the request ran")
}

/// A chunked body whose framing is broken says what broke (hyper's cause),
/// not only that the body could not be read (an audit).
#[tokio::test]
async fn a_broken_chunked_body_says_what_is_wrong_with_it() {
    let t = TestServer::start(CONFIG).await;
    let addr = t.base.trim_start_matches("http://").to_owned();
    let request = "POST /v1/check HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
                   Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n";
    let answer = raw_exchange(addr, request.to_owned()).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("chunk size"), "{answer}");
    let said = "error reading a body from connection";
    assert_eq!(answer.matches(said).count(), 1, "said once: {answer}");
    t.stop().await;
}
