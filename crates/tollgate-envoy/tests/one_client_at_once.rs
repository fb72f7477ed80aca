//! Requests of one client are decided side by side, not one after another:
//! during a store stall, each is answered by the failure policy once the
//! store's timeout has passed, however many of that client's requests are
//! in flight. (They waited in line, one timeout each, behind a lock held
//! across the store's call, so that a busy client's later requests outlived
//! Envoy's own timeout and Envoy's failure mode answered them: fail-closed
//! was bypassed for the first half second of every Redis stall, audit.)
//! Tokio's paused clock stands in for time: a hanging store, a guard's
//! timeout, and nothing else that waits.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{address, ip_and_key_plans, request, IP_AND_KEY_RULES};
use tollgate::testing::HangingStore;
use tollgate::{FailurePolicy, ManualClock, Store};
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::{RlsService, Rules, RulesConfig, ServiceConfig};
use tollgate_guard::GuardedStore;

const TIMEOUT: Duration = Duration::from_millis(100);
const REQUESTS: usize = 8;

fn service() -> RlsService {
    let rules = RulesConfig::from_toml(IP_AND_KEY_RULES).unwrap();
    let guarded: Arc<dyn Store> = Arc::new(GuardedStore::new(
        HangingStore,
        TIMEOUT,
        FailurePolicy::FailClosed,
    ));
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
