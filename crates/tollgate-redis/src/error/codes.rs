//! Redis's error codes, sorted by what a retry can do about them: the
//! tables the crate README quotes, and the one test of a redis-rs error
//! against them.

/// Redis's error codes that trying again later may fix: the server is
/// busy, loading, failing over, resharding or full. The failure policy
/// answers them. See the table in the crate README.
pub const TRANSIENT_CODES: &[&str] = &[
    // A script has run past busy-reply-threshold; it ends or is killed.
    "BUSY",
    // The data set is being loaded (restart, DEBUG RELOAD, full sync).
    "LOADING",
    // A replica with replica-serve-stale-data no lost its master.
    "MASTERDOWN",
    // The cluster cannot serve the slot (a master is down, slots unassigned).
    "CLUSTERDOWN",
    // A multi-key call met a slot halfway through a migration.
    "TRYAGAIN",
    // The node was demoted to a replica (a failover): the new master serves.
    "READONLY",
    // The same failover met by a call blocked in WAIT (replicas_to_ack):
    // Redis cuts it short ("instance state changed (master -> replica?)").
    // The script ran and its writes are unacknowledged: they are taken back
    // as any WAIT refused (crate::replicas), and the new master serves.
    "UNBLOCKED",
    // maxmemory reached with noeviction: keys expire and free memory (the
    // script hits it at its first write, so nothing was written).
    "OOM",
    // min-replicas-to-write is set and too few replicas are up to date: a
    // replica catches up or comes back (hit at the script's first write,
    // like OOM, so nothing was written).
    "NOREPLICAS",
    // A snapshot failed (disk full, or not writable) and
    // stop-writes-on-bgsave-error is on: writes are refused until one
    // succeeds (hit at the script's first write, so nothing was written).
    "MISCONF",
    // Redirections the cluster client follows itself; seen only when it gave up.
    "MOVED",
    "ASK",
    // The script cache was flushed: the store loads the script, sends the
    // call again and then sends the script's text (`Evalsha::run`); seen
    // only if all of that failed too.
    "NOSCRIPT",
];

/// The [`TRANSIENT_CODES`] that only the node serving the client's slot
/// answers, about that slot, not about itself: the node is up and
/// answering, only the slot is on its way elsewhere. Not `MOVED`: any node
/// answers it for a slot it does not serve, so the cluster client gives up
/// on one from a live node when the client's master is dead (seen in
/// `tollgate-server`'s `dashboard_cluster.rs`: a killed master's first
/// failure was a `MOVED` towards it). Not `CLUSTERDOWN`: a node answers it
/// for every slot once it sees the cluster failed; nor `READONLY`, for
/// every write once demoted: those say the part is gone.
pub const SLOT_CODES: &[&str] = &[
    // A multi-key call met its slot half-way through a migration (from the
    // slot's master, or from the importing one when the master sent it on).
    "TRYAGAIN",
    // The slot's master sends the call on to where the slot is moving (the
    // cluster client follows it; seen only once it gave up).
    "ASK",
    // The script is missing where the call ran although it was just loaded
    // and then sent whole (`Evalsha::run`; an ASK takes the call to a node
    // just added to the cluster, which the cluster client's SCRIPT LOAD,
    // sent to the masters that own slots, never reaches). Not seen since
    // the text is sent; were it, it is about the slot (an audit: counted as
    // the master's failures, its circuit opened for all its clients while
    // one slot moved).
    "NOSCRIPT",
];

/// Redis's error codes that no retry can fix, named for the README's table
/// (any code in neither list is permanent as well): a call across slots
/// (tollgate's keys share one hash tag, so a bug), a key of another type
/// under tollgate's prefix, missing permissions or authentication, a bad command.
pub const PERMANENT_CODES: &[&str] = &[
    "CROSSSLOT",
    "WRONGTYPE",
    "NOPERM",
    "NOAUTH",
    "WRONGPASS",
    "ERR",
    "EXECABORT",
];

/// The [`PERMANENT_CODES`] of credentials or permissions refused, which
/// the operator may mend ([`crate::RedisStoreError::may_heal`]).
pub(super) const CREDENTIAL_CODES: &[&str] = &["NOPERM", "NOAUTH", "WRONGPASS"];

pub(super) fn is_transient_redis(e: &redis::RedisError) -> bool {
    // A reconnection refused for its credentials (the password changed
    // under a running store) comes without a code: no retry fixes it.
    if e.kind() == redis::ErrorKind::AuthenticationFailed {
        return false;
    }
    match e.code() {
        Some(code) => TRANSIENT_CODES.contains(&code),
        // Not an error reply: the connection failed, was refused or dropped,
        // or timed out.
        None => {
            e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || e.is_cluster_error()
                || !matches!(e.retry_method(), redis::RetryMethod::NoRetry)
        }
    }
}
