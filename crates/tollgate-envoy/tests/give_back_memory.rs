//! On the memory store too, a request naming two clients consumes nothing
//! when the second refuses after the first was used. The service's locks
//! keep its own requests apart, but another front end of the same process
//! (`serve`'s HTTP API, a tower layer) decides on the same store without
//! them: here it uses up the API key between the service's look, which
//! found room, and its use of the key.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::two_clients::{address, key, plans, request, LIMIT, RULES};
use common::Running;
use tollgate::{
    GivenBack, ManualClock, MemoryBackend, Plan, PlanDecision, Receipt, Returnable, Store,
    StoreFuture, POLICY_NAMES,
};
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::{Rules, RulesConfig, ServiceConfig};

/// The service's memory store, where another front end uses up the API
/// key just before the service's first use of it.
struct Shared {
    memory: Arc<MemoryBackend>,
    armed: AtomicBool,
}

impl Store for Shared {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        self.memory.check(plan, client, now_ms, cost)
    }

    fn check_returnable<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, Returnable> {
        if plan.name() == "per-key" && cost > 0 && self.armed.swap(false, Ordering::SeqCst) {
            let other = self.memory.limiter().check(plan, client, now_ms, LIMIT);
            assert!(other.allowed, "the other front end's use");
        }
        self.memory.check_returnable(plan, client, now_ms, cost)
    }

    fn give_back(&self, receipt: Receipt) -> StoreFuture<'_, GivenBack> {
        self.memory.give_back(receipt)
    }
}

#[tokio::test]
async fn a_key_used_up_by_another_front_end_after_the_look_gives_the_address_back() {
    for policy in POLICY_NAMES {
        let plans = plans(policy);
        let rules = RulesConfig::from_toml(RULES).expect("rules");
        let rules = Rules::new(rules, &plans).expect("rules");
        let memory = Arc::new(MemoryBackend::new());
        let store = Shared {
            memory,
            armed: AtomicBool::new(true),
        };
        let clock = Arc::new(ManualClock::new(1_000));
        let mut running = Running::start(ServiceConfig::new(rules, Arc::new(store), clock)).await;

        let both = request(vec![address(), key()]);
        let answer = running.client.should_rate_limit(both).await;
        let answer = answer.expect("an answer").into_inner();
        assert_eq!(answer.overall_code, Code::OverLimit as i32, "{policy}");
        // The address has its whole budget: this request is its first.
        let alone = request(vec![address()]);
        let alone = running.client.should_rate_limit(alone).await;
        let alone = alone.expect("an answer").into_inner();
        assert_eq!(
            alone.statuses[0].limit_remaining,
            LIMIT - 1,
            "{policy}: the refused request used the address"
        );
        running.stop().await;
    }
}
