//! A store that fails for some clients only (a Redis Cluster's master
//! down, with `on_store_error = "unavailable"`): a request one of whose
//! clients is certainly over its limit is `OVER_LIMIT`, whatever the store
//! says of the others. `UNAVAILABLE` would hand it to Envoy's failure
//! mode, by default letting it through, so a caller adding a descriptor of
//! a client on the failing part would skip a spent limit. Served on
//! 127.0.0.1 port 0, called as Envoy calls it.

mod common;

use std::sync::Arc;

use common::{address, ip_and_key_plans, key, request, Running, IP_AND_KEY_RULES, LIMIT};
use tollgate::testing::{Switch, SwitchedStore};
use tollgate::{FailurePolicy, ManualClock, Store};
use tollgate_cache::{CachedStore, RejectionCache};
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::{Rules, RulesConfig, ServiceConfig};
use tollgate_guard::GuardedStore;

/// The memory store, failing every call for the clients of `per-key`, as a
/// cluster's master holding them would, and answering the rest.
fn partly_down() -> Arc<SwitchedStore> {
    let store = SwitchedStore::with_parts(|client| client.contains("|api_key=").then_some("keys"));
    store.set_part("keys", Switch::Down);
    Arc::new(store)
}

async fn start(store: Arc<SwitchedStore>) -> Running {
    start_on(store).await
}

async fn start_on(store: Arc<dyn Store>) -> Running {
    let rules = Rules::new(
        RulesConfig::from_toml(IP_AND_KEY_RULES).unwrap(),
        &ip_and_key_plans("sliding-window"),
    )
    .unwrap();
    Running::start(ServiceConfig::new(
        rules,
        store,
        Arc::new(ManualClock::new(0)),
    ))
    .await
}

#[tokio::test]
async fn a_client_over_its_limit_refuses_the_request_whatever_the_store_says_of_another() {
    let store = partly_down();
    let mut running = start(store.clone()).await;
    for _ in 0..LIMIT {
        let answer = running.client.should_rate_limit(request(vec![address()]));
        assert_eq!(
            answer.await.unwrap().into_inner().overall_code,
            Code::Ok as i32
        );
    }
    // The address is spent; its key's part of the store is down.
    let answer = running
        .client
        .should_rate_limit(request(vec![address(), key()]))
        .await
        .expect("a certain refusal, not an error status");
    let answer = answer.into_inner();
    assert_eq!(answer.overall_code, Code::OverLimit as i32);
    assert_eq!(answer.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(
        answer.statuses[1].current_limit, None,
        "no numbers for the key"
    );
    // Nothing changed for the address (no use counted, nothing given).
    let plans = ip_and_key_plans("sliding-window");
    let seen = store
        .memory()
        .inspect(&plans[0], "edge|remote_address=10.0.0.1", 0);
    let seen = seen.await.unwrap();
    assert_eq!(seen.limits[0].remaining, 0);

    // With no client over its limit, the failure is the request's:
    // `UNAVAILABLE`, for Envoy's failure mode to decide.
    let fresh = common::descriptor("remote_address", "10.0.0.2");
    let error = running
        .client
        .should_rate_limit(request(vec![fresh, key()]))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::Unavailable);
    running.stop().await;
}

/// The store down for every client, behind a fail-open guard and the
/// rejection cache, as `serve` wires a Redis store: a client the cache
/// remembers refusing still refuses a request that names another client
/// too. Its look (cost 0) is below what the cache answers, and the failure
/// policy answered it; before, the request was let through (an audit, with
/// a real Envoy: a spent client refused alone, allowed with a second
/// descriptor).
#[tokio::test]
async fn a_client_the_cache_remembers_refusing_refuses_the_request_when_the_store_fails() {
    let switched = Arc::new(SwitchedStore::new());
    let guarded = GuardedStore::new(
        switched.clone(),
        std::time::Duration::from_secs(1),
        FailurePolicy::FailOpen,
    );
    let cache = Arc::new(RejectionCache::new(1_000).unwrap());
    let mut running = start_on(Arc::new(CachedStore::new(guarded, cache))).await;
    for _ in 0..=LIMIT {
        running
            .client
            .should_rate_limit(request(vec![address()]))
            .await
            .unwrap();
    }
    // Refused once by the store: remembered.
    switched.set(Switch::Down);
    let answer = running
        .client
        .should_rate_limit(request(vec![address(), key()]))
        .await
        .expect("a certain refusal, not an error status")
        .into_inner();
    assert_eq!(answer.overall_code, Code::OverLimit as i32);
    assert_eq!(answer.statuses[0].code, Code::OverLimit as i32);
}
