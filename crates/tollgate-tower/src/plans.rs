//! Which plan a client key is checked against: a default plan and the keys
//! with a plan of their own, replaceable while the layer serves (a config
//! reload), without dropping any client's state.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tollgate::Plan;

/// The plans of a layer: a default plan, and the keys with a plan of their
/// own (e.g. paying clients on a larger plan).
#[derive(Debug, Clone)]
pub struct Plans {
    default: Plan,
    by_key: HashMap<String, Plan>,
}

impl Plans {
    /// Every key on `default`.
    pub fn new(default: Plan) -> Self {
        Self {
            default,
            by_key: HashMap::new(),
        }
    }

    /// The keys in `plans` on a plan of their own; every other key stays on
    /// the default plan.
    #[must_use]
    pub fn with_keys(mut self, plans: HashMap<String, Plan>) -> Self {
        self.by_key = plans;
        self
    }

    /// The plan requests with `key` are checked against.
    pub fn plan_for(&self, key: &str) -> &Plan {
        self.by_key.get(key).unwrap_or(&self.default)
    }

    /// The plan of every key without one of its own.
    pub fn default_plan(&self) -> &Plan {
        &self.default
    }

    /// Every plan in force, once each (by name): what a sweep of the
    /// memory store must be given so that it keeps their limits' states.
    pub fn distinct(&self) -> Vec<Plan> {
        let mut plans = vec![self.default.clone()];
        for plan in self.by_key.values() {
            if plans.iter().all(|p| p.name() != plan.name()) {
                plans.push(plan.clone());
            }
        }
        plans
    }
}

/// The plans in force, shared by every clone of a layer and its services.
/// Replacing them takes effect for the requests that start afterwards.
/// State is kept per limit id in the store, so a limit that a replacement
/// leaves unchanged (same name, policy, limit and window) keeps every
/// client's count, and a changed one starts afresh.
#[derive(Clone)]
pub struct PlansHandle {
    current: Arc<ArcSwap<Plans>>,
}

impl fmt::Debug for PlansHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlansHandle")
            .field("default_plan", &self.current().default_plan().name())
            .finish_non_exhaustive()
    }
}

impl PlansHandle {
    pub(crate) fn new(plans: Plans) -> Self {
        Self {
            current: Arc::new(ArcSwap::from_pointee(plans)),
        }
    }

    /// The plans in force now.
    pub fn current(&self) -> Arc<Plans> {
        self.current.load_full()
    }

    /// Puts `plans` in force for every request from now on.
    pub fn replace(&self, plans: Plans) {
        self.current.store(Arc::new(plans));
    }
}
