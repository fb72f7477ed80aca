//! Replicas for the tests: a `redis-server` started as the replica of
//! another (or of a [`super::Relay`] in front of it), and a wait until it
//! has applied what its primary wrote.

use super::{redis_cli, wait_for, RedisServer};
use crate::info::info_number;

impl RedisServer {
    /// A replica of the Redis reached at 127.0.0.1:`primary` (the primary
    /// itself, or a [`super::Relay`] in front of it), started as
    /// [`RedisServer::spawn`] does, once it is in sync (`master_link_status:up`,
    /// waited for, bounded). The primary is first told to sync at once
    /// (`repl-diskless-sync-delay 0`), not after its default 5 s.
    ///
    /// # Panics
    /// As [`RedisServer::spawn`], and when the replica never gets in sync.
    pub fn spawn_replica_of(test: &str, primary: u16) -> Option<Self> {
        redis_cli(primary, &["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
        let port = primary.to_string();
        let replica = Self::spawn_with(test, &["--replicaof", "127.0.0.1", &port])?;
        let in_sync = wait_for(250, || {
            replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
        });
        assert!(in_sync, "the replica of port {primary} never got in sync");
        Some(replica)
    }

    /// Waits (bounded, 5 s) until this replica has applied everything
    /// `primary` wrote so far: Redis replicates asynchronously, so a test
    /// that holds or cuts the stream must first know what got through.
    ///
    /// # Panics
    /// When the primary's offset cannot be read, or the replica is still
    /// behind after 5 s.
    pub fn wait_caught_up_with(&self, primary: &RedisServer) {
        let written = info_number(&primary.cli(&["INFO", "replication"]), "master_repl_offset")
            .expect("the primary's INFO replication has master_repl_offset");
        let caught_up = wait_for(250, || {
            info_number(&self.cli(&["INFO", "replication"]), "slave_repl_offset")
                .is_some_and(|applied| applied >= written)
        });
        assert!(
            caught_up,
            "the replica on port {} never reached offset {written}",
            self.port
        );
    }
}
