//! In a store stall, every request is answered by the failure policy once
//! one store timeout has passed: one client's requests side by side (they
//! waited in line behind a lock held across the store's call, one timeout
//! each, so that a busy client's later requests outlived Envoy's own
//! timeout and Envoy's failure mode answered them: fail-closed was
//! bypassed for the first half second of every Redis stall, audit), and a
//! request of several clients in one timeout, not one per step. Tokio's
//! paused clock stands in for time: a hanging store, a guard's timeout,
//! and nothing else that waits.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{address, ip_and_key_plans, key, request, IP_AND_KEY_RULES};
use tollgate::testing::HangingStore;
use tollgate::{FailurePolicy, ManualClock, Store};
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::{RlsService, Rules, RulesConfig, ServiceConfig};
use tollgate_guard::GuardedStore;

const TIMEOUT: Duration = Duration::from_millis(100);
const REQUESTS: usize = 8;

fn service() -> RlsService {
    service_failing(FailurePolicy::FailClosed)
}

fn service_failing(policy: FailurePolicy) -> RlsService {
    let rules = RulesConfig::from_toml(IP_AND_KEY_RULES).unwrap();
    let guarded: Arc<dyn Store> = Arc::new(GuardedStore::new(HangingStore, TIMEOUT, policy));
    RlsService::new(ServiceConfig::new(
        Rules::new(rules, &ip_and_key_plans("sliding-window")).unwrap(),
        guarded,
        Arc::new(ManualClock::new(0)),
    ))
}

#[tokio::test(start_paused = true)]
async fn a_clients_requests_in_a_stall_each_wait_one_timeout() {
    let service = Arc::new(service());
    let started = tokio::time::Instant::now();
    let calls: Vec<_> = (0..REQUESTS)
        .map(|_| {
            let service = service.clone();
            tokio::spawn(async move {
                let answer = service.decide(&request(vec![address()])).await.unwrap();
                (answer.overall_code, started.elapsed())
            })
        })
        .collect();
    for call in calls {
        let (code, waited) = call.await.unwrap();
        // Fail-closed answered, after the one timeout of the call itself.
        assert_eq!(code, Code::OverLimit as i32);
        assert_eq!(waited, TIMEOUT, "a request waited behind another's call");
    }
}

/// A request naming two clients looks at both, then uses them. In a stall
/// the failure policy answers the looks, and its answer stands for the
/// uses: one store timeout in all, not a second one while the request
/// holds both clients' locks (it took two, and the requests queued behind
/// it more, past Envoy's timeout; re-check audit through a real Envoy).
#[tokio::test(start_paused = true)]
async fn a_request_of_two_clients_in_a_stall_waits_one_timeout() {
    for (policy, code) in [
        (FailurePolicy::FailClosed, Code::OverLimit),
        (FailurePolicy::FailOpen, Code::Ok),
    ] {
        let service = service_failing(policy);
        let started = tokio::time::Instant::now();
        let answer = service
            .decide(&request(vec![address(), key()]))
            .await
            .unwrap();
        assert_eq!(answer.overall_code, code as i32, "{policy:?}");
        assert_eq!(started.elapsed(), TIMEOUT, "{policy:?}");
    }
}
