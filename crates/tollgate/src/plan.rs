//! Plans: several named limits checked together, all or nothing.
//!
//! A client on plan `free` might get 10 requests per second on a sliding
//! window and 1,000 per day on a token bucket. A request is allowed only if
//! every limit allows it, and a rejected request consumes nothing from any
//! of them. Limits marked `shadow` are decided and reported but never reject
//! (for dark launches).

use std::sync::Arc;

use crate::eviction::KnownLimits;
use crate::inspect::{inspect_plan, Inspection};
use crate::policy::{AnyPolicy, AnyState, Policy};
use crate::store::MemoryStore;
use crate::{Decision, Error, FailurePolicy};

mod give_back;

/// One named limit of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    name: Arc<str>,
    policy: AnyPolicy,
    shadow: bool,
    id: u64,
}

impl Limit {
    /// A limit called `name` (unique within its plan) applying `policy`.
    /// A `shadow` limit never rejects a request.
    pub fn new(name: impl Into<Arc<str>>, policy: AnyPolicy, shadow: bool) -> Self {
        Self {
            name: name.into(),
            policy,
            shadow,
            id: 0,
        }
    }

    /// The limit's name, as shown in decisions and headers.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The policy applied.
    pub fn policy(&self) -> &AnyPolicy {
        &self.policy
    }

    /// Whether the limit only observes.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// A stable identity for this limit's per-client state: the same for the
    /// same plan name, limit name, policy, limit and window in every process
    /// and across config reloads (so unchanged limits keep their state), and
    /// different when any of them changes. Shadowing does not change it.
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// A named list of limits, checked together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    name: Arc<str>,
    limits: Vec<Limit>,
}

impl Plan {
    /// A plan with at least one limit, limit names unique.
    ///
    /// # Errors
    /// [`Error::EmptyPlan`] or [`Error::DuplicateLimit`].
    pub fn new(name: impl Into<Arc<str>>, limits: Vec<Limit>) -> Result<Self, Error> {
        let name = name.into();
        if limits.is_empty() {
            return Err(Error::EmptyPlan {
                plan: name.to_string(),
            });
        }
        let mut limits = limits;
        for i in 0..limits.len() {
            if limits[..i].iter().any(|l| l.name == limits[i].name) {
                return Err(Error::DuplicateLimit {
                    plan: name.to_string(),
                    limit: limits[i].name.to_string(),
                });
            }
            let limit = &mut limits[i];
            limit.id = stable_id(&[
                name.as_bytes(),
                limit.name.as_bytes(),
                limit.policy.name().as_bytes(),
                &limit.policy.limit().to_le_bytes(),
                &limit.policy.window_ms().to_le_bytes(),
            ]);
        }
        Ok(Self { name, limits })
    }

    /// The plan's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plan's limits, in order.
    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }
}

/// FNV-1a over length-prefixed fields: deterministic everywhere, so servers
/// sharing one Redis agree on the key of every limit.
fn stable_id(fields: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |byte: u8| {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    };
    for field in fields {
        for byte in (field.len() as u64).to_le_bytes() {
            feed(byte);
        }
        for &byte in *field {
            feed(byte);
        }
    }
    hash
}

/// The decision of one limit within a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitDecision {
    /// The limit's name.
    pub name: Arc<str>,
    /// The limit's policy name.
    pub policy: &'static str,
    /// The limit's window in milliseconds.
    pub window_ms: u64,
    /// Whether the limit is a shadow (its rejection does not reject the request).
    pub shadow: bool,
    /// The limit's own decision. When the request as a whole was rejected,
    /// `remaining` and the waits describe the limit as it stays (nothing was
    /// consumed), even if this limit alone would have allowed it.
    pub decision: Decision,
}

/// Who made a decision: the store, this instance's rejection cache
/// repeating the store's own rejection, or the failure policy standing in
/// for the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecidedBy {
    /// The store decided, with the client's real state.
    #[default]
    Store,
    /// The instance's rejection cache (`tollgate-cache`) rejected the
    /// request without calling the store, because the store had rejected
    /// this client under this plan at a cost no larger, and the wait it gave
    /// has not run out: the store would have rejected it too.
    Cache,
    /// The store failed (or its circuit was open) and this failure policy
    /// answered instead. Never [`FailurePolicy::Unavailable`], which answers
    /// nothing: the error goes back to the front end.
    Failure(FailurePolicy),
}

