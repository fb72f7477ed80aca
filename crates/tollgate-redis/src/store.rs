//! [`RedisStore`]: plan decisions made by one Lua script in Redis.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, Script};
use tollgate::{Decision, LimitDecision, Plan, PlanDecision, Policy, Store, StoreFuture};

use crate::bounds;
use crate::keys::KeyLayout;
use crate::{policies, scripts, RedisStoreError};

/// Where the time of a decision comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeSource {
    /// The caller's `now_ms`, as in the in-memory limiter: answers are exact
    /// and repeatable (tests, replays), but servers sharing one Redis must
    /// keep their clocks close. A server whose clock runs ahead pushes the
    /// client's last-seen time forward, and the others are then answered at
    /// that later time (the backwards-time rule) until their clocks catch up.
    #[default]
    Caller,
    /// Redis's own clock (`TIME`, read inside the script): every server
    /// agrees whatever its clock says, at the price of the `now_ms` argument
    /// being ignored (so answers cannot be replayed or tested with a manual
    /// clock), and of waits measured on Redis's clock.
    Redis,
}

/// How a [`RedisStore`] names and expires its keys and reads the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStoreConfig {
    /// Every key starts with this prefix (see [`crate::keys`]). Default `"tollgate"`.
    pub prefix: String,
    /// Where the time comes from. Default: the caller's.
    pub time_source: TimeSource,
    /// Added to every key's expiry, in ms. Expiries run on Redis's clock but
    /// are computed from decision times, so the margin covers callers whose
    /// clocks lag Redis's or each other's. Default 60,000 (one minute).
    pub expiry_margin_ms: u64,
}

impl Default for RedisStoreConfig {
    fn default() -> Self {
        Self {
            prefix: "tollgate".to_owned(),
            time_source: TimeSource::Caller,
            expiry_margin_ms: 60_000,
        }
    }
}

/// Reconnect quickly and give up a round soon: callers have their own
/// timeout, and the next call after a failed round starts a new one.
fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(200))
        .set_connection_timeout(Some(Duration::from_millis(500)))
}

/// A connection to one Redis node (reconnecting by itself) or to a cluster.
#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// Per-client limit state in Redis, shared by every server using the same
/// Redis and key prefix, with the in-memory limiter's exact answers.
///
/// Each decision is one EVALSHA of [`scripts::PLAN`], which decides every
/// limit of the plan for the client and consumes from all of them or none,
/// atomically. Cloning is cheap and shares the connection.
#[derive(Clone)]
pub struct RedisStore {
    connection: Connection,
    script: Arc<Script>,
    keys: KeyLayout,
    config: RedisStoreConfig,
}

impl RedisStore {
    /// Connects to one Redis node (`redis://host:port/db`) through a
    /// [`ConnectionManager`], which reconnects by itself after Redis comes back.
    ///
    /// # Errors
    /// [`RedisStoreError::Config`] for a bad prefix, [`RedisStoreError::Redis`]
    /// for a bad URL or when the first connection fails.
    pub async fn connect(url: &str, config: RedisStoreConfig) -> Result<Self, RedisStoreError> {
        let keys = KeyLayout::new(config.prefix.clone())?;
        let client = Client::open(url)?;
        let manager = ConnectionManager::new_with_config(client, manager_config()).await?;
        Ok(Self::with_connection(
            Connection::Single(manager),
            keys,
            config,
        ))
    }

    /// Like [`RedisStore::connect`], without waiting for the first
    /// connection: a service can start while Redis is down (its calls fail
    /// as transient errors, so a [`crate::GuardedStore`] answers them) and
    /// uses Redis as soon as it is up. Must be called inside a Tokio runtime.
    ///
    /// # Errors
    /// [`RedisStoreError::Config`] for a bad prefix, [`RedisStoreError::Redis`]
    /// for a bad URL.
    pub fn connect_lazy(url: &str, config: RedisStoreConfig) -> Result<Self, RedisStoreError> {
        let keys = KeyLayout::new(config.prefix.clone())?;
        let client = Client::open(url)?;
        let manager = ConnectionManager::new_lazy_with_config(client, manager_config())?;
        Ok(Self::with_connection(
            Connection::Single(manager),
            keys,
            config,
        ))
    }

    /// Connects to a Redis Cluster given some of its nodes. All keys of one
    /// client share a hash tag, so every decision runs on one node.
    ///
    /// # Errors
    /// As [`RedisStore::connect`].
    pub async fn connect_cluster(
        nodes: &[&str],
        config: RedisStoreConfig,
    ) -> Result<Self, RedisStoreError> {
        let keys = KeyLayout::new(config.prefix.clone())?;
        let client = ClusterClient::builder(nodes.iter().copied())
            .connection_timeout(Duration::from_millis(500))
            .retries(3)
            .build()?;
        let connection = client.get_async_connection().await?;
        Ok(Self::with_connection(
            Connection::Cluster(connection),
            keys,
            config,
        ))
    }

    fn with_connection(connection: Connection, keys: KeyLayout, config: RedisStoreConfig) -> Self {
        Self {
            connection,
            script: Arc::new(Script::new(scripts::PLAN)),
            keys,
            config,
        }
    }

