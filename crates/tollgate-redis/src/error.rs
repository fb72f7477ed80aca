//! The one error type of the Redis store.

use std::time::Duration;

use tollgate::{StoreError, StoreErrorKind};

mod codes;
mod connect;

use codes::{is_transient_redis, CREDENTIAL_CODES};
pub use codes::{PERMANENT_CODES, SLOT_CODES, TRANSIENT_CODES};
pub(crate) use connect::credentials_refused;

/// Why the Redis store could not decide.
///
/// Each error is either transient (Redis down, slow, restarting, failing
/// over: trying again later may succeed, so a failure policy applies) or
/// permanent (a bad argument, a bad configuration, a script error: retrying
/// cannot help). See [`RedisStoreError::is_transient`]. Cloned when one
/// failed call carried several decisions (see [`crate::RedisStoreConfig::batch_max`]).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// The store's configuration cannot work (e.g. a key prefix with `{`).
    #[error("invalid Redis store configuration: {0}")]
    Config(String),
    /// The private CA given for TLS cannot work: its file cannot be read,
    /// holds no PEM certificate, or is given for a URL without TLS. Told
    /// apart from [`RedisStoreError::Config`] so that a front end can name
    /// the flag or key that gave the CA.
    #[error("invalid Redis store configuration: {0}")]
    Ca(String),
    /// An argument lies outside the range where the Redis store is exact
    /// (Lua numbers are doubles: see [`crate::bounds`]). Checked before any
    /// call, so nothing was written.
    #[error("out of the Redis store's exact range: {0}")]
    OutOfRange(String),
    /// A policy has no Redis script.
    #[error("policy {0:?} has no Redis script")]
    UnsupportedPolicy(String),
    /// The first connection to Redis failed (see
    /// [`crate::RedisStore::connect_to`]): `target` is shown without its
    /// password, and `hint` names the likely cause when it is known.
    #[error("cannot connect to Redis at {target}: {hint}{source}")]
    Connect {
        /// Where, without the password.
        target: String,
        /// The likely cause, for a person (empty when unknown).
        hint: &'static str,
        /// What the Redis client said.
        source: redis::RedisError,
    },
    /// The Redis user logged in but may not do what every decision needs
    /// (found at start-up, [`crate::RedisStore::connect_to`]): `what` it
    /// cannot do, and the ACL rule to `grant` it.
    #[error("the Redis user {what}: grant it {grant} (Redis said: {said})")]
    NotPermitted {
        /// What the user cannot do, e.g. "cannot run EVALSHA".
        what: String,
        /// The ACL rule that allows it, e.g. "+evalsha".
        grant: String,
        /// Redis's refusal.
        said: String,
    },
    /// Redis has no such command (found at start-up): disabled or renamed
    /// by the server's `rename-command`, as managed services do with some.
    /// Every decision would fail with it, answered by the failure policy.
    #[error(
        "Redis has no command {command} (disabled or renamed with rename-command): tollgate \
         needs EVALSHA, SCRIPT LOAD, TIME and PING (Redis said: {said})"
    )]
    MissingCommand {
        /// The command Redis does not know, as Redis names it.
        command: String,
        /// Redis's refusal.
        said: String,
    },
    /// Redis could not be reached or the command failed. Shown without
    /// Redis's script hash and Lua line, so the message is fit to log.
    #[error("Redis error: {}", loggable(.0))]
    Redis(#[from] redis::RedisError),
    /// The tollgate script refused its arguments or a stored state (raised
    /// before its first write, so nothing was changed).
    #[error("the tollgate script refused the call: {0}")]
    Script(String),
    /// Redis did not answer within the per-call timeout.
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
    /// The script started after the call's deadline (Redis was stalled,
    /// paused or overloaded, and ran the call after the caller had given up
    /// on it), so it wrote nothing. See [`crate::deadline`].
    #[error("Redis ran the call {late_by:?} after its deadline (timeout {timeout:?}); nothing was written")]
    DeadlinePassed {
        /// The call's timeout.
        timeout: Duration,
        /// How long after the deadline the script started, on Redis's clock.
        late_by: Duration,
    },
    /// The store did not settle in time ([`crate::RedisStore::settle`]):
    /// calls still waited for Redis's reply, or claims of lost replies or
    /// refunds were still to be sent.
    #[error("{} after {within:?}: what they consumed stays counted", owed(*calls, *claims_or_refunds))]
    Unsettled {
        /// Calls still waiting for their reply then.
        calls: usize,
        /// Whether claims of lost replies or refunds were still to be sent.
        claims_or_refunds: bool,
        /// How long the store was given.
        within: Duration,
    },
    /// The task carrying the call (a decision's, alone or in a batch, a
    /// give-back's, an inspection's or a clock measurement's) was dropped
    /// before it answered (the store's runtime shut down): nothing is known
    /// of it.
    #[error("the task carrying the call was dropped before Redis answered")]
    BatchLost,
    /// The call consumed, but fewer replicas than
    /// [`crate::RedisStoreConfig::replicas_to_ack`] acknowledged its writes
    /// in time (replicas down, lagging or too few): its consumption is being
    /// taken back, and the failure policy answers. See [`crate::replicas`].
    #[error("only {acknowledged} of {replicas} replicas acknowledged the decision within {timeout_ms} ms; its consumption is taken back")]
    NotReplicated {
        /// Replicas that acknowledged (Redis's `WAIT`).
        acknowledged: u64,
        /// Replicas asked for.
        replicas: u32,
        /// How long `WAIT` waited.
        timeout_ms: u64,
    },
    /// The script answered something this crate does not understand (a
    /// different script version under the same name, most likely).
    #[error("unexpected reply from the tollgate script: {0}")]
    Reply(String),
}

