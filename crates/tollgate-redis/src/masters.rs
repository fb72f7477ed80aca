//! Batching on a Redis Cluster: one queue per master.
//!
//! A decision goes to the queue of the master that serves its client's
//! slot, by the store's own map of slots ([`crate::slots`], read with
//! `CLUSTER SLOTS`); each queue batches as on one node ([`crate::batch`]).
//! The map only groups decisions: each batch is routed by a key of its first
//! decision, and a master that does not serve another decision's keys
//! refuses that decision before it writes anything, which is then sent
//! alone, routed by its own key. So a stale map (a resharding, a failover)
//! costs calls, never an answer, and it is read again when a master says it
//! is stale. Until the first map is read, every decision is sent alone.
//!
//! Each master's queue sends on a connection of its own, its lane
//! (`Connection::lane`, `connection.rs`), so that redis-rs reading the map
//! again for one master's calls (after a `MOVED` in a failover, behind a
//! call the master holds) holds no other master's. Calls sent alone because
//! of the map (none read yet, or a call another master holds) go on the
//! store's own connection. With `batch_max` 1, each decision goes alone on
//! its master's lane.
//!
//! The map also names each client's master as its failure domain (a
//! circuit breaker per master, `tollgate::Store::failure_domain`), so it is
//! kept on a cluster with `batch_max` 1 too (every decision then goes alone),
//! and read again once it is older than `MAP_MAX_AGE_US` (1 s): a failover
//! moves a master's slots whole to its replica, so no batch is refused and
//! only a new reading names the new master.
//!
//! A reading gives up after the store's timeout: `CLUSTER SLOTS` goes to any
//! one node, and a reading sent to a stalled node would otherwise wait up
//! to [`crate::RESPONSE_TIMEOUT`] (5 s), and no other reading could start
//! meanwhile.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;

use crate::batch::Batcher;
use crate::call::{Call, CallReply, Scripts};
use crate::connection::Connection;
use crate::slots::SlotMap;

/// At most one reading of the map per this many µs, so that a cluster that
/// cannot answer `CLUSTER SLOTS` is not asked on every decision.
const REFRESH_INTERVAL_US: u64 = 100_000;
/// A map older than this (1 s) is read again at the next decision.
const MAP_MAX_AGE_US: u64 = 1_000_000;
const NEVER: u64 = u64::MAX;

/// Where a store's decisions queue up: one node's queue, or a queue per
/// master of a cluster.
#[derive(Clone)]
pub(crate) enum Queues {
    /// One Redis node.
    Node(Arc<Batcher>),
    /// A Redis Cluster.
    Masters(Arc<MasterQueues>),
}

impl Queues {
    /// Queues of batches of at most `batch_max` decisions, `in_flight_max`
    /// of them in flight per node; on one node, `None` when `batch_max` is 1
    /// (every decision alone). A cluster always has them, for its map: with
    /// `batch_max` 1 every decision is sent alone, routed by its key. A
    /// reading of the map gives up after `timeout`.
    pub(crate) fn new(
        scripts: &Arc<Scripts>,
        batch_max: usize,
        in_flight_max: usize,
        timeout: Duration,
    ) -> Option<Self> {
        if scripts.connection.is_cluster() {
            return Some(Queues::Masters(Arc::new(MasterQueues::new(
                scripts.clone(),
                batch_max,
                in_flight_max,
                timeout,
            ))));
        }
        (batch_max > 1).then(|| {
            let misrouted = Arc::new(AtomicBool::new(false));
            Queues::Node(Arc::new(Batcher::new(
                scripts.clone(),
                scripts.connection.clone(),
                batch_max,
                in_flight_max,
                misrouted,
            )))
        })
    }

    /// On a cluster, reads the map of slots now (a failed reading is tried
    /// again by a later decision); on one node, nothing.
    pub(crate) async fn read_map(&self) {
        if let Queues::Masters(masters) = self {
            masters.read_map().await;
        }
    }

    /// Decides `call` in its node's queue (see [`Batcher::decide`]).
    pub(crate) async fn decide(&self, call: Call) -> CallReply {
        match self {
            Queues::Node(batcher) => batcher.decide(call).await,
            Queues::Masters(masters) => masters.decide(call).await,
        }
    }
}

