//! Giving back what a memory check consumed ([`crate::receipt`]): the
//! memory store's receipts, so that a request of several clients consumes
//! nothing when a later one refuses, even when another front end of the
//! same process (the HTTP API beside the Envoy service) used that client
//! between the look and the use.
//!
//! A receipt holds, for every limit the check changed, the state the check
//! left and the state a refused check would have left. Giving back is
//! compare and restore, as on Redis: a state still exactly as the check
//! left it gets the refused one back; one used since keeps the use, except
//! under the sliding log, whose use is taken out of the log
//! ([`Policy::take_back`]).

use compact_str::CompactString;

use super::{check_plan, PlanLimiter};
use crate::plan::{Plan, PlanStates};
use crate::policy::{AnyState, Policy};
use crate::receipt::{GivenBack, Receipt, Returnable};
use crate::store::{Lineage, SameEntry};

/// What a memory check consumed, for [`PlanLimiter::give_back`].
struct MemoryReceipt {
    client: CompactString,
    /// The entry the check used: a client evicted and stored anew since
    /// holds none of this check's use.
    lineage: Lineage,
    /// The time the check was decided at (the client's latest seen time,
    /// when later than the call's).
    used_at: u64,
    cost: u32,
    limits: Vec<Changed>,
}

/// One limit whose state the check changed.
struct Changed {
    limit: crate::Limit,
    /// The state a refused check would have left (`None`: no state).
    refused: Option<AnyState>,
    /// The state the check left.
    used: AnyState,
}

impl PlanLimiter {
    /// [`PlanLimiter::check`], with a [`Receipt`] of what it consumed when
    /// it consumed anything, for [`PlanLimiter::give_back`].
    pub fn check_returnable(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
    ) -> Returnable {
        self.with_plan_entry(plan, client, now_ms, |access| {
            let now = access.now_ms;
            if cost == 0 {
                // A look consumes nothing: no copies, no receipt.
                return check_plan(plan, access.state, now, 0).into();
            }
            let mut refused = access.state.clone();
            check_plan(plan, &mut refused, now, 0);
            let decision = check_plan(plan, access.state, now, cost);
            let receipt = decision.allowed.then(|| {
                Receipt::new(MemoryReceipt {
                    client: CompactString::new(client),
                    lineage: access.lineage,
                    used_at: now,
                    cost,
                    limits: changed(plan, &refused, access.state),
                })
            });
            Returnable { decision, receipt }
        })
    }

    /// Takes back what the check of `receipt` consumed: each limit's state
    /// is put back to what a refused check would have left when nothing
    /// used it since; otherwise the sliding log takes the use out and the
    /// others keep it ([`GivenBack::Kept`]). A client no longer stored has
    /// nothing left to take back. A client whose entry may have been
    /// removed and made anew since (an eviction in its shard,
    /// [`SameEntry::Unsure`]) keeps what it holds: its state may be another
    /// request's, even one equal to the check's, and taking that back would
    /// admit more than the limit. A receipt of another store is kept.
    pub fn give_back(&self, receipt: Receipt) -> GivenBack {
        let Ok(receipt) = receipt.into_inner::<MemoryReceipt>() else {
            return GivenBack::Kept;
        };
        let MemoryReceipt {
            client,
            lineage,
            used_at,
            cost,
            limits,
        } = receipt;
        let restored = self.store.with_same_entry(&client, lineage, |states| {
            // Every limit, even after one that keeps its use.
            let mut all = true;
            for changed in limits {
                all &= restore(states, changed, used_at, cost);
            }
            all
        });
        match restored {
            SameEntry::Same(false) | SameEntry::Unsure => GivenBack::Kept,
            SameEntry::Same(true) | SameEntry::Gone => GivenBack::Restored,
        }
    }
}

/// The limits of `plan` whose state differs between `refused` and `used`.
fn changed(plan: &Plan, refused: &PlanStates, used: &PlanStates) -> Vec<Changed> {
    let find = |states: &PlanStates, id: u64| {
        (states.iter())
            .find(|(state_id, _)| *state_id == id)
            .map(|(_, state)| state.clone())
    };
    (plan.limits().iter())
        .filter_map(|limit| {
            let used = find(used, limit.id())?;
            let refused = find(refused, limit.id());
            (refused.as_ref() != Some(&used)).then(|| Changed {
                limit: limit.clone(),
                refused,
                used,
            })
        })
        .collect()
}

/// Puts one limit's state back (see [`PlanLimiter::give_back`]); true when
/// nothing of the use is left in it.
fn restore(states: &mut PlanStates, changed: Changed, used_at: u64, cost: u32) -> bool {
    let Changed {
        limit,
        refused,
        used,
    } = changed;
    let Some(at) = states.iter().position(|(id, _)| *id == limit.id()) else {
        return true;
    };
    if states[at].1 != used {
        return limit.policy().take_back(&mut states[at].1, used_at, cost);
    }
    match refused {
        Some(refused) => states[at].1 = refused,
        None => drop(states.swap_remove(at)),
    }
    true
}
