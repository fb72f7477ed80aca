//! What evicting a client from a capped store gives away: the [`Eviction`]
//! trait a capped [`crate::MemoryStore`] asks, and its answer for a capped
//! [`crate::PlanLimiter`].
//!
//! A full shard holds clients of every plan, but a check knows only its own
//! plan. So the limiter remembers every limit it has met, by limit id (the
//! plan of every check that added a state, of every check that made room,
//! and of every sweep), and judges each client by
//! the states it holds: the most units any one of its (non-shadow) limits
//! would give back. The maximum rather than the sum, because one request
//! counts against every limit of its plan: summing would count it once per
//! limit. A shadow limit never rejects, so resetting it gives nothing away.

use std::sync::atomic::{AtomicU64, Ordering};

use foldhash::fast::RandomState;
use hashbrown::HashMap;
use parking_lot::{Mutex, MutexGuard};

use crate::plan::{Limit, Plan, PlanStates};
use crate::policy::Policy;

/// How a capped store chooses what to drop when a new client finds its
/// shard full (see [`crate::MemoryStore::with_entry_reclaiming`]).
pub trait Eviction<S> {
    /// Whether dropping the entry at `now_ms` changes no answer (it may trim
    /// the state first). Such entries go first.
    fn reclaimable(&mut self, state: &mut S, now_ms: u64) -> bool;

    /// How many units evicting the entry at `now_ms` would give the client
    /// back (it would start afresh). Entries that give back fewer go first,
    /// so that a client that used up its quota goes last.
    fn units_given_back(&mut self, state: &S, now_ms: u64) -> u64;
}

/// Plain LRU: nothing is reclaimable and every eviction gives back as much,
/// so the least recently seen go first.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeastRecentlySeen;

impl<S> Eviction<S> for LeastRecentlySeen {
    fn reclaimable(&mut self, _: &mut S, _: u64) -> bool {
        false
    }

    fn units_given_back(&mut self, _: &S, _: u64) -> u64 {
        0
    }
}

/// The limits a plan limiter has met, by id.
#[derive(Default)]
pub(crate) struct KnownLimits {
    limits: Mutex<Limits>,
    /// [`plan_key`] of the plan [`KnownLimits::learn`] learned last (0:
    /// none), so that checks under one plan find it known without the lock.
    last_learned: AtomicU64,
}

/// Which limits a plan has, as one number: its limits' ids (each a hash of
/// the plan, the limit's name, policy, limit and window) and whether each
/// is a shadow (which its id leaves out: a reload may flip it), folded
/// together.
fn plan_key(plan: &Plan) -> u64 {
    plan.limits()
        .iter()
        .fold(0x9e37_79b9_7f4a_7c15, |key, limit| {
            (key ^ limit.id() ^ u64::from(limit.is_shadow()))
                .rotate_left(23)
                .wrapping_mul(0x0100_0000_01b3)
        })
}

/// Limits by id. Looked up once per state of every client of a full shard:
/// a fast hash, not SipHash (ids are already hashes of the limit).
type Limits = HashMap<u64, Limit, RandomState>;

impl KnownLimits {
    /// The eviction for a store making room while `plan` is being checked.
    pub(crate) fn for_plan<'a>(&'a self, plan: &'a Plan) -> PlanEviction<'a> {
        PlanEviction {
            known: self,
            plan,
            guard: None,
        }
    }

    /// Learns the limits of `plan`, whose check added a state: at once when
    /// `plan` is the one learned last (one atomic load), else under the
    /// lock.
    pub(crate) fn learn(&self, plan: &Plan) {
        let key = plan_key(plan);
        if self.last_learned.load(Ordering::Acquire) == key {
            return;
        }
        self.include(std::slice::from_ref(plan));
        self.last_learned.store(key, Ordering::Release);
    }

    /// Learns the limits of `plans` (a sweep's), keeping those met before:
    /// a limit a reload removed or changed still has states in the store
    /// until they are dropped, and they must be judged by their own policy.
    /// Forgotten, they were unknown, so that a full shard could neither
    /// reclaim them nor weigh what evicting them gives back: it took them
    /// for priceless, and evicted the clients of the limits in force, a
    /// spent one first, which then had its quota whole again. Limits are
    /// few (one per distinct limit the configs ever held).
    pub(crate) fn include(&self, plans: &[Plan]) {
        let mut known = self.limits.lock();
        for limit in plans.iter().flat_map(|plan| plan.limits()) {
            if known.get(&limit.id()) != Some(limit) {
                known.insert(limit.id(), limit.clone());
            }
        }
    }
}

/// Judges the clients of a full shard while one plan is being checked.
pub(crate) struct PlanEviction<'a> {
    known: &'a KnownLimits,
    plan: &'a Plan,
    /// Taken (after the shard's lock: never the other way round) when first
    /// needed, so a check that makes no room pays nothing.
    guard: Option<MutexGuard<'a, Limits>>,
}

impl PlanEviction<'_> {
    /// The limit a state belongs to, if known: the plan at hand first (most
    /// clients of a shard share a few plans), then every limit met.
    fn limit(&mut self, id: u64) -> Option<&Limit> {
        let (known, plan) = (self.known, self.plan);
        let known = self.guard.get_or_insert_with(|| {
            let mut known = known.limits.lock();
            for limit in plan.limits() {
                if known.get(&limit.id()) != Some(limit) {
                    known.insert(limit.id(), limit.clone());
                }
            }
            known
        });
        match plan.limits().iter().find(|l| l.id() == id) {
            Some(limit) => Some(limit),
            None => known.get(&id),
        }
    }
}

impl Eviction<PlanStates> for PlanEviction<'_> {
    /// Drops the limit states that no longer matter; a client left with none
    /// can go.
    fn reclaimable(&mut self, states: &mut PlanStates, now_ms: u64) -> bool {
        states.retain(|(id, state)| {
            self.limit(*id)
                .is_none_or(|limit| !limit.policy().reclaim(state, now_ms).allows_removal(false))
        });
        states.is_empty()
    }

    /// The most any one non-shadow limit would give back. A state of a limit
    /// not known gives back as much as can be: without its policy nothing
    /// shows that it is cheap to evict.
    fn units_given_back(&mut self, states: &PlanStates, now_ms: u64) -> u64 {
        let mut most = 0;
        for (id, state) in states {
            let units = match self.limit(*id) {
                Some(limit) if limit.is_shadow() => 0,
                Some(limit) => limit.policy().units_given_back(state, now_ms),
                None => u64::MAX,
            };
            most = most.max(units);
        }
        most
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AnyPolicy;

    fn plan(shadow: bool) -> Plan {
        let daily = AnyPolicy::from_name("sliding-window", 2, 86_400_000).unwrap();
        Plan::new("p", vec![Limit::new("1d", daily, shadow)]).unwrap()
    }

    /// A reload that turns a shadow limit into an enforced one keeps its
    /// id: the plan learned last must still be learned again, or a full
    /// shard weighs its clients' states as a shadow's, worth nothing, and
    /// evicts a client that used up the now enforced limit first (review).
    #[test]
    fn a_limit_whose_shadow_flipped_is_learned_again() {
        let known = KnownLimits::default();
        let (shadow, enforced) = (plan(true), plan(false));
        assert_eq!(shadow.limits()[0].id(), enforced.limits()[0].id());
        known.learn(&shadow);
        known.learn(&enforced);
        let id = enforced.limits()[0].id();
        assert!(!known.limits.lock()[&id].is_shadow());
    }
}
