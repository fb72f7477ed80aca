//! The connection to Redis: one node (reconnecting by itself, `node.rs`) or
//! a cluster, with the two calls the store makes: a script, and `TIME`.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, FromRedisValue, RedisResult, Value};

use tokio::runtime::Handle;

use crate::evalsha::Evalsha;
use crate::lazy_cluster::LazyCluster;
use crate::node::Node;
use crate::replicas::{Acked, ReplicaWait};
use crate::{RedisStoreError, RedisTarget};

/// How long a call waits for its reply before redis-rs gives up on it:
/// 5 s. Long enough for any reply a caller still waits for (a
/// store timeout longer than this is cut to it), and for most replies a
/// stalled Redis holds (a SIGSTOP of seconds, a blocking command), which
/// are then refunded as late ([`crate::call::refund`]). A reply later than this
/// is given up on, and its call taken back by the receipt it left
/// ([`crate::call::lost`]), so a shorter wait loses nothing: it was 30 s before
/// the receipts, since such a reply was lost with its refund. Not longer:
/// a call whose reply never comes (seen when Redis closes connections
/// every 10 ms: a call sent on a connection as it died was never failed)
/// holds the batch in flight, and every decision queued behind it, this
/// long. The same bound holds on a cluster, retries included.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a new connection to one node may take (TCP, TLS handshake,
/// login, database) when the store is made by connecting
/// ([`crate::RedisStore::connect`] and its kind): the start-up check,
/// documented as waiting up to 5 s. A link slow to set up a connection (a
/// distant TLS Redis, a loaded proxy in front of it) then connects at
/// start-up, and so do that node's reconnections, which use the same
/// bound: at the half second of a store made without connecting they would
/// fail on it for good once the first connection dropped.
pub const FIRST_CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a new connection may take for a store made without
/// connecting ([`Connection::lazy`]), and on a cluster: short, so that a
/// node that accepts no connection (a partition) is tried again soon by the
/// next call, within the callers' timeouts.
const RECONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// One connection attempt per reconnect, no retries: the next call after a
/// failed attempt starts a new one (after an I/O error, by the manager
/// itself; after a refusal at login, by a new manager: `node.rs`). With
/// retries, every call made while the manager waits between attempts would
/// wait with it, up to the caller's timeout: when Redis dies, all the calls
/// in flight would each wait out the timeout before the circuit breaker
/// could open, where a refused connection fails them in well under a
/// millisecond. Replies are waited for up to [`RESPONSE_TIMEOUT`]; a
/// connection is waited for up to `connection_timeout`.
fn manager_config(connection_timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_number_of_retries(0)
        .set_connection_timeout(Some(connection_timeout))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
}

/// The runtime the store is made on, its home: every task the store starts
/// runs there (`Scripts::spawn`), and so does the making of its
/// connections, whose work redis-rs runs in tasks of the runtime it is
/// made on. A caller on another runtime (a gRPC worker's single-threaded
/// one, which ends at shutdown before the store does) then leaves nothing
/// of the store's behind when its runtime ends.
///
/// # Errors
/// [`RedisStoreError::Config`] outside a Tokio runtime.
pub(crate) fn home() -> Result<Handle, RedisStoreError> {
    Handle::try_current().map_err(|_| {
        RedisStoreError::Config(
            "a Redis store must be made inside a Tokio runtime, which runs its connections".into(),
        )
    })
}

/// A connection to one Redis node (reconnecting by itself) or to a cluster.
///
/// A cluster's connection sends a command again when its connection drops
/// (up to 3 times: see `target.rs`), and follows a slot that moved (MOVED,
/// ASK). So does the store itself on one node, for refunds and claims. A
/// script run twice this way still acts once: a decision whose receipt is
/// already stored answers from it (`decide.lua`), a refund whose own key
/// holds its answer answers from that (`refund.lua`), and a claim removes
/// the receipt it takes back by.
#[derive(Clone)]
pub(crate) enum Connection {
    Single(Arc<Node>),
    Cluster(Arc<LazyCluster>),
}

