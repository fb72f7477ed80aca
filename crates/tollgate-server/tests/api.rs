//! The HTTP API end to end: a real server on 127.0.0.1 port 0, real HTTP,
//! time moved by hand.

mod common;

use common::{TestServer, CONFIG};
use reqwest::StatusCode;

#[tokio::test]
async fn decisions_carry_the_ietf_headers_and_json() {
    let t = TestServer::start(CONFIG).await;
    let a = t.check("alice", 1).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.header("content-type"), Some("application/json"));
    assert_eq!(
        a.header("ratelimit-policy"),
        Some(r#""free-1s";q=2;w=1, "free-1d";q=5;w=86400"#)
    );
    assert_eq!(
        a.header("ratelimit"),
        Some(r#""free-1s";r=1;t=1, "free-1d";r=4;t=17280"#)
    );
    assert_eq!(a.header("retry-after"), None);
    let body = a.json();
    assert_eq!(body["allowed"], true);
    assert_eq!(body["plan"], "free");
    assert_eq!(body["client"], "alice");
    assert_eq!(body["retry_after_ms"], 0);
    assert_eq!(body["decided_by"], "store");
    let limits = body["limits"].as_array().unwrap();
    assert_eq!(limits.len(), 2);
    assert_eq!(limits[0]["name"], "1s");
    assert_eq!(limits[0]["policy"], "sliding-window");
    assert_eq!(limits[0]["limit"], 2);
    assert_eq!(limits[0]["remaining"], 1);
    assert_eq!(limits[0]["retry_after_ms"], 0);
    assert_eq!(limits[0]["reset_after_ms"], 1000);
    assert_eq!(limits[0]["allowed"], true);
    assert_eq!(limits[1]["policy"], "token-bucket");
    assert_eq!(limits[1]["remaining"], 4);
    t.stop().await;
}

#[tokio::test]
async fn rejection_is_429_worthy_with_retry_after_and_consumes_nothing() {
    let t = TestServer::start(CONFIG).await;
    assert_eq!(t.check("bob", 1).await.json()["allowed"], true);
    t.clock.advance(300);
    assert_eq!(t.check("bob", 1).await.json()["allowed"], true);
    t.clock.advance(100);
    let a = t.check("bob", 1).await;
    assert_eq!(a.status, StatusCode::OK);
    let body = a.json();
    assert_eq!(body["allowed"], false);
    // The first request leaves the window at +1000 ms: 600 ms from now.
    assert_eq!(body["retry_after_ms"], 600);
    assert_eq!(a.header("retry-after"), Some("1"));
    assert_eq!(body["limits"][0]["allowed"], false);
    // The day limit would have allowed it, but nothing was taken from it.
    assert_eq!(body["limits"][1]["remaining"], 3);
    assert_eq!(t.remaining("bob", 1).await, 3);
    // One millisecond early is still too early; on time is allowed.
    t.clock.advance(599);
    assert_eq!(t.check("bob", 1).await.json()["allowed"], false);
    t.clock.advance(1);
    assert_eq!(t.check("bob", 1).await.json()["allowed"], true);
    t.stop().await;
}

#[tokio::test]
async fn a_cost_over_the_limit_can_never_pass_and_says_so() {
    let t = TestServer::start(CONFIG).await;
    let a = t.check("carol", 3).await;
    let body = a.json();
    assert_eq!(body["allowed"], false);
    assert_eq!(body["retry_after_ms"], serde_json::Value::Null);
    assert_eq!(a.header("retry-after"), None);
    t.stop().await;
}

#[tokio::test]
async fn remaining_uses_nothing() {
    let t = TestServer::start(CONFIG).await;
    t.check("dave", 1).await;
    for _ in 0..5 {
        let a = t.get("/v1/remaining/dave").await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(
            a.header("ratelimit"),
            Some(r#""free-1s";r=1;t=1, "free-1d";r=4;t=17280"#)
        );
        let body = a.json();
        assert_eq!(body["cost"], 0);
        assert_eq!(body["allowed"], true);
        assert_eq!(body["limits"][0]["remaining"], 1);
    }
    t.check("dave", 1).await;
    let body = t.get("/v1/remaining/dave").await.json();
    // Nothing left this second: a request of cost 1 would not pass.
    assert_eq!(body["allowed"], false);
    assert_eq!(body["limits"][0]["remaining"], 0);
    // An unknown client has everything.
    let body = t.get("/v1/remaining/nobody").await.json();
    assert_eq!(body["limits"][0]["remaining"], 2);
    assert_eq!(body["limits"][1]["remaining"], 5);
    t.stop().await;
}

#[tokio::test]
async fn a_look_with_nothing_left_says_when_a_request_of_cost_1_passes() {
    let t = TestServer::start(CONFIG).await;
    t.check("frank", 1).await;
    t.clock.advance(300);
    t.check("frank", 1).await;
    t.clock.advance(100);
    let body = t.get("/v1/remaining/frank").await.json();
    assert_eq!(body["allowed"], false);
    // The first request leaves the 1 s window at +1000 ms, 600 ms from now:
    // the wait a check of cost 1 would be told, not a look's own 0.
    assert_eq!(body["retry_after_ms"], 600);
    let second = &body["limits"][0];
    assert_eq!(
        (
            &second["remaining"],
            &second["allowed"],
            &second["retry_after_ms"]
        ),
        (&0.into(), &false.into(), &600.into())
    );
    let day = &body["limits"][1];
    assert_eq!(
        (&day["remaining"], &day["allowed"], &day["retry_after_ms"]),
        (&3.into(), &true.into(), &0.into())
    );
    let check = t.check("frank", 1).await.json();
    assert_eq!(
        (&check["allowed"], &check["retry_after_ms"]),
        (&false.into(), &600.into())
    );
    // On time, the look and the check agree that it passes.
    t.clock.advance(600);
    let body = t.get("/v1/remaining/frank").await.json();
    assert_eq!(
        (&body["allowed"], &body["retry_after_ms"]),
        (&true.into(), &0.into())
    );
    assert_eq!(body["limits"][0]["retry_after_ms"], 0);
    t.stop().await;
}

#[tokio::test]
async fn a_look_at_a_spent_shadow_limit_gives_its_wait_too() {
    let t = TestServer::start(CONFIG).await;
    t.post_check(r#"{"client":"gina","plan":"dark"}"#).await;
    t.clock.advance(250);
    let body = t.get("/v1/remaining/gina?plan=dark").await.json();
    // The shadow limit (GCRA, 1 per second) rejects nothing, so the plan
    // would let a request pass; its own wait is still the one it would have.
    assert_eq!(
        (&body["allowed"], &body["retry_after_ms"]),
        (&true.into(), &0.into())
    );
    let trial = &body["limits"][1];
    assert_eq!(
        (&trial["shadow"], &trial["remaining"], &trial["allowed"]),
        (&true.into(), &0.into(), &false.into())
    );
    assert_eq!(trial["retry_after_ms"], 750);
    t.stop().await;
}

#[tokio::test]
async fn clients_get_their_plan_and_a_plan_can_be_named() {
    let t = TestServer::start(CONFIG).await;
    let body = t.check("acme", 1).await.json();
    assert_eq!(body["plan"], "paid");
    assert_eq!(body["limits"][0]["remaining"], 9);
    let body = t
        .post_check(r#"{"client":"erin","cost":4,"plan":"paid"}"#)
        .await
        .json();
    assert_eq!(
        (body["plan"].as_str(), body["allowed"].as_bool()),
        (Some("paid"), Some(true))
    );
    let body = t.get("/v1/remaining/erin?plan=paid").await.json();
    assert_eq!(body["limits"][0]["remaining"], 6);
    // Plans keep separate state: erin is untouched on her own plan.
    assert_eq!(t.remaining("erin", 0).await, 2);
    t.stop().await;
}

#[tokio::test]
async fn shadow_limits_decide_and_count_but_never_reject() {
    let t = TestServer::start(CONFIG).await;
    for i in 0..3 {
        let a = t.post_check(r#"{"client":"frank","plan":"dark"}"#).await;
        let body = a.json();
        assert_eq!(body["allowed"], true, "request {i}");
        assert_eq!(body["limits"][1]["shadow"], true);
        // The shadow gcra allows one per second: the later ones it would reject.
        assert_eq!(body["limits"][1]["allowed"], i == 0, "request {i}");
        // Shadow limits are not advertised in the headers.
        assert_eq!(a.header("ratelimit-policy"), Some(r#""dark-real";q=3;w=1"#));
    }
    let a = t.post_check(r#"{"client":"frank","plan":"dark"}"#).await;
    assert_eq!(a.json()["allowed"], false);
    // Requests 2 and 3 were let in despite the shadow limit; request 4 was
    // rejected by the real limit, and the shadow limit would have too.
    let metrics = t.get("/metrics").await.body;
    assert!(
        metrics.contains("tollgate_shadow_rejections_total{plan=\"dark\",limit=\"trial\"} 3\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tollgate_requests_total{plan=\"dark\",outcome=\"allowed\"} 3\n"),
        "{metrics}"
    );
    t.stop().await;
}

#[tokio::test]
async fn forward_auth_answers_204_then_429() {
    let t = TestServer::start(CONFIG).await;
    for _ in 0..2 {
        let a = t.get_with("/v1/auth", &[("X-Client-Id", "gina")]).await;
        assert_eq!(a.status, StatusCode::NO_CONTENT);
        assert!(a.header("ratelimit").is_some());
        assert!(a.body.is_empty());
    }
    let a = t.get_with("/v1/auth", &[("X-Client-Id", "gina")]).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(a.header("retry-after"), Some("1"));
    assert_eq!(a.json()["allowed"], false);
    // A plan can be named in the query (nginx: auth_request /v1/auth?plan=paid).
    let a = t
        .get_with("/v1/auth?plan=paid", &[("X-Client-Id", "gina")])
        .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let a = t.get("/v1/auth").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("x-client-id"), "{}", a.body);
    t.stop().await;
}

#[tokio::test]
async fn forward_auth_can_read_another_header_or_the_api_key() {
    let custom = CONFIG.replace(
        "max_cost = 1000",
        "max_cost = 1000\n[auth]\nheader = \"X-User\"",
    );
    let t = TestServer::start(&custom).await;
    let a = t.get_with("/v1/auth", &[("X-User", "hank")]).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let a = t.get_with("/v1/auth", &[("X-Client-Id", "hank")]).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    t.stop().await;

    let keyed = CONFIG.replace("max_cost = 1000", "max_cost = 1000\n[auth]\napi_key = true");
    let t = TestServer::start(&keyed).await;
    let a = t
        .get_with("/v1/auth", &[("Authorization", "Bearer acme")])
        .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    // The key is the client id: acme is on the paid plan.
    assert_eq!(a.header("ratelimit-policy"), Some(r#""paid-1s";q=10;w=1"#));
    let a = t.get_with("/v1/auth", &[("X-Api-Key", "acme")]).await;
    assert_eq!(a.header("ratelimit"), Some(r#""paid-1s";r=8;t=1"#));
    let a = t
        .get_with("/v1/auth", &[("Authorization", "Basic xyz")])
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("Bearer"));
    let a = t.get("/v1/auth").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("API key"));
    t.stop().await;
}

/// Every front end reads the API key by one parser (tollgate-http): an
/// `Authorization` of another scheme is not the key, `X-Api-Key` is.
#[tokio::test]
async fn forward_auth_reads_x_api_key_beside_another_authorization_scheme() {
    let keyed = CONFIG.replace("max_cost = 1000", "max_cost = 1000\n[auth]\napi_key = true");
    let t = TestServer::start(&keyed).await;
    let a = t
        .get_with(
            "/v1/auth",
            &[("Authorization", "Basic xyz"), ("X-Api-Key", "acme")],
        )
        .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT, "{}", a.body);
    assert_eq!(a.header("ratelimit"), Some(r#""paid-1s";r=9;t=1"#));
    t.stop().await;
}

#[tokio::test]
async fn health_and_unknown_routes() {
    let t = TestServer::start(CONFIG).await;
    let a = t.get("/healthz").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json()["status"], "ok");
    let a = t.get("/v1/nope").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert!(a.error().contains("/v1/nope"));
    let a = t.get("/v1/check").await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(a.error().contains("GET"));
    t.stop().await;
}

#[tokio::test]
async fn concurrent_requests_never_exceed_the_limit() {
    let t = TestServer::start(CONFIG).await;
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let http = t.http.clone();
        let url = format!("{}/v1/check", t.base);
        tasks.push(tokio::spawn(async move {
            let response = http
                .post(url)
                .body(r#"{"client":"acme"}"#)
                .send()
                .await
                .unwrap();
            let body: serde_json::Value =
                serde_json::from_str(&response.text().await.unwrap()).unwrap();
            body["allowed"].as_bool().unwrap()
        }));
    }
    let mut allowed = 0;
    for task in tasks {
        allowed += usize::from(task.await.unwrap());
    }
    assert_eq!(allowed, 10);
    t.stop().await;
}

#[tokio::test]
async fn shutdown_finishes_and_closes_the_listener() {
    let t = TestServer::start(CONFIG).await;
    let base = t.base.clone();
    assert_eq!(t.check("ivan", 1).await.status, StatusCode::OK);
    t.stop().await;
    let after = reqwest::Client::new()
        .get(format!("{base}/healthz"))
        .send()
        .await;
    assert!(after.is_err(), "the server still answers after shutdown");
}

#[tokio::test]
async fn several_listeners_share_one_limit_and_one_shutdown() {
    use std::sync::Arc;
    use tollgate_server::{Config, Server, StoreHandle};

    let config = Config::parse(CONFIG).unwrap();
    let store = StoreHandle::for_config(&config).unwrap();
    let clock = Arc::new(tollgate::ManualClock::new(common::START_MS));
    let server = Server::new(config, store, clock);
    let a = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let b = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let urls = [a.local_addr().unwrap(), b.local_addr().unwrap()]
        .map(|addr| format!("http://{addr}/v1/check"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(tollgate_server::run_all(vec![a, b], server, async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    let mut verdicts = Vec::new();
    for url in urls.iter().cycle().take(3) {
        let body = http
            .post(url)
            .body(r#"{"client":"uma"}"#)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        verdicts.push(body["allowed"].as_bool().unwrap());
    }
    assert_eq!(verdicts, [true, true, false]);
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}
