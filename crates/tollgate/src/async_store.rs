//! The async boundary between a service and wherever limit state lives.
//!
//! The core is synchronous; services (HTTP, gRPC, middleware) talk to a store
//! through this one async trait, implemented here for memory and in
//! `tollgate-redis` for Redis, so that no decision logic is written twice.

use std::future::{Future, Ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::inspect::Inspection;
use crate::plan::{Plan, PlanDecision};
use crate::plan_limiter::PlanLimiter;
use crate::receipt::{GivenBack, Receipt, Returnable};

/// What [`Store`] methods return: an answer already made, or a boxed future
/// for a store that has to wait for it.
///
/// The memory store, and a cached rejection in front of a shared store,
/// answer at once; boxing their answers would cost an allocation per
/// decision that nothing needed (BENCHMARKS.md, "The peer's address and the
/// memory store's answer, no longer allocated").
pub struct StoreFuture<'a, T>(Answer<'a, T>);

/// The two kinds of [`StoreFuture`].
enum Answer<'a, T> {
    /// Made when the store method returned.
    Made(Ready<Result<T, StoreError>>),
    /// Still to come (a network call, a timeout around one).
    Waiting(Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>),
}

impl<'a, T> StoreFuture<'a, T> {
    /// An answer already made: no allocation.
    pub fn ready(result: Result<T, StoreError>) -> Self {
        Self(Answer::Made(std::future::ready(result)))
    }

    /// The answer of `future`, boxed.
    pub fn new(future: impl Future<Output = Result<T, StoreError>> + Send + 'a) -> Self {
        Self(Answer::Waiting(Box::pin(future)))
    }
}

impl<T> Future for StoreFuture<'_, T> {
    type Output = Result<T, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Both kinds are `Unpin` (`Ready` always, a `Pin<Box<_>>` always).
        match &mut self.get_mut().0 {
            Answer::Made(answer) => Pin::new(answer).poll(cx),
            Answer::Waiting(future) => future.as_mut().poll(cx),
        }
    }
}

/// How long a front end shutting down waits for its store to settle
/// ([`Store::settle`]): 5 s, as long as a Redis store waits for a refund's
/// answer.
pub const SETTLE_WITHIN: Duration = Duration::from_secs(5);

/// A store could not decide (Redis down, timed out, answered nonsense).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    /// What went wrong, for logs.
    pub message: String,
    /// Whether trying again may succeed, and whether the part of the store
    /// holding the client's state was reached. A guarded store answers
    /// every kind by its failure policy; the kind decides how the error is
    /// counted and whether it trips the circuit breaker.
    pub kind: StoreErrorKind,
}

/// What kind of failure a [`StoreError`] is: what a guarded store's
/// circuit breaker makes of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// Trying again later may succeed (connection lost, timeout), and the
    /// part of the store holding the client's state (see
    /// [`Store::failure_domain`]) may be down: it trips the part's
    /// circuit breaker.
    Transient,
    /// Trying again later may succeed, and the part holding the client's
    /// state was reached and answered: the failure is the client's own. A
    /// Redis Cluster master answering `TRYAGAIN` because the client's slot
    /// is half-way through a migration still serves its other clients, so
    /// its circuit breaker counts the part as reached, and one client's
    /// slot does not open the circuit of every client of the part.
    TransientClientOnly,
    /// Retrying cannot fix it (a misconfiguration, a script error). The
    /// part answered, so it does not trip the circuit breaker.
    Permanent,
}

