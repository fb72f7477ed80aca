//! Inspection: one client's state under every limit of a plan, read
//! without using anything and without writing anything.
//!
//! Every store answers [`crate::Store::inspect`] the same way: it reads the
//! client's raw states (a copy from the memory store, a read-only script in
//! Redis) and hands them to [`inspect_plan`], which computes every number
//! with the policies' own arithmetic. So an inspection and a decision can
//! never disagree, whatever the store.

use std::sync::Arc;

use crate::plan::{LimitDecision, Plan, PlanDecision, PlanStates};
use crate::policy::{AnyState, Policy};

/// Units allowed at one time in a sliding window's log, still in the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRun {
    /// When the units were allowed (ms).
    pub at_ms: u64,
    /// Units allowed at that time.
    pub units: u32,
    /// How long until they leave the window (ms, at least 1).
    pub leaves_in_ms: u64,
}

/// One limit's state for one client, as an inspection shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitState {
    /// The limit's name.
    pub name: Arc<str>,
    /// Its policy's name.
    pub policy: &'static str,
    /// Requests per window, or the bucket's capacity.
    pub limit: u32,
    /// The window, in ms.
    pub window_ms: u64,
    /// Whether the limit only observes.
    pub shadow: bool,
    /// Requests of cost 1 the client could make now under this limit.
    pub remaining: u32,
    /// How long until the client's full quota is back (ms).
    pub reset_after_ms: u64,
    /// How long until a request of cost 1 would pass this limit (ms; 0 now).
    pub retry_after_ms: u64,
    /// For the sliding window: the runs of its log still inside the window,
    /// oldest first. `None` for the other policies.
    pub log: Option<Vec<LogRun>>,
}

/// One client's state under every limit of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// The time the state was read at: the caller's time, or the client's
    /// latest seen time when that is later (as a decision would use).
    pub now_ms: u64,
    /// Whether a request of cost 1 would pass every non-shadow limit now.
    pub allowed: bool,
    /// How long until a request of cost 1 would pass the plan (ms; 0 now).
    pub retry_after_ms: u64,
    /// Each limit, in the plan's order.
    pub limits: Vec<LimitState>,
}

/// The runs of a sliding log still inside the window at `now`.
fn live_runs(state: &AnyState, window_ms: u64, now: u64) -> Option<Vec<LogRun>> {
    let AnyState::SlidingWindow(log) = state else {
        return None;
    };
    let runs = log.runs().filter_map(|(at_ms, units)| {
        let leaves = u128::from(at_ms) + u128::from(window_ms);
        let leaves_in_ms = u64::try_from(leaves.checked_sub(u128::from(now))?).ok()?;
        (leaves_in_ms > 0).then_some(LogRun {
            at_ms,
            units,
            leaves_in_ms,
        })
    });
    Some(runs.collect())
}

/// The inspection of a client whose stored states are `states` (by limit
/// id, as [`PlanStates`]; a limit without one is as for a client first seen
/// at `now_ms`) at `now_ms`, which the caller has already brought up to the
/// client's latest seen time. Pure arithmetic: each number is the policy's
/// own answer to a request of cost 0 (`remaining`, reset) or 1 (the waits),
/// and the plan's wait is the plan's rule applied to those answers.
pub fn inspect_plan(plan: &Plan, states: &PlanStates, now_ms: u64) -> Inspection {
    let mut limits = Vec::with_capacity(plan.limits().len());
    let mut asks = Vec::with_capacity(plan.limits().len());
    for limit in plan.limits() {
        let policy = limit.policy();
        let fresh;
        let state = match states.iter().find(|(id, _)| *id == limit.id()) {
            Some((_, state)) => state,
            None => {
                fresh = policy.new_state(now_ms);
                &fresh
            }
        };
        let look = policy.decide(state, now_ms, 0);
        let one = policy.decide(state, now_ms, 1);
        limits.push(LimitState {
            name: limit.name().into(),
            policy: policy.name(),
            limit: policy.limit(),
            window_ms: policy.window_ms(),
            shadow: limit.is_shadow(),
            remaining: look.remaining,
            reset_after_ms: look.reset_after_ms,
            // A limit is at least 1, so a request of cost 1 always has a wait.
            retry_after_ms: one.retry_after_ms.unwrap_or(u64::MAX),
            log: live_runs(state, policy.window_ms(), now_ms),
        });
        asks.push(LimitDecision {
            name: limit.name().into(),
            policy: policy.name(),
            window_ms: policy.window_ms(),
            shadow: limit.is_shadow(),
            decision: one,
        });
    }
    let one = PlanDecision::from_limits(asks);
    Inspection {
        now_ms,
        allowed: one.allowed,
        retry_after_ms: one.retry_after_ms.unwrap_or(u64::MAX),
        limits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AnyPolicy, Limit, PlanLimiter};

    fn plan() -> Plan {
        let limit = |name: &str, policy: &str, n: u32| {
            Limit::new(name, AnyPolicy::from_name(policy, n, 1_000).unwrap(), false)
        };
        Plan::new(
            "p",
            vec![
                limit("log", "sliding-window", 3),
                limit("bucket", "token-bucket", 4),
                limit("gcra", "gcra", 5),
            ],
        )
        .unwrap()
    }

    #[test]
    fn the_numbers_are_those_of_checks_and_nothing_is_stored() {
        let plan = plan();
        let limiter = PlanLimiter::new();
        for t in [100, 100, 400] {
            assert!(limiter.check(&plan, "a", t, 1).allowed);
        }
        let seen = limiter.inspect(&plan, "a", 500);
        let log = &seen.limits[0];
        assert_eq!((log.remaining, log.retry_after_ms), (0, 600));
        assert_eq!(log.reset_after_ms, 900);
        let runs: Vec<(u64, u32, u64)> = log
            .log
            .as_ref()
            .unwrap()
            .iter()
            .map(|r| (r.at_ms, r.units, r.leaves_in_ms))
            .collect();
        assert_eq!(runs, [(100, 2, 600), (400, 1, 900)]);
        assert_eq!((seen.allowed, seen.retry_after_ms), (false, 600));
        // The bucket: one token back at 350, three used.
        assert_eq!(seen.limits[1].remaining, 2);
        assert_eq!(seen.limits[2].log, None);
        // A check of cost 1 at the same time agrees on the wait.
        assert_eq!(limiter.check(&plan, "a", 500, 1).retry_after_ms, Some(600));
        // An unknown client is read, not stored.
        let fresh = limiter.inspect(&plan, "b", 700);
        assert!(fresh.allowed && fresh.limits.iter().all(|l| l.remaining == l.limit));
        assert!(limiter.store().get("b").is_none());
    }
}