impl RedisStoreError {
    /// True when trying again later may succeed (connection lost or refused,
    /// timeout, cluster failing over or loading, script busy, too few
    /// replicas in sync, a snapshot failing): the failure policy applies.
    /// False for errors that retrying cannot fix.
    pub fn is_transient(&self) -> bool {
        match self {
            RedisStoreError::Timeout(_)
            | RedisStoreError::DeadlinePassed { .. }
            | RedisStoreError::Unsettled { .. }
            | RedisStoreError::NotReplicated { .. }
            | RedisStoreError::BatchLost => true,
            RedisStoreError::Redis(e) | RedisStoreError::Connect { source: e, .. } => {
                is_transient_redis(e)
            }
            RedisStoreError::Config(_)
            | RedisStoreError::Ca(_)
            | RedisStoreError::OutOfRange(_)
            | RedisStoreError::UnsupportedPolicy(_)
            | RedisStoreError::Script(_)
            | RedisStoreError::NotPermitted { .. }
            | RedisStoreError::MissingCommand { .. }
            | RedisStoreError::Reply(_) => false,
        }
    }
}

impl RedisStoreError {
    /// True when the operator may mend it while the store runs: a transient
    /// error, or credentials or permissions refused (a password changed, an
    /// ACL cut; the README's table calls those permanent, since no retry of
    /// a decision fixes them). A claim or refund that meets one tries again
    /// for as long as it is kept; one that meets a bug (a wrong type under
    /// the prefix, a script error) stops there.
    pub fn may_heal(&self) -> bool {
        let refused_credentials = |e: &redis::RedisError| {
            e.kind() == redis::ErrorKind::AuthenticationFailed
                || e.code()
                    .is_some_and(|code| CREDENTIAL_CODES.contains(&code))
        };
        match self {
            RedisStoreError::Redis(e) | RedisStoreError::Connect { source: e, .. } => {
                self.is_transient() || refused_credentials(e)
            }
            _ => self.is_transient(),
        }
    }

    /// True when Redis refused the call for the client's slot alone
    /// ([`SLOT_CODES`]): the node was reached and serves its other slots,
    /// so the error says so ([`tollgate::StoreErrorKind::TransientClientOnly`]) and a guard keeps the
    /// circuit of that master closed for its other clients.
    pub fn is_slot_only(&self) -> bool {
        match self {
            RedisStoreError::Redis(e) => e.code().is_some_and(|code| SLOT_CODES.contains(&code)),
            _ => false,
        }
    }
}

impl RedisStoreError {
    /// True when the call may have run in Redis although no reply reached
    /// the store: the connection dropped after the call was sent, or the
    /// reply did not come in time. Such a call is looked up by its receipt
    /// ([`crate::call::lost`]). A refused connection sent nothing, and an error
    /// reply means the script did not run or wrote nothing; except on a
    /// connection that sends a command again after its connection dropped
    /// (`resent`: a cluster's), whose error is its last attempt's: an
    /// earlier attempt may have run whatever the last one met.
    pub(crate) fn outcome_unknown(&self, resent: bool) -> bool {
        match self {
            RedisStoreError::Redis(_) if resent => true,
            RedisStoreError::Redis(e) => {
                (e.is_io_error() || e.is_timeout() || e.is_connection_dropped())
                    && !e.is_connection_refusal()
            }
            RedisStoreError::Timeout(_) => true,
            _ => false,
        }
    }
}

