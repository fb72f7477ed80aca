//! Requests naming two clients, an address and an API key, each on a plan
//! of its own: what the give-back tests share.

// Each test binary compiles this module; not every one uses all of it.
#![allow(dead_code)]

use tollgate::{AnyPolicy, Limit, Plan};
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

/// Addresses on `per-ip`, API keys on `per-key`.
pub const RULES: &str = r#"
[[rules]]
domain = "edge"
descriptor = [{ key = "remote_address" }]
plan = "per-ip"

[[rules]]
domain = "edge"
descriptor = [{ key = "api_key" }]
plan = "per-key"
"#;

/// Each client may make this many requests a day.
pub const LIMIT: u32 = 5;

/// `per-ip` and `per-key`, each `LIMIT` a day under `policy`.
pub fn plans(policy: &str) -> Vec<Plan> {
    let plan = |name: &str| {
        let policy = AnyPolicy::from_name(policy, LIMIT, 86_400_000).expect("policy");
        Plan::new(name, vec![Limit::new("per-day", policy, false)]).expect("plan")
    };
    vec![plan("per-ip"), plan("per-key")]
}

/// A request of domain `edge` with `descriptors`.
pub fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors,
        hits_addend: 0,
    }
}

fn descriptor(key: &str, value: &str) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: value.into(),
        }],
        ..RateLimitDescriptor::default()
    }
}

/// The caller's address.
pub fn address() -> RateLimitDescriptor {
    descriptor("remote_address", "10.0.0.1")
}

/// The caller's API key.
pub fn key() -> RateLimitDescriptor {
    descriptor("api_key", "k")
}

/// Each descriptor's code.
pub fn codes(response: &RateLimitResponse) -> Vec<Code> {
    let code = |code: i32| Code::try_from(code).expect("a code");
    response.statuses.iter().map(|s| code(s.code)).collect()
}