impl Connection {
    /// Connects to one node or a cluster, eagerly: the first connection
    /// (TLS handshake, ACL login, database selection, a `PING`) must
    /// succeed, so that a wrong password, an untrusted certificate or an
    /// unreachable node is reported at start-up, saying which; one node's
    /// connections are waited for up to [`FIRST_CONNECTION_TIMEOUT`]. A cluster's
    /// command sent again after a wait is sent within `timeout`, the
    /// callers' (`RedisTarget::cluster_client`). A cluster's connections,
    /// and a node's that replace one refused at login, are made on `home`,
    /// the store's runtime ([`home`]).
    pub(crate) async fn connect(
        target: &RedisTarget,
        timeout: Duration,
        home: Handle,
    ) -> Result<Self, RedisStoreError> {
        let failed = |e| RedisStoreError::connect(target, e);
        if target.is_cluster() {
            let cluster = LazyCluster::new(target.cluster_client(timeout)?, home);
            let mut connection = cluster.get().await.map_err(failed)?;
            redis::cmd("PING")
                .query_async::<()>(&mut connection)
                .await
                .map_err(failed)?;
            Ok(Connection::Cluster(Arc::new(cluster)))
        } else {
            let client = target.client()?;
            let config = manager_config(FIRST_CONNECTION_TIMEOUT);
            let mut manager = ConnectionManager::new_with_config(client.clone(), config.clone())
                .await
                .map_err(failed)?;
            redis::cmd("PING")
                .query_async::<()>(&mut manager)
                .await
                .map_err(failed)?;
            let node = Node::new(client, config, manager, home);
            Ok(Connection::Single(Arc::new(node)))
        }
    }

    /// Prepares a connection to one node or a cluster without connecting
    /// yet; `timeout` and `home` as for [`Connection::connect`]. Taking
    /// `home` also says that a runtime is there: redis-rs's lazy one-node
    /// connection panics outside one.
    pub(crate) fn lazy(
        target: &RedisTarget,
        timeout: Duration,
        home: Handle,
    ) -> Result<Self, RedisStoreError> {
        if target.is_cluster() {
            let cluster = LazyCluster::new(target.cluster_client(timeout)?, home);
            return Ok(Connection::Cluster(Arc::new(cluster)));
        }
        let client = target.client()?;
        let config = manager_config(RECONNECT_TIMEOUT);
        let manager = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?;
        let node = Node::new(client, config, manager, home);
        Ok(Connection::Single(Arc::new(node)))
    }

    /// A connection of its own for one master's calls: on a cluster, a new
    /// connection of the same client, made at its first use or by
    /// [`Connection::ready`] (see `lazy_cluster.rs` for why); on one node,
    /// this one.
    pub(crate) fn lane(&self) -> Self {
        match self {
            Connection::Single(_) => self.clone(),
            Connection::Cluster(c) => Connection::Cluster(Arc::new(c.lane())),
        }
    }

    /// Makes a cluster's connection now, if it has none yet (one node's
    /// reconnects by itself).
    pub(crate) async fn ready(&self) -> RedisResult<()> {
        match self {
            Connection::Single(_) => Ok(()),
            Connection::Cluster(c) => c.get().await.map(drop),
        }
    }

    /// Whether a command whose connection dropped is sent again on a new
    /// one (a cluster's, `ClusterClientBuilder::retries`; one node's
    /// manager never resends), so that any error, or a reply of a call
    /// that started too late, may follow an earlier attempt that ran.
    pub(crate) fn resends(&self) -> bool {
        self.is_cluster()
    }

