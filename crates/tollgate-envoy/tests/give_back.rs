//! A request naming two clients (an address and an API key) is all or
//! nothing across a fleet too: when the key refuses after the address was
//! consumed, the address's use is given back, so the refused request
//! consumes nothing. The service runs on a loopback port over the stack
//! `serve` builds (a rejection cache, a guard, the Redis store) on a real
//! `redis-server` spawned here, and the key's refusal comes from a real
//! fault, injected just before the service uses the key:
//!
//! - another instance on the same Redis uses the key's whole budget, after
//!   the service looked and found room;
//! - Redis's replies are held (a relay in front of it), so the key's call
//!   outlives the guard's timeout and fail-closed refuses it;
//! - the replies are held and Envoy gives up on the call (its future is
//!   dropped half way).
//!
//! On the memory store too: the service's locks keep its own requests
//! apart, but another front end of the same process (`serve`'s HTTP API, a
//! tower layer) decides on the same store without them, and uses up the
//! key between the service's look and its use.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use common::{address, ip_and_key_plans as plans, key, request, Running, IP_AND_KEY_RULES, LIMIT};
use tollgate::{
    FailurePolicy, GivenBack, Inspection, ManualClock, MemoryBackend, Plan, PlanDecision, Receipt,
    Returnable, Store, StoreFuture, POLICY_NAMES,
};
use tollgate_cache::{CachedStore, RejectionCache};
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use tollgate_envoy::{Rules, RulesConfig, ServiceConfig};
use tollgate_guard::{BreakerConfig, GuardedStore};
use tollgate_redis::testing::{counts_until, load_scripts, wait_until, RedisServer, Relay};
use tollgate_redis::{RedisStore, RedisStoreConfig, RedisStoreError};

/// Each descriptor's code.
fn codes(response: &RateLimitResponse) -> Vec<Code> {
    let code = |code: i32| Code::try_from(code).expect("a code");
    response.statuses.iter().map(|s| code(s.code)).collect()
}

/// What happens just before the service's first use of the API key.
enum Fault {
    /// Another instance on the same Redis uses the key's whole budget.
    OtherInstance(RedisStore),
    /// Redis's replies are held from then on.
    HeldReplies(Arc<Relay>),
    /// Another front end of the process uses the key's whole budget in the
    /// memory store the service decides in.
    OtherFrontEnd(Arc<MemoryBackend>),
}

/// The stack the service decides with, and the fault, injected once.
struct Faulty {
    inner: Arc<dyn Store>,
    fault: Fault,
    armed: AtomicBool,
    /// Told once the fault is injected.
    injected: Arc<Notify>,
    /// Told when a use of the address is answered.
    address_used: Notify,
}

impl Faulty {
    /// `inner` with `fault` armed, and what is told once it is injected.
    fn new(inner: Arc<dyn Store>, fault: Fault) -> (Self, Arc<Notify>) {
        let injected = Arc::new(Notify::new());
        let faulty = Faulty {
            inner,
            fault,
            armed: AtomicBool::new(true),
            injected: injected.clone(),
            address_used: Notify::new(),
        };
        (faulty, injected)
    }
}

impl Store for Faulty {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        self.inner.check(plan, client, now_ms, cost)
    }

    fn check_returnable<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, Returnable> {
        StoreFuture::new(async move {
            if plan.name() == "per-ip" && cost > 0 {
                let used = self.inner.check_returnable(plan, client, now_ms, cost);
                let used = used.await;
                self.address_used.notify_one();
                return used;
            }
            if plan.name() == "per-key" && cost > 0 && self.armed.swap(false, Ordering::SeqCst) {
                // The service uses both clients at once: the fault comes
                // once the address's use is answered.
                self.address_used.notified().await;
                match &self.fault {
                    Fault::OtherInstance(other) => {
                        let used = other.decide(plan, client, now_ms, LIMIT).await;
                        assert!(used.expect("the other instance's use").allowed);
                    }
                    Fault::HeldReplies(relay) => relay.hold_replies(),
                    Fault::OtherFrontEnd(memory) => {
                        let used = memory.limiter().check(plan, client, now_ms, LIMIT);
                        assert!(used.allowed, "the other front end's use");
                    }
                }
                self.injected.notify_one();
            }
            self.inner
                .check_returnable(plan, client, now_ms, cost)
                .await
        })
    }

    fn give_back(&self, receipt: Receipt) -> StoreFuture<'_, GivenBack> {
        self.inner.give_back(receipt)
    }

    fn settle(&self, within: Duration) -> StoreFuture<'_, ()> {
        self.inner.settle(within)
    }

    fn inspect<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Inspection> {
        self.inner.inspect(plan, client, now_ms)
    }
}

/// One service over a Redis store, that store (for its counts), and word
/// of the fault.
struct Service {
    running: Running,
    redis: RedisStore,
    injected: Arc<Notify>,
}

