//! The Redis target: `tollgate replay --redis URL` runs a session's calls
//! through [`tollgate_redis::RedisStore`], with the file's times.
//!
//! Each `new` builds a one-limit plan and a fresh key space: by default a
//! random key prefix (`tollgate-replay:<random>:<n>`), so replays never see
//! each other's state; with a shared prefix, `new` number `n` of the session
//! uses `<prefix>:<n>`, so several replays of one file (e.g. two processes)
//! share their clients' state on purpose. Keys expire an hour after their
//! last write (replayed times run much faster than Redis's clock, so this
//! margin is what keeps a session's state alive while it runs).

use std::hash::{BuildHasher, Hasher};

use tokio::runtime::Runtime;
use tollgate::{AnyPolicy, Limit, Plan};
use tollgate_redis::keys::KeyLayout;
use tollgate_redis::{RedisStore, RedisStoreConfig, RedisStoreError, RedisTarget};

use super::Target;

/// How long replayed keys outlive their last write, in ms.
const REPLAY_EXPIRY_MARGIN_MS: u64 = 3_600_000;

/// The store's timeout ([`RedisStoreConfig::timeout`]): a call's deadline
/// on Redis's clock, and its wait for replicas. A replayed session is
/// compared line by line with the answers it should give, so a call that
/// a busy machine or a stalled Redis holds up for a while is still
/// decided, not failed after the 100 ms a server in front of an API can
/// spare. Well under the connection's own wait for a reply
/// ([`tollgate_redis::RESPONSE_TIMEOUT`], 5 s), so that a call's `WAIT`
/// for replicas ends, and is answered, before its reply is given up on.
const STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long one call may wait for Redis before its line prints an error:
/// a bound on the whole call, beyond the store's own.
const CALL_TIMEOUT: std::time::Duration = tollgate_redis::RESPONSE_TIMEOUT;

/// Replays against Redis (one node or a cluster).
pub struct Redis {
    runtime: Runtime,
    store: RedisStore,
    base: String,
    sessions: u64,
    plan: Option<Plan>,
}

impl Redis {
    /// Connects to one Redis node. `shared_prefix`: see the module doc.
    ///
    /// # Errors
    /// A message when the shared prefix is not one (checked first, as
    /// given), the runtime cannot start or Redis cannot be reached.
    pub fn connect(url: &str, shared_prefix: Option<&str>) -> Result<Self, String> {
        Self::build(shared_prefix, |config| async move {
            RedisStore::connect(url, config).await
        })
    }

    /// Connects to one node or a cluster, given as a [`RedisTarget`]
    /// (`rediss://`, ACL users, a private CA), answering each call only once
    /// `replicas_to_ack` replicas hold it
    /// ([`RedisStoreConfig::replicas_to_ack`]; 0: at once).
    ///
    /// # Errors
    /// As [`Redis::connect`].
    pub fn connect_target(
        target: &RedisTarget,
        shared_prefix: Option<&str>,
        replicas_to_ack: u32,
    ) -> Result<Self, String> {
        Self::build(shared_prefix, |config| async move {
            let config = RedisStoreConfig {
                replicas_to_ack,
                ..config
            };
            RedisStore::connect_to(target, config).await
        })
    }

    /// Connects to a Redis Cluster through some of its nodes.
    ///
    /// # Errors
    /// As [`Redis::connect`].
    pub fn connect_cluster(nodes: &[&str], shared_prefix: Option<&str>) -> Result<Self, String> {
        Self::build(shared_prefix, |config| async move {
            RedisStore::connect_cluster(nodes, config).await
        })
    }

