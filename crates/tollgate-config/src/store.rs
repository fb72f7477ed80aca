//! The store a config names: the front end's own memory, or a shared store
//! (Redis) behind `tollgate_guard`'s [`GuardedStore`], which owns the
//! per-call timeout, the failure policy and the circuit breaker, with
//! `tollgate_cache`'s exact rejection cache in front of the guard (so that
//! only the store's own rejections are cached, never the failure policy's).
//! Front ends do not decide for a failed store themselves: they only count
//! what the guard decided. Every front end (serve, its Envoy service,
//! `proxy`, the tower layer of either) gets its store from here.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{MemoryBackend, PlanLimiter, Store, SystemMonotonicClock};
use tollgate_cache::CachedStore;
pub use tollgate_cache::RejectionCache;
use tollgate_guard::GuardedStore;
use tollgate_redis::{RedisStore, RedisStoreConfig, RedisStoreError, RedisTarget};

use crate::config::{Config, StoreConfig};
use crate::Error;

/// How long fail-closed asks rejected clients to wait, in ms: the store may
/// be back by then.
pub use tollgate_guard::DEFAULT_FAIL_CLOSED_RETRY_AFTER_MS as FAIL_CLOSED_RETRY_AFTER_MS;

/// Where the server keeps limit state.
#[derive(Clone)]
pub enum StoreHandle {
    /// In this process: the server also reports tracked clients and sweeps idle ones.
    Memory(Arc<MemoryBackend>),
    /// Redis, one node or a cluster: shared like [`StoreHandle::Shared`],
    /// and kept by its own type so that the server can report how many
    /// calls carried its decisions ([`RedisStore::call_counts`]).
    Redis(Arc<RedisStore>),
    /// Any other store behind the [`Store`] trait. The server puts a shared
    /// store behind a [`GuardedStore`] with the config's timeout and failure
    /// policy.
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
        let Some((target, redis_config)) = redis_parts(config)? else {
            return Ok(Self::memory(config));
        };
        let refused = |reason: String| Error::Redis {
            url: target.redacted(),
            reason,
        };
        // Outside a Tokio runtime, refused by the store: it runs there.
        let store = RedisStore::connect_lazy_to(&target, redis_config)
            .map_err(|e| refused(e.to_string()))?;
        tracing::info!(redis = %target.redacted(), "limit state in Redis (connecting in the background)");
        Ok(StoreHandle::Redis(Arc::new(store)))
    }

    /// Like [`StoreHandle::for_config`], checking Redis first: the first
    /// connection (TLS handshake, ACL login, database, `PING`) is made now,
    /// so that a wrong password or an untrusted certificate stops start-up
    /// with an error saying which, instead of every call failing later.
    /// A Redis that does not answer (refused, or silent for
    /// [`STARTUP_CHECK_TIMEOUT`]), or answers that it is not ready (still
    /// loading its data set after a restart, a cluster not formed yet, or
    /// another transient error), may simply not be up yet: that is logged
    /// as an error naming the node and why, and the store connects in the
    /// background, its failure policy answering until Redis is up.
    ///
    /// # Errors
    /// As [`StoreHandle::for_config`], and [`Error::Redis`] for a Redis
    /// that refused the connection (credentials, certificate, database).
    pub async fn connect(config: &Config) -> Result<Self, Error> {
        let Some((target, redis_config)) = redis_parts(config)? else {
            return Ok(Self::memory(config));
        };
        let attempt = RedisStore::connect_to(&target, redis_config.clone());
        let error = match tokio::time::timeout(STARTUP_CHECK_TIMEOUT, attempt).await {
            Ok(Ok(store)) => {
                tracing::info!(redis = %target.redacted(), "limit state in Redis (connected)");
                warn_of_risks(&store, &target).await;
                return Ok(StoreHandle::Redis(Arc::new(store)));
            }
            Ok(Err(e)) if !e.is_not_up_yet() => {
                return Err(Error::Redis {
                    url: target.redacted(),
                    reason: e.to_string(),
                })
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!(
                "cannot connect to Redis at {}: no answer within {STARTUP_CHECK_TIMEOUT:?}",
                target.redacted()
            ),
        };
        tracing::error!(redis = %target.redacted(), %error, "Redis is unreachable or not ready at start-up; the failure policy answers until it is up");
        let handle = Self::for_config(config)?;
        if let StoreHandle::Redis(store) = &handle {
            tokio::spawn(check_once_up(store.clone(), target));
        }
        Ok(handle)
    }

    fn memory(config: &Config) -> Self {
        StoreHandle::Memory(Arc::new(MemoryBackend::with_max_clients(
            config.store.max_clients,
        )))
    }
}

/// How often [`check_once_up`] asks a Redis that was not up at start-up.
const UP_CHECK_EVERY: Duration = Duration::from_secs(1);

