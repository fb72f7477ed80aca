//! A `DecisionObserver` is told each decision once (never the zero-cost
//! looks of multi-client requests), each refusal for a cost over
//! `max_cost`, each store failure, and each request's time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::testing::FailingStore;
use tollgate::{
    AnyPolicy, Limit, ManualClock, MemoryBackend, Plan, PlanDecision, Store, StoreError,
};
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_envoy::{DecisionObserver, RlsService, Rules, RulesConfig, ServiceConfig};

const RULES: &str = r#"
[[rules]]
domain = "edge"
descriptor = [{ key = "api_key" }]
plan = "per-key"

[[rules]]
domain = "edge"
descriptor = [{ key = "generic_key", value = "expensive" }]
plan = "shared"
"#;

fn plans() -> Vec<Plan> {
    let limit = |name: &str, policy: &str, n: u32, window: u64| {
        Limit::new(
            name,
            AnyPolicy::from_name(policy, n, window).unwrap(),
            false,
        )
    };
    vec![
        Plan::new("per-key", vec![limit("1s", "gcra", 10, 1_000)]).unwrap(),
        Plan::new("shared", vec![limit("1m", "token-bucket", 3, 60_000)]).unwrap(),
    ]
}

/// What the observer was told.
#[derive(Default)]
struct Seen {
    /// (plan, cost, allowed) per decision.
    decided: Mutex<Vec<(String, u32, bool)>>,
    /// The client of each decision.
    clients: Mutex<Vec<String>>,
    failed: Mutex<Vec<String>>,
    timed: Mutex<u32>,
}

impl DecisionObserver for Seen {
    fn decided(&self, plan: &Plan, client: &str, cost: u32, decision: &PlanDecision) {
        self.clients.lock().unwrap().push(client.to_owned());
        self.decided
            .lock()
            .unwrap()
            .push((plan.name().to_owned(), cost, decision.allowed));
    }

    fn store_failed(&self, plan: &Plan, _error: &StoreError) {
        self.failed.lock().unwrap().push(plan.name().to_owned());
    }

    fn timed(&self, _elapsed: Duration) {
        *self.timed.lock().unwrap() += 1;
    }
}

impl Seen {
    fn take(&self) -> Vec<(String, u32, bool)> {
        std::mem::take(&mut *self.decided.lock().unwrap())
    }
}

fn service(store: Arc<dyn Store>, seen: &Arc<Seen>) -> RlsService {
    RlsService::new(config(store, seen))
}

fn config(store: Arc<dyn Store>, seen: &Arc<Seen>) -> ServiceConfig {
    let rules = Rules::new(RulesConfig::from_toml(RULES).unwrap(), &plans()).unwrap();
    ServiceConfig::new(rules, store, Arc::new(ManualClock::new(0)))
        .observer(seen.clone() as Arc<dyn DecisionObserver>)
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

fn request(descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors,
        hits_addend: hits,
    }
}

fn decision(plan: &str, cost: u32, allowed: bool) -> (String, u32, bool) {
    (plan.to_owned(), cost, allowed)
}

#[tokio::test]
async fn each_decision_is_reported_once_and_looks_never() {
    let seen = Arc::new(Seen::default());
    let rls = service(Arc::new(MemoryBackend::new()), &seen);
    let both = || {
        vec![
            descriptor("api_key", "k1"),
            descriptor("generic_key", "expensive"),
        ]
    };

    // One client: one decision, with the request's cost.
    rls.decide(&request(vec![descriptor("api_key", "k1")], 2))
        .await
        .unwrap();
    assert_eq!(seen.take(), [decision("per-key", 2, true)]);
    // The client as the store keys it: the domain and the descriptor.
    assert_eq!(*seen.clients.lock().unwrap(), ["edge|api_key=k1"]);

    // Two clients with room: each decided once (their looks are not).
    rls.decide(&request(both(), 1)).await.unwrap();
    assert_eq!(
        seen.take(),
        [decision("per-key", 1, true), decision("shared", 1, true)]
    );
    rls.decide(&request(both(), 2)).await.unwrap();
    assert_eq!(
        seen.take(),
        [decision("per-key", 2, true), decision("shared", 2, true)]
    );

    // The shared limit (3) is used up: it is decided (rejected); the key,
    // left untouched, is not reported.
    let response = rls.decide(&request(both(), 1)).await.unwrap();
    assert_eq!(response.overall_code, Code::OverLimit as i32);
    assert_eq!(seen.take(), [decision("shared", 1, false)]);

    // A descriptor no rule limits asks nothing and is not timed.
    rls.decide(&request(vec![descriptor("other", "x")], 1))
        .await
        .unwrap();
    assert!(seen.take().is_empty());
    assert_eq!(*seen.timed.lock().unwrap(), 4);
    assert!(seen.failed.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_store_failure_is_reported_and_the_request_still_timed() {
    let seen = Arc::new(Seen::default());
    let rls = service(
        Arc::new(FailingStore::new(StoreError::transient("down"))),
        &seen,
    );
    let error = rls
        .decide(&request(vec![descriptor("api_key", "k1")], 1))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::Unavailable);
    // Several clients: both looks (asked at once) fail, each reported, and
    // the request ends.
    rls.decide(&request(
        vec![
            descriptor("generic_key", "expensive"),
            descriptor("api_key", "k1"),
        ],
        1,
    ))
    .await
    .unwrap_err();
    assert_eq!(
        *seen.failed.lock().unwrap(),
        ["per-key", "shared", "per-key"]
    );
    assert!(seen.take().is_empty());
    assert_eq!(*seen.timed.lock().unwrap(), 2);
}

/// A client asking for more than `max_cost` is refused without the store
/// being asked for that cost, and still reported refused, so that a
/// dashboard counts it; the other client of the request, untouched, is not.
#[tokio::test]
async fn a_cost_over_max_cost_is_reported_refused() {
    let seen = Arc::new(Seen::default());
    let rls = RlsService::new(config(Arc::new(MemoryBackend::new()), &seen).max_cost(4));
    let response = rls
        .decide(&request(vec![descriptor("api_key", "k1")], 5))
        .await
        .unwrap();
    assert_eq!(response.overall_code, Code::OverLimit as i32);
    assert_eq!(seen.take(), [decision("per-key", 5, false)]);

    let mut expensive = descriptor("generic_key", "expensive");
    expensive.hits_addend = Some(tollgate_envoy::pb::google::protobuf::UInt64Value {
        value: u64::from(u32::MAX) + 1,
    });
    let both = request(vec![descriptor("api_key", "k1"), expensive], 1);
    let response = rls.decide(&both).await.unwrap();
    assert_eq!(response.overall_code, Code::OverLimit as i32);
    assert_eq!(seen.take(), [decision("shared", u32::MAX, false)]);
    assert_eq!(*seen.timed.lock().unwrap(), 2);
}
