//! One Redis node's connection: a redis-rs `ConnectionManager`, which
//! reconnects by itself after a lost connection, and which this module
//! replaces when its reconnection was refused at login.
//!
//! Why: the manager keeps the outcome of its last reconnection, and starts
//! another only when that one failed with an I/O error (redis-rs 1.8,
//! `aio/connection_manager.rs`, `reconnect_if_io_error`). A reconnection
//! that reached Redis but was refused at login (the password changed, the
//! ACL user not yet added back after a restart, the database refused) is
//! kept for good: every later call gets its error, even once the
//! credentials work again. So a call that meets such a refusal puts a new
//! manager in its place, which connects at the next call (the circuit
//! breaker's probe, or any call: a permanent error does not open it), at
//! most once per [`LOGIN_RETRY_US`]: calls keep coming while the breaker
//! stays closed, and each new manager is a new connection and login (a TLS
//! handshake, an entry in Redis's ACL log). The refusal sent nothing, so no
//! call is charged twice; the call that met it fails, as it would have.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Cmd, FromRedisValue, RedisError, RedisResult};
use tokio::runtime::Handle;
use tollgate::{MonotonicClock, SystemMonotonicClock};

/// The shortest time between two logins after a refused one (µs): a
/// password being rotated is let in within a quarter of a second, and a
/// refusal that never heals costs four connections a second, not one per
/// round trip.
pub(crate) const LOGIN_RETRY_US: u64 = 250_000;

/// One node's connection, replaced when refused at login.
pub(crate) struct Node {
    client: Client,
    config: ConnectionManagerConfig,
    /// Where a replacing manager is made (its tasks run there):
    /// `connection::home`.
    home: Handle,
    monotonic: SystemMonotonicClock,
    /// Read on every call without a lock; replaced under `replacing`.
    current: ArcSwap<Current>,
    replacing: Mutex<()>,
}

/// The manager in use, and how many were replaced before it: a call
/// replaces only the manager it used, so that calls refused together
/// replace it once.
struct Current {
    manager: ConnectionManager,
    generation: u64,
    /// When it was made (the node's monotonic µs).
    made_us: u64,
}

impl Node {
    /// A node whose connection is `manager`, made of `client` and `config`.
    pub(crate) fn new(
        client: Client,
        config: ConnectionManagerConfig,
        manager: ConnectionManager,
        home: Handle,
    ) -> Self {
        Self {
            client,
            config,
            home,
            monotonic: SystemMonotonicClock::new(),
            current: ArcSwap::from_pointee(Current {
                manager,
                generation: 0,
                made_us: 0,
            }),
            replacing: Mutex::new(()),
        }
    }

    /// Puts a new manager, not connected yet, in the place of the one of
    /// `generation`, unless another call already did, or that one was made
    /// less than [`LOGIN_RETRY_US`] ago.
    fn replace(&self, generation: u64) {
        // Nothing is left half written by a panic under this lock.
        let _replacing = self
            .replacing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now_us = self.monotonic.now_us();
        let current = self.current.load();
        if current.generation != generation
            || (generation > 0 && now_us.saturating_sub(current.made_us) < LOGIN_RETRY_US)
        {
            return;
        }
        let _at_home = self.home.enter();
        // Cannot fail with this configuration (no push sender), but if it
        // did, the manager in place stays: calls get its error as before.
        if let Ok(manager) =
            ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone())
        {
            self.current.store(Arc::new(Current {
                manager,
                generation: generation + 1,
                made_us: now_us,
            }));
        }
    }

    /// Runs `run` on the node's connection, and once more when its
    /// connection was refused: after an outage the manager answers the
    /// first call with its last failed reconnect, and only then starts a
    /// new one. A refused connection sent nothing, so one retry cannot
    /// charge twice, and it lets the first call after Redis is back (the
    /// breaker's probe) succeed. A call refused at login replaces the
    /// manager (see the module's documentation). Every command on one node
    /// goes through here: the scripts, and the `TIME` a store made while
    /// Redis was down reads before its first script.
    pub(crate) async fn run<T, F, R>(&self, run: F) -> RedisResult<T>
    where
        F: Fn(ConnectionManager) -> R,
        R: Future<Output = RedisResult<T>>,
    {
        let (manager, generation) = {
            let current = self.current.load();
            (current.manager.clone(), current.generation)
        };
        let answer = match run(manager.clone()).await {
            Err(e) if e.is_connection_refusal() => run(manager).await,
            answer => answer,
        };
        if matches!(&answer, Err(e) if refused_at_login(e)) {
            self.replace(generation);
        }
        answer
    }

    /// `command`'s reply, through [`Node::run`].
    pub(crate) async fn query<T: FromRedisValue>(&self, command: &Cmd) -> RedisResult<T> {
        self.run(|mut c| async move { command.query_async(&mut c).await })
            .await
    }
}

/// Whether Redis refused the connection at login, which the manager never
/// tries again: the user name or password refused (the one definition:
/// `error::connect::credentials_refused`), or the database (`SELECT`).
pub(crate) fn refused_at_login(e: &RedisError) -> bool {
    crate::error::credentials_refused(e) || e.to_string().contains("refused to switch database")
}
