//! The refunds of one store, sent by one task at a time: each client's
//! newest first and up to 64 clients' at once, the ones that found their
//! state changed kept to be tried again (`stale.rs`), and the ones Redis
//! could not be reached for sent again under the same id.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use tokio::task::JoinSet;

use tollgate::GivenBack;

use super::stale::{keep_stale, retry_stale_of, Kept};
use super::{Refund, MAX_QUEUED};
use crate::by_client::by_client;
use crate::call::{Scripts, LOST_KEPT, MOST_BETWEEN_TRIES, REFUND_TIMEOUT};
use crate::task_place::TaskPlace;
use crate::RedisStoreError;

/// How refunds ended, and how many have not yet (see
/// [`crate::CallCounts`]).
#[derive(Debug, Default)]
pub(crate) struct RefundCounters {
    pub(crate) restored: AtomicU64,
    pub(crate) stale: AtomicU64,
    /// Of the stale, restored on a later try (moved to `restored`).
    pub(crate) restored_late: AtomicU64,
    pub(crate) failed: AtomicU64,
    /// Refunds made that have not ended yet: queued, being sent, or waiting
    /// to be sent again.
    pub(crate) pending: AtomicU64,
}

/// A refund on its way to Redis.
pub(crate) struct Queued {
    /// Its number in the order its reply came, which is the order Redis
    /// ran the calls of one client (one connection to the node that holds
    /// its keys, and a batch's calls in order).
    pub(super) number: u64,
    /// The id it is sent under, the same for every copy until Redis
    /// answers it ([`crate::scripts::REFUND`] keeps its answer under it).
    pub(super) id: String,
    /// When it was made: it is sent again until [`LOST_KEPT`] after.
    made: Instant,
    /// When it was first kept after finding its state changed (the
    /// clock's monotonic µs): it is tried again until `STALE_KEPT_US` after.
    pub(super) first_kept_us: Option<u64>,
    pub(super) refund: Refund,
}

#[derive(Default)]
pub(super) struct Pending {
    /// Refunds waiting to be sent, in the order their replies came.
    queue: Vec<Queued>,
    /// Refunds Redis could not be reached for, to be sent again.
    again: Vec<Queued>,
    /// The next refund's number.
    next: u64,
    /// Refunds that found their state changed, kept to be tried again.
    pub(super) stale: Kept,
    /// A task is sending refunds.
    running: bool,
}

/// The refunds of one store's connection, sent by one task at a time.
#[derive(Default)]
pub(crate) struct Refunds {
    pending: Mutex<Pending>,
    pub(crate) counters: RefundCounters,
}

impl Refunds {
    pub(super) fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether no refund waits to be sent (or sent again) and none is being
    /// sent (those kept after finding their state changed wait for
    /// nothing).
    pub(crate) fn is_idle(&self) -> bool {
        let pending = self.lock();
        pending.queue.is_empty() && !pending.running
    }

