//! What evicting a client of a capped [`crate::PlanLimiter`] gives away.
//!
//! A full shard holds clients of every plan, but a check knows only its own
//! plan. So the limiter remembers every limit it has met while making room
//! (and the plans of its last sweep), by limit id, and judges each client by
//! the states it holds: the most units any one of its (non-shadow) limits
//! would give back. The maximum rather than the sum, because one request
//! counts against every limit of its plan: summing would count it once per
//! limit. A shadow limit never rejects, so resetting it gives nothing away.

use std::collections::HashMap;

use parking_lot::{Mutex, MutexGuard};

use crate::plan::{Limit, Plan, PlanStates};
use crate::policy::Policy;
use crate::store::DropCost;

/// The limits a plan limiter has met, by id.
#[derive(Default)]
pub(crate) struct KnownLimits {
    limits: Mutex<HashMap<u64, Limit>>,
}

impl KnownLimits {
    /// The judge for a store making room while `plan` is being checked. It
    /// takes the lock (after the shard's: never the other way round) and
    /// learns `plan`'s limits only when first called, so a check that makes
    /// no room pays nothing.
    pub(crate) fn judge_for<'a>(
        &'a self,
        plan: &'a Plan,
    ) -> impl FnMut(&mut PlanStates, u64) -> DropCost + 'a {
        let mut known: Option<MutexGuard<'a, HashMap<u64, Limit>>> = None;
        move |states, now| {
            let known = known.get_or_insert_with(|| {
                let mut known = self.limits.lock();
                for limit in plan.limits() {
                    if known.get(&limit.id()) != Some(limit) {
                        known.insert(limit.id(), limit.clone());
                    }
                }
                known
            });
            judge(known, states, now)
        }
    }

    /// Forgets every limit but those of `plans` (a sweep drops the states of
    /// other limits anyway).
    pub(crate) fn replace(&self, plans: &[Plan]) {
        let limits = plans
            .iter()
            .flat_map(|plan| plan.limits())
            .map(|limit| (limit.id(), limit.clone()))
            .collect();
        *self.limits.lock() = limits;
    }
}

/// Drops the states that no longer matter, then says what evicting the rest
/// gives back. A state of a limit not known gives back as much as can be:
/// without its policy nothing shows that it is cheap to evict.
fn judge(known: &HashMap<u64, Limit>, states: &mut PlanStates, now: u64) -> DropCost {
    states.retain(|(id, state)| {
        known
            .get(id)
            .is_none_or(|limit| !limit.policy().reclaim(state, now).allows_removal(false))
    });
    if states.is_empty() {
        return DropCost::Nothing;
    }
    let units = states.iter().map(|(id, state)| match known.get(id) {
        Some(limit) if limit.is_shadow() => 0,
        Some(limit) => limit.policy().units_given_back(state, now),
        None => u64::MAX,
    });
    DropCost::GivesBack(units.max().unwrap_or(0))
}