/// What a service is built with: the policy, the guard's, and where its
/// Redis store connects.
struct Setup<'a> {
    policy: &'a str,
    failure: FailurePolicy,
    timeout: Duration,
    url: String,
    prefix: String,
}

impl Service {
    async fn start(setup: Setup<'_>, fault: impl FnOnce(&RedisStore) -> Fault) -> Self {
        let config = RedisStoreConfig {
            prefix: setup.prefix,
            timeout: setup.timeout,
            ..RedisStoreConfig::default()
        };
        let redis = RedisStore::connect(&setup.url, config)
            .await
            .expect("connect");
        // Every call of the fault must reach Redis: no circuit breaker.
        let guarded = GuardedStore::new(redis.clone(), setup.timeout, setup.failure).with_breaker(
            BreakerConfig {
                failures: 0,
                ..BreakerConfig::default()
            },
        );
        let cache = Arc::new(RejectionCache::new(1_000).expect("cache"));
        let inner = Arc::new(CachedStore::new(guarded, cache));
        let (store, injected) = Faulty::new(inner, fault(&redis));
        let running = serve(setup.policy, store).await;
        Service {
            running,
            redis,
            injected,
        }
    }

    async fn ask(&mut self, descriptors: Vec<RateLimitDescriptor>) -> RateLimitResponse {
        let request = request(descriptors);
        let answer = self.running.client.should_rate_limit(request).await;
        answer.expect("an answer, not an error status").into_inner()
    }

    /// What one request of `descriptor` alone leaves: `LIMIT - 1` when
    /// nothing was used before.
    async fn remaining_after(&mut self, descriptor: RateLimitDescriptor) -> u32 {
        let response = self.ask(vec![descriptor]).await;
        assert_eq!(response.overall_code, Code::Ok as i32);
        response.statuses[0].limit_remaining
    }

    /// A service fail-closed after `timeout`, on a relay in front of
    /// `server` that the fault makes hold Redis's replies.
    async fn behind_relay(
        server: &RedisServer,
        policy: &str,
        timeout: Duration,
        prefix: &str,
    ) -> (Self, Arc<Relay>) {
        let relay = Arc::new(Relay::start(server.port()));
        let setup = Setup {
            policy,
            failure: FailurePolicy::FailClosed,
            timeout,
            url: relay.url(),
            prefix: prefix.into(),
        };
        let held = Fault::HeldReplies(relay.clone());
        (Self::start(setup, |_| held).await, relay)
    }

    /// Both clients have their whole budget: a request of each is its first.
    async fn untouched(&mut self, what: &str) {
        for client in [address(), key()] {
            let left = self.remaining_after(client).await;
            assert_eq!(left, LIMIT - 1, "{what} used a client");
        }
    }

    /// Waits until Redis has taken back `calls` calls.
    async fn refunded(&self, calls: u64) -> u64 {
        counts_until(&self.redis, |c| c.refunded >= calls)
            .await
            .refunded
    }
}

/// The service over `store`, with the plans of `policy`.
async fn serve(policy: &str, store: Faulty) -> Running {
    let plans = plans(policy);
    let rules = Rules::new(
        RulesConfig::from_toml(IP_AND_KEY_RULES).expect("rules"),
        &plans,
    )
    .expect("rules");
    let clock = Arc::new(ManualClock::new(1_000));
    Running::start(ServiceConfig::new(rules, Arc::new(store), clock)).await
}