    /// Counts a refund that could not be sent.
    pub(crate) fn count_failed(&self) {
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// `refund`, numbered after every refund so far, under a new id.
    pub(crate) fn number(&self, scripts: &Scripts, refund: Refund) -> Queued {
        let number = {
            let mut pending = self.lock();
            pending.next += 1;
            pending.next - 1
        };
        self.counters.pending.fetch_add(1, Ordering::Relaxed);
        Queued {
            number,
            id: scripts.receipts.refund_id(),
            made: Instant::now(),
            first_kept_us: None,
            refund,
        }
    }

    /// Queues `refund`, and starts the task that sends refunds unless it
    /// runs. Must be called inside a Tokio runtime.
    pub(crate) fn push(&self, scripts: &Arc<Scripts>, refund: Refund) {
        if self.lock().queue.len() >= MAX_QUEUED {
            self.count_failed();
            return;
        }
        let queued = self.number(scripts, refund);
        self.start_with(scripts, |pending| pending.queue.push(queued));
    }

    /// Puts `change` in place under the lock, and starts the sending task
    /// unless it runs.
    fn start_with(&self, scripts: &Arc<Scripts>, change: impl FnOnce(&mut Pending)) {
        let start = {
            let mut pending = self.lock();
            change(&mut pending);
            !std::mem::replace(&mut pending.running, true)
        };
        if start {
            scripts.spawn(send(scripts.clone()));
        }
    }
}

/// Sends what is queued until nothing is left to send or to send again,
/// each client's newest first, the clients' from tasks of their own, each
/// holding one of [`Scripts::take_backs`] (64) while it sends (one client's
/// wait for a master that is down holds back no other's: it goes back to the
/// queue).
/// Waits one turn first, so that the other replies of the same read queue
/// theirs; refunds to be sent again go at most once every
/// [`MOST_BETWEEN_TRIES`], with what is queued then.
async fn send(scripts: Arc<Scripts>) {
    let mut place = TaskPlace::new(|| scripts.refunds.lock().running = false);
    tokio::task::yield_now().await;
    let mut again_sent = Instant::now();
    loop {
        let (mut group, wait, again) = {
            let mut pending = scripts.refunds.lock();
            if pending.queue.is_empty() && pending.again.is_empty() {
                // Under the lock that a refund is queued under: the next
                // one starts a task.
                pending.running = false;
                place.given_back();
                return;
            }
            let mut group = std::mem::take(&mut pending.queue);
            let since = again_sent.elapsed();
            let again =
                !pending.again.is_empty() && (group.is_empty() || since >= MOST_BETWEEN_TRIES);
            let mut wait = Duration::ZERO;
            if again {
                if group.is_empty() {
                    wait = MOST_BETWEEN_TRIES.saturating_sub(since);
                }
                group.append(&mut pending.again);
            }
            (group, wait, again)
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        if again {
            again_sent = Instant::now();
        }
        group.sort_by_key(|queued| std::cmp::Reverse(queued.number));
        let mut sending = JoinSet::new();
        for newest_first in by_client(group, |queued| Some(&queued.refund.client)) {
            let scripts = scripts.clone();
            sending.spawn(async move {
                // Never closed, so a permit always comes.
                let _sending = scripts.take_backs.acquire().await;
                send_of_one_client(scripts.clone(), newest_first).await;
            });
        }
        while let Some(ended) = sending.join_next().await {
            if ended.is_err() {
                scripts.refunds.count_failed();
            }
        }
    }
}

/// Sends one client's refunds, newest first, each followed, once it
/// restored, by the client's refunds kept after finding their state
/// changed.
async fn send_of_one_client(scripts: Arc<Scripts>, newest_first: Vec<Queued>) {
    for queued in newest_first {
        let client = queued.refund.client.clone();
        if matches!(attempt(&scripts, queued).await, Ok(GivenBack::Restored)) {
            retry_stale_of(&scripts, &client).await;
        }
    }
}

/// Sends one refund and counts how it ended. One that found a state
/// changed is kept to be tried again (under a new id: Redis answered this
/// one); one that found no receipt of its call is counted stale and not
/// kept (nothing of the call is there to take back); one that met an error
/// (its connection dropped, before or after Redis ran it; Redis refused the
/// connection, restarting, or the login; no answer within
/// [`REFUND_TIMEOUT`]) is sent again under
/// the same id by the sending task, until [`LOST_KEPT`] after it was made,
/// and counted only then.
pub(crate) async fn attempt(
    scripts: &Arc<Scripts>,
    queued: Queued,
) -> Result<GivenBack, RedisStoreError> {
    let sent = match send_once(scripts, queued, REFUND_TIMEOUT).await {
        // A login refused or a permission cut too: the operator may mend
        // them, and until then the use stays counted.
        Sent::Failed(error, queued) if error.may_heal() && queued.made.elapsed() < LOST_KEPT => {
            let refunds = &scripts.refunds;
            refunds.start_with(scripts, |pending| pending.again.push(queued));
            return Err(error);
        }
        sent => sent,
    };
    // Ended: no longer pending, before it is counted as what it ended as
    // (so that counts that show it ended show it no longer pending).
    let counters = &scripts.refunds.counters;
    counters.pending.fetch_sub(1, Ordering::Relaxed);
    match sent {
        Sent::NothingThere => {
            counters.stale.fetch_add(1, Ordering::Relaxed);
            Ok(GivenBack::Kept)
        }
        Sent::Restored => {
            counters.restored.fetch_add(1, Ordering::Relaxed);
            Ok(GivenBack::Restored)
        }
        Sent::Partly(left) => {
            counters.stale.fetch_add(1, Ordering::Relaxed);
            keep_stale(scripts, left);
            Ok(GivenBack::Kept)
        }
        Sent::Failed(error, _) => {
            counters.failed.fetch_add(1, Ordering::Relaxed);
            Err(error)
        }
    }
}

/// What one send of a refund came to.
pub(super) enum Sent {
    /// Every limit left was restored.
    Restored,
    /// The call's receipt is not where the refund ran: the call never ran
    /// there (a replica promoted before its write reached it), so there is
    /// nothing of it to take back, now or later; or its receipt is gone
    /// (expired, pushed out of the client's 1 MiB), and the consumption
    /// stays, towards admitting less.
    NothingThere,
    /// Some limit found its state changed: what is left of the refund, under
    /// a new id (Redis keeps this one's answer under the old).
    Partly(Queued),
    /// Redis refused it or did not answer within the wait (it may have run).
    Failed(RedisStoreError, Queued),
}

/// Sends `queued` once, waiting at most `wait` for Redis's answer.
pub(super) async fn send_once(scripts: &Arc<Scripts>, queued: Queued, wait: Duration) -> Sent {
    let answer = tokio::time::timeout(wait, scripts.refund(&queued.refund, &queued.id))
        .await
        .unwrap_or(Err(RedisStoreError::Timeout(wait)));
    match answer {
        Ok(restored) if restored.is_empty() => Sent::NothingThere,
        Ok(restored) if restored.iter().all(|&r| r == 1) => Sent::Restored,
        Ok(restored) => Sent::Partly(Queued {
            id: scripts.receipts.refund_id(),
            refund: queued.refund.partly(&restored),
            ..queued
        }),
        Err(error) => Sent::Failed(error, queued),
    }
}
