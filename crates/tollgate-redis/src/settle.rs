//! Settling before the process exits: a call answered by the failure
//! policy while Redis held its reply is refunded only when the reply comes
//! (`crate::call::refund`), and a process that exits first never reads it. So a
//! server shutting down waits, for a bounded time, until every call has had
//! its reply handed over and every refund is sent
//! ([`crate::RedisStore::settle`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How many pieces of work a store still owes an answer to: calls queued
/// or sent whose reply is not handed over yet, and give-backs not yet
/// answered.
#[derive(Debug, Default)]
pub(crate) struct Outstanding(AtomicUsize);

impl Outstanding {
    /// Counts one piece of work until the returned mark is dropped.
    pub(crate) fn mark(self: &Arc<Self>) -> Mark {
        self.0.fetch_add(1, Ordering::SeqCst);
        Mark(self.clone())
    }

    /// How many are outstanding now.
    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// One piece of outstanding work, counted until dropped.
#[derive(Debug)]
pub(crate) struct Mark(Arc<Outstanding>);

impl Drop for Mark {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::SeqCst);
    }
}