/// The map of slots and a queue per master in it.
struct Routes {
    map: SlotMap,
    /// The address and the queue of each master, indexed as
    /// [`SlotMap::masters`].
    queues: Vec<(Arc<str>, Arc<Batcher>)>,
    /// When the map was read (the scripts' clock, µs).
    read_us: u64,
}

/// Makes `lanes` (new masters' lanes), all at once, for up to
/// [`crate::RESPONSE_TIMEOUT`], before the routes that hold them are put in
/// place: a call routed to a lane still connecting would wait for it, and
/// could reach Redis past its deadline (a TLS cluster's handshakes take
/// longer than a short timeout). A lane that fails to connect is tried
/// again by its first call.
async fn connect(lanes: Vec<Connection>) {
    if lanes.is_empty() {
        return;
    }
    let mut connecting = tokio::task::JoinSet::new();
    for lane in lanes {
        connecting.spawn(async move { lane.ready().await });
    }
    let _ = tokio::time::timeout(crate::RESPONSE_TIMEOUT, connecting.join_all()).await;
}

/// A queue per master of a cluster, and the map that picks one.
pub(crate) struct MasterQueues {
    scripts: Arc<Scripts>,
    batch_max: usize,
    in_flight_max: usize,
    /// How long one reading of the map may wait for its node.
    timeout: Duration,
    routes: ArcSwapOption<Routes>,
    /// Set by a queue whose master refused a decision as another's.
    misrouted: Arc<AtomicBool>,
    refreshing: AtomicBool,
    /// When the map was last asked for (the scripts' clock, µs), or NEVER.
    asked_us: AtomicU64,
}

impl MasterQueues {
    fn new(
        scripts: Arc<Scripts>,
        batch_max: usize,
        in_flight_max: usize,
        timeout: Duration,
    ) -> Self {
        Self {
            scripts,
            batch_max,
            in_flight_max,
            timeout,
            routes: ArcSwapOption::empty(),
            misrouted: Arc::new(AtomicBool::new(false)),
            refreshing: AtomicBool::new(false),
            asked_us: AtomicU64::new(NEVER),
        }
    }

    /// The address (`host:port`) of the master serving `key`'s slot, by the
    /// map in force; `None` before the first reading.
    pub(crate) fn master_of(&self, key: &str) -> Option<Arc<str>> {
        let routes = self.routes.load();
        let routes = routes.as_ref()?;
        let master = routes.map.master_of(key.as_bytes())?;
        routes
            .queues
            .get(master)
            .map(|(address, _)| address.clone())
    }

    async fn decide(self: &Arc<Self>, call: Call) -> CallReply {
        let queue = {
            let routes = self.routes.load();
            if self.map_is_due(routes.as_deref()) {
                self.read_map_later();
            }
            routes.as_ref().and_then(|routes| {
                let key = call.keys.first()?;
                let master = routes.map.master_of(key.as_bytes())?;
                routes.queues.get(master).map(|(_, queue)| queue.clone())
            })
        };
        match queue {
            Some(queue) if self.batch_max > 1 => queue.decide(call).await,
            Some(queue) => (self.scripts).one_detached(queue.lane(), call).await,
            None => {
                let connection = &self.scripts.connection;
                self.scripts.one_detached(connection, call).await
            }
        }
    }

    /// Whether to read the map again: there is none yet, a master refused a
    /// decision as another's, or it is older than [`MAP_MAX_AGE_US`].
    fn map_is_due(&self, routes: Option<&Routes>) -> bool {
        let Some(routes) = routes else {
            return true;
        };
        let age_us = self.scripts.clock.now_us().saturating_sub(routes.read_us);
        self.misrouted.load(Ordering::Relaxed) || age_us >= MAP_MAX_AGE_US
    }

