//! A Redis Cluster connection made at its first use, so that a service
//! can start while the cluster is down (as [`crate::RedisStore::connect_lazy`]
//! does for one node): until the cluster answers, each call fails as a
//! transient error and the failure policy answers it. A store that
//! connects eagerly makes it at once (`connection.rs`).

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use tokio::sync::OnceCell;

/// The client, and its connection once one was made.
pub(crate) struct LazyCluster {
    client: ClusterClient,
    connection: OnceCell<ClusterConnection>,
}

impl LazyCluster {
    /// Nothing is connected yet.
    pub(crate) fn new(client: ClusterClient) -> Self {
        Self {
            client,
            connection: OnceCell::new(),
        }
    }

    /// The connection, made now if there is none yet (concurrent first
    /// calls wait for one attempt; a failed attempt is retried by the next call).
    pub(crate) async fn get(&self) -> Result<ClusterConnection, redis::RedisError> {
        self.connection
            .get_or_try_init(|| self.client.get_async_connection())
            .await
            .cloned()
    }
}