/// A Redis error as text fit to log: Redis's own code and message (e.g.
/// `OOM command not allowed when used memory > 'maxmemory'.`), without the
/// script hash and Lua line that Redis appends to errors raised inside a
/// script (" script: <sha>, on @user_script:<line>.").
pub(crate) fn loggable(e: &redis::RedisError) -> String {
    let text = match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_owned(),
        _ => e.to_string(),
    };
    // Redis quotes an unknown command's arguments: a script's hash and a
    // client's keys, or a script's whole source.
    let cut = [" script: ", ", with args beginning with:"]
        .iter()
        .filter_map(|marker| text.find(marker))
        .min();
    match cut {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

impl From<RedisStoreError> for StoreError {
    fn from(e: RedisStoreError) -> Self {
        let kind = if e.is_slot_only() {
            StoreErrorKind::TransientClientOnly
        } else if e.is_transient() {
            StoreErrorKind::Transient
        } else {
            StoreErrorKind::Permanent
        };
        StoreError::of_kind(kind, e.to_string())
    }
}

/// What [`RedisStoreError::Unsettled`] says was still owed.
fn owed(calls: usize, claims_or_refunds: bool) -> String {
    match (calls, claims_or_refunds) {
        (0, _) => "claims of lost replies or refunds were still to be sent".to_owned(),
        (_, false) => format!("{calls} calls still waited for Redis's reply"),
        (_, true) => format!(
            "{calls} calls still waited for Redis's reply, and claims of lost replies or refunds were still to be sent"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store's error for Redis's error reply `text` (`CODE message`).
    fn replied(text: &str) -> RedisStoreError {
        match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(e)) => RedisStoreError::Redis(e.into()),
            other => panic!("{text}: {other:?}"),
        }
    }

    /// What a claim or refund tries again (until it is no longer kept):
    /// what a retry or the operator may mend, not a bug.
    #[test]
    fn credentials_refused_may_heal_and_bugs_do_not() {
        for text in [
            "WRONGPASS invalid username-password pair or user is disabled.",
            "NOAUTH Authentication required.",
            "NOPERM User alice has no permissions to run the 'evalsha' command",
            "OOM command not allowed when used memory > 'maxmemory'.",
            "LOADING Redis is loading the dataset in memory",
        ] {
            assert!(replied(text).may_heal(), "{text}");
        }
        for text in [
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "ERR user_script:12: attempt to compare nil with number",
            "CROSSSLOT Keys in request don't hash to the same slot",
        ] {
            assert!(!replied(text).may_heal(), "{text}");
        }
    }

    /// A slot on its way to another master is the client's failure, not
    /// its master's: transient (the failure policy answers), and the
    /// master reached, so that its circuit stays closed for the others.
    #[test]
    fn a_slot_being_moved_is_transient_and_its_master_reached() {
        for text in [
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "ASK 3999 127.0.0.1:7001",
            "NOSCRIPT No matching script. Please use EVAL.",
        ] {
            let error = replied(text);
            assert!(error.is_transient() && error.is_slot_only(), "{text}");
            let error = StoreError::from(error);
            assert!(error.is_client_only(), "{text}: {error:?}");
        }
        // The node itself is failing, or cannot be told from the call (a
        // MOVED comes from any node, the client's master maybe dead).
        for text in [
            "MOVED 3999 127.0.0.1:7001",
            "CLUSTERDOWN The cluster is down",
            "READONLY You can't write against a read only replica.",
            "LOADING Redis is loading the dataset in memory",
        ] {
            let error = StoreError::from(replied(text));
            assert_eq!(error.kind, StoreErrorKind::Transient, "{text}: {error:?}");
        }
        let timeout = StoreError::from(RedisStoreError::Timeout(Duration::from_millis(50)));
        assert_eq!(timeout.kind, StoreErrorKind::Transient);
        let refused = StoreError::from(replied("WRONGTYPE Operation against a key"));
        assert_eq!(refused.kind, StoreErrorKind::Permanent);
        for code in SLOT_CODES {
            assert!(TRANSIENT_CODES.contains(code), "{code}");
        }
    }

    /// With `replicas_to_ack`, the `WAIT` behind a call on a master demoted
    /// by a failover is cut short: a failover, transient as `READONLY` is,
    /// and not the client's slot alone (the master is gone).
    #[test]
    fn a_wait_cut_short_by_a_failover_is_transient() {
        let text = "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)";
        let error = replied(text);
        assert!(error.is_transient(), "{error}");
        let error = StoreError::from(error);
        assert_eq!(error.kind, StoreErrorKind::Transient, "{error:?}");
        assert_eq!(error.message, format!("Redis error: {text}"));
    }

    #[test]
    fn unsettled_says_what_was_still_owed() {
        let within = Duration::from_secs(5);
        let say = |calls, claims_or_refunds| {
            RedisStoreError::Unsettled {
                calls,
                claims_or_refunds,
                within,
            }
            .to_string()
        };
        assert_eq!(
            say(0, true),
            "claims of lost replies or refunds were still to be sent after 5s: what they consumed stays counted"
        );
        assert!(say(2, false).starts_with("2 calls still waited for Redis's reply after 5s"));
        assert!(say(1, true).contains("1 calls still waited for Redis's reply, and claims"));
    }
}
