//! What the gRPC tests of the service share: rules, plans, a server and
//! requests.
#![allow(dead_code)]

use crate::common::Running;
use std::sync::Arc;

use tollgate::{AnyPolicy, Limit, ManualClock, MemoryBackend, Plan, Store};
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate_envoy::{Rules, RulesConfig, ServiceConfig};

pub const RULES: &str = r#"
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

pub fn plan(name: &str, limits: &[(&str, &str, u32, u64)]) -> Plan {
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

pub fn plans() -> Vec<Plan> {
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

pub struct Server {
    pub rules: tollgate_envoy::RulesHandle,
    pub running: Running,
}

impl Server {
    pub async fn start(store: Arc<dyn Store>, clock: Arc<ManualClock>) -> Self {
        let rules = Rules::new(RulesConfig::from_toml(RULES).unwrap(), &plans()).unwrap();
        let config = ServiceConfig::new(rules, store, clock);
        let rules = config.rules_handle();
        Server {
            rules,
            running: Running::start(config).await,
        }
    }

    pub async fn memory(clock: Arc<ManualClock>) -> Self {
        Self::start(Arc::new(MemoryBackend::new()), clock).await
    }

    pub async fn ask(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.running
            .client
            .should_rate_limit(request)
            .await
            .unwrap()
            .into_inner()
    }

    pub async fn stop(self) {
        self.running.stop().await;
    }
}

pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
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

pub fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors,
        hits_addend: 0,
    }
}

pub fn ip(addr: &str) -> RateLimitDescriptor {
    descriptor(&[("remote_address", addr)])
}

pub fn codes(response: &RateLimitResponse) -> Vec<Code> {
    response
        .statuses
        .iter()
        .map(|s| Code::try_from(s.code).unwrap())
        .collect()
}

pub fn header<'a>(response: &'a RateLimitResponse, key: &str) -> Option<&'a str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key == key)
        .map(|h| h.value.as_str())
}
