//! A Redis Cluster of real `redis-server` processes on loopback for tests:
//! masters, optional replicas, optional TLS (one private CA for every node,
//! the cluster bus and replication over TLS too) and extra arguments (e.g.
//! an ACL user), killed on drop.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use super::{redis_available, wait_for, RedisServer, TestCerts, NEXT_DIR};
use crate::info::info_number;

/// What cluster to start. The default is three masters, no replicas, plain TCP.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Masters (each owns a third, or its share, of the slots); at least 3.
    pub masters: usize,
    /// Replicas of each master (`--cluster-replicas`).
    pub replicas_per_master: usize,
    /// TLS only, with certificates from one private CA the cluster makes.
    pub tls: bool,
    /// Extra `redis-server` arguments for every node, e.g. an ACL user:
    /// `["--user", "alice", "on", ">pw", "~*", "&*", "+@all"]`.
    pub extra: Vec<String>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            masters: 3,
            replicas_per_master: 0,
            tls: false,
            extra: Vec::new(),
        }
    }
}

impl ClusterOptions {
    /// Three masters, no replicas, that keep serving their own slots while
    /// one master is down or stalled (`--cluster-require-full-coverage no`),
    /// and mark a silent master failed after one second
    /// (`--cluster-node-timeout 1000`): for the drills that take one down.
    pub fn one_master_may_fail() -> Self {
        Self {
            extra: [
                "--cluster-require-full-coverage",
                "no",
                "--cluster-node-timeout",
                "1000",
            ]
            .map(String::from)
            .to_vec(),
            ..Self::default()
        }
    }
}

/// The hash tag every key of `client` carries, `{c:<client>}` with the id
/// escaped as the store escapes it ([`crate::keys`]): to find a client's
/// keys among a node's.
pub fn client_tag(client: &str) -> String {
    let mut tag = String::from("{c:");
    crate::keys::escape_into(client.as_bytes(), &mut tag);
    tag.push('}');
    tag
}

/// The cluster slot of `client`'s keys, as Redis computes it
/// (`crate::slots`), from their hash tag.
pub fn client_slot(client: &str) -> u16 {
    crate::slots::slot_of(client_tag(client).as_bytes())
}

/// A Redis Cluster on loopback, killed on drop.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// What the cluster was started with, for a node added later.
    options: ClusterOptions,
    /// The certificates' directory of a TLS cluster, removed on drop.
    certs_dir: Option<PathBuf>,
}

impl RedisCluster {
    /// Three masters, no replicas, plain TCP: [`RedisCluster::spawn_with`]
    /// with the default [`ClusterOptions`].
    ///
    /// # Panics
    /// As [`RedisCluster::spawn_with`].
    pub fn spawn(test: &str) -> Option<Self> {
        Self::spawn_with(test, &ClusterOptions::default())
    }

