//! A request Envoy gives up on while the service shuts down consumes
//! nothing: what its clients consumed so far is given back before the
//! worker it ran on ends, even when the call is dropped as the last thing
//! that worker serves. Its give-back runs in a task of that worker's
//! runtime (`src/taken.rs`), which is polled before the worker's last
//! connection has closed and its runtime ends.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use common::{address, ip_and_key_plans, key, request, Running, IP_AND_KEY_RULES, LIMIT};
use tollgate::{
    GivenBack, ManualClock, MemoryBackend, Plan, PlanDecision, Receipt, Returnable, Store,
    StoreFuture, POLICY_NAMES,
};
use tollgate_envoy::{Rules, RulesConfig, ServiceConfig};

/// The memory store, whose use of the API key never answers: it waits
/// for the address's use to be answered, says so, and hangs, so that the
/// request is held with the address consumed.
struct KeyHangs {
    memory: Arc<MemoryBackend>,
    /// The address's client id in the store, once it is used.
    address: Mutex<Option<String>>,
    address_used: Notify,
    held: mpsc::UnboundedSender<()>,
}

impl Store for KeyHangs {
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
        StoreFuture::new(async move {
            if cost == 0 {
                return self
                    .memory
                    .check_returnable(plan, client, now_ms, cost)
                    .await;
            }
            if plan.name() == "per-ip" {
                let used = self.memory.check_returnable(plan, client, now_ms, cost);
                let used = used.await;
                *self.address.lock().unwrap() = Some(client.to_owned());
                self.address_used.notify_one();
                return used;
            }
            self.address_used.notified().await;
            let _ = self.held.send(());
            std::future::pending().await
        })
    }

    fn give_back(&self, receipt: Receipt) -> StoreFuture<'_, GivenBack> {
        self.memory.give_back(receipt)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_given_up_on_during_shutdown_gives_back_what_it_used() {
    for policy in POLICY_NAMES {
        let memory = Arc::new(MemoryBackend::new());
        let (held, mut holding) = mpsc::unbounded_channel();
        let store = Arc::new(KeyHangs {
            memory: memory.clone(),
            address: Mutex::new(None),
            address_used: Notify::new(),
            held,
        });
        let plans = ip_and_key_plans(policy);
        let rules = RulesConfig::from_toml(IP_AND_KEY_RULES).expect("rules");
        let rules = Rules::new(rules, &plans).expect("rules");
        let config = ServiceConfig::new(rules, store.clone(), Arc::new(ManualClock::new(0)));
        let running = Running::start(config).await;

        let mut client = running.client.clone();
        let call = tokio::spawn(async move {
            client
                .should_rate_limit(request(vec![address(), key()]))
                .await
        });
        tokio::time::timeout(Duration::from_secs(5), holding.recv())
            .await
            .expect("the key's use is reached")
            .expect("held");
        // The server is told to stop while the call is held, then Envoy
        // gives up on it: the last thing its worker serves.
        let stopping = tokio::spawn(running.stop());
        call.abort();
        tokio::time::timeout(Duration::from_secs(10), stopping)
            .await
            .expect("the server stops once the call is dropped")
            .expect("stopped");

        let address = store.address.lock().unwrap().clone().expect("used");
        let left = memory.limiter().inspect(&plans[0], &address, 0).limits[0].remaining;
        assert_eq!(left, LIMIT, "{policy}: the address's use given back");
    }
}
