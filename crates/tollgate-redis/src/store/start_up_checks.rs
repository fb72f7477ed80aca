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

use crate::{RedisStore, RedisStoreError};

/// The policy under which a full Redis refuses writes instead of dropping
/// keys: the only one under which the store stays exact.
pub const NO_EVICTION: &str = "noeviction";

impl RedisStore {
    /// The `maxmemory-policy` of the node, or of a cluster primary, that
    /// may evict tollgate's keys (anything but [`NO_EVICTION`]); `None`
    /// when every node that answered refuses writes when full instead.
    ///
    /// # Errors
    /// When Redis cannot be reached, or refuses `CONFIG GET` (an ACL user
    /// without `+config|get`, or a managed service that renames or disables
    /// `CONFIG`): the policy is then unknown, not wrong.
    pub async fn evicting_memory_policy(&self) -> Result<Option<String>, RedisStoreError> {
        let policies = self
            .scripts
            .connection
            .config_get("maxmemory-policy")
            .await?;
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
}
