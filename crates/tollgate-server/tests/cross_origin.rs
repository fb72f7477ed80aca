//! `POST /v1/check` refuses what a browser sends from a page of another
//! origin, as Go's `net/http.CrossOriginProtection` does: such a page can
//! POST a `text/plain` body with `mode: "no-cors"` (a "simple" request, no
//! preflight) and would otherwise spend any client's quota through its
//! visitors' browsers. Requests with neither `Sec-Fetch-Site` nor `Origin`
//! (every client that is not a browser) are decided as before. Raw HTTP/1.1
//! on real sockets, so that `Host` is what the test writes; and the
//! audit's own case in a real headless Chromium.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{TestServer, CONFIG};
use serde_json::json;
use tollgate_testkit::browser::Browser;

/// A body the page of another origin sends: `text/plain`, as much of the
/// victim's quota as one request may take (the 1s limit is 2).
const SPEND: &str = r#"{"client":"victim","cost":2}"#;

/// `method path` with `headers` and `body` on a fresh connection to the
/// test server, with `Host: host`; the status and the body of the answer.
async fn raw(
    t: &TestServer,
    request_line: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let addr = t.base.trim_start_matches("http://").to_owned();
    let mut head = format!(
        "{request_line} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head.push_str(body);
    tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(&addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("a read timeout");
        stream.write_all(head.as_bytes()).expect("sent");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("an answer");
        let status = answer
            .get(9..12)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("not HTTP: {answer:?}"));
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .unwrap_or_default();
        (status, body)
    })
    .await
    .expect("the request ran")
}

/// The victim's day quota left (limit 1 of plan `free`: 5 a day).
async fn day_left(t: &TestServer) -> u64 {
    t.remaining("victim", 1).await
}

#[tokio::test]
async fn a_page_of_another_origin_cannot_spend_a_clients_quota() {
    let t = TestServer::start(CONFIG).await;
    let host = t.base.trim_start_matches("http://").to_owned();
    let from_another_origin: [&[(&str, &str)]; 6] = [
        // What Chromium sends for the no-cors fetch of a page on another site.
        &[
            ("Content-Type", "text/plain;charset=UTF-8"),
            ("Origin", "http://evil.example"),
            ("Sec-Fetch-Site", "cross-site"),
            ("Sec-Fetch-Mode", "no-cors"),
        ],
        // Another port of the same host is another origin (same site).
        &[
            ("Origin", "http://127.0.0.1:1"),
            ("Sec-Fetch-Site", "same-site"),
        ],
        // Sec-Fetch-Site decides even when Origin looks right.
        &[
            ("Origin", &format!("http://{host}")),
            ("Sec-Fetch-Site", "cross-site"),
        ],
        // A browser without Sec-Fetch-Site: its Origin against Host.
        &[
            ("Content-Type", "text/plain"),
            ("Origin", "http://evil.example"),
        ],
        &[("Origin", "http://127.0.0.1")],
        // A sandboxed frame or a data: URL sends an opaque origin.
        &[("Origin", "null")],
    ];
    for headers in from_another_origin {
        let (status, body) = raw(&t, "POST /v1/check", &host, headers, SPEND).await;
        assert_eq!(status, 403, "{headers:?}: {body}");
        let error = serde_json::from_str::<serde_json::Value>(&body).expect("JSON")["error"]
            .as_str()
            .expect("an error")
            .to_owned();
        assert!(error.contains("cross-origin request refused"), "{error}");
        assert_eq!(day_left(&t).await, 5, "{headers:?} spent the quota");
    }
    let metrics = t.get("/metrics").await.body;
    assert!(
        metrics.contains("tollgate_bad_requests_total{status=\"403\"} 6\n"),
        "{metrics}"
    );

    // The same origin, a request the user typed (none), the Origin of this
    // very host, and a client that is no browser (curl's form-urlencoded)
    // are decided.
    let decided: [&[(&str, &str)]; 4] = [
        &[
            ("Origin", &format!("http://{host}")),
            ("Sec-Fetch-Site", "same-origin"),
        ],
        &[("Sec-Fetch-Site", "none")],
        &[("Origin", &format!("http://{host}"))],
        &[("Content-Type", "application/x-www-form-urlencoded")],
    ];
    for (spent, headers) in decided.into_iter().enumerate() {
        let body = r#"{"client":"victim","cost":1}"#;
        let (status, answer) = raw(&t, "POST /v1/check", &host, headers, body).await;
        assert_eq!(status, 200, "{headers:?}: {answer}");
        assert!(answer.contains(r#""allowed":true"#), "{answer}");
        assert_eq!(day_left(&t).await, 4 - spent as u64, "{headers:?}");
        t.clock.advance(1_000);
    }
    t.stop().await;
}

/// Forward auth is left alone: nginx `auth_request` and Traefik pass the
/// user's own browser headers on, Origin included, for legitimate
/// cross-origin traffic to the API they guard.
#[tokio::test]
async fn forward_auth_still_decides_requests_from_other_origins() {
    let t = TestServer::start(CONFIG).await;
    let host = t.base.trim_start_matches("http://").to_owned();
    let headers = [
        ("X-Client-Id", "victim"),
        ("Origin", "https://app.example"),
        ("Sec-Fetch-Site", "cross-site"),
    ];
    let (status, body) = raw(&t, "GET /v1/auth", &host, &headers, "").await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(day_left(&t).await, 4);
    t.stop().await;
}

/// The audit's page: another origin (another host name and port) whose
/// script POSTs `text/plain` with `mode: "no-cors"` to `/v1/check`, which
/// Chromium sends without a preflight. The request reaches the server and
/// is refused; the server's own page (same origin) is still decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_cors_post_from_another_origin_spends_nothing_in_a_real_browser() {
    let Some(browser) = Browser::start("cross_origin_browser", 800, 600).await else {
        return;
    };
    let t = TestServer::start(CONFIG).await;
    let (other_origin, _) = tollgate_testkit::counting_upstream().await;
    let b = browser.client();
    b.goto(&format!("http://localhost:{}/", other_origin.port()))
        .await
        .expect("the other origin's page opens");
    let post = "return fetch(arguments[0], {method: 'POST', mode: 'no-cors', \
                headers: {'Content-Type': 'text/plain'}, body: arguments[1]}) \
                .then((response) => response.type, (error) => 'failed: ' + error);";
    let sent = b
        .execute(
            post,
            vec![json!(format!("{}/v1/check", t.base)), json!(SPEND)],
        )
        .await
        .expect("the script runs");
    // An opaque answer: the request went out, and its answer is hidden from the page.
    assert_eq!(sent, json!("opaque"));
    assert_eq!(
        day_left(&t).await,
        5,
        "the page of another origin spent the quota"
    );
    let metrics = t.get("/metrics").await.body;
    assert!(
        metrics.contains("tollgate_bad_requests_total{status=\"403\"} 1\n"),
        "the request reached the server and was refused: {metrics}"
    );

    b.goto(&format!("{}/", t.base))
        .await
        .expect("the dashboard opens");
    let same_origin = "return fetch('/v1/check', {method: 'POST', body: arguments[0]}) \
                       .then((response) => response.json()).then((decision) => decision.allowed);";
    let allowed = b
        .execute(same_origin, vec![json!(SPEND)])
        .await
        .expect("the script runs");
    assert_eq!(allowed, json!(true));
    assert_eq!(day_left(&t).await, 3);
    browser.finish().await;
    t.stop().await;
}
