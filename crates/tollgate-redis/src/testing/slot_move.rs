//! A slot moving from one master to another, step by step, as a resharding
//! moves it: marked importing and migrating, its keys sent a few at a time
//! with `MIGRATE`, then given to its new owner. Between the steps a client's
//! keys may lie half on each master, which is where a test stops it.

use super::cluster::{client_slot, RedisCluster};
use super::{wait_for, RedisServer};

/// One slot on its way from the master `from` to the master `to` (indexes
/// in [`RedisCluster::nodes`]).
pub struct SlotMove<'a> {
    cluster: &'a RedisCluster,
    slot: String,
    from: usize,
    to: usize,
}

impl RedisCluster {
    /// Starts moving the slot of `client`'s keys to the master `to`: the
    /// target imports it and the source migrates it (`CLUSTER SETSLOT`), and
    /// no key has moved yet. A client that asks the source for a key it no
    /// longer has is sent to the target (`ASK`); a command on keys of which
    /// only some have moved is refused (`TRYAGAIN`).
    ///
    /// # Panics
    /// When the client has no keys, or a step is refused.
    pub fn start_moving_slot_of(&self, client: &str, to: usize) -> SlotMove<'_> {
        let from = self.node_holding(client).expect("the client has keys");
        let slot = client_slot(client).to_string();
        let (source, target) = (&self.nodes()[from], &self.nodes()[to]);
        ok(target.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source.node_id()]));
        ok(source.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target.node_id()]));
        SlotMove {
            cluster: self,
            slot,
            from,
            to,
        }
    }

    /// Moves the slot of `client`'s keys, with its keys, to the master
    /// `to` (an index in [`RedisCluster::nodes`]), as a resharding does
    /// ([`RedisCluster::start_moving_slot_of`], then [`SlotMove::finish`]).
    /// Clients that cached the old owner meet `MOVED` there.
    ///
    /// # Panics
    /// When the client has no keys, or a step is refused.
    pub fn move_slot_of(&self, client: &str, to: usize) {
        self.start_moving_slot_of(client, to).finish();
    }
}

impl SlotMove<'_> {
    /// The slot's keys still on the source.
    pub fn keys_left(&self) -> Vec<String> {
        let keys = self
            .source()
            .cli(&["CLUSTER", "GETKEYSINSLOT", &self.slot, "1000"]);
        keys.lines()
            .filter(|key| !key.is_empty())
            .map(String::from)
            .collect()
    }

    /// Sends `keys` (of the slot) to the target in one `MIGRATE`.
    ///
    /// # Panics
    /// When `MIGRATE` is refused (e.g. the target already has such a key).
    pub fn migrate(&self, keys: &[&str]) {
        let port = self.target().port().to_string();
        let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        migrate.extend(keys);
        ok(self.source().cli(&migrate));
    }

    /// Sends the keys left, gives the slot to the target on every master,
    /// and waits (bounded) until every master says so.
    ///
    /// # Panics
    /// When a step is refused, or the masters never agree.
    pub fn finish(self) {
        let keys = self.keys_left();
        if !keys.is_empty() {
            self.migrate(&keys.iter().map(String::as_str).collect::<Vec<_>>());
        }
        let target_id = self.target().node_id();
        let cluster = self.cluster;
        // The target first, then the source, then the others, as Redis's
        // documentation of `CLUSTER SETSLOT` asks: the target raises its
        // config epoch before anyone points clients at it, and the source
        // stops answering for the slot before the others learn of the move.
        let others = cluster
            .masters()
            .into_iter()
            .filter(|&master| master != self.to && master != self.from);
        for master in [self.to, self.from].into_iter().chain(others) {
            ok(cluster.nodes()[master]
                .cli(&["CLUSTER", "SETSLOT", &self.slot, "NODE", &target_id]));
        }
        let moved = wait_for(500, || {
            cluster.masters().iter().all(|&master| {
                let reply =
                    cluster.nodes()[master].cli(&["CLUSTER", "COUNTKEYSINSLOT", &self.slot]);
                (reply.trim() != "0") == (master == self.to)
            })
        });
        assert!(moved, "slot {} never moved to node {}", self.slot, self.to);
    }

    fn source(&self) -> &RedisServer {
        &self.cluster.nodes()[self.from]
    }

    fn target(&self) -> &RedisServer {
        &self.cluster.nodes()[self.to]
    }
}

fn ok(reply: String) {
    assert_eq!(reply.trim(), "OK", "{reply}");
}
