//! A cost no limit may grant: a `hits_addend` over `u32::MAX`, one client's
//! descriptors adding up past it, or past `ServiceConfig::max_cost`. Such a
//! request is answered `OVER_LIMIT`, as the store answers a cost over every
//! limit, and takes nothing from any client of the request. An error status
//! would not do: Envoy hands errors to its failure mode, which by default
//! (`failure_mode_deny: false`) lets the request through. Served on
//! 127.0.0.1 port 0, called as Envoy calls it.

mod common;

use common::{Running, IP_AND_KEY_RULES};
use std::sync::Arc;

use tollgate::testing::FailingStore;
use tollgate::{AnyPolicy, Limit, ManualClock, MemoryBackend, Plan, Store};
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate_envoy::pb::google::protobuf::UInt64Value;
use tollgate_envoy::{Rules, RulesConfig, ServiceConfig};

/// Per address: 2 a second. Per key: 5 a second and 100 an hour.
fn plans() -> Vec<Plan> {
    let limit = |name: &str, policy: &str, n: u32, window: u64| {
        Limit::new(
            name,
            AnyPolicy::from_name(policy, n, window).unwrap(),
            false,
        )
    };
    vec![
        Plan::new("per-ip", vec![limit("1s", "sliding-window", 2, 1_000)]).unwrap(),
        Plan::new(
            "per-key",
            vec![
                limit("1s", "gcra", 5, 1_000),
                limit("1h", "sliding-window", 100, 3_600_000),
            ],
        )
        .unwrap(),
    ]
}

struct Server {
    running: Running,
}

impl Server {
    async fn start(max_cost: u32) -> Self {
        Self::with_store(Arc::new(MemoryBackend::new()), max_cost).await
    }

    async fn with_store(store: Arc<dyn Store>, max_cost: u32) -> Self {
        let rules =
            Rules::new(RulesConfig::from_toml(IP_AND_KEY_RULES).unwrap(), &plans()).unwrap();
        let config =
            ServiceConfig::new(rules, store, Arc::new(ManualClock::new(0))).max_cost(max_cost);
        Server {
            running: Running::start(config).await,
        }
    }

    /// The answer to `descriptors`; an error status fails the test.
    async fn ask(&mut self, descriptors: Vec<RateLimitDescriptor>) -> RateLimitResponse {
        let request = RateLimitRequest {
            domain: "edge".into(),
            descriptors,
            hits_addend: 0,
        };
        match self.running.client.should_rate_limit(request).await {
            Ok(response) => response.into_inner(),
            Err(status) => panic!("answered an error status: {status:?}"),
        }
    }

    /// What `descriptor` (alone in a request, and allowed) leaves of the
    /// limit its status reports.
    async fn remaining_after(&mut self, descriptor: RateLimitDescriptor) -> u32 {
        let response = self.ask(vec![descriptor]).await;
        assert_eq!(codes(&response), [Code::Ok]);
        response.statuses[0].limit_remaining
    }

    async fn stop(self) {
        self.running.stop().await;
    }
}

fn descriptor(key: &str, value: &str, hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: value.into(),
        }],
        hits_addend: hits.map(|value| UInt64Value { value }),
        ..RateLimitDescriptor::default()
    }
}

fn ip(address: &str) -> RateLimitDescriptor {
    descriptor("remote_address", address, None)
}

fn key(name: &str, hits: u64) -> RateLimitDescriptor {
    descriptor("api_key", name, Some(hits))
}

fn codes(response: &RateLimitResponse) -> Vec<Code> {
    response
        .statuses
        .iter()
        .map(|s| Code::try_from(s.code).unwrap())
        .collect()
}

fn header<'a>(response: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key == name)
        .map(|h| h.value.as_str())
}

/// What the store itself answers (on a server without `max_cost`) a fresh
/// key asking for more than every limit of its plan (1000 against 5 and
/// 100), beside a fresh address: the key `OVER_LIMIT` for ever (no
/// `Retry-After`), the address as it stays.
async fn store_answer_to_a_cost_over_every_limit() -> RateLimitResponse {
    let mut server = Server::start(u32::MAX).await;
    let answer = server.ask(vec![key("fresh", 1_000), ip("10.9.9.9")]).await;
    assert_eq!(codes(&answer), [Code::OverLimit, Code::Ok]);
    assert_eq!(header(&answer, "retry-after"), None);
    server.stop().await;
    answer
}