impl StoreError {
    /// An error that may go away by itself.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::of_kind(StoreErrorKind::Transient, message)
    }

    /// An error that may go away by itself, met by the client alone: its
    /// part of the store answered (see [`StoreErrorKind::TransientClientOnly`]).
    pub fn transient_reached(message: impl Into<String>) -> Self {
        Self::of_kind(StoreErrorKind::TransientClientOnly, message)
    }

    /// An error that will not go away by retrying.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::of_kind(StoreErrorKind::Permanent, message)
    }

    /// An error of `kind`.
    pub fn of_kind(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            kind,
        }
    }

    /// True when trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        self.kind != StoreErrorKind::Permanent
    }

    /// True when the transient error is the client's own: its part of the
    /// store was reached ([`StoreErrorKind::TransientClientOnly`]).
    pub fn is_client_only(&self) -> bool {
        self.kind == StoreErrorKind::TransientClientOnly
    }
}

/// Where per-client limit state lives, seen from a service.
///
/// A check is atomic per client: all limits of the plan are decided and
/// consumed together, or nothing is consumed.
pub trait Store: Send + Sync {
    /// Decides a request of `cost` units (0 only asks) for `client` against
    /// every limit of `plan` at `now_ms`.
    ///
    /// # Errors
    /// A [`StoreError`] when the store could not be reached or could not decide.
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision>;

    /// [`Store::check`], with a [`Receipt`] of what it consumed when the
    /// store can give that back ([`Store::give_back`]): for a request that
    /// several clients decide together, all or nothing (see
    /// [`crate::receipt`]).
    ///
    /// The default gives no receipt: for a store that cannot take a check
    /// back. The memory store and the Redis store give receipts.
    ///
    /// # Errors
    /// As [`Store::check`].
    fn check_returnable<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, Returnable> {
        StoreFuture::new(
            async move { self.check(plan, client, now_ms, cost).await.map(Into::into) },
        )
    }

    /// Takes back what the check of `receipt` consumed, as a refund of a
    /// call whose caller gave up: compare and restore, never more than the
    /// check took (see [`GivenBack`]).
    ///
    /// The default keeps everything: it has issued no receipt to honour.
    ///
    /// # Errors
    /// A [`StoreError`] when the store could not be reached; the
    /// consumption then stays.
    fn give_back(&self, receipt: Receipt) -> StoreFuture<'_, GivenBack> {
        drop(receipt);
        StoreFuture::ready(Ok(GivenBack::Kept))
    }

    /// `client`'s state under every limit of `plan` at `now_ms` (or at the
    /// client's latest seen time, when later), using nothing and writing
    /// nothing: not an unknown client, not a token bucket's anchor, not the
    /// latest seen time. Every store reads its raw states and computes the
    /// numbers with [`crate::inspect_plan`], so that they are the policies'
    /// own.
    ///
    /// The default answers an error: a store that cannot read its states
    /// without changing them says so rather than answer something else.
    ///
    /// # Errors
    /// A [`StoreError`] when the store could not be read.
    fn inspect<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Inspection> {
        let _ = (plan, client, now_ms);
        StoreFuture::ready(Err(StoreError::permanent(
            "this store cannot inspect a client's state",
        )))
    }

    /// Waits, for at most `within`, until the store owes nothing: every call
    /// it sent has had its answer, and what it must still write because of
    /// one is written (a Redis store's refunds of calls whose caller gave
    /// up before the reply came). A front end awaits it when it shuts
    /// down, before its runtime ends (for [`SETTLE_WITHIN`]), so that what
    /// an abandoned call consumed is taken back even when the process exits
    /// right after a stall.
    ///
    /// The default owes nothing: a store whose calls end with their
    /// callers (memory) is always settled.
    ///
    /// # Errors
    /// A [`StoreError`] saying what is still owed when `within` ran out
    /// (it stays as it is: consumed, towards admitting less).
    fn settle(&self, within: Duration) -> StoreFuture<'_, ()> {
        let _ = within;
        StoreFuture::ready(Ok(()))
    }

    /// The part of the store that holds `client`'s state, named, when the
    /// store is made of parts that fail apart (the masters of a Redis
    /// Cluster): a guard keeps one circuit breaker per part, so that one
    /// node down does not open the circuit for the clients of the others.
    ///
    /// The default, `None`, says the store fails as one (one node, memory),
    /// as does `None` from a store that cannot tell yet (a cluster whose
    /// map of slots is not read).
    fn failure_domain(&self, client: &str) -> Option<Arc<str>> {
        let _ = client;
        None
    }

    /// A refusal of a request of `cost` that the store can give at once,
    /// without deciding or reaching what lies behind it: one that a
    /// rejection cache in front remembers (`tollgate-cache`). A request of
    /// several clients asks it for a client whose store failed, so that a
    /// client known to be over its limit still refuses the request.
    ///
    /// The default remembers nothing.
    fn remembered_refusal(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
    ) -> Option<PlanDecision> {
        let _ = (plan, client, now_ms, cost);
        None
    }
}

