//! A Redis Cluster connection made at its first use, so that a service
//! can start while the cluster is down (as [`crate::RedisStore::connect_lazy`]
//! does for one node): until the cluster answers, each call fails as a
//! transient error and the failure policy answers it. A store that
//! connects eagerly makes it at once (`connection.rs`).
//!
//! A [`LazyCluster::lane`] is another connection of the same client, for one
//! master's decisions ([`crate::masters`]): redis-rs holds every request of a
//! cluster connection while it reads the map of slots again (after a
//! `MOVED`), and that reading asks every node it knows on the connection's
//! own links, so it waits behind any call a node holds there (a master
//! whose writes are paused, as `CLUSTER FAILOVER` pauses them) for as long
//! as the node holds it. On a connection of their own, the other masters'
//! decisions are not held behind it.

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

    /// A connection of its own, with this one's client and settings, made
    /// at its first use.
    pub(crate) fn lane(&self) -> Self {
        Self::new(self.client.clone())
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
