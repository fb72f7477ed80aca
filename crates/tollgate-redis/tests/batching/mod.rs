//! What the batching tests share (`batch.rs` on one node, `cluster_batch.rs`
//! on a cluster): callers polled in a fixed order by one task
//! ([`in_order`]), so that the order they queued in is the order of the
//! list; a plan of every policy; the store's configuration; requests from a
//! fixed generator.
#![allow(dead_code)] // each test file uses its own part

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tollgate::{AnyPolicy, Limit, Plan, PlanDecision, PlanLimiter};
use tollgate_redis::{RedisStore, RedisStoreConfig, RedisStoreError};

pub type Answer = Result<PlanDecision, RedisStoreError>;
pub type Pending<'a> = Pin<Box<dyn Future<Output = Answer> + 'a>>;

/// Polls every future in the list's order until all are ready.
pub async fn in_order(futures: Vec<Pending<'_>>) -> Vec<Answer> {
    let mut futures: Vec<Option<Pending<'_>>> = futures.into_iter().map(Some).collect();
    let mut answers: Vec<Option<Answer>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (slot, answer) in futures.iter_mut().zip(answers.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => {
                        *answer = Some(value);
                        *slot = None;
                    }
                    Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    answers
        .into_iter()
        .map(|a| a.expect("every future answered"))
        .collect()
}

/// A decision of cost 1 at `now_ms` for each of `clients`, in order, none
/// polled yet.
pub fn at_once<'a, C: AsRef<str>>(
    store: &'a RedisStore,
    plan: &'a Plan,
    clients: &'a [C],
    now_ms: u64,
) -> Vec<Pending<'a>> {
    clients
        .iter()
        .map(|client| Box::pin(store.decide(plan, client.as_ref(), now_ms, 1)) as Pending<'a>)
        .collect()
}

/// Decides `requests` (`(client, now_ms, cost)`) all at once, queued in
/// the list's order, and checks that each answer is the in-memory
/// limiter's for that order.
pub async fn assert_answers_in_arrival_order(
    store: &RedisStore,
    plan: &Plan,
    requests: &[(String, u64, u32)],
) {
    let futures: Vec<Pending<'_>> = requests
        .iter()
        .map(|(client, now, cost)| Box::pin(store.decide(plan, client, *now, *cost)) as Pending<'_>)
        .collect();
    let answers = in_order(futures).await;
    let reference = PlanLimiter::new();
    for (i, ((client, now, cost), answer)) in requests.iter().zip(answers).enumerate() {
        let expected = reference.check(plan, client, *now, *cost);
        assert_eq!(
            answer.expect("decided"),
            expected,
            "request {i}: {client} at {now}, cost {cost}"
        );
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    // One thread: a batch's task runs only once every caller has queued,
    // so the batches are the same on every run.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Every policy, one limit each, plus a shadow limit.
pub fn plan() -> Plan {
    let mut limits: Vec<Limit> = ["sliding-window", "token-bucket", "gcra"]
        .iter()
        .map(|name| {
            let policy = AnyPolicy::from_name(name, 5, 1_000).expect("policy");
            Limit::new(*name, policy, false)
        })
        .collect();
    let shadow = AnyPolicy::from_name("sliding-window", 3, 10_000).expect("policy");
    limits.push(Limit::new("shadow", shadow, true));
    Plan::new("batch", limits).expect("plan")
}

pub fn config(prefix: &str, batches_in_flight: usize) -> RedisStoreConfig {
    RedisStoreConfig {
        prefix: prefix.to_owned(),
        expiry_margin_ms: 600_000,
        // Answers, not stalls: a loaded test machine must not make calls late.
        timeout: Duration::from_secs(10),
        batch_max: 16,
        batches_in_flight,
        ..RedisStoreConfig::default()
    }
}

/// The requests, in arrival order: `(client, now_ms, cost)`, from a small
/// linear congruential generator (deterministic, no extra dependency).
pub fn requests(count: usize, clients: u64) -> Vec<(String, u64, u32)> {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut now = 10_000;
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            now += (state >> 60) * 7; // 0 to 105 ms later, often the same time
            let client = format!("client-{}", (state >> 33) % clients);
            let cost = u32::try_from((state >> 20) % 4).expect("small");
            (client, now, cost)
        })
        .collect()
}
