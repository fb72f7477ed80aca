//! The rate limit service on 127.0.0.1 port 0, called by a tonic client as
//! Envoy would call it; time moved by hand.

mod common;

use common::Running;
use std::sync::Arc;
use std::time::Duration;

use tollgate::testing::FailingStore;
use tollgate::{
    AnyPolicy, FailurePolicy, Limit, ManualClock, MemoryBackend, Plan, PlanDecision, Store,
    StoreFuture,
};
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate_envoy::pb::google::protobuf::UInt64Value;
use tollgate_envoy::{Rules, RulesConfig, ServiceConfig};
use tollgate_guard::GuardedStore;

const RULES: &str = r#"
[[rules]]
domain = "edge"
descriptor = [{ key = "remote_address" }]
plan = "per-ip"

[[rules]]
domain = "edge"
descriptor = [{ key = "generic_key", value = "expensive" }]
plan = "shared"

[[rules]]
domain = "edge"
descriptor = [{ key = "api_key" }]
plan = "per-key"
"#;

fn plan(name: &str, limits: &[(&str, &str, u32, u64)]) -> Plan {
    Plan::new(
        name,
        limits
            .iter()
            .map(|(limit, policy, n, window)| {
                Limit::new(
                    *limit,
                    AnyPolicy::from_name(policy, *n, *window).unwrap(),
                    false,
                )
            })
            .collect(),
    )
    .unwrap()
}

fn plans() -> Vec<Plan> {
    vec![
        plan("per-ip", &[("1s", "sliding-window", 2, 1_000)]),
        plan("shared", &[("1m", "token-bucket", 3, 60_000)]),
        plan(
            "per-key",
            &[
                ("1s", "gcra", 5, 1_000),
                ("1h", "sliding-window", 100, 3_600_000),
            ],
        ),
    ]
}

struct Server {
    rules: tollgate_envoy::RulesHandle,
    running: Running,
}

impl Server {
    async fn start(store: Arc<dyn Store>, clock: Arc<ManualClock>) -> Self {
        let rules = Rules::new(RulesConfig::from_toml(RULES).unwrap(), &plans()).unwrap();
        let config = ServiceConfig::new(rules, store, clock);
        let rules = config.rules_handle();
        Server {
            rules,
            running: Running::start(config).await,
        }
    }

    async fn memory(clock: Arc<ManualClock>) -> Self {
        Self::start(Arc::new(MemoryBackend::new()), clock).await
    }

    async fn ask(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.running
            .client
            .should_rate_limit(request)
            .await
            .unwrap()
            .into_inner()
    }

    async fn stop(self) {
        self.running.stop().await;
    }
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors,
        hits_addend: 0,
    }
}

fn ip(addr: &str) -> RateLimitDescriptor {
    descriptor(&[("remote_address", addr)])
}

fn codes(response: &RateLimitResponse) -> Vec<Code> {
    response
        .statuses
        .iter()
        .map(|s| Code::try_from(s.code).unwrap())
        .collect()
}

fn header<'a>(response: &'a RateLimitResponse, key: &str) -> Option<&'a str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key == key)
        .map(|h| h.value.as_str())
}

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
