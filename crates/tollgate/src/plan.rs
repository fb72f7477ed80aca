//! Plans: several named limits checked together, all or nothing.
//!
//! A client on plan `free` might get 10 requests per second on a sliding
//! window and 1,000 per day on a token bucket. A request is allowed only if
//! every limit allows it, and a rejected request consumes nothing from any
//! of them. Limits marked `shadow` are decided and reported but never reject
//! (for dark launches).

use std::sync::Arc;

use crate::policy::{AnyPolicy, AnyState, Policy};
use crate::{Decision, Error, FailurePolicy};

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

    /// The name, shared: every decision of this limit carries it without a
    /// copy of its text.
    pub(crate) fn shared_name(&self) -> Arc<str> {
        Arc::clone(&self.name)
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

/// The most limits one plan may hold: far more than a real plan needs (a
/// few windows: per second, per minute, per day), few enough that a
/// decision's one Redis script and its headers stay small.
pub const MAX_LIMITS_PER_PLAN: usize = 64;

/// A named list of limits, checked together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    name: Arc<str>,
    limits: Vec<Limit>,
}

impl Plan {
    /// A plan with at least one limit and at most [`MAX_LIMITS_PER_PLAN`],
    /// limit names unique.
    ///
    /// # Errors
    /// [`Error::EmptyPlan`], [`Error::TooManyLimits`] or [`Error::DuplicateLimit`].
    pub fn new(name: impl Into<Arc<str>>, limits: Vec<Limit>) -> Result<Self, Error> {
        let name = name.into();
        if limits.is_empty() {
            return Err(Error::EmptyPlan {
                plan: name.to_string(),
            });
        }
        if limits.len() > MAX_LIMITS_PER_PLAN {
            return Err(Error::TooManyLimits {
                plan: name.to_string(),
                count: limits.len(),
                max: MAX_LIMITS_PER_PLAN,
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
