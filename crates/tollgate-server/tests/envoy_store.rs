//! Envoy's rate limit service inside `tollgate serve`, on its store:
//! `/metrics` counts gRPC decisions, a Redis that is down gives the failure
//! policy's answer or gRPC `UNAVAILABLE`, as `[envoy] on_store_error` says,
//! and a repeat offender is answered by the rejection cache.

mod envoy_common;

use std::sync::Arc;

use tollgate::ManualClock;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_redis::testing::RedisServer;
use tollgate_server::{Config, Server, StoreHandle};
use tollgate_testkit::metric;

use envoy_common::*;

#[tokio::test]
async fn grpc_decisions_are_counted_in_metrics_per_plan_and_limit() {
    // Addresses on `free` (3 a day), API keys on `paid` (10 a day).
    let text = config_text("free").replace(
        "[[plans.free]]",
        "[[envoy.rules]]\ndomain = \"edge\"\ndescriptor = [{ key = \"api_key\" }]\nplan = \"paid\"\n\n[[plans.free]]",
    );
    let mut t = Running::start(&text).await;
    for _ in 0..4 {
        t.ask(request("edge", "remote_address", "10.0.0.9"))
            .await
            .unwrap();
    }
    // Two clients in one request: each decided once, on its own plan (the
    // looks taken first are not decisions).
    let mut both = request("edge", "api_key", "k1");
    both.descriptors
        .push(request("edge", "remote_address", "10.0.0.8").descriptors[0].clone());
    let response = t.ask(both).await.unwrap();
    assert_eq!(response.overall_code, Code::Ok as i32);
    // Not limited: not a decision.
    t.ask(request("elsewhere", "remote_address", "10.0.0.9"))
        .await
        .unwrap();

    let m = t.get("/metrics").await;
    let series = [
        (
            "tollgate_requests_total{plan=\"free\",outcome=\"allowed\"}",
            4,
        ),
        (
            "tollgate_requests_total{plan=\"free\",outcome=\"rejected\"}",
            1,
        ),
        (
            "tollgate_requests_total{plan=\"paid\",outcome=\"allowed\"}",
            1,
        ),
        (
            "tollgate_limit_decisions_total{plan=\"free\",limit=\"1d\",outcome=\"allowed\"}",
            4,
        ),
        (
            "tollgate_limit_decisions_total{plan=\"free\",limit=\"1d\",outcome=\"rejected\"}",
            1,
        ),
        (
            "tollgate_limit_decisions_total{plan=\"paid\",limit=\"1d\",outcome=\"allowed\"}",
            1,
        ),
        ("tollgate_frontend_decisions_total{frontend=\"grpc\"}", 6),
        ("tollgate_frontend_decisions_total{frontend=\"http\"}", 0),
        ("tollgate_decisions_by_total{decided_by=\"store\"}", 6),
        ("tollgate_store_errors_total{kind=\"transient\"}", 0),
        // One per gRPC request that asked the store.
        ("tollgate_decision_duration_seconds_count", 5),
    ];
    for (name, expected) in series {
        assert_eq!(metric(&m, name), expected, "{name}");
    }

    // The dashboard's top limited clients rank Envoy's clients too, by the
    // store's key of their descriptors, with the plan and what refused.
    let top: serde_json::Value = serde_json::from_str(&t.get("/v1/top").await).unwrap();
    let first = &top["clients"][0];
    assert_eq!(first["client"], "edge|remote_address=10.0.0.9", "{top}");
    assert_eq!(first["plan"], "free");
    assert_eq!(first["limited_by"], "1d");
    assert_eq!(first["count"], 1);
    // Inspected under that plan, the key is the client the store decided.
    let path = "/v1/clients/edge%7Cremote_address%3D10.0.0.9?plan=free";
    let state: serde_json::Value = serde_json::from_str(&t.get(path).await).unwrap();
    assert_eq!(state["limits"][0]["remaining"], 0, "{state}");
    t.stop().await;
}

/// Plan `free` (3 a day) on the Redis at `url`, its failure policy
/// `policy`, and the Envoy rule of [`config_text`]; `envoy_line` goes in
/// `[envoy]`.
fn redis_config(url: &str, policy: &str, envoy_line: &str) -> String {
    config_text("free").replace(
        "[envoy]\n",
        &format!(
            "[store]\nurl = \"{url}\"\nfailure_policy = \"{policy}\"\nprefix = \"envoy-test\"\ntimeout = \"200ms\"\n\n[envoy]\n{envoy_line}\n"
        ),
    )
}

