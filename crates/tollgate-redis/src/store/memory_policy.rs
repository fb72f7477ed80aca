//! Redis's `maxmemory-policy`, which a service reads once it has connected:
//! every key tollgate writes carries an expiry, so under an evicting policy
//! (`volatile-*`, `allkeys-*`) a full Redis may drop a client's state early
//! and the client is allowed again, with no error anywhere. Managed Redis
//! services often default to one (`volatile-lru`). See the crate README,
//! "Redis's memory policy".

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
}
