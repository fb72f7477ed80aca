//! What a service checks of Redis once it has connected, to warn of a
//! Redis that would silently cost exactness or every decision:
//!
//! - its `maxmemory-policy`: every key tollgate writes carries an expiry,
//!   so under an evicting policy (`volatile-*`, `allkeys-*`) a full Redis
//!   may drop a client's state early and the client is allowed again, with
//!   no error anywhere. Managed Redis services often default to one
//!   (`volatile-lru`). See the crate README, "Redis's memory policy".
//! - whether the node is a replica (a managed service's reader endpoint
//!   given by mistake): every write is refused, so the failure policy
//!   answers every call.
//! - how many replicas the node, or each cluster primary, has connected:
//!   fewer than [`crate::RedisStoreConfig::replicas_to_ack`], and every
//!   decision that consumes is answered by the failure policy.

use crate::info::{info_number, info_text};
use crate::{RedisStore, RedisStoreError};

/// The policy under which a full Redis refuses writes instead of dropping
/// keys: the only one under which the store stays exact.
pub const NO_EVICTION: &str = "noeviction";

impl RedisStore {
    /// The `maxmemory-policy` of the node, or of a cluster primary, that
    /// may evict tollgate's keys (anything but [`NO_EVICTION`]); `None`
    /// when every node that answered refuses writes when full instead.
    ///
    /// Read by `CONFIG GET`, or, where that is refused (an ACL user without
    /// `+config|get`, or a managed service that renames or disables
    /// `CONFIG`), from `INFO memory`'s `maxmemory_policy`.
    ///
    /// # Errors
    /// When Redis cannot be reached, or refuses both: the policy is then
    /// unknown, not wrong. The error is `CONFIG GET`'s.
    pub async fn evicting_memory_policy(&self) -> Result<Option<String>, RedisStoreError> {
        let connection = &self.scripts.connection;
        let policies = match connection.config_get("maxmemory-policy").await {
            Ok(policies) => policies,
            Err(refused) => (self.info_of_every_primary("memory").await)
                .map_err(|_| refused)?
                .iter()
                .filter_map(|info| Some(info_text(info, "maxmemory_policy")?.to_owned()))
                .collect(),
        };
        Ok(policies.into_iter().find(|policy| policy != NO_EVICTION))
    }

    /// Whether the store's one node is a replica (`ROLE`): it refuses every
    /// write with `READONLY`, so every call would be answered by the
    /// failure policy until it is promoted. Always false on a cluster, whose
    /// connection writes to primaries only.
    ///
    /// # Errors
    /// When Redis cannot be reached, or refuses `ROLE`.
    pub async fn is_replica(&self) -> Result<bool, RedisStoreError> {
        self.scripts.connection.is_replica().await
    }

    /// The fewest replicas connected to the node, or to any cluster
    /// primary (`INFO replication`'s `connected_slaves`); `None` when no
    /// node said. With fewer than
    /// [`crate::RedisStoreConfig::replicas_to_ack`], every decision that
    /// consumes is answered by the failure policy.
    ///
    /// # Errors
    /// When Redis cannot be reached, or refuses `INFO`.
    pub async fn fewest_connected_replicas(&self) -> Result<Option<u64>, RedisStoreError> {
        let infos = self.info_of_every_primary("replication").await?;
        Ok(infos
            .iter()
            .filter_map(|info| info_number(info, "connected_slaves"))
            .min())
    }

    /// `INFO section` of the node, or of every cluster primary, as text (a
    /// reply that is not text left out).
    async fn info_of_every_primary(&self, section: &str) -> Result<Vec<String>, RedisStoreError> {
        let mut command = redis::cmd("INFO");
        command.arg(section);
        let replies = self.scripts.connection.ask_every_primary(command).await?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| redis::from_redis_value::<String>(reply).ok())
            .collect())
    }
}
