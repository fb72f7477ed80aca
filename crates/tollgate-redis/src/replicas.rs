//! Decisions answered only once replicas hold them
//! ([`crate::RedisStoreConfig::replicas_to_ack`]).
//!
//! Redis replicates asynchronously: a master that dies before its replica
//! received a decision's writes is replaced by a replica that never saw
//! them, and the client's consumption is lost (BENCHMARKS.md, "An unplanned
//! failover", and "Decisions a replica holds before they are answered": 4
//! of 8 drills with the replicas stalled lost 264 to 783 allowed uses; with
//! `replicas_to_ack` = 1, none of 8 lost any).
//! With `replicas_to_ack` = n, every script call is sent in one pipeline
//! with `WAIT n timeout` behind it, on the same connection, so the `WAIT`
//! counts the replicas that acknowledged that call's writes (and any earlier
//! ones of the connection). A call that consumed, answered with fewer than
//! n acknowledgements, is not answered as allowed: its consumption is taken
//! back ([`crate::call::refund`]) and its caller gets the transient
//! [`crate::RedisStoreError::NotReplicated`], which the failure policy answers (or
//! Redis's refusal of the `WAIT`, `NOPERM` for an ACL user without it). A
//! call that consumed nothing (a rejection, a cost of 0, a call that
//! started too late) is answered as it is: losing it in a failover loses no
//! consumption. (A rejection may have counted a consumption not yet taken
//! back: towards admitting less, as with any refund still on its way.)
//!
//! What this guarantees, and what not: an allowed decision is on the
//! master and on n replicas. A failover to one of those replicas keeps it;
//! Redis Cluster lets the replica with the most replicated data stand for
//! election first, and with n equal to the number of replicas every
//! candidate has it. A failover to a replica that did not acknowledge (n
//! smaller than the replicas, an operator's forced takeover) can still lose
//! it, as `WAIT`'s own documentation says: it makes loss unlikely, not
//! impossible. The refund of a call not acknowledged is itself replicated
//! asynchronously; losing it leaves the consumption counted, towards
//! admitting less.

/// How many replicas must acknowledge a call's writes, and how long
/// Redis's `WAIT` waits for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaWait {
    /// At least 1.
    pub(crate) replicas: u32,
    /// At least 1 (`WAIT`'s 0 would wait for ever).
    pub(crate) timeout_ms: u64,
}

/// What the `WAIT` behind a script call answered, if one was sent.
#[derive(Debug)]
pub(crate) enum Acked {
    /// No `WAIT` was sent.
    NotAsked,
    /// This many replicas acknowledged the call's writes.
    Replicas(u64),
    /// Redis refused the `WAIT` (a user whose ACL lacks it): no replica is
    /// known to hold the call's writes.
    Refused(redis::RedisError),
}
