//! The store's settle on shutdown ([`tollgate::Store::settle`]), within one
//! [`SETTLE_WITHIN`] in all, as the README promises. `Prepared::run`
//! settles once the HTTP requests in flight are finished, and again after
//! the gRPC server's last requests (which may have left calls of their own
//! in flight): both waits share one deadline, set by the first, so that a
//! store that never settles (a stalled master) holds the shutdown once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use tokio::time::Instant;
use tollgate::SETTLE_WITHIN;

use crate::Server;

/// The settles of one shutdown, sharing one deadline.
pub(crate) struct Settling {
    server: Server,
    /// [`SETTLE_WITHIN`] after the first settle began.
    deadline: OnceLock<Instant>,
    /// A settle ran out of time with the store still owing calls (and the
    /// guard said so).
    ran_out: AtomicBool,
}

impl Settling {
    /// The settles of `server`'s store, none begun.
    pub(crate) fn new(server: Server) -> Self {
        Self {
            server,
            deadline: OnceLock::new(),
            ran_out: AtomicBool::new(false),
        }
    }

    /// Waits for the store to settle until the deadline, which the first
    /// call sets ([`SETTLE_WITHIN`] from now); once it has passed, the
    /// store is only asked whether it is settled (what is left is logged),
    /// unless an earlier settle already ran out of time and said so.
    pub(crate) async fn settle(&self) {
        let now = Instant::now();
        let deadline = *self.deadline.get_or_init(|| now + SETTLE_WITHIN);
        let within = deadline.saturating_duration_since(now);
        if within.is_zero() && self.ran_out.load(Ordering::Relaxed) {
            return;
        }
        if !self.server.settle_store_within(within).await {
            self.ran_out.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::Duration;

    use tollgate::{
        ManualClock, MemoryBackend, Plan, PlanDecision, Store, StoreError, StoreFuture,
        SETTLE_WITHIN,
    };
    use tollgate_config::{Config, StoreHandle};

    use crate::{Prepared, Server};

    /// A store that never settles (Redis stalled with calls in flight): each
    /// [`Store::settle`] waits out all it was given, on tokio's clock, and
    /// says what is still owed. It keeps how long each was asked to wait.
    #[derive(Default)]
    struct NeverSettles {
        memory: MemoryBackend,
        asked: Mutex<Vec<Duration>>,
    }

    impl Store for NeverSettles {
        fn check<'a>(
            &'a self,
            plan: &'a Plan,
            client: &'a str,
            now_ms: u64,
            cost: u32,
        ) -> StoreFuture<'a, PlanDecision> {
            self.memory.check(plan, client, now_ms, cost)
        }

        fn settle(&self, within: Duration) -> StoreFuture<'_, ()> {
            (self.asked.lock())
                .unwrap_or_else(PoisonError::into_inner)
                .push(within);
            StoreFuture::new(async move {
                tokio::time::sleep(within).await;
                Err(StoreError::transient("1 call still waited for its reply"))
            })
        }
    }

    /// The README's promise: on shutdown the store is waited for at most
    /// `SETTLE_WITHIN` in all, also by `Prepared::run`, which settles once
    /// after the HTTP requests and again after the gRPC server's (it asked
    /// for the whole `SETTLE_WITHIN` twice: 10 s with a stalled master).
    /// Tokio's clock is paused: each wait passes at once, in full.
    #[tokio::test(start_paused = true)]
    async fn a_store_that_never_settles_is_waited_for_one_settle_within_in_all() {
        let store = Arc::new(NeverSettles::default());
        let server = Server::new(
            Config::embedded_default(),
            StoreHandle::Shared(store.clone()),
            Arc::new(ManualClock::new(1_000)),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let prepared = Prepared {
            addrs: vec![listener.local_addr().expect("an address")],
            listeners: vec![listener],
            server,
            grpc_listener: None,
            hangups: None,
        };
        prepared.run(async {}).await.expect("ran");
        // One wait, all of it; once it ran out, the store is not asked
        // again with nothing left (its guard warned a second time, "after
        // 0ns", at every such shutdown).
        let asked = store.asked.lock().unwrap().clone();
        assert_eq!(asked, vec![SETTLE_WITHIN]);
    }
}