    /// Starts `redis-server --cluster-enabled yes` nodes, joins them with
    /// `redis-cli --cluster create` and waits (bounded) until every node
    /// reports `cluster_state:ok` and every replica is attached. `None` when
    /// Redis is not installed (a panic when it is required).
    ///
    /// # Panics
    /// When the cluster does not form.
    pub fn spawn_with(test: &str, options: &ClusterOptions) -> Option<Self> {
        if !redis_available(test) {
            return None;
        }
        let certs_dir = options.tls.then(|| {
            std::env::temp_dir().join(format!(
                "tollgate-cluster-certs-{}-{}",
                std::process::id(),
                NEXT_DIR.fetch_add(1, Ordering::Relaxed)
            ))
        });
        let certs = certs_dir.as_deref().map(TestCerts::generate);
        let count = options.masters * (1 + options.replicas_per_master);
        let mut nodes = Vec::with_capacity(count);
        for _ in 0..count {
            nodes.push(spawn_node(test, options, certs.clone())?);
        }
        let replicas = options.replicas_per_master.to_string();
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())));
        args.extend(["--cluster-replicas", &replicas, "--cluster-yes"].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let created = nodes[0].cli(&args);
        let cluster = Self {
            nodes,
            options: options.clone(),
            certs_dir,
        };
        let ok = wait_for(500, || cluster.is_ok(options.masters));
        assert!(ok, "{test}: the cluster did not become ok: {created}");
        Some(cluster)
    }

    /// Starts one more node, with the cluster's options, and joins it as a
    /// master that owns no slot yet (`redis-cli --cluster add-node`), as an
    /// operator growing the cluster does; waits (bounded) until every node
    /// knows it and it sees the cluster whole. Returns its index in [`RedisCluster::nodes`].
    ///
    /// # Panics
    /// When the node does not start or join.
    pub fn add_empty_master(&mut self, test: &str) -> usize {
        let node = spawn_node(test, &self.options, self.certs().cloned())
            .expect("redis-server is installed");
        let joining = format!("127.0.0.1:{}", node.port());
        let existing = format!("127.0.0.1:{}", self.nodes[0].port());
        let added = self.nodes[0].cli(&["--cluster", "add-node", &joining, &existing]);
        let id = node.node_id();
        self.nodes.push(node);
        let known = wait_for(500, || {
            self.nodes.iter().all(|n| {
                let nodes = n.cli(&["CLUSTER", "NODES"]);
                let ok = n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok");
                ok && nodes
                    .lines()
                    .any(|line| line.starts_with(&id) && line.contains("connected"))
            })
        });
        assert!(known, "{test}: the new node never joined: {added}");
        self.nodes.len() - 1
    }

    /// Every node says `cluster_state:ok`, and `masters` of them are masters
    /// whose replicas (if any) are all attached.
    fn is_ok(&self, masters: usize) -> bool {
        let all_ok = self
            .nodes
            .iter()
            .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
        let replicas_up = self
            .nodes
            .iter()
            .filter(|n| n.cli(&["ROLE"]).starts_with("slave"))
            .all(|n| {
                n.cli(&["INFO", "replication"])
                    .contains("master_link_status:up")
            });
        all_ok && replicas_up && self.masters().len() == masters
    }

    /// The nodes' URLs (`redis://` or, with TLS, `rediss://`).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes, masters and replicas.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes, to kill and restart one.
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// The indexes (into [`RedisCluster::nodes`]) of the nodes that are
    /// masters now (a failover changes them).
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].pid().is_some())
            .filter(|&i| self.nodes[i].cli(&["ROLE"]).starts_with("master"))
            .collect()
    }

    /// The index of the first node (in [`RedisCluster::nodes`]) holding
    /// keys of `client` (by [`client_tag`]): where a client the store has
    /// decided for keeps its state.
    pub fn node_holding(&self, client: &str) -> Option<usize> {
        let tag = client_tag(client);
        (0..self.nodes.len()).find(|&node| self.nodes[node].cli(&["KEYS", "*"]).contains(&tag))
    }

    /// The index of the master holding `client`'s keys (its replicas hold
    /// them too).
    ///
    /// # Panics
    /// When no master holds them.
    pub fn master_holding(&self, client: &str) -> usize {
        let tag = client_tag(client);
        self.masters()
            .into_iter()
            .find(|&master| self.nodes[master].cli(&["KEYS", "*"]).contains(&tag))
            .expect("a master holds the client's keys")
    }

    /// The index of a replica of the master at `master` (by the master's
    /// port, which each replica's `ROLE` names).
    ///
    /// # Panics
    /// When the master has no replica.
    pub fn replica_of(&self, master: usize) -> usize {
        let port = self.nodes[master].port().to_string();
        (0..self.nodes.len())
            .find(|&i| {
                let role = self.nodes[i].cli(&["ROLE"]);
                let lines: Vec<&str> = role.lines().collect();
                lines.first() == Some(&"slave") && lines.get(2) == Some(&port.as_str())
            })
            .expect("the master has a replica")
    }

    /// Whether every node has heard of every other's last configuration:
    /// the same current epoch (`CLUSTER INFO`), and the same config epoch
    /// and slots for each master (`CLUSTER NODES`). `redis-cli --cluster
    /// check` compares only the slots. A master that takes a slot raises
    /// its config epoch above the highest it has heard of; had it not yet
    /// heard of the old owner's last raise, it would claim the slot with
    /// the lower epoch, and a message from the old owner sent before the
    /// move would take the slot back (and drop its keys).
    pub fn epochs_agree(&self) -> bool {
        let mut views = self
            .nodes
            .iter()
            .filter(|node| node.pid().is_some())
            .map(|node| {
                let info = node.cli(&["CLUSTER", "INFO"]);
                let current = info_number(&info, "cluster_current_epoch");
                (current, masters_view(&node.cli(&["CLUSTER", "NODES"])))
            });
        let Some(first) = views.next() else {
            return true;
        };
        first.0.is_some() && views.all(|view| view == first)
    }

    /// The certificates of a TLS cluster (one CA for every node).
    pub fn certs(&self) -> Option<&TestCerts> {
        self.nodes.first().and_then(RedisServer::certs)
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        if let Some(dir) = &self.certs_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Starts one cluster node with `options`' arguments (TLS with `certs`).
fn spawn_node(
    test: &str,
    options: &ClusterOptions,
    certs: Option<TestCerts>,
) -> Option<RedisServer> {
    let mut extra = vec![
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
    ];
    if certs.is_some() {
        extra.extend(["--tls-cluster", "yes", "--tls-replication", "yes"]);
    }
    extra.extend(options.extra.iter().map(String::as_str));
    RedisServer::spawn_inner(test, &extra, certs.map(Some))
}

/// A node's view of the masters from its `CLUSTER NODES`: each master's id,
/// config epoch and slots, sorted; a slot being moved (`[..]`, which only
/// the node itself shows) left out.
fn masters_view(nodes: &str) -> Vec<String> {
    let mut view: Vec<String> = nodes
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|fields| fields.len() >= 8 && fields[2].contains("master"))
        .map(|fields| {
            let slots: Vec<&str> = fields[8..]
                .iter()
                .copied()
                .filter(|slot| !slot.starts_with('['))
                .collect();
            format!("{} {} {}", fields[0], fields[6], slots.join(" "))
        })
        .collect();
    view.sort();
    view
}
