//! What the rate limit service decides with: rules, store and clock. What
//! to answer when the store fails is the store's own failure policy
//! (`tollgate_guard::GuardedStore`); an error it hands back is gRPC
//! `UNAVAILABLE`, for Envoy's `failure_mode_deny` to decide.

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, Guard};
use tollgate::{Clock, Store};

use crate::observer::DecisionObserver;
use crate::rules::Rules;

/// The rules in force, replaceable while the service runs (for config
/// reloads). Clones share the same rules. Limit state is keyed by each
/// limit's stable id, so limits that a reload leaves unchanged keep their
/// counts. Reading them costs no lock and no reference count (`arc-swap`),
/// so the workers that read them on every call do not contend.
#[derive(Debug, Clone)]
pub struct RulesHandle {
    current: Arc<ArcSwap<Rules>>,
}

impl RulesHandle {
    fn new(rules: Rules) -> Self {
        Self {
            current: Arc::new(ArcSwap::from_pointee(rules)),
        }
    }

    /// Puts `rules` in force for every request that starts from now on.
    pub fn replace(&self, rules: Rules) {
        self.current.store(Arc::new(rules));
    }

    /// The rules in force now.
    pub fn current(&self) -> Arc<Rules> {
        self.current.load_full()
    }

    /// The rules in force now, for the duration of one call.
    pub(crate) fn load(&self) -> Guard<Arc<Rules>> {
        self.current.load()
    }
}

/// The rate limit service's configuration.
#[derive(Clone)]
pub struct ServiceConfig {
    pub(crate) rules: RulesHandle,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) observer: Option<Arc<dyn DecisionObserver>>,
    /// The largest cost one client of one request may ask for, all its
    /// descriptors together; past it the request is `OVER_LIMIT`.
    pub(crate) max_cost: u32,
    /// How long a shutdown waits for the calls still open before it closes
    /// their connections ([`ServiceConfig::drain_within`]).
    pub(crate) drain_within: Duration,
    /// Set when a shutdown's drain has ended: no call is decided after.
    pub(crate) drain_ended: Arc<AtomicBool>,
}

/// How long a shutdown waits for open calls by default: the HTTP
/// listeners' default idle timeout, which bounds theirs.
pub const DEFAULT_DRAIN_WITHIN: Duration = Duration::from_secs(60);

impl fmt::Debug for ServiceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceConfig")
            .field("rules", &self.rules)
            .field("observed", &self.observer.is_some())
            .finish_non_exhaustive()
    }
}

impl ServiceConfig {
    /// Decides descriptors by `rules`, with limit state in `store` and the
    /// time from `clock`; store errors give gRPC `UNAVAILABLE`.
    pub fn new(rules: Rules, store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Self {
            rules: RulesHandle::new(rules),
            store,
            clock,
            observer: None,
            max_cost: u32::MAX,
            drain_within: DEFAULT_DRAIN_WITHIN,
            drain_ended: Arc::default(),
        }
    }

    /// Bounds a shutdown (default [`DEFAULT_DRAIN_WITHIN`]): once it has
    /// begun, the calls in flight have `drain_within` to be answered, then
    /// every connection still open is closed. Without it, a client that
    /// opened a call and never finished sending it would keep the server
    /// from ever stopping (a call not yet read whole was never decided, so
    /// closing it takes nothing from any budget). `tollgate serve` sets its
    /// `[connections] idle_timeout`, which bounds its HTTP shutdown alike.
    #[must_use]
    pub fn drain_within(mut self, drain_within: Duration) -> Self {
        self.drain_within = drain_within;
        self
    }

    /// Refuses a request whose descriptors ask one client for more than
    /// `max_cost` in all (default `u32::MAX`, past which no limit could
    /// grant it): the counterpart of the HTTP API's `max_cost`, for library
    /// users (Envoy's `hits_addend` often counts bytes, so `tollgate serve`
    /// keeps the default).
    ///
    /// The refusal is `OVER_LIMIT` for ever (no `Retry-After`), and the
    /// request consumes nothing from any of its clients: not an error
    /// status, which Envoy hands to its failure mode, by default letting the
    /// request through.
    #[must_use]
    pub fn max_cost(mut self, max_cost: u32) -> Self {
        self.max_cost = max_cost;
        self
    }

    /// A handle to replace the rules while the service runs (e.g. on SIGHUP).
    pub fn rules_handle(&self) -> RulesHandle {
        self.rules.clone()
    }

    /// Reports every decision and store failure to `observer` (e.g. to
    /// count them in metrics). Without one, nothing is reported.
    #[must_use]
    pub fn observer(mut self, observer: Arc<dyn DecisionObserver>) -> Self {
        self.observer = Some(observer);
        self
    }
}