    /// Whether this is a cluster (whose nodes each have their own clock).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(_))
    }

    /// Runs a script (EVALSHA, loading it after NOSCRIPT).
    pub(crate) async fn invoke<T: FromRedisValue>(&self, call: &Evalsha<'_>) -> RedisResult<T> {
        match self {
            Connection::Single(node) => {
                node.run(|mut c| async move { call.run(&mut c).await })
                    .await
            }
            Connection::Cluster(c) => call.run(&mut c.get().await?).await,
        }
    }

    /// Runs a script as [`Connection::invoke`] does; with `wait`, then
    /// `WAIT` in the same pipeline ([`crate::replicas`]), and says how many
    /// replicas acknowledged.
    pub(crate) async fn invoke_acked<T: FromRedisValue>(
        &self,
        call: &Evalsha<'_>,
        wait: Option<ReplicaWait>,
    ) -> RedisResult<(T, Acked)> {
        let Some(wait) = wait else {
            return Ok((self.invoke(call).await?, Acked::NotAsked));
        };
        let (reply, waited) = match self {
            Connection::Single(node) => {
                node.run(|mut c| async move { call.run_acked(&mut c, wait).await })
                    .await
            }
            // redis-rs follows a pipeline's MOVED and ASK as a command's.
            Connection::Cluster(c) => call.run_acked(&mut c.get().await?, wait).await,
        }?;
        Ok((
            reply,
            match waited {
                Ok(acknowledged) => Acked::Replicas(acknowledged),
                Err(refused) => Acked::Refused(refused),
            },
        ))
    }

    /// The cluster's `CLUSTER SLOTS`, asked of any one node (on one node,
    /// an error: there are no slots).
    pub(crate) async fn cluster_slots(&self) -> Result<Value, RedisStoreError> {
        let command = || {
            let mut command = redis::cmd("CLUSTER");
            command.arg("SLOTS");
            command
        };
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        match self {
            Connection::Single(_) => Err(RedisStoreError::Reply(
                "CLUSTER SLOTS asked of a single node".into(),
            )),
            Connection::Cluster(c) => Ok(c.get().await?.route_command(command(), routing).await?),
        }
    }

    /// The value of the configuration parameter `name` on the node, or on
    /// every cluster primary that answered (`CONFIG GET`).
    pub(crate) async fn config_get(&self, name: &str) -> Result<Vec<String>, RedisStoreError> {
        let mut command = redis::cmd("CONFIG");
        command.arg("GET").arg(name);
        let replies = self.ask_every_primary(command).await?;
        // Each reply: the name and its value, as a map (RESP3) or a list.
        let values = replies.into_iter().filter_map(|reply| {
            let pairs: Vec<(String, String)> = redis::from_redis_value(reply).ok()?;
            pairs
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, value)| value)
        });
        Ok(values.collect())
    }

    /// `command`'s reply from the node, or from every cluster primary that
    /// answered.
    pub(crate) async fn ask_every_primary(
        &self,
        command: Cmd,
    ) -> Result<Vec<Value>, RedisStoreError> {
        Ok(match self {
            Connection::Single(c) => vec![c.query::<Value>(&command).await?],
            Connection::Cluster(c) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                match c.get().await?.route_command(command, routing).await? {
                    Value::Map(nodes) => nodes.into_iter().map(|(_, reply)| reply).collect(),
                    reply => vec![reply],
                }
            }
        })
    }

    /// Whether the one node is a replica (`ROLE`), which refuses every
    /// write (`READONLY`); a cluster's connection writes to primaries only.
    pub(crate) async fn is_replica(&self) -> Result<bool, RedisStoreError> {
        match self {
            Connection::Single(c) => {
                let role: Value = c.query(&redis::cmd("ROLE")).await?;
                let first = match role {
                    Value::Array(items) => items.into_iter().next(),
                    _ => None,
                };
                let name: Option<String> = first.and_then(|v| redis::from_redis_value(v).ok());
                Ok(matches!(name.as_deref(), Some("slave" | "replica")))
            }
            Connection::Cluster(_) => Ok(false),
        }
    }

    /// Redis's `TIME` in µs: of the node, or the earliest of every
    /// cluster primary that answered (the most conservative for deadlines).
    pub(crate) async fn time_us(&self) -> Result<u64, RedisStoreError> {
        match self {
            Connection::Single(c) => {
                let (secs, micros): (u64, u64) = c.query(&redis::cmd("TIME")).await?;
                Ok(time_us(secs, micros))
            }
            Connection::Cluster(c) => cluster_time_us(c.get().await?).await,
        }
    }
}

/// The earliest `TIME` of every cluster primary that answered.
async fn cluster_time_us(mut connection: ClusterConnection) -> Result<u64, RedisStoreError> {
    let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
    let reply = connection
        .route_command(redis::cmd("TIME"), routing)
        .await?;
    earliest_time(reply)
}

fn time_us(secs: u64, micros: u64) -> u64 {
    secs.saturating_mul(1_000_000).saturating_add(micros)
}

/// The earliest `TIME` in a cluster's per-node map of replies.
fn earliest_time(reply: Value) -> Result<u64, RedisStoreError> {
    let Value::Map(nodes) = reply else {
        return Err(RedisStoreError::Reply(format!(
            "TIME from every primary: {reply:?}"
        )));
    };
    nodes
        .into_iter()
        .filter_map(|(_, time)| redis::from_redis_value::<(u64, u64)>(time).ok())
        .map(|(secs, micros)| time_us(secs, micros))
        .min()
        .ok_or_else(|| RedisStoreError::Reply("no cluster primary answered TIME".into()))
}