/// The in-memory store behind the async boundary: decisions are immediate.
#[derive(Default)]
pub struct MemoryBackend {
    limiter: PlanLimiter,
}

impl MemoryBackend {
    /// An empty in-memory store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An in-memory store keeping at most about `max_clients` clients, evicting
    /// idle ones (see [`PlanLimiter::with_max_clients`]).
    pub fn with_max_clients(max_clients: usize) -> Self {
        Self {
            limiter: PlanLimiter::with_max_clients(max_clients),
        }
    }

    /// The synchronous limiter inside.
    pub fn limiter(&self) -> &PlanLimiter {
        &self.limiter
    }
}

impl Store for MemoryBackend {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        let decision = self.limiter.check(plan, client, now_ms, cost);
        StoreFuture::ready(Ok(decision))
    }

    fn check_returnable<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, Returnable> {
        let answer = self.limiter.check_returnable(plan, client, now_ms, cost);
        StoreFuture::ready(Ok(answer))
    }

    fn give_back(&self, receipt: Receipt) -> StoreFuture<'_, GivenBack> {
        StoreFuture::ready(Ok(self.limiter.give_back(receipt)))
    }

    fn inspect<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Inspection> {
        let inspection = self.limiter.inspect(plan, client, now_ms);
        StoreFuture::ready(Ok(inspection))
    }
}

impl<S: Store + ?Sized> Store for Arc<S> {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        (**self).check(plan, client, now_ms, cost)
    }

    fn inspect<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Inspection> {
        (**self).inspect(plan, client, now_ms)
    }

    fn check_returnable<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, Returnable> {
        (**self).check_returnable(plan, client, now_ms, cost)
    }

    fn give_back(&self, receipt: Receipt) -> StoreFuture<'_, GivenBack> {
        (**self).give_back(receipt)
    }

    fn settle(&self, within: Duration) -> StoreFuture<'_, ()> {
        (**self).settle(within)
    }

    fn failure_domain(&self, client: &str) -> Option<Arc<str>> {
        (**self).failure_domain(client)
    }

    fn remembered_refusal(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
    ) -> Option<PlanDecision> {
        (**self).remembered_refusal(plan, client, now_ms, cost)
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::{StoreError, StoreFuture};

    fn poll<T>(future: &mut std::pin::Pin<&mut StoreFuture<'_, T>>) -> Poll<Result<T, StoreError>> {
        future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_made_answer_is_ready_at_the_first_poll() {
        let mut future = pin!(StoreFuture::ready(Ok(7)));
        assert_eq!(poll(&mut future), Poll::Ready(Ok(7)));
    }

    #[test]
    fn a_waiting_answer_comes_when_its_future_is_done() {
        let mut waited = false;
        let mut future = pin!(StoreFuture::new(std::future::poll_fn(move |_| {
            if std::mem::replace(&mut waited, true) {
                Poll::Ready(Err(StoreError::transient("timed out")))
            } else {
                Poll::<Result<u8, StoreError>>::Pending
            }
        })));
        assert_eq!(poll(&mut future), Poll::Pending);
        assert_eq!(
            poll(&mut future),
            Poll::Ready(Err(StoreError::transient("timed out")))
        );
    }
}