/// How many calls `redis` owes a reply, once it is `calls` (at most 5 s).
async fn owed(redis: &RedisStore, calls: usize) -> usize {
    let mut owed = 0;
    for _ in 0..1_000 {
        owed = match redis.settle(Duration::ZERO).await {
            Err(RedisStoreError::Unsettled { calls, .. }) => calls,
            _ => 0,
        };
        if owed >= calls {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    owed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_used_up_by_another_instance_after_the_look_gives_the_address_back() {
    let Some(server) = RedisServer::spawn("envoy_give_back_race") else {
        return;
    };
    for policy in POLICY_NAMES {
        let setup = Setup {
            policy,
            failure: FailurePolicy::FailClosed,
            timeout: Duration::from_secs(2),
            url: server.url(),
            prefix: format!("race-{policy}"),
        };
        let other = |redis: &RedisStore| Fault::OtherInstance(redis.clone());
        let mut service = Service::start(setup, other).await;

        let answer = service.ask(vec![address(), key()]).await;
        assert_eq!(codes(&answer), [Code::Ok, Code::OverLimit], "{policy}");
        assert_eq!(answer.overall_code, Code::OverLimit as i32, "{policy}");
        assert_eq!(service.refunded(1).await, 1, "{policy}");
        // The address has its whole budget: this request is its first.
        let left = service.remaining_after(address()).await;
        assert_eq!(
            left,
            LIMIT - 1,
            "{policy}: the refused request used the address"
        );
        service.running.stop().await;
    }
}

#[tokio::test]
async fn a_key_used_up_by_another_front_end_after_the_look_gives_the_address_back() {
    for policy in POLICY_NAMES {
        let memory = Arc::new(MemoryBackend::new());
        let fault = Fault::OtherFrontEnd(memory.clone());
        let (store, _) = Faulty::new(memory, fault);
        let mut running = serve(policy, store).await;

        let both = request(vec![address(), key()]);
        let answer = running.client.should_rate_limit(both).await;
        let answer = answer.expect("an answer").into_inner();
        assert_eq!(codes(&answer), [Code::Ok, Code::OverLimit], "{policy}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_refused_by_fail_closed_while_replies_are_held_gives_the_address_back() {
    let Some(server) = RedisServer::spawn("envoy_give_back_held") else {
        return;
    };
    load_scripts(&server.url()).await;
    for policy in POLICY_NAMES {
        let (mut service, relay) = Service::behind_relay(
            &server,
            policy,
            Duration::from_millis(200),
            &format!("held-{policy}"),
        )
        .await;

        let answer = service.ask(vec![address(), key()]).await;
        assert_eq!(codes(&answer), [Code::Ok, Code::OverLimit], "{policy}");
        relay.release_replies();
        // The key's late reply, and the address given back.
        assert_eq!(service.refunded(2).await, 2, "{policy}");
        service
            .untouched(&format!("{policy}: the refused request"))
            .await;
        service.running.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_envoy_gives_up_on_half_way_gives_back_what_it_used() {
    let Some(server) = RedisServer::spawn("envoy_give_back_cancelled") else {
        return;
    };
    load_scripts(&server.url()).await;
    for policy in POLICY_NAMES {
        let (mut service, relay) = Service::behind_relay(
            &server,
            policy,
            Duration::from_secs(5),
            &format!("cancelled-{policy}"),
        )
        .await;

        let mut client = service.running.client.clone();
        let call = client.should_rate_limit(request(vec![address(), key()]));
        // Boxed, so that dropping it drops the call (a `pin!` would only
        // drop the reference).
        let mut call = Box::pin(call);
        tokio::select! {
            answer = &mut call => panic!("{policy}: answered while held: {answer:?}"),
            () = service.injected.notified() => {}
        }
        // Two looks and the address's use, then the key's, which Redis
        // runs (its reply held): then Envoy gives up on the call.
        let sent = counts_until(&service.redis, |c| c.decisions >= 4).await;
        assert_eq!(sent.decisions, 4, "{policy}");
        drop(call);
        // Released only once the service has seen Envoy give up (its
        // give-back is sent, and held, beside the key's call): a reply
        // let through first would answer the call before the reset came.
        assert_eq!(owed(&service.redis, 2).await, 2, "{policy}");
        relay.release_replies();
        assert_eq!(service.refunded(2).await, 2, "{policy}");
        service
            .untouched(&format!("{policy}: the abandoned request"))
            .await;
        service.running.stop().await;
    }
}

/// A service shutting down right after a Redis stall still takes back what
/// its abandoned calls consumed: each worker lets the store settle (the
/// replies of its calls in flight, and their refunds) before its runtime
/// ends, which would otherwise drop the task waiting for a held reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_shutting_down_takes_back_what_its_abandoned_calls_used() {
    let Some(server) = RedisServer::spawn("envoy_settle_on_shutdown") else {
        return;
    };
    load_scripts(&server.url()).await;
    let relay = Arc::new(Relay::start(server.port()));
    let setup = |prefix: &str, url: String| Setup {
        policy: "gcra",
        failure: FailurePolicy::FailClosed,
        timeout: Duration::from_millis(200),
        url,
        prefix: prefix.into(),
    };
    let unused = Fault::HeldReplies(relay.clone());
    let mut service = Service::start(setup("settle", relay.url()), |_| unused).await;
    assert_eq!(service.remaining_after(key()).await, LIMIT - 1);

    relay.hold_replies();
    let answer = service.ask(vec![key()]).await;
    assert_eq!(codes(&answer), [Code::OverLimit], "fail-closed");
    let Service { running, redis, .. } = service;
    let stopping = tokio::spawn(running.stop());
    // A shutdown that does not wait is over long before this.
    wait_until(50, || stopping.is_finished()).await;
    relay.release_replies();
    stopping.await.expect("stopped");
    assert_eq!(redis.call_counts().refunded, 1, "the held call taken back");

    let unused = Fault::HeldReplies(relay.clone());
    let mut again = Service::start(setup("settle", server.url()), |_| unused).await;
    let left = again.remaining_after(key()).await;
    assert_eq!(left, LIMIT - 2, "only the first request used the key");
    again.running.stop().await;
}
