//! The rate limit service on 127.0.0.1 port 0, called by a tonic client as
//! Envoy would call it; time moved by hand: answers, costs, all or nothing.

mod common;
mod grpc_common;

use std::sync::Arc;

use tollgate::{ManualClock, MemoryBackend, Plan, PlanDecision, Store, StoreFuture};
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_envoy::pb::google::protobuf::UInt64Value;

use grpc_common::*;

#[tokio::test]
async fn one_limit_per_address_with_full_descriptor_status() {
    let clock = Arc::new(ManualClock::new(50_000));
    let mut server = Server::memory(clock.clone()).await;

    let first = server.ask(request(vec![ip("10.0.0.1")])).await;
    assert_eq!(first.overall_code, Code::Ok as i32);
    let status = &first.statuses[0];
    let limit = status.current_limit.as_ref().unwrap();
    assert_eq!(limit.name, "per-ip-1s");
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (2, Unit::Second as i32)
    );
    assert_eq!(status.limit_remaining, 1);
    let reset = status.duration_until_reset.unwrap();
    assert_eq!((reset.seconds, reset.nanos), (1, 0));
    assert_eq!(
        header(&first, "ratelimit-policy"),
        Some(r#""per-ip-1s";q=2;w=1"#)
    );
    assert_eq!(header(&first, "ratelimit"), Some(r#""per-ip-1s";r=1;t=1"#));
    assert_eq!(header(&first, "retry-after"), None);

    clock.advance(300);
    assert_eq!(
        server.ask(request(vec![ip("10.0.0.1")])).await.overall_code,
        Code::Ok as i32
    );
    let third = server.ask(request(vec![ip("10.0.0.1")])).await;
    assert_eq!(third.overall_code, Code::OverLimit as i32);
    assert_eq!(codes(&third), [Code::OverLimit]);
    assert_eq!(third.statuses[0].limit_remaining, 0);
    assert_eq!(header(&third, "retry-after"), Some("1"));

    // Another address has its own budget; the first is free again 1 s after its first call.
    let other = server.ask(request(vec![ip("10.0.0.2")])).await;
    assert_eq!(other.overall_code, Code::Ok as i32);
    clock.set(51_000);
    let later = server.ask(request(vec![ip("10.0.0.1")])).await;
    assert_eq!(later.overall_code, Code::Ok as i32);
    server.stop().await;
}

#[tokio::test]
async fn a_fixed_value_is_one_shared_limit_and_unmatched_descriptors_are_ok() {
    let clock = Arc::new(ManualClock::new(0));
    let mut server = Server::memory(clock).await;
    let expensive = || descriptor(&[("generic_key", "expensive")]);
    let cheap = || descriptor(&[("generic_key", "cheap")]);
    let other_domain = RateLimitRequest {
        domain: "elsewhere".into(),
        ..request(vec![ip("10.0.0.1")])
    };
    for _ in 0..3 {
        let response = server.ask(request(vec![expensive(), cheap()])).await;
        assert_eq!(codes(&response), [Code::Ok, Code::Ok]);
        // The unmatched descriptor has no limit to report.
        assert_eq!(response.statuses[1].current_limit, None);
    }
    let response = server.ask(request(vec![cheap(), expensive()])).await;
    assert_eq!(codes(&response), [Code::Ok, Code::OverLimit]);
    assert_eq!(response.overall_code, Code::OverLimit as i32);
    // Token bucket, 3 per minute: the next token in 20 s.
    assert_eq!(header(&response, "retry-after"), Some("20"));
    let unmatched = server.ask(other_domain).await;
    assert_eq!(unmatched.overall_code, Code::Ok as i32);
    assert!(unmatched.response_headers_to_add.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_rejected_request_consumes_nothing_from_any_descriptor() {
    let clock = Arc::new(ManualClock::new(0));
    let mut server = Server::memory(clock).await;
    let key = || descriptor(&[("api_key", "k1")]);
    let expensive = || descriptor(&[("generic_key", "expensive")]);
    // Use up the shared limit (3), while the per-key limit (5/s) takes 3 too.
    for _ in 0..3 {
        let response = server.ask(request(vec![key(), expensive()])).await;
        assert_eq!(response.overall_code, Code::Ok as i32);
    }
    for _ in 0..4 {
        let response = server.ask(request(vec![key(), expensive()])).await;
        assert_eq!(codes(&response), [Code::Ok, Code::OverLimit]);
        // Reported as it stays: 2 of 5 left this second.
        assert_eq!(response.statuses[0].limit_remaining, 2);
    }
    // Those rejections took nothing from the key's budget: two more pass alone.
    let alone = server.ask(request(vec![key()])).await;
    assert_eq!(alone.statuses[0].limit_remaining, 1);
    let alone = server.ask(request(vec![key()])).await;
    assert_eq!(
        (alone.overall_code, alone.statuses[0].limit_remaining),
        (Code::Ok as i32, 0)
    );
    assert_eq!(
        server.ask(request(vec![key()])).await.overall_code,
        Code::OverLimit as i32
    );
    server.stop().await;
}

/// The memory store with an await point in every check, as a networked
/// store has: concurrent requests interleave between their store calls.
struct SlowStore(MemoryBackend);

impl Store for SlowStore {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        StoreFuture::new(async move {
            tokio::task::yield_now().await;
            self.0.check(plan, client, now_ms, cost).await
        })
    }
}

#[tokio::test]
async fn concurrent_multi_descriptor_requests_stay_all_or_nothing() {
    let clock = Arc::new(ManualClock::new(0));
    let store = Arc::new(SlowStore(MemoryBackend::new()));
    let mut server = Server::start(store, clock).await;
    let both = || {
        request(vec![
            descriptor(&[("api_key", "k2")]),
            descriptor(&[("generic_key", "expensive")]),
        ])
    };
    let calls: Vec<_> = (0..24)
        .map(|_| {
            let mut client = server.running.client.clone();
            let request = both();
            tokio::spawn(async move {
                client
                    .should_rate_limit(request)
                    .await
                    .unwrap()
                    .into_inner()
            })
        })
        .collect();
    let mut allowed = 0;
    for call in calls {
        if call.await.unwrap().overall_code == Code::Ok as i32 {
            allowed += 1;
        }
    }
    // The shared limit lets 3 through; the key's 5/s lost exactly those 3.
    assert_eq!(allowed, 3);
    let alone = server
        .ask(request(vec![descriptor(&[("api_key", "k2")])]))
        .await;
    assert_eq!(
        (alone.overall_code, alone.statuses[0].limit_remaining),
        (Code::Ok as i32, 1)
    );
    server.stop().await;
}

#[tokio::test]
async fn hits_addend_is_the_cost_and_repeated_descriptors_add_up() {
    let clock = Arc::new(ManualClock::new(0));
    let mut server = Server::memory(clock).await;
    let key = |name: &str| descriptor(&[("api_key", name)]);

    // Request level: 4 of 5.
    let response = server
        .ask(RateLimitRequest {
            hits_addend: 4,
            ..request(vec![key("a")])
        })
        .await;
    assert_eq!(response.statuses[0].limit_remaining, 1);

    // Descriptor level wins over request level; 0 counts as 1.
    let mut heavy = key("b");
    heavy.hits_addend = Some(UInt64Value { value: 3 });
    let mut zero = key("c");
    zero.hits_addend = Some(UInt64Value { value: 0 });
    let response = server
        .ask(RateLimitRequest {
            hits_addend: 2,
            ..request(vec![heavy, zero])
        })
        .await;
    let remaining: Vec<u32> = response
        .statuses
        .iter()
        .map(|s| s.limit_remaining)
        .collect();
    assert_eq!(remaining, [2, 4]);

    // The same client twice in one request counts both: 3 + 3 > 5.
    let response = server
        .ask(RateLimitRequest {
            hits_addend: 3,
            ..request(vec![key("d"), key("d")])
        })
        .await;
    assert_eq!(codes(&response), [Code::OverLimit, Code::OverLimit]);
    let response = server
        .ask(RateLimitRequest {
            hits_addend: 5,
            ..request(vec![key("d")])
        })
        .await;
    assert_eq!(codes(&response), [Code::Ok]);
    // Costs no limit may grant (over u32::MAX, or ServiceConfig::max_cost):
    // tests/over_cost.rs.
    server.stop().await;
}

#[tokio::test]
async fn negative_hits_are_left_alone() {
    let clock = Arc::new(ManualClock::new(0));
    let mut server = Server::memory(clock).await;
    let mut refund = ip("10.0.0.9");
    refund.is_negative_hits = true;
    refund.hits_addend = Some(UInt64Value { value: 100 });
    let response = server.ask(request(vec![refund])).await;
    assert_eq!(codes(&response), [Code::Ok]);
    assert_eq!(response.statuses[0].current_limit, None);
    // Nothing was taken from (or given back to) the address's budget.
    let response = server.ask(request(vec![ip("10.0.0.9")])).await;
    assert_eq!(response.statuses[0].limit_remaining, 1);
    server.stop().await;
}
