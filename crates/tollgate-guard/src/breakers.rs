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

/// A part with no call for this long (10 s) is dropped: after a failover
/// the old master gets no more calls, and its circuit, open when it died,
/// would otherwise be shown open for ever. A part that is called again
/// gets a fresh, closed breaker.
pub const IDLE_PART_MS: u64 = 10_000;

/// Every breaker of one guarded store (shared by its sibling guards).
#[derive(Debug)]
pub(crate) struct Breakers {
    config: BreakerConfig,
    /// For a store that fails as one, or a call whose part is not known.
    whole: Breaker,
    /// One per part, made at its first call. Parts are a cluster's masters,
    /// so this stays as small as the cluster.
    parts: Mutex<Parts>,
}

#[derive(Debug, Default)]
struct Parts {
    by_name: HashMap<Arc<str>, Part>,
    /// Calls short-circuited by parts dropped since, so that the total
    /// never goes down.
    dropped_short_circuited: u64,
}

#[derive(Debug)]
struct Part {
    breaker: Arc<Breaker>,
    last_call_ms: u64,
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
            parts: Mutex::new(Parts::default()),
        }
    }

    /// The breaker of `domain` (the whole store's for `None`) for a call at
    /// `now_ms`.
    pub(crate) fn of(&self, domain: Option<Arc<str>>, now_ms: u64) -> BreakerFor<'_> {
        let Some(domain) = domain else {
            return BreakerFor::Whole(&self.whole);
        };
        let mut parts = self.parts();
        let part = parts
            .by_name
            .entry(domain)
            .or_insert_with_key(|domain| Part {
                breaker: Arc::new(Breaker::new(self.config, Some(domain.clone()))),
                last_call_ms: now_ms,
            });
        part.last_call_ms = part.last_call_ms.max(now_ms);
        BreakerFor::Part(part.breaker.clone())
    }

    /// Calls answered without the store, by every breaker.
    pub(crate) fn short_circuited(&self, now_ms: u64) -> u64 {
        let parts = self.live_parts(now_ms);
        let live: u64 = parts
            .by_name
            .values()
            .map(|part| part.breaker.short_circuited())
            .sum();
        self.whole.short_circuited() + parts.dropped_short_circuited + live
    }

    /// Whether any circuit is open now.
    pub(crate) fn any_open(&self, now_ms: u64) -> bool {
        let parts = self.live_parts(now_ms);
        self.whole.is_open() || parts.by_name.values().any(|part| part.breaker.is_open())
    }

    /// Every part called in the last [`IDLE_PART_MS`], by name, and whether
    /// its circuit is open now.
    pub(crate) fn part_states(&self, now_ms: u64) -> Vec<(Arc<str>, bool)> {
        let mut states: Vec<(Arc<str>, bool)> = self
            .live_parts(now_ms)
            .by_name
            .iter()
            .map(|(name, part)| (name.clone(), part.breaker.is_open()))
            .collect();
        states.sort_unstable();
        states
    }

    /// The parts, those idle for [`IDLE_PART_MS`] at `now_ms` dropped first.
    fn live_parts(&self, now_ms: u64) -> MutexGuard<'_, Parts> {
        let mut parts = self.parts();
        let mut dropped = 0;
        parts.by_name.retain(|_, part| {
            let idle = now_ms.saturating_sub(part.last_call_ms) >= IDLE_PART_MS;
            if idle {
                dropped += part.breaker.short_circuited();
            }
            !idle
        });
        parts.dropped_short_circuited += dropped;
        parts
    }

    fn parts(&self) -> MutexGuard<'_, Parts> {
        self.parts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