#[tokio::test]
async fn a_redis_failure_is_the_failure_policys_answer_or_unavailable_as_configured() {
    let Some(mut redis) = RedisServer::spawn(
        "a_redis_failure_is_the_failure_policys_answer_or_unavailable_as_configured",
    ) else {
        return;
    };
    let url = redis.url();
    let mut by_policy = Running::start(&redis_config(&url, "fail-closed", "")).await;
    let mut unavailable = Running::start(&redis_config(
        &url,
        "fail-closed",
        "on_store_error = \"unavailable\"",
    ))
    .await;
    // Redis decides while it is up, one budget for both servers.
    let mut remaining = Vec::new();
    for t in [&mut by_policy, &mut unavailable] {
        let response = t
            .ask(request("edge", "remote_address", "10.0.0.1"))
            .await
            .unwrap();
        assert_eq!(response.overall_code, Code::Ok as i32);
        remaining.push(response.statuses[0].limit_remaining);
    }
    assert_eq!(remaining, [2, 1]);

    redis.kill();
    for _ in 0..2 {
        // Default: `[store] failure_policy` answers (fail-closed: OVER_LIMIT).
        let response = by_policy
            .ask(request("edge", "remote_address", "10.0.0.2"))
            .await
            .unwrap();
        assert_eq!(response.overall_code, Code::OverLimit as i32);
        // "unavailable": Envoy's failure_mode_deny decides.
        let status = unavailable
            .ask(request("edge", "remote_address", "10.0.0.2"))
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    }
    // The HTTP API of the same server keeps the failure policy.
    let http = reqwest::Client::new()
        .post(format!("http://{}/v1/check", unavailable.http))
        .body(r#"{"client":"c"}"#)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(http.contains("\"decided_by\":\"fail-closed\""), "{http}");

    let m = by_policy.get("/metrics").await;
    assert_eq!(
        metric(
            &m,
            "tollgate_decisions_by_total{decided_by=\"fail-closed\"}"
        ),
        2
    );
    assert_eq!(
        metric(&m, "tollgate_store_errors_total{kind=\"transient\"}"),
        2
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_requests_total{plan=\"free\",outcome=\"rejected\"}"
        ),
        2
    );
    let m = unavailable.get("/metrics").await;
    // Two gRPC failures and one HTTP decision by the failure policy.
    assert_eq!(
        metric(&m, "tollgate_store_errors_total{kind=\"transient\"}"),
        3
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_decisions_by_total{decided_by=\"fail-closed\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_requests_total{plan=\"free\",outcome=\"rejected\"}"
        ),
        1
    );
    // `/v1/stats` counts the gRPC calls too (their own guard's): one
    // decided by Redis while it was up, the three failures, the one
    // fail-closed answer.
    let stats: serde_json::Value =
        serde_json::from_str(&unavailable.get("/v1/stats").await).unwrap();
    let calls = &stats["store"]["calls"];
    assert_eq!(calls["store"], 1, "{calls}");
    assert_eq!(calls["transient_errors"], 3, "{calls}");
    assert_eq!(calls["fail_closed"], 1, "{calls}");
    by_policy.stop().await;
    unavailable.stop().await;
}

#[test]
fn on_store_error_is_checked_with_the_line_and_changing_it_needs_a_restart() {
    let text = config_text("free").replace(
        "grpc_listen = \"127.0.0.1:0\"",
        "grpc_listen = \"127.0.0.1:0\"\non_store_error = \"fail-open\"",
    );
    let error = Config::parse(&text).err().unwrap().to_string();
    assert!(
        error.contains("line 6,")
            && error.contains("unknown on_store_error \"fail-open\"")
            && error.contains("failure-policy, unavailable"),
        "{error}"
    );

    let default = Config::parse(&config_text("free")).unwrap();
    assert_eq!(default.envoy.on_store_error, None);
    let unavailable = Config::parse(&text.replace("\"fail-open\"", "\"unavailable\"")).unwrap();
    assert_eq!(
        unavailable.envoy.on_store_error,
        Some(tollgate_server::config::FailurePolicy::Unavailable)
    );
    let store = StoreHandle::for_config(&default).unwrap();
    let server = Server::new(default, store, Arc::new(ManualClock::new(0)));
    let report = server.apply(unavailable);
    assert_eq!(report.needs_restart, ["envoy.on_store_error"]);
}

#[tokio::test]
async fn envoys_repeat_offender_is_answered_by_the_rejection_cache() {
    let Some(mut redis) =
        RedisServer::spawn("envoys_repeat_offender_is_answered_by_the_rejection_cache")
    else {
        return;
    };
    // The gRPC service on its own guard (policy `unavailable`), with the
    // server's one rejection cache in front of it.
    let text = redis_config(
        &redis.url(),
        "fail-closed",
        "on_store_error = \"unavailable\"",
    );
    let mut t = Running::start(&text).await;
    let offender = || request("edge", "remote_address", "10.0.0.7");
    let mut codes = Vec::new();
    for _ in 0..5 {
        codes.push(t.ask(offender()).await.unwrap().overall_code);
    }
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    assert_eq!(codes, [ok, ok, ok, over, over]);
    let m = t.get("/metrics").await;
    assert_eq!(
        metric(&m, "tollgate_decisions_by_total{decided_by=\"store\"}"),
        4
    );
    assert_eq!(
        metric(&m, "tollgate_decisions_by_total{decided_by=\"cache\"}"),
        1
    );
    assert_eq!(metric(&m, "tollgate_rejection_cache_clients"), 1);
    // Without Redis the cache still knows the offender (its wait is a
    // day); anyone else meets the failure: gRPC UNAVAILABLE.
    redis.kill();
    assert_eq!(t.ask(offender()).await.unwrap().overall_code, over);
    let status = t
        .ask(request("edge", "remote_address", "10.0.0.8"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    t.stop().await;
}
