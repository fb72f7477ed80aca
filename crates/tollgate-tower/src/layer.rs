//! The [`tower::Layer`] that wraps a service in a [`RateLimit`].

use std::sync::Arc;

use tower::Layer;

use crate::config::RateLimitConfig;
use crate::service::RateLimit;

/// Wraps services in [`RateLimit`]. Cheap to clone; every service it makes
/// shares the same config and store, so they all draw on one budget.
#[derive(Debug, Clone)]
pub struct RateLimitLayer<K> {
    config: Arc<RateLimitConfig>,
    key: K,
}

impl<K> RateLimitLayer<K> {
    /// A layer deciding by `config`, keying requests with `key`
    /// (a [`crate::KeyExtractor`]).
    pub fn new(config: RateLimitConfig, key: K) -> Self {
        Self {
            config: Arc::new(config),
            key,
        }
    }

    /// The shared config.
    pub fn config(&self) -> &RateLimitConfig {
        &self.config
    }
}

impl<S, K: Clone> Layer<S> for RateLimitLayer<K> {
    type Service = RateLimit<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::from_parts(inner, self.config.clone(), self.key.clone())
    }
}