#[tokio::test]
async fn a_hits_addend_over_u32_max_is_over_limit_and_consumes_nothing() {
    let reference = store_answer_to_a_cost_over_every_limit().await;
    let mut server = Server::start(u32::MAX).await;
    let over = u64::from(u32::MAX) + 1;

    // Beside another client: answered as the store answers a cost over
    // every limit, numbers and headers included.
    let answer = server.ask(vec![key("k", over), ip("10.0.0.1")]).await;
    assert_eq!(answer, reference);
    // Alone, at the largest value, and twice for one client (a sum past
    // u64::MAX too).
    for descriptors in [
        vec![key("k", over)],
        vec![key("k", u64::MAX)],
        vec![key("k", u64::MAX), key("k", u64::MAX)],
    ] {
        let answer = server.ask(descriptors).await;
        assert_eq!(answer.overall_code, Code::OverLimit as i32);
        assert!(codes(&answer).iter().all(|c| *c == Code::OverLimit));
        assert_eq!(header(&answer, "retry-after"), None);
    }

    // Nothing was taken: the key still has its 5 this second, the address
    // its 2.
    assert_eq!(server.remaining_after(key("k", 5)).await, 0);
    assert_eq!(server.remaining_after(ip("10.0.0.1")).await, 1);
    server.stop().await;
}

#[tokio::test]
async fn descriptors_of_one_client_adding_up_past_u32_max_are_over_limit_and_consume_nothing() {
    let mut server = Server::start(u32::MAX).await;
    let half = u64::from(u32::MAX / 2 + 1);
    // Each fits a u32, their sum does not: never capped to u32::MAX (a limit
    // of u32::MAX would then be asked for less than the request costs).
    let answer = server
        .ask(vec![key("s", half), ip("10.0.0.2"), key("s", half)])
        .await;
    assert_eq!(answer.overall_code, Code::OverLimit as i32);
    assert_eq!(codes(&answer), [Code::OverLimit, Code::Ok, Code::OverLimit]);
    assert_eq!(header(&answer, "retry-after"), None);
    assert_eq!(server.remaining_after(key("s", 5)).await, 0);
    assert_eq!(server.remaining_after(ip("10.0.0.2")).await, 1);
    server.stop().await;
}

#[tokio::test]
async fn a_cost_over_max_cost_is_over_limit_and_consumes_nothing() {
    let reference = store_answer_to_a_cost_over_every_limit().await;
    let mut server = Server::start(10).await;
    // 11 alone, or 6 and 5 for one client: answered as the store answers a
    // cost over every limit.
    let answer = server.ask(vec![key("m", 11), ip("10.0.0.3")]).await;
    assert_eq!(answer, reference);
    let answer = server
        .ask(vec![key("m", 6), ip("10.0.0.3"), key("m", 5)])
        .await;
    assert_eq!(codes(&answer), [Code::OverLimit, Code::Ok, Code::OverLimit]);
    assert_eq!(header(&answer, "retry-after"), None);

    // Nothing was taken from either client; a cost within max_cost is
    // decided by the store.
    assert_eq!(server.remaining_after(key("m", 5)).await, 0);
    assert_eq!(server.remaining_after(ip("10.0.0.3")).await, 1);
    server.stop().await;
}

/// The refusal needs no state: with the store down, the request is still
/// `OVER_LIMIT` (without numbers), not the `UNAVAILABLE` that Envoy's
/// default failure mode would let through. A request within the bound
/// does get `UNAVAILABLE` then, for Envoy's failure mode to decide.
#[tokio::test]
async fn a_store_down_does_not_turn_the_refusal_into_an_error() {
    let mut server = Server::with_store(Arc::new(FailingStore::down()), 10).await;
    for descriptors in [
        vec![key("k", u64::from(u32::MAX) + 1), ip("10.0.0.4")],
        vec![key("k", 11)],
    ] {
        let answer = server.ask(descriptors).await;
        assert_eq!(answer.overall_code, Code::OverLimit as i32);
        assert_eq!(codes(&answer)[0], Code::OverLimit);
        assert_eq!(answer.statuses[0].current_limit, None);
        assert_eq!(header(&answer, "retry-after"), None);
    }
    let within = RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![key("k", 10)],
        hits_addend: 0,
    };
    let error = server
        .running
        .client
        .should_rate_limit(within)
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::Unavailable);
    server.stop().await;
}
