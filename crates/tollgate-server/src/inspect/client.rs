//! `GET /v1/clients/{client}`: one client's plan and the state of each of
//! its limits, without using anything.
//!
//! On the memory store the numbers are the policies' own answers on a copy
//! of the client's state (nothing is written, not even a first-call
//! anchor), including the exact wait for a request of cost 1 and the
//! sliding window's log. On a shared store (Redis) they come from a check
//! of cost 0, as `GET /v1/remaining` gives: the wait for a request of cost
//! 1 is known only when one would pass now (0), and the log is not read.

use serde::Serialize;
use tollgate::{AnyState, DecidedBy, Plan, PlanDecision, PlanStates, Policy};

/// Where the numbers come from.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// A copy of the client's state in the memory store.
    MemoryState,
    /// A check of cost 0 on the store.
    StoreCheck,
}

/// One request allowed in the sliding window's log.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LogEntry {
    /// When the units were allowed (clock ms).
    pub at_ms: u64,
    /// Units allowed at that time.
    pub units: u32,
    /// How long until they leave the window.
    pub leaves_in_ms: u64,
}

/// One limit's state.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LimitState {
    /// The limit's name.
    pub name: String,
    /// Its policy.
    pub policy: &'static str,
    /// Requests per window, or the bucket's capacity.
    pub limit: u32,
    /// The window, in ms.
    pub window_ms: u64,
    /// Whether the limit only observes.
    pub shadow: bool,
    /// Requests of cost 1 the client could make now.
    pub remaining: u32,
    /// How long until the full quota is back, in ms.
    pub reset_ms: u64,
    /// How long until a request of cost 1 would pass this limit, in ms
    /// (`null` when unknown: on a shared store while `remaining` is 0).
    pub retry_after_ms: Option<u64>,
    /// The sliding window's log, oldest first (`null` for other policies
    /// and on a shared store).
    pub entries: Option<Vec<LogEntry>>,
}

/// `GET /v1/clients/{client}`'s answer.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ClientState {
    /// The client id.
    pub client: String,
    /// The plan looked at.
    pub plan: String,
    /// The clock's time of the answer (ms).
    pub now_ms: u64,
    /// Where the numbers come from.
    pub source: Source,
    /// Who answered (`"store"` unless the store failed and the failure policy stood in).
    pub decided_by: &'static str,
    /// Whether a request of cost 1 would pass every limit now.
    pub allowed: bool,
    /// How long until a request of cost 1 would pass (`null` when unknown).
    pub retry_after_ms: Option<u64>,
    /// Each limit, in the plan's order.
    pub limits: Vec<LimitState>,
}

/// The log of a sliding window's state, entries still inside the window at `now`.
fn log_entries(state: &AnyState, window_ms: u64, now: u64) -> Option<Vec<LogEntry>> {
    let AnyState::SlidingWindow(log) = state else {
        return None;
    };
    Some(
        log.runs()
            .filter_map(|(at_ms, units)| {
                let leaves = u128::from(at_ms) + u128::from(window_ms);
                let leaves_in_ms = u64::try_from(leaves.checked_sub(u128::from(now))?).ok()?;
                (leaves_in_ms > 0).then_some(LogEntry {
                    at_ms,
                    units,
                    leaves_in_ms,
                })
            })
            .collect(),
    )
}

/// The client's state from a copy of its memory states (`states` empty for
/// an unknown client), at `now` (already clamped to the client's last seen time).
pub fn from_memory(client: &str, plan: &Plan, states: &PlanStates, now: u64) -> ClientState {
    let mut limits = Vec::with_capacity(plan.limits().len());
    let mut asks = Vec::with_capacity(plan.limits().len());
    for limit in plan.limits() {
        let policy = limit.policy();
        let fresh;
        let state = match states.iter().find(|(id, _)| *id == limit.id()) {
            Some((_, state)) => state,
            None => {
                fresh = policy.new_state(now);
                &fresh
            }
        };
        let look = policy.decide(state, now, 0);
        let one = policy.decide(state, now, 1);
        limits.push(LimitState {
            name: limit.name().to_owned(),
            policy: policy.name(),
            limit: look.limit,
            window_ms: policy.window_ms(),
            shadow: limit.is_shadow(),
            remaining: look.remaining,
            reset_ms: look.reset_after_ms,
            retry_after_ms: one.retry_after_ms,
            entries: log_entries(state, policy.window_ms(), now),
        });
        asks.push(tollgate::LimitDecision {
            name: limit.name().into(),
            policy: policy.name(),
            window_ms: policy.window_ms(),
            shadow: limit.is_shadow(),
            decision: one,
        });
    }
    // Whether a request of cost 1 would pass, and its wait: the plan's rule
    // applied to each limit's answer for cost 1.
    let one = PlanDecision::from_limits(asks);
    ClientState {
        client: client.to_owned(),
        plan: plan.name().to_owned(),
        now_ms: now,
        source: Source::MemoryState,
        decided_by: DecidedBy::Store.as_str(),
        allowed: one.allowed,
        retry_after_ms: one.retry_after_ms,
        limits,
    }
}

/// The client's state from a check of cost 0 on the store.
pub fn from_look(client: &str, plan: &Plan, look: &PlanDecision, now: u64) -> ClientState {
    let limits: Vec<LimitState> = look
        .limits
        .iter()
        .map(|l| LimitState {
            name: l.name.to_string(),
            policy: l.policy,
            limit: l.decision.limit,
            window_ms: l.window_ms,
            shadow: l.shadow,
            remaining: l.decision.remaining,
            reset_ms: l.decision.reset_after_ms,
            retry_after_ms: (l.decision.remaining > 0).then_some(0),
            entries: None,
        })
        .collect();
    let blocking = |l: &&LimitState| !l.shadow && l.remaining == 0;
    let allowed = !limits.iter().any(|l| blocking(&l));
    ClientState {
        client: client.to_owned(),
        plan: plan.name().to_owned(),
        now_ms: now,
        source: Source::StoreCheck,
        decided_by: look.decided_by.as_str(),
        allowed,
        retry_after_ms: allowed.then_some(0),
        limits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{AnyPolicy, Limit, PlanLimiter};

    #[test]
    fn memory_view_matches_a_check_and_lists_the_log() {
        let policy = AnyPolicy::from_name("sliding-window", 3, 1_000).expect("policy");
        let plan = Plan::new("free", vec![Limit::new("1s", policy, false)]).expect("plan");
        let limiter = PlanLimiter::new();
        for t in [100, 100, 400] {
            assert!(limiter.check(&plan, "alice", t, 1).allowed);
        }
        let entry = limiter.store().get("alice").expect("known");
        let view = from_memory("alice", &plan, &entry.state, 500);
        let limit = &view.limits[0];
        assert_eq!(limit.remaining, 0);
        assert!(!view.allowed);
        // The two units at 100 leave at 1100.
        assert_eq!(limit.retry_after_ms, Some(600));
        assert_eq!(view.retry_after_ms, Some(600));
        let entries = limit.entries.as_ref().expect("a log");
        assert_eq!(
            entries
                .iter()
                .map(|e| (e.at_ms, e.units))
                .collect::<Vec<_>>(),
            [(100, 2), (400, 1)]
        );
        // A check of cost 1 at the same time agrees.
        let check = limiter.check(&plan, "alice", 500, 1);
        assert_eq!(check.retry_after_ms, Some(600));
    }
}
