//! The rate limit service on 127.0.0.1 port 0, called by a tonic client as
//! Envoy would call it: rules replaced while serving, malformed requests,
//! store failures, the health check, long client keys.

mod common;
mod grpc_common;

use std::sync::Arc;
use std::time::Duration;

use tollgate::testing::FailingStore;
use tollgate::{FailurePolicy, ManualClock};
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_envoy::{Rules, RulesConfig};
use tollgate_guard::GuardedStore;

use grpc_common::*;

#[tokio::test]
async fn rules_can_be_replaced_while_serving_and_unchanged_limits_keep_their_counts() {
    let clock = Arc::new(ManualClock::new(0));
    let mut server = Server::memory(clock).await;
    let key = || descriptor(&[("api_key", "k")]);
    server.ask(request(vec![key()])).await;
    server.ask(request(vec![ip("10.0.0.1")])).await;

    // New rules: only API keys are limited; the per-ip rule is gone.
    let reloaded = r#"
        [[rules]]
        domain = "edge"
        descriptor = [{ key = "api_key" }]
        plan = "per-key"
        "#;
    let rules = Rules::new(RulesConfig::from_toml(reloaded).unwrap(), &plans()).unwrap();
    server.rules.replace(rules);

    let response = server.ask(request(vec![key(), ip("10.0.0.1")])).await;
    // per-key (5/s) kept its count: 3 left after this one; per-ip is unlimited now.
    assert_eq!(response.statuses[0].limit_remaining, 3);
    assert_eq!(response.statuses[1].current_limit, None);
    server.stop().await;
}

#[tokio::test]
async fn malformed_requests_are_invalid_arguments() {
    let clock = Arc::new(ManualClock::new(0));
    let mut server = Server::memory(clock).await;
    let no_domain = RateLimitRequest {
        domain: String::new(),
        ..request(vec![ip("10.0.0.1")])
    };
    let error = server
        .running
        .client
        .should_rate_limit(no_domain)
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(error.message().contains("domain"), "{}", error.message());
    let error = server
        .running
        .client
        .should_rate_limit(request(vec![]))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    let too_many = (0..=tollgate_envoy::service::MAX_DESCRIPTORS)
        .map(|i| descriptor(&[("api_key", &i.to_string())]))
        .collect();
    let error = server
        .running
        .client
        .should_rate_limit(request(too_many))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(
        error.message().contains("at most 1024"),
        "{}",
        error.message()
    );
    server.stop().await;
}

#[tokio::test]
async fn store_failures_are_unavailable_or_the_configured_answer() {
    let clock = Arc::new(ManualClock::new(0));
    let mut server = Server::start(Arc::new(FailingStore::down()), clock.clone()).await;
    let error = server
        .running
        .client
        .should_rate_limit(request(vec![ip("10.0.0.1")]))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::Unavailable);
    // Unmatched descriptors never touch the store.
    let fine = server
        .ask(request(vec![descriptor(&[("nope", "x")])]))
        .await;
    assert_eq!(fine.overall_code, Code::Ok as i32);
    server.stop().await;

    for (policy, code) in [
        (FailurePolicy::FailOpen, Code::Ok),
        (FailurePolicy::FailClosed, Code::OverLimit),
    ] {
        let store = GuardedStore::new(FailingStore::down(), Duration::from_secs(1), policy);
        let mut server = Server::start(Arc::new(store), clock.clone()).await;
        let response = server
            .ask(request(vec![
                ip("10.0.0.1"),
                descriptor(&[("api_key", "k")]),
            ]))
            .await;
        assert_eq!(codes(&response), [code, code], "{policy:?}");
        assert_eq!(response.overall_code, code as i32);
        server.stop().await;
    }
}

#[tokio::test]
async fn grpc_health_reports_serving() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let server = Server::memory(Arc::new(ManualClock::new(0))).await;
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", server.running.addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let response = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            response.status,
            ServingStatus::Serving as i32,
            "{service:?}"
        );
    }
    drop(health);
    server.stop().await;
}

/// A client key over 256 bytes is limited as any other (shortened to its
/// start and digest), never refused: Envoy would let a refused request
/// through.
#[tokio::test]
async fn long_client_keys_are_limited_not_refused() {
    let mut server = Server::memory(Arc::new(ManualClock::new(0))).await;
    let long = |tail: &str| {
        let value = format!("{}{tail}", "v".repeat(4 * tollgate::MAX_CLIENT_BYTES));
        RateLimitRequest {
            hits_addend: 3,
            ..request(vec![descriptor(&[("api_key", &value)])])
        }
    };
    assert_eq!(codes(&server.ask(long("a")).await), [Code::Ok]);
    assert_eq!(
        codes(&server.ask(long("a")).await),
        [Code::OverLimit],
        "5 per second: 3 + 3"
    );
    assert_eq!(
        codes(&server.ask(long("b")).await),
        [Code::Ok],
        "another key, its own limit"
    );
    server.stop().await;
}
