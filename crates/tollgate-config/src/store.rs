//! The store a config names: the front end's own memory, or a shared store
//! (Redis) behind `tollgate_redis`'s [`GuardedStore`], which owns the
//! per-call timeout and the failure policy. Front ends do not decide for a
//! failed store themselves: they only count and log what the guard decided.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{MemoryBackend, Plan, PlanDecision, Store, StoreFuture};
use tollgate_redis::{GuardedStore, RedisStore, RedisStoreConfig};

use crate::config::{Config, FailurePolicy, StoreConfig, StoreKind};
use crate::Error;

/// How long fail-closed asks rejected clients to wait, in ms: the store may
/// be back by then.
pub const FAIL_CLOSED_RETRY_AFTER_MS: u64 = 1_000;

/// Where the server keeps limit state.
#[derive(Clone)]
pub enum StoreHandle {
    /// In this process: the server also reports tracked clients and sweeps idle ones.
    Memory(Arc<MemoryBackend>),
    /// Anywhere else behind the [`Store`] trait (Redis). The server puts it
    /// behind a [`GuardedStore`] with the config's timeout and failure policy.
    Shared(Arc<dyn Store>),
}

impl StoreHandle {
    /// The store for the config's `[store]` section. A Redis store connects
    /// lazily: the server starts while Redis is down (the failure policy
    /// answers until it is up) and reconnects by itself.
    ///
    /// # Errors
    /// [`Error::Redis`] when the Redis URL or key prefix is refused by the
    /// Redis client, or when called outside a Tokio runtime (the Redis
    /// connection needs one).
    pub fn for_config(config: &Config) -> Result<Self, Error> {
        match &config.store.kind {
            StoreKind::Memory => Ok(StoreHandle::Memory(Arc::new(
                MemoryBackend::with_max_clients(config.store.max_clients),
            ))),
            StoreKind::Redis { url } => {
                let refused = |reason: String| Error::Redis {
                    url: url.clone(),
                    reason,
                };
                if tokio::runtime::Handle::try_current().is_err() {
                    return Err(refused("it can only connect inside a Tokio runtime".into()));
                }
                let redis_config = RedisStoreConfig {
                    prefix: config.store.prefix.clone(),
                    // The guard's timeout: calls Redis runs after it write nothing.
                    timeout: Duration::from_millis(config.store.timeout_ms),
                    ..RedisStoreConfig::default()
                };
                let store = RedisStore::connect_lazy(url, redis_config)
                    .map_err(|e| refused(e.to_string()))?;
                Ok(StoreHandle::Shared(Arc::new(store)))
            }
        }
    }
}

impl StoreHandle {
    /// The store as the server decides with it, for other front ends on
    /// the same config (e.g. `tollgate proxy --config`): the memory store as
    /// it is, a shared store behind a [`GuardedStore`] with the config's
    /// timeout and failure policy.
    pub fn into_store(self, config: &StoreConfig) -> Arc<dyn Store> {
        match self {
            StoreHandle::Memory(memory) => memory,
            StoreHandle::Shared(shared) => Arc::new(guard(shared, config)),
        }
    }
}

impl From<FailurePolicy> for tollgate_redis::FailurePolicy {
    fn from(policy: FailurePolicy) -> Self {
        match policy {
            FailurePolicy::FailOpen => tollgate_redis::FailurePolicy::FailOpen,
            FailurePolicy::FailClosed => tollgate_redis::FailurePolicy::FailClosed {
                retry_after_ms: FAIL_CLOSED_RETRY_AFTER_MS,
            },
            FailurePolicy::LocalFallback => tollgate_redis::FailurePolicy::LocalFallback,
        }
    }
}

/// A shared store as a sized [`Store`], so that [`GuardedStore`] can wrap it.
pub struct SharedStore(Arc<dyn Store>);

impl Store for SharedStore {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        self.0.check(plan, client, now_ms, cost)
    }
}

/// `store` behind the timeout and failure policy of `config`; the local
/// fallback is capped like the memory store.
pub fn guard(store: Arc<dyn Store>, config: &StoreConfig) -> GuardedStore<SharedStore> {
    GuardedStore::new(
        SharedStore(store),
        Duration::from_millis(config.timeout_ms),
        config.failure_policy.into(),
    )
    .with_fallback(MemoryBackend::with_max_clients(config.max_clients))
}
