//! The circuit breakers of a guarded store: one for the store as a whole,
//! and one for each part of it that fails apart (a master of a Redis
//! Cluster), as the store names them ([`tollgate::Store::failure_domain`]).
//!
//! With one breaker for a cluster, a killed master's clients would open the
//! circuit for every client after a few failures, and the healthy masters'
//! clients would be answered by the failure policy too. With one per
//! master, only the dead master's clients are: each part's failures open
//! its own circuit, and its own probes close it.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::breaker::{Breaker, BreakerConfig};

/// Every breaker of one guarded store (shared by its sibling guards).
#[derive(Debug)]
pub(crate) struct Breakers {
    config: BreakerConfig,
    /// For a store that fails as one, or a call whose part is not known.
    whole: Breaker,
    /// One per part, made at its first call. Parts are a cluster's masters,
    /// so this stays as small as the cluster (a failover adds one).
    parts: Mutex<HashMap<Arc<str>, Arc<Breaker>>>,
}

/// The breaker that judges one call.
pub(crate) enum BreakerFor<'a> {
    /// The whole store's.
    Whole(&'a Breaker),
    /// One part's.
    Part(Arc<Breaker>),
}

impl Deref for BreakerFor<'_> {
    type Target = Breaker;

    fn deref(&self) -> &Breaker {
        match self {
            BreakerFor::Whole(breaker) => breaker,
            BreakerFor::Part(breaker) => breaker,
        }
    }
}

impl Breakers {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            whole: Breaker::new(config, None),
            parts: Mutex::new(HashMap::new()),
        }
    }

    /// The breaker of `domain` (the whole store's for `None`).
    pub(crate) fn of(&self, domain: Option<Arc<str>>) -> BreakerFor<'_> {
        let Some(domain) = domain else {
            return BreakerFor::Whole(&self.whole);
        };
        let mut parts = self.parts();
        let breaker = parts
            .entry(domain)
            .or_insert_with_key(|domain| Arc::new(Breaker::new(self.config, Some(domain.clone()))));
        BreakerFor::Part(breaker.clone())
    }

    /// Calls answered without the store, by every breaker.
    pub(crate) fn short_circuited(&self) -> u64 {
        let parts: u64 = self.parts().values().map(|b| b.short_circuited()).sum();
        self.whole.short_circuited() + parts
    }

    /// Whether any circuit is open now.
    pub(crate) fn any_open(&self) -> bool {
        self.whole.is_open() || self.parts().values().any(|b| b.is_open())
    }

    /// Every part that has had a call, by name, and whether its circuit is
    /// open now.
    pub(crate) fn part_states(&self) -> Vec<(Arc<str>, bool)> {
        let mut states: Vec<(Arc<str>, bool)> = self
            .parts()
            .iter()
            .map(|(part, breaker)| (part.clone(), breaker.is_open()))
            .collect();
        states.sort_unstable();
        states
    }

    fn parts(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<Breaker>>> {
        self.parts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