impl DecidedBy {
    /// Every value a decision can carry, for metrics that list them all.
    pub const ALL: [DecidedBy; 5] = [
        DecidedBy::Store,
        DecidedBy::Cache,
        DecidedBy::Failure(FailurePolicy::FailOpen),
        DecidedBy::Failure(FailurePolicy::FailClosed),
        DecidedBy::Failure(FailurePolicy::LocalFallback),
    ];

    /// A short name for logs, metrics and JSON: `"store"`, `"cache"`, or the
    /// failure policy's name (`"fail-open"`, `"fail-closed"`,
    /// `"local-fallback"`).
    pub fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Store => "store",
            DecidedBy::Cache => "cache",
            DecidedBy::Failure(policy) => policy.as_str(),
        }
    }
}

/// The decision for one request against a whole plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanDecision {
    /// Whether every non-shadow limit allowed the request.
    pub allowed: bool,
    /// How long until this same request would be allowed by every limit:
    /// `Some(0)` when allowed, `None` when its cost exceeds a (non-shadow) limit.
    pub retry_after_ms: Option<u64>,
    /// One decision per limit, in the plan's order.
    pub limits: Vec<LimitDecision>,
    /// Whether the store decided or a failure policy stood in for it.
    pub decided_by: DecidedBy,
}

impl PlanDecision {
    /// Builds the overall answer from each limit's decision. Waiting for the
    /// longest wait among the rejecting limits is exact, because without
    /// consumption no limit gets stricter as time passes.
    pub fn from_limits(limits: Vec<LimitDecision>) -> Self {
        let mut allowed = true;
        let mut retry_after_ms = Some(0);
        for limit in limits.iter().filter(|l| !l.shadow && !l.decision.allowed) {
            allowed = false;
            retry_after_ms = match (retry_after_ms, limit.decision.retry_after_ms) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
        }
        Self {
            allowed,
            retry_after_ms,
            limits,
            decided_by: DecidedBy::Store,
        }
    }

    /// Why the request was refused: the enforced limit that holds it back
    /// longest (the one its `retry_after_ms` comes from; a cost over a
    /// limit before any wait, the first such limit among equals). `None`
    /// when it was allowed.
    pub fn refused_by(&self) -> Option<&LimitDecision> {
        let wait = |l: &LimitDecision| l.decision.retry_after_ms.unwrap_or(u64::MAX);
        (self.limits.iter())
            .filter(|l| !l.shadow && !l.decision.allowed)
            .fold(None, |longest: Option<&LimitDecision>, l| match longest {
                Some(kept) if wait(kept) >= wait(l) => Some(kept),
                _ => Some(l),
            })
    }
}

/// The states of one client under every limit it has met, by limit id.
pub type PlanStates = Vec<(u64, AnyState)>;

/// Checks clients against plans, with state in memory, atomically per client.
#[derive(Default)]
pub struct PlanLimiter {
    store: MemoryStore<PlanStates>,
    /// The limits met, to judge what evicting a client gives away.
    known_limits: KnownLimits,
    /// The limits the last sweep found states of in none of its plans.
    /// A sweep drops such a state only when its limit was of no plan at the
    /// sweep before too: a reload while a sweep walks the shards may add a
    /// limit whose first states the sweep, holding the plans it read
    /// before, would take for a removed limit's (the client's use of it
    /// forgotten); the next sweep reads the new plans.
    unknown_limits: parking_lot::Mutex<Vec<u64>>,
}

impl PlanLimiter {
    /// A limiter with no clients yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A limiter keeping at most about `max_clients` clients (see
    /// [`MemoryStore::with_max_clients`]): when a shard is full, a new client
    /// first makes room by dropping the limit states that no longer matter
    /// (clients left with no state go), then by evicting the clients whose
    /// eviction gives back the fewest units: under the limit that would give
    /// back the most ([`Policy::units_given_back`]), least recently seen first
    /// among equals. A client that used up its quota goes last.
    pub fn with_max_clients(max_clients: usize) -> Self {
        Self {
            store: MemoryStore::with_max_clients(max_clients),
            known_limits: KnownLimits::default(),
            unknown_limits: parking_lot::Mutex::default(),
        }
    }

