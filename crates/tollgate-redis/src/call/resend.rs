//! A call sent once more after its connection turned out dropped, on one
//! node ([`resend_after`]), and what it answers when that fails too.

use std::sync::Arc;

use super::{script_error, Call, Scripts};
use crate::connection::Connection;
use crate::RedisStoreError;

impl Scripts {
    /// The error to answer `calls` with when, sent again after their
    /// connection `dropped`, they failed `again`: Redis's own error reply
    /// when it gave one (`NOAUTH`, `LOADING`, `NOPERM`, ...: the cause, and
    /// its kind for the failure policy and the breaker, where the first
    /// error said "broken pipe"), with the claims the first attempt needs
    /// queued here, since an error reply asks for none; otherwise the first
    /// error, whose claims its caller's answer queues
    /// ([`RedisStoreError::outcome_unknown`]).
    pub(super) fn resend_failed(
        self: &Arc<Self>,
        calls: &[&Call],
        dropped: redis::RedisError,
        again: redis::RedisError,
    ) -> RedisStoreError {
        if again.code().is_none() {
            return script_error(dropped);
        }
        for call in calls {
            self.lost.push(self, call);
        }
        script_error(again)
    }
}

/// Whether a call whose connection turned out dropped is sent once more,
/// on the new one: on one node, whose connection manager never resends
/// (a cluster's client does, [`Connection::resends`]). A connection that
/// died while idle (Redis restarted) fails the first call sent on it, which
/// never reached any Redis; the failure policy answered it, after every
/// restart, on every connection. Sent again, a call that did run before
/// the connection dropped runs once all the same (its receipt answers it
/// again), and one that now starts past its deadline
/// ([`started_late`]) writes nothing: it keeps the first error, so that an
/// attempt that may have run is claimed ([`crate::call::lost`]).
pub(crate) fn resend_after(connection: &Connection, error: &redis::RedisError) -> bool {
    !connection.resends() && error.is_connection_dropped()
}

/// Whether a decision's reply says it started past its deadline and wrote
/// nothing (`{ redis_time_us, -1 }`).
pub(super) fn started_late(reply: &[i64]) -> bool {
    reply.get(1) == Some(&-1)
}