/// The start-up checks of [`StoreHandle::connect`], once a Redis that was
/// down at start-up first answers (the usual order when a service and its
/// Redis start together): what no wait fixes (a user without a permission
/// decisions need, a command renamed away) is logged as an error, since a
/// running service cannot refuse to start; then [`warn_of_risks`]. Asked
/// every [`UP_CHECK_EVERY`] until then.
async fn check_once_up(store: Arc<RedisStore>, target: RedisTarget) {
    let redis = target.redacted();
    let mut told = false;
    loop {
        match store.check_what_decisions_need().await {
            Ok(()) => {
                tracing::info!(redis, "Redis is up: limit state in Redis");
                break;
            }
            Err(
                error @ (RedisStoreError::NotPermitted { .. }
                | RedisStoreError::MissingCommand { .. }),
            ) => {
                tracing::error!(redis, %error, "Redis is up, but every decision will be refused and answered by the failure policy");
                break;
            }
            Err(error) if error.is_transient() || error.is_not_up_yet() => {}
            // A wrong password, say: told once, and asked again, so that
            // the checks below run once it is put right.
            Err(error) if !told => {
                tracing::error!(redis, %error, "Redis is up, but refuses this service (check the URL's user:password@); every decision is answered by the failure policy until it does not");
                told = true;
            }
            Err(_) => {}
        }
        tokio::time::sleep(UP_CHECK_EVERY).await;
    }
    warn_of_risks(&store, &target).await;
}

/// Warns of a Redis that would silently cost exactness or every decision:
/// one that may evict tollgate's keys (a `maxmemory-policy` other than
/// `noeviction`: full, it would drop clients' state early and allow them
/// again), a replica (it refuses every write, so the failure policy would
/// answer every call), or one with fewer replicas connected than `[store]
/// replicas_to_ack` (every decision that consumes would be answered by the
/// failure policy). What cannot be read (`CONFIG` or `ROLE` refused or
/// renamed, as managed services do) is warned of too, with what to grant.
async fn warn_of_risks(store: &RedisStore, target: &RedisTarget) {
    let redis = target.redacted();
    // Asked at once, under one bound: start-up waits for one round trip.
    let checks = async {
        tokio::join!(
            store.evicting_memory_policy(),
            store.is_replica(),
            store.fewest_connected_replicas()
        )
    };
    let Ok((policy, replica, replicas)) = tokio::time::timeout(STARTUP_CHECK_TIMEOUT, checks).await
    else {
        tracing::debug!("no answer to the start-up checks (maxmemory-policy, ROLE, INFO)");
        return;
    };
    let wanted = store.config().replicas_to_ack;
    match replicas {
        Ok(Some(connected)) if connected < u64::from(wanted) => tracing::warn!(
            redis,
            connected,
            replicas_to_ack = wanted,
            "Redis has fewer replicas connected than replicas_to_ack (on the primary with fewest): every decision that consumes is answered by the failure policy until enough are"
        ),
        Err(error) if wanted > 0 => tracing::warn!(
            redis,
            %error,
            replicas_to_ack = wanted,
            "cannot read how many replicas Redis has (grant the user +info): with fewer than replicas_to_ack, every decision that consumes is answered by the failure policy"
        ),
        _ => {}
    }
    match policy {
        Ok(Some(policy)) => tracing::warn!(
            redis,
            policy,
            "Redis's maxmemory-policy evicts keys: a full Redis may drop a client's state early and allow it again; run Redis with maxmemory-policy {}",
            tollgate_redis::NO_EVICTION
        ),
        Ok(None) => {}
        // Unknown is not wrong, but an evicting policy would go unwarned.
        Err(error) => tracing::warn!(
            redis,
            %error,
            "cannot read Redis's maxmemory-policy (grant the user +config|get or +info): an evicting policy, which lets a full Redis drop clients' state early, would go unnoticed; make sure it is {}",
            tollgate_redis::NO_EVICTION
        ),
    }
    match replica {
        Ok(true) => tracing::warn!(
            redis,
            "Redis is a replica: it refuses every write (READONLY), so the failure policy answers every call until it is promoted; give the primary's address"
        ),
        Ok(false) => {}
        Err(error) => tracing::warn!(
            redis,
            %error,
            "cannot ask Redis whether it is a replica (grant the user +role): a replica refuses every write"
        ),
    }
}

/// How long [`StoreHandle::connect`] waits for Redis's first answer: as
/// long as the Redis client waits for the first connection to one node
/// ([`tollgate_redis::FIRST_CONNECTION_TIMEOUT`]), whose own bound was
/// 0.5 s before, so that a slow link gave up long before this.
pub const STARTUP_CHECK_TIMEOUT: Duration = tollgate_redis::FIRST_CONNECTION_TIMEOUT;

