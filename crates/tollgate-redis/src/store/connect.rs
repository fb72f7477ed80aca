//! [`RedisStore`]'s constructors: one node (at once or lazily), a Redis
//! Cluster from seed nodes, and a store of another configuration sharing a
//! connection.

use std::sync::Arc;

use crate::evalsha::LuaScript;

use super::RedisStore;
use crate::call::Scripts;
use crate::connection::{self, Connection};
use crate::deadline::RedisClock;
use crate::keys::KeyLayout;
use crate::masters::Queues;
use crate::measure;
use crate::{scripts, RedisStoreConfig, RedisStoreError, RedisTarget};

impl RedisStore {
    /// Connects to one Redis node (`redis://host:port/db`, see
    /// [`RedisTarget`] for every form) through a [`redis::aio::ConnectionManager`],
    /// which reconnects by itself after Redis comes back (and after
    /// credentials refused at a reconnection work again).
    ///
    /// # Errors
    /// As [`RedisStore::connect_to`].
    pub async fn connect(url: &str, config: RedisStoreConfig) -> Result<Self, RedisStoreError> {
        Self::connect_to(&RedisTarget::single(url), config).await
    }

    /// Connects to one node or a cluster, eagerly: the first connection
    /// (TLS handshake, ACL login, database selection, a `PING`) must
    /// succeed, so that a wrong password, an untrusted certificate or an
    /// unreachable node is reported at start-up. After that, a lost
    /// connection is re-established by itself and calls fail as transient
    /// errors meanwhile (a `tollgate_guard::GuardedStore` answers them).
    ///
    /// The runtime this is called on is the store's home: its connections
    /// and the tasks it starts for its calls run there, whichever runtime
    /// its callers are on (see the crate docs, "Runtimes"), so it must
    /// outlive them and keep running (a single-threaded runtime runs its
    /// tasks only inside its `block_on`, as `tollgate proxy`'s main one does
    /// for as long as the proxy serves).
    ///
    /// # Errors
    /// [`RedisStoreError::Config`] for a bad prefix or target, or
    /// [`RedisStoreError::Ca`] for its CA (see [`RedisTarget::validate`]),
    /// [`RedisStoreError::Connect`] when the first connection fails, saying
    /// why;
    /// [`RedisStoreError::NotPermitted`] when the ACL user may not run
    /// `TIME`, load or run the store's scripts, or read and write the keys
    /// under its prefix (checked by loading the scripts and running the
    /// read-only inspection script, which writes nothing).
    pub async fn connect_to(
        target: &RedisTarget,
        config: RedisStoreConfig,
    ) -> Result<Self, RedisStoreError> {
        let keys = config.validate()?;
        let home = connection::home()?;
        let store = Self::with_connection(
            Connection::connect(target, config.timeout, home.clone()).await?,
            keys,
            config,
            home,
        );
        measure::measure_offset(&store.scripts)
            .await
            .map_err(|e| store.refusal(e))?;
        store.check_permissions().await?;
        if let Some(queues) = &store.queues {
            // On a cluster, batching starts with the first decision.
            queues.read_map().await;
        }
        Ok(store)
    }

    /// Like [`RedisStore::connect`], without waiting for the first
    /// connection: a service can start while Redis is down (its calls fail
    /// as transient errors, so a `tollgate_guard::GuardedStore` answers them) and
    /// uses Redis as soon as it is up. Must be called inside a Tokio runtime,
    /// the store's home (as for [`RedisStore::connect_to`]).
    ///
    /// # Errors
    /// [`RedisStoreError::Config`] for a bad prefix or outside a Tokio
    /// runtime, [`RedisStoreError::Redis`] for a bad URL.
    pub fn connect_lazy(url: &str, config: RedisStoreConfig) -> Result<Self, RedisStoreError> {
        Self::connect_lazy_to(&RedisTarget::single(url), config)
    }

    /// Like [`RedisStore::connect_to`], without waiting for the first
    /// connection (one node or a cluster): a service can start while Redis
    /// is down (its calls fail as transient errors, so a
    /// `tollgate_guard::GuardedStore` answers them) and uses Redis as soon as it is
    /// up. Must be called inside a Tokio runtime, the store's home (as for
    /// [`RedisStore::connect_to`]).
    ///
    /// # Errors
    /// [`RedisStoreError::Config`] for a bad prefix or target, or outside a
    /// Tokio runtime; [`RedisStoreError::Ca`] for its CA (see
    /// [`RedisTarget::validate`]).
    pub fn connect_lazy_to(
        target: &RedisTarget,
        config: RedisStoreConfig,
    ) -> Result<Self, RedisStoreError> {
        let keys = config.validate()?;
        let home = connection::home()?;
        Ok(Self::with_connection(
            Connection::lazy(target, config.timeout, home.clone())?,
            keys,
            config,
            home,
        ))
    }

    /// Connects to a Redis Cluster given some of its nodes. All keys of one
    /// client share a hash tag, so every decision runs on one node.
    ///
    /// # Errors
    /// As [`RedisStore::connect_to`].
    pub async fn connect_cluster(
        nodes: &[&str],
        config: RedisStoreConfig,
    ) -> Result<Self, RedisStoreError> {
        Self::connect_to(&RedisTarget::cluster(nodes.iter().copied()), config).await
    }

    /// The store on `connection`, whose tasks run on `home`
    /// ([`connection::home`]).
    fn with_connection(
        connection: Connection,
        keys: KeyLayout,
        config: RedisStoreConfig,
        home: tokio::runtime::Handle,
    ) -> Self {
        let scripts = Arc::new(Scripts::new(connection, Arc::new(RedisClock::new()), home));
        Self {
            queues: queues(&scripts, &config),
            scripts,
            inspect_script: Arc::new(LuaScript::new(scripts::INSPECT)),
            keys,
            config,
        }
    }

    /// The same connection with another configuration (e.g. another key
    /// prefix: a separate key space), and the same queue of decisions when
    /// the batching settings are the same. A cluster connection keeps the
    /// waits it was made with (before it sends a refused call again, within
    /// the first configuration's timeout).
    ///
    /// # Errors
    /// [`RedisStoreError::Config`] for a bad prefix or batching setting.
    pub fn with_config(&self, config: RedisStoreConfig) -> Result<Self, RedisStoreError> {
        let keys = config.validate()?;
        let same_batching = config.batch_max == self.config.batch_max
            && config.batches_in_flight == self.config.batches_in_flight;
        Ok(Self {
            queues: if same_batching {
                self.queues.clone()
            } else {
                queues(&self.scripts, &config)
            },
            scripts: self.scripts.clone(),
            inspect_script: self.inspect_script.clone(),
            keys,
            config,
        })
    }
}

/// The queues of decisions `config` asks for: on one node, none with
/// `batch_max` 1.
fn queues(scripts: &Arc<Scripts>, config: &RedisStoreConfig) -> Option<Queues> {
    Queues::new(
        scripts,
        config.batch_max,
        config.batches_in_flight,
        config.timeout,
    )
}
