//! Replicas for the tests: a `redis-server` started as the replica of
//! another (or of a [`super::Relay`] in front of it), and a wait until it
//! has applied what its primary wrote.

use std::io::Write;
use std::process::{Command, Stdio};

use super::{redis_cli, wait_for, RedisServer};
use crate::info::info_number;

impl RedisServer {
    /// A replica of the Redis reached at 127.0.0.1:`primary` (the primary
    /// itself, or a [`super::Relay`] in front of it), started as
    /// [`RedisServer::spawn`] does, once it is in sync: its link is up
    /// (`master_link_status:up`), it acknowledges what the primary writes,
    /// as `WAIT` counts it, and the primary counts everything it has sent
    /// as acknowledged. For up to about a second after the primary lists it
    /// as online, a `WAIT` gets no acknowledgement from it (seen with Redis
    /// 7.0), which a test of `replicas_to_ack` would take for a missing
    /// replica. Each waited for, bounded. The primary is first told to sync
    /// at once (`repl-diskless-sync-delay 0`), not after its default 5 s.
    ///
    /// # Panics
    /// As [`RedisServer::spawn`], and when the replica never gets in sync.
    pub fn spawn_replica_of(test: &str, primary: u16) -> Option<Self> {
        redis_cli(primary, &["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
        let port = primary.to_string();
        let replica = Self::spawn_with(test, &["--replicaof", "127.0.0.1", &port])?;
        let in_sync = wait_for(100, || {
            replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
                && acknowledged(primary)
        })
            // The probe's `WAIT` left the primary's offset a `REPLCONF
            // GETACK` ahead of what the replica acknowledged, until its next
            // acknowledgement (one a second): a test that then holds the
            // stream would see a `WAIT` with nothing written block for its
            // timeout.
            && wait_for(100, || acked_all(primary, replica.port));
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

/// Whether a replica of the Redis at 127.0.0.1:`primary` acknowledges, within
/// 100 ms, a message published on it (propagated to its replicas, as a
/// write is, but leaving no key behind): `PUBLISH` then `WAIT 1 100`, on one
/// connection, as a decision sent with `replicas_to_ack` waits.
fn acknowledged(primary: u16) -> bool {
    let Ok(mut cli) = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &primary.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    let sent = cli.stdin.take().is_some_and(|mut stdin| {
        stdin
            .write_all(b"PUBLISH tollgate-test:replica-probe 1\nWAIT 1 100\n")
            .is_ok()
    });
    let Ok(output) = cli.wait_with_output() else {
        return false;
    };
    sent && String::from_utf8_lossy(&output.stdout).lines().last() == Some("1")
}

/// Whether the Redis at 127.0.0.1:`primary` counts its replica on port
/// `replica` as having acknowledged everything it has sent
/// (`slaveN:...,port=<replica>,...,offset=<acknowledged>` against
/// `master_repl_offset` in `INFO replication`).
fn acked_all(primary: u16, replica: u16) -> bool {
    let info = redis_cli(primary, &["INFO", "replication"]);
    let port = format!(",port={replica},");
    let acknowledged = info
        .lines()
        .find(|line| line.starts_with("slave") && line.contains(&port))
        .and_then(|line| line.split(",offset=").nth(1))
        .and_then(|rest| rest.split(',').next())
        .and_then(|offset| offset.trim().parse::<u64>().ok());
    match (acknowledged, info_number(&info, "master_repl_offset")) {
        (Some(acknowledged), Some(sent)) => acknowledged >= sent,
        _ => false,
    }
}
