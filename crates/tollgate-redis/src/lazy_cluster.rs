//! A Redis Cluster connection made at its first use, so that a service
//! can start while the cluster is down (as [`crate::RedisStore::connect_lazy`]
//! does for one node): until the cluster answers, each call fails as a
//! transient error and the failure policy answers it. A store that
//! connects eagerly makes it at once (`connection.rs`).
//!
//! The connection is made on the store's home runtime (the one the store
//! was made on, `call.rs`'s `Scripts::home`), whichever runtime its first
//! call comes from: redis-rs runs a connection's work in tasks spawned where
//! it is made, and a caller's runtime may end before the store does (a
//! gRPC worker's, at shutdown), which would leave the store a connection
//! nobody drives.
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
use tokio::runtime::Handle;
use tokio::sync::OnceCell;

/// The client, and its connection once one was made.
pub(crate) struct LazyCluster {
    client: ClusterClient,
    connection: OnceCell<ClusterConnection>,
    home: Handle,
}

impl LazyCluster {
    /// Nothing is connected yet; the connection will be made on `home`.
    pub(crate) fn new(client: ClusterClient, home: Handle) -> Self {
        Self {
            client,
            connection: OnceCell::new(),
            home,
        }
    }

    /// A connection of its own, with this one's client, settings and home
    /// runtime, made at its first use.
    pub(crate) fn lane(&self) -> Self {
        Self::new(self.client.clone(), self.home.clone())
    }

    /// The connection, made now (on the home runtime) if there is none yet
    /// (concurrent first calls wait for one attempt; a failed attempt is
    /// retried by the next call).
    pub(crate) async fn get(&self) -> Result<ClusterConnection, redis::RedisError> {
        self.connection
            .get_or_try_init(|| {
                let client = self.client.clone();
                let connecting = self
                    .home
                    .spawn(async move { client.get_async_connection().await });
                async move {
                    connecting.await.unwrap_or_else(|_| {
                        Err(std::io::Error::other("the store's runtime has shut down").into())
                    })
                }
            })
            .await
            .cloned()
    }
}