    /// Reads the map again, in a task of its own (there is none yet, a
    /// master said it is out of date, or it aged), at most once per
    /// [`REFRESH_INTERVAL_US`] and one reading at a time.
    fn read_map_later(self: &Arc<Self>) {
        let now = self.scripts.clock.now_us();
        let asked = self.asked_us.load(Ordering::Relaxed);
        if asked != NEVER && now.saturating_sub(asked) < REFRESH_INTERVAL_US {
            return;
        }
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        self.asked_us.store(now, Ordering::Relaxed);
        self.misrouted.store(false, Ordering::Relaxed);
        let reading = Reading {
            masters: self.clone(),
        };
        self.scripts.spawn(reading.run());
    }

    /// Reads the map of slots and puts it in place, with a queue and a
    /// connected lane for each master (a failed or late reading changes
    /// nothing).
    async fn read_map(&self) {
        let reading = tokio::time::timeout(self.timeout, self.scripts.connection.cluster_slots());
        if let Ok(Ok(reply)) = reading.await {
            if let Ok(map) = SlotMap::from_reply(&reply) {
                let read_us = self.scripts.clock.now_us();
                let (routes, new_lanes) = self.routes_for(map, read_us);
                connect(new_lanes).await;
                self.routes.store(Some(Arc::new(routes)));
            }
        }
    }

    /// The routes for `map`, read at `read_us`, keeping the queue of every
    /// master that stays, and the lanes of the new masters' queues (not
    /// connected yet).
    fn routes_for(&self, map: SlotMap, read_us: u64) -> (Routes, Vec<Connection>) {
        let old = self.routes.load();
        let mut queues = Vec::with_capacity(map.masters().len());
        let mut new_lanes = Vec::new();
        for address in map.masters() {
            let kept = old.as_ref().and_then(|old| {
                old.queues
                    .iter()
                    .find(|(a, _)| **a == **address)
                    .map(|(_, q)| q.clone())
            });
            let queue = kept.unwrap_or_else(|| {
                let lane = self.scripts.connection.lane();
                new_lanes.push(lane.clone());
                Arc::new(Batcher::new(
                    self.scripts.clone(),
                    lane,
                    self.batch_max,
                    self.in_flight_max,
                    self.misrouted.clone(),
                ))
            });
            queues.push((Arc::from(address.as_str()), queue));
        }
        let routes = Routes {
            map,
            queues,
            read_us,
        };
        (routes, new_lanes)
    }
}

/// One reading of the map; lets the next one start when it ends, however
/// it ends (a failed reading is tried again by a later decision).
struct Reading {
    masters: Arc<MasterQueues>,
}

impl Reading {
    async fn run(self) {
        self.masters.read_map().await;
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.masters.refreshing.store(false, Ordering::Release);
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::connection::Connection;
    use crate::deadline::RedisClock;
    use crate::testing::RedisCluster;
    use crate::RedisTarget;

    const TIMEOUT: Duration = Duration::from_millis(200);

    #[test]
    fn a_reading_of_the_map_from_a_stalled_cluster_gives_up_and_keeps_the_map_it_had() {
        let Some(cluster) = RedisCluster::spawn("masters-stalled-reading") else {
            return;
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let target = RedisTarget::cluster(cluster.urls());
            let home = tokio::runtime::Handle::current();
            let connection = Connection::connect(&target, Duration::from_millis(100), home.clone())
                .await
                .expect("connect");
            let scripts = Arc::new(Scripts::new(connection, Arc::new(RedisClock::new()), home));
            let masters = MasterQueues::new(scripts, 64, 1, TIMEOUT);
            masters.read_map().await;
            let before = masters.routes.load_full().expect("a map").map.clone();

            // Every node stalled: whichever one the reading asks, it does
            // not answer (the processes are killed on drop if this fails).
            for node in cluster.nodes() {
                node.stop_process();
            }
            // Bounded by far more than the timeout: without one, the
            // reading waits for as long as the nodes stall.
            let reading = tokio::time::timeout(TIMEOUT * 25, masters.read_map()).await;
            for node in cluster.nodes() {
                node.continue_process();
            }
            assert!(
                reading.is_ok(),
                "the reading waited on a stalled node past its timeout"
            );
            let after = masters.routes.load_full().expect("the map is kept");
            assert_eq!(after.map, before, "a late reading changes nothing");
        });
    }
}
