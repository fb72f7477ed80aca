//! [`PlanLimiter`]: plans checked against clients' states in memory, and
//! [`check_plan`], the all-or-nothing check on one client's states that
//! every in-memory path shares.

use crate::eviction::KnownLimits;
use crate::inspect::{inspect_plan, Inspection};
use crate::plan::{LimitDecision, Plan, PlanDecision, PlanStates};
use crate::policy::Policy;
use crate::store::{Access, MemoryStore};

mod give_back;

/// Checks clients against plans, with state in memory, atomically per client.
#[derive(Default)]
pub struct PlanLimiter {
    pub(super) store: MemoryStore<PlanStates>,
    /// The limits met, to judge what evicting a client gives away.
    pub(super) known_limits: KnownLimits,
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
        Self::on(MemoryStore::with_max_clients(max_clients))
    }

    /// [`Self::with_max_clients`], evicting the same clients for the same
    /// calls in every run ([`MemoryStore::repeatable`]): for what-if tools,
    /// not servers.
    pub fn with_max_clients_repeatable(max_clients: usize) -> Self {
        Self::on(MemoryStore::with_max_clients(max_clients).repeatable())
    }

    /// A limiter keeping its clients in `store`.
    fn on(store: MemoryStore<PlanStates>) -> Self {
        Self {
            store,
            known_limits: KnownLimits::default(),
            unknown_limits: parking_lot::Mutex::default(),
        }
    }

    /// Decides a request of `cost` units for `client` against every limit of
    /// `plan`, and consumes from each limit only if the request is allowed
    /// (shadow limits that would reject consume nothing). A cost of 0 only asks.
    pub fn check(&self, plan: &Plan, client: &str, now_ms: u64, cost: u32) -> PlanDecision {
        self.with_plan_entry(plan, client, now_ms, |access| {
            check_plan(plan, access.state, access.now_ms, cost)
        })
    }

    /// `f` on `client`'s entry (made, and room made for it, if need be),
    /// checked under `plan`. A state `f` adds is of a limit of `plan`, which
    /// the limiter then knows: a full shard weighs each client by its
    /// states' limits, and a state of a limit not known is taken for
    /// priceless, so that a spent client of a known plan went first.
    pub(super) fn with_plan_entry<R>(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        f: impl FnOnce(Access<'_, PlanStates>) -> R,
    ) -> R {
        let mut added_state = false;
        let answer = self.store.with_entry_reclaiming(
            client,
            now_ms,
            |_| Vec::new(),
            self.known_limits.for_plan(plan),
            |access| {
                let Access {
                    state,
                    now_ms,
                    is_new,
                    lineage,
                } = access;
                let before = state.len();
                let answer = f(Access {
                    state: &mut *state,
                    now_ms,
                    is_new,
                    lineage,
                });
                added_state = state.len() > before;
                answer
            },
        );
        if added_state {
            self.known_limits.learn(plan);
        }
        answer
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
    /// a row found their limit in none of their plans and the client was
    /// not seen after `now_ms` (a state written under a plan newer than the
    /// sweep's stays). Returns how many clients were dropped entirely.
    ///
    /// One sweeper at a time: the list of limits found in no plan passes
    /// from one sweep to the next, so two sweeps of one limiter at once
    /// could each take the other's for their own.
    pub fn sweep(&self, plans: &[Plan], now_ms: u64, reset_phase: bool) -> usize {
        self.known_limits.include(plans);
        let find = |id: u64| {
            plans
                .iter()
                .flat_map(|p| p.limits().iter())
                .find(|l| l.id() == id)
        };
        let unknown_before = std::mem::take(&mut *self.unknown_limits.lock());
        let mut unknown = Vec::new();
        let dropped = self.store.sweep_with(now_ms, |states, now| {
            states.retain(|(id, state)| match find(*id) {
                Some(limit) => !limit
                    .policy()
                    .reclaim(state, now)
                    .allows_removal(reset_phase),
                None => {
                    if !unknown.contains(id) {
                        unknown.push(*id);
                    }
                    // (A client seen after the sweep's time, which may have
                    // written it under plans newer than the sweep's, is not
                    // offered: `MemoryStore::sweep_with`.)
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
    let mut decisions = Vec::with_capacity(plan.limits().len());
    for limit in plan.limits() {
        let decision = match states.iter().find(|(id, _)| *id == limit.id()) {
            Some((_, state)) => limit.policy().decide(state, now, cost),
            None => limit
                .policy()
                .decide(&limit.policy().new_state(now), now, cost),
        };
        decisions.push(LimitDecision {
            name: limit.shared_name(),
            policy: limit.policy().name(),
            window_ms: limit.policy().window_ms(),
            shadow: limit.is_shadow(),
            decision,
        });
    }
    let mut outcome = PlanDecision::from_limits(decisions);
    for (limit, reported) in plan.limits().iter().zip(outcome.limits.iter_mut()) {
        let position = states.iter().position(|(id, _)| *id == limit.id());
        let consume = outcome.allowed && cost > 0 && reported.decision.allowed;
        if !outcome.allowed && cost > 0 && reported.decision.allowed {
            // This limit would have taken the request but another rejected
            // it: report this limit as it stays, since nothing is consumed.
            reported.decision = match position {
                Some(i) => limit.policy().decide(&states[i].1, now, 0),
                None => limit
                    .policy()
                    .decide(&limit.policy().new_state(now), now, 0),
            };
        }
        if consume || limit.policy().first_call_anchors() {
            let i = position.unwrap_or_else(|| {
                states.push((limit.id(), limit.policy().new_state(now)));
                states.len() - 1
            });
            if consume {
                limit.policy().consume(&mut states[i].1, now, cost);
            }
        }
    }
    outcome
}