    fn build<F, Fut>(shared_prefix: Option<&str>, connect: F) -> Result<Self, String>
    where
        F: FnOnce(RedisStoreConfig) -> Fut,
        Fut: std::future::Future<Output = Result<RedisStore, tollgate_redis::RedisStoreError>>,
    {
        if let Some(prefix) = shared_prefix {
            check_prefix(prefix)?;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the async runtime: {e}"))?;
        let base = match shared_prefix {
            Some(prefix) => prefix.to_owned(),
            None => format!("tollgate-replay:{:016x}", random_u64()),
        };
        let config = RedisStoreConfig {
            prefix: format!("{base}:0"),
            expiry_margin_ms: REPLAY_EXPIRY_MARGIN_MS,
            timeout: STORE_TIMEOUT,
            ..RedisStoreConfig::default()
        };
        let store = runtime
            .block_on(connect(config))
            .map_err(|e| format!("cannot use Redis: {e}"))?;
        Ok(Self {
            runtime,
            store,
            base,
            sessions: 0,
            plan: None,
        })
    }

    /// The key prefix of the current session (`<base>:<n>`).
    pub fn prefix(&self) -> &str {
        self.store.keys().prefix()
    }

    fn check(&self, client: &str, now_ms: u64, cost: u32) -> Result<tollgate::Decision, String> {
        let plan = self.plan.as_ref().ok_or("no limiter")?;
        let call = self.store.decide(plan, client, now_ms, cost);
        let answer = self
            .runtime
            .block_on(async { tokio::time::timeout(CALL_TIMEOUT, call).await })
            .map_err(|_| format!("Redis did not answer within {CALL_TIMEOUT:?}"))
            .and_then(|answer| answer.map_err(|e| e.to_string()));
        let decision = match answer {
            Ok(decision) => decision,
            Err(error) => {
                // What a failed or abandoned call consumed is taken back in
                // the background: the next line must find it back, so that
                // an error line changes nothing and a replay answers alike
                // every time.
                let _ = self
                    .runtime
                    .block_on(self.store.settle(tollgate::SETTLE_WITHIN));
                return Err(error);
            }
        };
        decision
            .limits
            .first()
            .map(|l| l.decision)
            .ok_or_else(|| "the store answered no limit".to_owned())
    }
}

/// Checks a shared prefix as given (`--redis-prefix`) with the store's own
/// rule for key prefixes ([`KeyLayout::new`]: not empty, no `{` or `}`),
/// before connecting: the store checks only the session prefixes built from
/// it (`<prefix>:<n>`), whose message would show a prefix the user never
/// wrote.
fn check_prefix(prefix: &str) -> Result<(), String> {
    KeyLayout::new(prefix).map(drop).map_err(|error| {
        let reason = match error {
            RedisStoreError::Config(reason) => reason,
            other => other.to_string(),
        };
        format!("invalid --redis-prefix: {reason}")
    })
}

/// A random number from the standard library's randomly seeded hasher (no
/// clock read, no extra dependency).
fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.finish()
}

impl Target for Redis {
    fn start(&mut self, policy: &str, limit: u32, window_ms: u64) -> Result<(), String> {
        let margin_ms = self.store.config().expiry_margin_ms;
        let any = AnyPolicy::from_name(policy, limit, window_ms).map_err(|e| e.to_string())?;
        tollgate_redis::check_servable_limit(policy, limit, window_ms, margin_ms)
            .map_err(|e| e.to_string())?;
        let plan = Plan::new("replay", vec![Limit::new("limit", any, false)])
            .map_err(|e| e.to_string())?;
        self.sessions += 1;
        let config = RedisStoreConfig {
            prefix: format!("{}:{}", self.base, self.sessions),
            ..self.store.config().clone()
        };
        self.store = self.store.with_config(config).map_err(|e| e.to_string())?;
        self.plan = Some(plan);
        Ok(())
    }

    fn allow(&mut self, client: &str, now_ms: u64) -> Result<bool, String> {
        self.check(client, now_ms, 1).map(|d| d.allowed)
    }

    fn remaining(&mut self, client: &str, now_ms: u64) -> Result<u32, String> {
        self.check(client, now_ms, 0).map(|d| d.remaining)
    }
}
