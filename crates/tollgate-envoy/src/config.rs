//! What the rate limit service decides with: rules, store, clock, and what
//! to answer when the store fails.

use std::fmt;
use std::sync::Arc;

use tollgate::{Clock, Store};

use crate::rules::Rules;

/// What to answer when the store fails (returns an error instead of a
/// decision). Stores with their own failure policy (Redis: fail-open,
/// fail-closed, local fallback) answer with a decision instead, which is
/// used as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnStoreError {
    /// Fail the call with gRPC `UNAVAILABLE`, so that Envoy's own setting
    /// decides: `failure_mode_deny: false` (Envoy's default) lets the request
    /// through, `true` answers it with a 500. The default: the operator's
    /// choice stays in one place, the Envoy config.
    #[default]
    Unavailable,
    /// Answer `OK` for the descriptors whose store failed.
    FailOpen,
    /// Answer `OVER_LIMIT` for the descriptors whose store failed.
    FailClosed,
}

/// The rate limit service's configuration.
#[derive(Clone)]
pub struct ServiceConfig {
    pub(crate) rules: Rules,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) on_store_error: OnStoreError,
}

impl fmt::Debug for ServiceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceConfig")
            .field("rules", &self.rules)
            .field("on_store_error", &self.on_store_error)
            .finish_non_exhaustive()
    }
}

impl ServiceConfig {
    /// Decides descriptors by `rules`, with limit state in `store` and the
    /// time from `clock`; store errors give gRPC `UNAVAILABLE`.
    pub fn new(rules: Rules, store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Self {
            rules,
            store,
            clock,
            on_store_error: OnStoreError::default(),
        }
    }

    /// What to answer when the store fails.
    #[must_use]
    pub fn on_store_error(mut self, policy: OnStoreError) -> Self {
        self.on_store_error = policy;
        self
    }
}
