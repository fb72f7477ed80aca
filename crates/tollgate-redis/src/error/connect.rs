//! Why a first connection to Redis failed, as far as the Redis client
//! says: a hint for a person ([`RedisStoreError::Connect`]'s), and whether
//! Redis may simply not be up yet ([`RedisStoreError::is_not_up_yet`]).

use super::{RedisStoreError, TRANSIENT_CODES};

impl RedisStoreError {
    /// The first connection to `target` failed with `source`.
    pub(crate) fn connect(target: &crate::RedisTarget, source: redis::RedisError) -> Self {
        let tls = target.nodes().iter().any(|n| n.starts_with("rediss://"));
        Self::Connect {
            target: target.redacted(),
            hint: connect_hint(&source, tls),
            source,
        }
    }
}

/// Why a first connection failed, as far as the Redis client says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnectCause {
    WrongCredentials,
    UntrustedCertificate,
    Refused,
    /// No answer in time, the connection made or not.
    TimedOut,
    /// The server reset the connection before answering anything.
    Reset,
    Other,
}

impl ConnectCause {
    fn of(e: &redis::RedisError) -> Self {
        let text = e.to_string();
        // A cluster's client gives its seeds' I/O error as the detail of
        // its own ("Failed to create initial connections - Io: timed out").
        let io_detail = e.detail().filter(|_| e.is_io_error());
        if credentials_refused(e) {
            Self::WrongCredentials
        } else if text.contains("certificate") || text.contains("UnknownIssuer") {
            Self::UntrustedCertificate
        } else if e.is_connection_refusal() {
            Self::Refused
        } else if e.is_timeout() || io_detail == Some("timed out") {
            Self::TimedOut
        } else if e.is_io_error() && text.to_lowercase().contains("connection reset") {
            Self::Reset
        } else {
            Self::Other
        }
    }
}

/// Whether Redis refused the user name or password: `AUTH` refused on
/// RESP2 (redis-rs's `AuthenticationFailed`), `HELLO` refused on RESP3
/// (`WRONGPASS`), or a command sent without logging in (`NOAUTH`). A
/// cluster's client reports its seeds' refusal as an I/O error, "Failed to
/// create initial connections", with the refusal only in its text: "... -
/// Io: Password authentication failed - AuthenticationFailed". The one
/// definition, for a first connection and a reconnection alike
/// (`node::refused_at_login`).
pub(crate) fn credentials_refused(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
        || ["AuthenticationFailed", "WRONGPASS", "NOAUTH"]
            .iter()
            .any(|refusal| text.contains(refusal))
}

/// The likely cause of a failed first connection, in words a person acts
/// on; `tls`: the URL is `rediss://`. A TLS handshake sent to a port that
/// does not speak TLS goes unanswered (Redis waits for the end of a line
/// that never comes); plain text sent to a TLS port is answered by a reset.
/// Both may have other causes (a slow network; a proxy with no server
/// behind it), so they are named as a question, not as the answer.
fn connect_hint(e: &redis::RedisError, tls: bool) -> &'static str {
    match (ConnectCause::of(e), tls) {
        (ConnectCause::WrongCredentials, _) => {
            "wrong user name or password (check the URL's user:password@); "
        }
        (ConnectCause::UntrustedCertificate, _) => {
            "the server's TLS certificate is not trusted (give its CA: [store] tls_ca or --redis-ca); "
        }
        (ConnectCause::Refused, _) => {
            "nothing accepts connections there (is Redis running, and is it this port?); "
        }
        (ConnectCause::TimedOut, false) => {
            "no answer in time (is the address right, and is Redis reachable?); "
        }
        (ConnectCause::TimedOut, true) => {
            "no answer in time (does this port speak TLS? rediss:// needs Redis's tls-port, redis:// a plain one; is the address right, and is Redis reachable?); "
        }
        (ConnectCause::Reset, false) => {
            "the connection was reset before Redis answered (does this port speak TLS only? then use rediss://); "
        }
        (ConnectCause::Reset, true) | (ConnectCause::Other, _) => "",
    }
}

impl RedisStoreError {
    /// True for a first connection that failed in a way waiting may fix:
    /// nothing answered (refused, timed out, or the connection broke before
    /// Redis said anything: which is also what a port that does not speak
    /// the URL's TLS or plain text looks like, see `connect_hint`), Redis answered with a transient error (still
    /// loading its data set after a restart, or another of
    /// [`TRANSIENT_CODES`]), or a cluster's seeds answered but serve no
    /// slot yet (the cluster is being formed). Redis may simply not be up
    /// yet, so a service may start and let its failure policy answer until
    /// it is. False for a wrong password or an untrusted certificate, which
    /// no wait can fix, and for every other error.
    pub fn is_not_up_yet(&self) -> bool {
        match self {
            RedisStoreError::Connect { source, .. } => match ConnectCause::of(source) {
                ConnectCause::Refused | ConnectCause::TimedOut | ConnectCause::Reset => true,
                ConnectCause::Other => match source.code() {
                    Some(code) => TRANSIENT_CODES.contains(&code),
                    // A cluster whose seeds answer but serve no slot yet
                    // (its nodes not joined): redis-rs finds no connection.
                    None => {
                        source.is_io_error()
                            || source.kind() == redis::ErrorKind::ClusterConnectionNotFound
                    }
                },
                ConnectCause::WrongCredentials | ConnectCause::UntrustedCertificate => false,
            },
            _ => false,
        }
    }
}
