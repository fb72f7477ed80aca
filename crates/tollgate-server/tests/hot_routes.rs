//! `serve` answers its busiest routes before the router
//! (`tollgate_server::routes::HotRoutes`); these must be the router's answers,
//! byte for byte. Two servers with the same config and the same hand-moved
//! clock get the same requests, one through the router and one through the
//! hot routes, and every status, header and body is compared, and so are
//! the bad-request counters.

mod common;

use std::sync::Arc;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::header::CONTENT_LENGTH;
use axum::http::{HeaderValue, Method, Request, Response};
use http_body_util::BodyExt;
use tollgate::ManualClock;
use tollgate_server::http::MAX_BODY_BYTES;
use tollgate_server::routes::{router, HotRoutes};
use tollgate_server::{Config, Server, StoreHandle};
use tower::{Service, ServiceExt};

fn server() -> Server {
    let config = Config::parse(common::CONFIG).expect("test config is valid");
    let store = StoreHandle::for_config(&config).expect("a memory store");
    Server::new(config, store, Arc::new(ManualClock::new(common::START_MS)))
}

/// One request, built afresh for each service.
struct Ask {
    method: Method,
    uri: &'static str,
    headers: &'static [(&'static str, &'static str)],
    body: Vec<u8>,
}

impl Ask {
    fn new(method: Method, uri: &'static str) -> Self {
        Self {
            method,
            uri,
            headers: &[],
            body: Vec::new(),
        }
    }

    fn check(body: impl Into<Vec<u8>>) -> Self {
        Self {
            body: body.into(),
            headers: &[("content-type", "application/json")],
            ..Self::new(Method::POST, "/v1/check")
        }
    }

    fn auth(uri: &'static str, headers: &'static [(&'static str, &'static str)]) -> Self {
        Self {
            headers,
            ..Self::new(Method::GET, uri)
        }
    }

    fn request(&self) -> Request<Body> {
        let mut request = Request::builder().method(self.method.clone()).uri(self.uri);
        for (name, value) in self.headers {
            request = request.header(*name, *value);
        }
        request.body(Body::from(self.body.clone())).unwrap()
    }
}

/// Status, headers and body of `service`'s answer to `ask`, as hyper
/// writes them: with a `Content-Length` from a body of known size (axum's
/// router sets it itself; hyper adds it on the wire when it is missing).
async fn answer<S>(service: &mut S, ask: &Ask) -> (Response<()>, Bytes)
where
    S: Service<
        Request<Body>,
        Response = axum::response::Response,
        Error = std::convert::Infallible,
    >,
{
    let response = service
        .ready()
        .await
        .unwrap()
        .call(ask.request())
        .await
        .unwrap();
    let (mut parts, body) = response.into_parts();
    if let Some(length) = body.size_hint().exact() {
        parts
            .headers
            .entry(CONTENT_LENGTH)
            .or_insert_with(|| HeaderValue::from(length));
    }
    let body = body.collect().await.expect("a body").to_bytes();
    (Response::from_parts(parts, ()), body)
}

fn the_asks() -> Vec<Ask> {
    let mut asks = Vec::new();
    // Allowed, then rejected by the 2-per-second window, then a paid client.
    for _ in 0..3 {
        asks.push(Ask::check(r#"{"client":"alice"}"#));
    }
    asks.push(Ask::check(r#"{"client":"acme","cost":3}"#));
    asks.push(Ask::check(r#"{"client":"bob","plan":"paid"}"#));
    // The caller's mistakes.
    asks.push(Ask::check(r#"{"client":"bob","plan":"nope"}"#));
    asks.push(Ask::check(r#"{"client":"bob","cost":5000}"#));
    asks.push(Ask::check(r#"{"client":""}"#));
    asks.push(Ask::check(r#"{"client": "#));
    asks.push(Ask::check(""));
    asks.push(Ask::check(vec![b' '; MAX_BODY_BYTES + 1]));
    // A browser's request from a page of another origin (403).
    asks.push(Ask {
        headers: &[
            ("content-type", "text/plain"),
            ("origin", "http://evil.example"),
            ("sec-fetch-site", "cross-site"),
        ],
        ..Ask::check(r#"{"client":"alice"}"#)
    });
    asks.push(Ask {
        headers: &[("origin", "http://evil.example")],
        ..Ask::check(r#"{"client":"alice"}"#)
    });
    // Forward auth: allowed, then rejected, a plan, and mistakes.
    for _ in 0..3 {
        asks.push(Ask::auth("/v1/auth", &[("x-client-id", "carol")]));
    }
    asks.push(Ask::auth("/v1/auth?plan=paid", &[("x-client-id", "dave")]));
    asks.push(Ask::auth("/v1/auth?plan=", &[("x-client-id", "dave")]));
    asks.push(Ask::auth("/v1/auth?colour=red", &[("x-client-id", "dave")]));
    asks.push(Ask::auth("/v1/auth", &[]));
    // The health check, and the hot paths with other methods (the router's).
    asks.push(Ask::new(Method::GET, "/healthz"));
    // A query that is not UTF-8, refused before any route reads it (the
    // router's layer; the hot routes answered /healthz 200).
    asks.push(Ask::new(Method::GET, "/healthz?x=%E9"));
    asks.push(Ask {
        uri: "/v1/check?x=%E9",
        ..Ask::check(r#"{"client":"alice"}"#)
    });
    asks.push(Ask::auth(
        "/v1/auth?plan=fr%E9e",
        &[("x-client-id", "dave")],
    ));
    asks.push(Ask::new(Method::HEAD, "/healthz"));
    asks.push(Ask::new(Method::POST, "/healthz"));
    asks.push(Ask::new(Method::GET, "/v1/check"));
    asks.push(Ask::new(Method::POST, "/v1/auth"));
    asks.push(Ask::new(Method::GET, "/v1/remaining/alice"));
    asks
}

#[tokio::test]
async fn the_hot_routes_answer_as_the_router_does() {
    let (through_router, through_hot_routes) = (server(), server());
    let mut router = router(through_router.clone());
    let mut hot = HotRoutes::new(through_hot_routes.clone());
    for ask in the_asks() {
        let (expected, expected_body) = answer(&mut router, &ask).await;
        let (got, got_body) = answer(&mut hot, &ask).await;
        let what = format!("{} {}", ask.method, ask.uri);
        assert_eq!(got.status(), expected.status(), "{what}");
        assert_eq!(got.headers(), expected.headers(), "{what}");
        assert_eq!(got_body, expected_body, "{what}: {got_body:?}");
    }
    let counters = |server: &Server| {
        server
            .render_metrics()
            .lines()
            .filter(|line| line.contains("bad_requests") || line.contains("decisions_total"))
            .map(str::to_owned)
            .collect::<std::collections::BTreeSet<_>>()
    };
    let expected = counters(&through_router);
    assert!(
        expected.iter().any(|line| line.contains("bad_requests")),
        "{expected:?}"
    );
    assert_eq!(counters(&through_hot_routes), expected);
}