    /// The same connection with another configuration (e.g. another key
    /// prefix: a separate key space).
    ///
    /// # Errors
    /// [`RedisStoreError::Config`] for a bad prefix.
    pub fn with_config(&self, config: RedisStoreConfig) -> Result<Self, RedisStoreError> {
        Ok(Self {
            connection: self.connection.clone(),
            script: self.script.clone(),
            keys: KeyLayout::new(config.prefix.clone())?,
            config,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &RedisStoreConfig {
        &self.config
    }

    /// The key layout in force.
    pub fn keys(&self) -> &KeyLayout {
        &self.keys
    }

    /// The SHA1 of the plan script, as EVALSHA names it.
    pub fn script_sha(&self) -> &str {
        self.script.get_hash()
    }

    /// Decides a request of `cost` units (0 only asks) for `client` against
    /// every limit of `plan` at `now_ms` (ignored with [`TimeSource::Redis`]),
    /// in one round trip.
    ///
    /// # Errors
    /// [`RedisStoreError::OutOfRange`] before any call when an argument is
    /// outside the store's exact range ([`crate::bounds`]); Redis errors;
    /// [`RedisStoreError::Script`] when the script refuses its arguments or
    /// a stored state; [`RedisStoreError::Reply`] for a reply it cannot read.
    pub async fn decide(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
    ) -> Result<PlanDecision, RedisStoreError> {
        let caller_time = self.config.time_source == TimeSource::Caller;
        bounds::check(
            plan,
            caller_time.then_some(now_ms),
            self.config.expiry_margin_ms,
        )?;
        let base = self.keys.client_base(client);
        let mut invocation = self.script.prepare_invoke();
        invocation.key(KeyLayout::seen_key_from_base(&base));
        if caller_time {
            invocation.arg(now_ms);
        } else {
            invocation.arg("redis");
        }
        invocation.arg(cost).arg(self.config.expiry_margin_ms);
        for limit in plan.limits() {
            let policy = limit.policy();
            let descriptor = policies::by_name(policy.name())
                .ok_or_else(|| RedisStoreError::UnsupportedPolicy(policy.name().to_owned()))?;
            invocation.key(KeyLayout::limit_key_from_base(
                &base,
                limit.id(),
                descriptor.format,
            ));
            invocation
                .arg(descriptor.code)
                .arg(policy.limit())
                .arg(policy.window_ms())
                .arg(if limit.is_shadow() { "1" } else { "0" });
        }
        let reply: Result<Vec<i64>, redis::RedisError> = match &self.connection {
            Connection::Single(c) => invocation.invoke_async(&mut c.clone()).await,
            Connection::Cluster(c) => invocation.invoke_async(&mut c.clone()).await,
        };
        let reply = reply.map_err(|e| match e.code() {
            Some("TOLLGATE") => {
                // Redis appends " script: <sha>, on @user_script:<line>."
                let detail = e.detail().unwrap_or_default();
                let message = detail.split(" script: ").next().unwrap_or(detail);
                RedisStoreError::Script(message.to_owned())
            }
            _ => RedisStoreError::Redis(e),
        })?;
        read_reply(plan, &reply)
    }
}

/// Builds the decision from the script's reply.
fn read_reply(plan: &Plan, reply: &[i64]) -> Result<PlanDecision, RedisStoreError> {
    let limits = plan.limits();
    if reply.len() != 2 + 4 * limits.len() {
        return Err(RedisStoreError::Reply(format!(
            "{} numbers for {} limits",
            reply.len(),
            limits.len()
        )));
    }
    let number = |value: i64, what: &str| {
        u64::try_from(value).map_err(|_| RedisStoreError::Reply(format!("negative {what} {value}")))
    };
    let mut decisions = Vec::with_capacity(limits.len());
    for (limit, fields) in limits.iter().zip(reply[2..].chunks_exact(4)) {
        let remaining = u32::try_from(fields[1])
            .map_err(|_| RedisStoreError::Reply(format!("remaining {} out of range", fields[1])))?;
        let retry_after_ms = match fields[2] {
            -1 => None,
            value => Some(number(value, "retry_after_ms")?),
        };
        decisions.push(LimitDecision {
            name: limit.name().into(),
            policy: limit.policy().name(),
            window_ms: limit.policy().window_ms(),
            shadow: limit.is_shadow(),
            decision: Decision {
                allowed: fields[0] == 1,
                limit: limit.policy().limit(),
                remaining,
                retry_after_ms,
                reset_after_ms: number(fields[3], "reset_after_ms")?,
            },
        });
    }
    let decision = PlanDecision::from_limits(decisions);
    if decision.allowed != (reply[1] == 1) {
        return Err(RedisStoreError::Reply(
            "the script's overall answer disagrees with its limits".into(),
        ));
    }
    Ok(decision)
}

impl Store for RedisStore {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        Box::pin(async move {
            self.decide(plan, client, now_ms, cost)
                .await
                .map_err(Into::into)
        })
    }
}