/// The Redis target and store settings of `config`, or `None` for memory.
fn redis_parts(config: &Config) -> Result<Option<(RedisTarget, RedisStoreConfig)>, Error> {
    let Some(target) = config.store.redis_target()? else {
        return Ok(None);
    };
    let redis_config = RedisStoreConfig {
        prefix: config.store.prefix.clone(),
        // The guard's timeout: calls Redis runs after it write nothing.
        timeout: Duration::from_millis(config.store.timeout_ms),
        batch_max: config.store.batching.batch_max,
        batches_in_flight: config.store.batching.batches_in_flight,
        replicas_to_ack: config.store.replicas_to_ack,
        time_source: config.store.clock,
        ..RedisStoreConfig::default()
    };
    Ok(Some((target, redis_config)))
}

impl StoreHandle {
    /// The store as the server decides with it, for other front ends on
    /// the same config (e.g. `tollgate proxy --config`): the memory store as
    /// it is, a shared store behind a [`GuardedStore`] with the config's
    /// timeout and failure policy, and the config's rejection cache in front
    /// of that (returned too, to drop a changed plan's entries on reload);
    /// and the memory it keeps clients in, to sweep of idle ones.
    pub fn into_store(
        self,
        config: &StoreConfig,
    ) -> (Arc<dyn Store>, Option<Arc<RejectionCache>>, ClientMemory) {
        match self.shared() {
            Err(memory) => (memory.clone(), None, ClientMemory::Memory(memory)),
            Ok(shared) => {
                let cache = rejection_cache(config);
                let guarded = Arc::new(guard(shared, config));
                let store = cached(guarded.clone(), cache.as_ref());
                (store, cache, ClientMemory::Fallback(guarded))
            }
        }
    }

    /// The store shared with other servers (Redis, or another behind the
    /// [`Store`] trait), or the memory store.
    ///
    /// # Errors
    /// The memory store, which is not shared.
    pub fn shared(self) -> Result<Arc<dyn Store>, Arc<MemoryBackend>> {
        match self {
            StoreHandle::Memory(memory) => Err(memory),
            StoreHandle::Redis(redis) => Ok(redis),
            StoreHandle::Shared(shared) => Ok(shared),
        }
    }

    /// The Redis store, if that is the store (for its call counts).
    pub fn redis(&self) -> Option<Arc<RedisStore>> {
        match self {
            StoreHandle::Redis(redis) => Some(redis.clone()),
            _ => None,
        }
    }
}

/// Where a store's wiring keeps clients in this process's memory: the
/// memory store, or a guarded store's local fallback (empty unless the
/// failure policy is `local-fallback` and the store failed). A front end
/// sweeps it of idle clients, as `serve` does its own.
#[derive(Clone)]
pub enum ClientMemory {
    /// The memory store.
    Memory(Arc<MemoryBackend>),
    /// The guarded shared store, for its local fallback.
    Fallback(Arc<GuardedStore<Arc<dyn Store>>>),
}

impl ClientMemory {
    /// The limiter holding those clients.
    pub fn limiter(&self) -> &PlanLimiter {
        match self {
            ClientMemory::Memory(memory) => memory.limiter(),
            ClientMemory::Fallback(guarded) => guarded.fallback().limiter(),
        }
    }
}

/// The rejection cache `config` asks for: `None` when off and for the
/// memory store. Under `clock = "redis"` it times its entries by a
/// monotonic clock of its own, as Redis times the decisions by its own.
pub fn rejection_cache(config: &StoreConfig) -> Option<Arc<RejectionCache>> {
    let max_clients = config.shared_rejection_cache()?;
    let on_redis_clock = config.clock == tollgate_redis::TimeSource::Redis;
    match RejectionCache::new(max_clients) {
        Ok(cache) if on_redis_clock => Some(Arc::new(
            cache.on_own_clock(Arc::new(SystemMonotonicClock::new())),
        )),
        Ok(cache) => Some(Arc::new(cache)),
        // The config's bounds are the cache's: unreachable, but never a panic.
        Err(e) => {
            tracing::error!(error = %e, "rejection cache off");
            None
        }
    }
}

/// `guarded` (a shared store behind its failure policy) with `cache` in
/// front, if any. Only the guard's outside may be cached: inside it, the
/// failure policy's rejections would be remembered as the store's.
pub fn cached<S: Store + 'static>(
    guarded: S,
    cache: Option<&Arc<RejectionCache>>,
) -> Arc<dyn Store> {
    match cache {
        Some(cache) => Arc::new(CachedStore::new(guarded, cache.clone())),
        None => Arc::new(guarded),
    }
}

/// `store` behind the timeout, failure policy and circuit breaker of
/// `config`; the local fallback is capped like the memory store.
pub fn guard(store: Arc<dyn Store>, config: &StoreConfig) -> GuardedStore<Arc<dyn Store>> {
    GuardedStore::new(
        store,
        Duration::from_millis(config.timeout_ms),
        config.failure_policy,
    )
    .with_fallback(MemoryBackend::with_max_clients(config.max_clients))
    .with_breaker(config.breaker)
}