    /// Decides a request of `cost` units for `client` against every limit of
    /// `plan`, and consumes from each limit only if the request is allowed
    /// (shadow limits that would reject consume nothing). A cost of 0 only asks.
    pub fn check(&self, plan: &Plan, client: &str, now_ms: u64, cost: u32) -> PlanDecision {
        self.store.with_entry_reclaiming(
            client,
            now_ms,
            |_| Vec::new(),
            self.known_limits.for_plan(plan),
            |access| check_plan(plan, access.state, access.now_ms, cost),
        )
    }

    /// The numbers for `client` under `plan` without using anything.
    pub fn peek(&self, plan: &Plan, client: &str, now_ms: u64) -> PlanDecision {
        self.check(plan, client, now_ms, 0)
    }

    /// `client`'s state under every limit of `plan` at `now_ms` (or at the
    /// client's latest seen time, when later), read from a copy: nothing is
    /// stored, not even an unknown client or a token bucket's anchor, and
    /// the latest seen time stays as it was. See [`crate::inspect_plan`].
    pub fn inspect(&self, plan: &Plan, client: &str, now_ms: u64) -> Inspection {
        match self.store.get(client) {
            Some(entry) => inspect_plan(plan, &entry.state, now_ms.max(entry.last_seen)),
            None => inspect_plan(plan, &Vec::new(), now_ms),
        }
    }

    /// Drops limit states that no longer matter (see [`crate::Limiter::sweep`]),
    /// given the plans they belong to; states of limits in none of `plans`
    /// (left behind by a config change) are dropped too, once two sweeps in
    /// a row found their limit in none of their plans (a state written under
    /// a plan newer than the sweep's stays). Returns how many clients were
    /// dropped entirely.
    pub fn sweep(&self, plans: &[Plan], now_ms: u64, reset_phase: bool) -> usize {
        self.known_limits.replace(plans);
        let find = |id: u64| {
            plans
                .iter()
                .flat_map(|p| p.limits.iter())
                .find(|l| l.id == id)
        };
        let unknown_before = std::mem::take(&mut *self.unknown_limits.lock());
        let mut unknown = Vec::new();
        let dropped = self.store.sweep_with(now_ms, |states, now| {
            states.retain(|(id, state)| match find(*id) {
                Some(limit) => !limit.policy.reclaim(state, now).allows_removal(reset_phase),
                None => {
                    if !unknown.contains(id) {
                        unknown.push(*id);
                    }
                    !unknown_before.contains(id)
                }
            });
            states.is_empty()
        });
        *self.unknown_limits.lock() = unknown;
        dropped
    }

    /// Number of clients with stored state.
    pub fn clients(&self) -> usize {
        self.store.len()
    }

    /// The store, for inspection (cap, eviction counts).
    pub fn store(&self) -> &MemoryStore<PlanStates> {
        &self.store
    }
}

/// The plan check on one client's states: decide every limit, then consume
/// from all of them or (when rejected) from none.
pub fn check_plan(plan: &Plan, states: &mut PlanStates, now: u64, cost: u32) -> PlanDecision {
    let mut decisions = Vec::with_capacity(plan.limits.len());
    for limit in &plan.limits {
        let decision = match states.iter().find(|(id, _)| *id == limit.id) {
            Some((_, state)) => limit.policy.decide(state, now, cost),
            None => limit.policy.decide(&limit.policy.new_state(now), now, cost),
        };
        decisions.push(LimitDecision {
            name: limit.name.clone(),
            policy: limit.policy.name(),
            window_ms: limit.policy.window_ms(),
            shadow: limit.shadow,
            decision,
        });
    }
    let mut outcome = PlanDecision::from_limits(decisions);
    for (limit, reported) in plan.limits.iter().zip(outcome.limits.iter_mut()) {
        let position = states.iter().position(|(id, _)| *id == limit.id);
        let consume = outcome.allowed && cost > 0 && reported.decision.allowed;
        if !outcome.allowed && cost > 0 && reported.decision.allowed {
            // This limit would have taken the request but another rejected
            // it: report this limit as it stays, since nothing is consumed.
            reported.decision = match position {
                Some(i) => limit.policy.decide(&states[i].1, now, 0),
                None => limit.policy.decide(&limit.policy.new_state(now), now, 0),
            };
        }
        if consume || limit.policy.first_call_anchors() {
            let i = position.unwrap_or_else(|| {
                states.push((limit.id, limit.policy.new_state(now)));
                states.len() - 1
            });
            if consume {
                limit.policy.consume(&mut states[i].1, now, cost);
            }
        }
    }
    outcome
}
