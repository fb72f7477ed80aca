//! [`NaiveStore`]: the plan contract spelt out over the naive [`models`],
//! as a [`Store`], so that any store's answers can be compared with answers
//! it did not compute itself.
//!
//! The contract, as the README states it: a request is allowed when every
//! non-shadow limit of the plan allows it; an allowed request uses its cost
//! on every limit that allowed it, a rejected one uses nothing; a limit that
//! would have allowed a rejected request reports itself as it stays; the
//! overall wait is the longest wait of the rejecting non-shadow limits (none
//! when one of them can never pass); a call earlier than the latest seen for
//! its client is answered at that latest time; a token bucket is anchored at
//! the first call that meets it, even one that only asks.
//!
//! [`models`]: crate::models

use std::collections::HashMap;
use std::sync::Mutex;

use tollgate::{DecidedBy, LimitDecision, Plan, PlanDecision, Policy, Store, StoreFuture};

use crate::models::{decide, AnyModel};

/// What the naive store keeps per client.
#[derive(Default)]
struct Client {
    last_seen: u64,
    /// One model per limit met, by [`tollgate::Limit::id`].
    limits: HashMap<u64, AnyModel>,
}

/// One limit tried on its own: the model before, after, and the answer.
type Tried = (AnyModel, AnyModel, tollgate::Decision);

/// The plan contract over naive models, one client at a time under one lock.
#[derive(Default)]
pub struct NaiveStore {
    clients: Mutex<HashMap<String, Client>>,
}

impl NaiveStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The decision for `cost` units of `client` under `plan` at `now_ms`.
    ///
    /// # Panics
    /// On a policy without a naive model (a new policy needs one here).
    pub fn decide(&self, plan: &Plan, client: &str, now_ms: u64, cost: u32) -> PlanDecision {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let entry = clients.entry(client.to_owned()).or_insert(Client {
            last_seen: now_ms,
            limits: HashMap::new(),
        });
        entry.last_seen = entry.last_seen.max(now_ms);
        let now = entry.last_seen;
        let tried = try_each_limit(plan, entry, now, cost);
        let (allowed, retry_after_ms) = overall(plan, &tried);
        let mut limits = Vec::new();
        for (limit, (before, after, mut decision)) in plan.limits().iter().zip(tried) {
            let kept = if allowed && decision.allowed {
                after
            } else {
                if decision.allowed {
                    // Allowed here, rejected elsewhere: nothing was used.
                    decision = decide(&mut before.clone(), now, 0);
                }
                before
            };
            entry.limits.insert(limit.id(), kept);
            limits.push(LimitDecision {
                name: limit.name().into(),
                policy: limit.policy().name(),
                window_ms: limit.policy().window_ms(),
                shadow: limit.is_shadow(),
                decision,
            });
        }
        PlanDecision {
            allowed,
            retry_after_ms,
            limits,
            decided_by: DecidedBy::Store,
        }
    }
}

/// Each limit of `plan` decided on its own: its model before, after, and
/// its answer.
///
/// # Panics
/// On a policy without a naive model.
fn try_each_limit(plan: &Plan, client: &Client, now: u64, cost: u32) -> Vec<Tried> {
    plan.limits()
        .iter()
        .map(|limit| {
            let policy = limit.policy();
            let before = client.limits.get(&limit.id()).cloned().unwrap_or_else(|| {
                AnyModel::new(policy.name(), policy.limit(), policy.window_ms(), now)
                    .unwrap_or_else(|| panic!("no naive model for {}", policy.name()))
            });
            let mut after = before.clone();
            let decision = decide(&mut after, now, cost);
            (before, after, decision)
        })
        .collect()
}

/// Whether the plan allows (no enforced limit rejects), and the overall
/// wait: the longest of the rejecting limits, none when one never passes.
fn overall(plan: &Plan, tried: &[Tried]) -> (bool, Option<u64>) {
    let rejecting: Vec<&tollgate::Decision> = plan
        .limits()
        .iter()
        .zip(tried)
        .filter(|(limit, (_, _, d))| !limit.is_shadow() && !d.allowed)
        .map(|(_, (_, _, d))| d)
        .collect();
    let retry_after_ms = rejecting.iter().try_fold(0, |longest: u64, d| {
        d.retry_after_ms.map(|w| longest.max(w))
    });
    (rejecting.is_empty(), retry_after_ms)
}

impl Store for NaiveStore {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        StoreFuture::new(async move { Ok(self.decide(plan, client, now_ms, cost)) })
    }
}
