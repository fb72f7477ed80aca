//! Calls whose reply never came: found by their receipt, and taken back.
//!
//! A call can run in Redis and its reply never reach the store: the
//! connection drops on the way back (a network fault, a proxy cut, a
//! `CLIENT KILL` between the run and the write of the reply), or, on one
//! node, the reply comes later than [`crate::RESPONSE_TIMEOUT`]. The caller
//! met an error and was answered by its failure policy, so what the call
//! consumed must be taken back, as for a reply that came too late
//! ([`crate::call::refund`]); but without the reply the store knows neither
//! whether the call ran nor what its refund needs.
//!
//! So every call carries an id unique to it (`src/receipts.rs`), and a
//! call that consumes leaves a receipt under that id in a key beside the
//! client's last-seen key: the time it was decided at and its undo numbers
//! (`decide.lua`). A call of cost 1 or more that ends in an error leaving its
//! outcome unknown is queued here. One task of the store claims each queued
//! call ([`crate::scripts::CLAIM`]) once Redis's clock has passed the
//! call's deadline (after it, a call that has not started never writes:
//! [`crate::deadline`]), so the receipt is there exactly when the call
//! consumed. The claim takes the consumption back as a refund would
//! (compare and restore; one client's calls newest first) and removes the
//! receipt, in one script: so a claim whose own answer is lost (the
//! connection dropped again) is simply sent again, and a call is taken back
//! at most once. The claims of many clients (the calls in flight on a
//! connection that dropped) go at most 64 at a time, with the refunds
//! (`TAKE_BACKS_AT_ONCE`).
//!
//! A claim that cannot reach Redis (it is still down, or restarting) is
//! tried again, for up to [`LOST_KEPT`]; the call stays open meanwhile, so
//! no call of the store drops its receipt. What stays out of reach: a
//! receipt pushed out of a client's receipts, which keep at most 1 MiB
//! (some 20,000 open calls of one client), receipts kept past 180 s
//! (`decide.lua`; longer than a claim is tried), a Redis that lost the
//! write itself (a restart without persistence), and claims past
//! [`MAX_LOST`] waiting. Each leaves the consumption in place, towards
//! admitting less.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::by_client::by_client;
use crate::call::{Arg, Call, Claimed, Scripts};
use crate::call::{LOST_KEPT, MOST_BETWEEN_TRIES, REFUND_TIMEOUT};
use crate::task_place::TaskPlace;

/// At most this many lost calls wait to be claimed; one past it is counted
/// as a failed refund.
pub const MAX_LOST: usize = 65_536;

/// The most calls of one client taken back by one claim (a script runs
/// alone on its node: a bound on how long it holds it).
const MOST_PER_CLAIM: usize = 256;

#[derive(Default)]
struct Pending {
    /// Lost calls waiting to be claimed, in the order they were sent, each
    /// holding its receipt open until its claim is done ([`Call::open`]).
    queue: Vec<Call>,
    /// A task is claiming.
    running: bool,
}

/// The lost calls of one store's connection, claimed by one task at a time.
#[derive(Default)]
pub(crate) struct LostCalls {
    pending: Mutex<Pending>,
    /// Lost calls queued so far ([`crate::CallCounts::replies_lost`]).
    pub(crate) queued: AtomicU64,
}

impl LostCalls {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether no lost call waits to be claimed and none is being claimed.
    pub(crate) fn is_idle(&self) -> bool {
        let pending = self.lock();
        pending.queue.is_empty() && !pending.running
    }

    /// Queues `call`, whose reply never came, if it may have consumed (cost
    /// 1 or more), and starts the claiming task unless it runs. Must be
    /// called inside a Tokio runtime.
    pub(crate) fn push(&self, scripts: &Arc<Scripts>, call: &Call) {
        if !matches!(call.args.get(1), Some(Arg::Number(1..))) {
            return;
        }
        self.queued.fetch_add(1, Ordering::Relaxed);
        let start = {
            let mut pending = self.lock();
            if pending.queue.len() >= MAX_LOST {
                scripts.refunds.count_failed();
                return;
            }
            pending.queue.push(call.clone());
            !std::mem::replace(&mut pending.running, true)
        };
        if start {
            scripts.spawn(claim_all(scripts.clone()));
        }
    }
}

/// Claims what is queued until the queue is empty, after one turn, so that
/// the other calls of the same lost batch or connection queue theirs.
/// Each client's calls go in one claim (which takes them back newest
/// first), the clients' at once, each from a task of its own, each claim
/// on its way holding one of [`Scripts::take_backs`]: while they
/// wait, the group's calls stay open, and every call of the store keeps
/// the receipts it would otherwise drop.
async fn claim_all(scripts: Arc<Scripts>) {
    let mut place = TaskPlace::new(|| scripts.lost.lock().running = false);
    tokio::task::yield_now().await;
    loop {
        let group = {
            let mut pending = scripts.lost.lock();
            if pending.queue.is_empty() {
                pending.running = false;
                place.given_back();
                return;
            }
            std::mem::take(&mut pending.queue)
        };
        let clients: Vec<_> = by_client(group, |call| call.keys.first())
            .into_iter()
            .map(|calls| {
                let claiming = scripts.clone();
                scripts.spawn(async move {
                    // Newest first across claims too.
                    for chunk in calls.rchunks(MOST_PER_CLAIM) {
                        let chunk: Vec<&Call> = chunk.iter().collect();
                        claim(&claiming, &chunk).await;
                    }
                    // Closed once claimed: their receipts are gone.
                    drop(calls);
                })
            })
            .collect();
        for client in clients {
            if client.await.is_err() {
                scripts.refunds.count_failed();
            }
        }
    }
}

/// Takes back what `calls` (of one client, in the order they were sent)
/// consumed, by their receipts, and counts how each ended
/// ([`crate::CallCounts`]: restored, stale or failed; nothing for a call
/// that consumed nothing). Waits for their deadlines to pass on Redis's
/// clock, and tries again while Redis cannot be reached, refuses it (a
/// login refused, say) or the claim's answer does not come, for up to
/// [`LOST_KEPT`]: a claim removes the
/// receipts in the same script that takes the consumption back, so one
/// sent twice takes nothing back twice.
async fn claim(scripts: &Arc<Scripts>, calls: &[&Call]) {
    let counters = &scripts.refunds.counters;
    let failed = || {
        let n = u64::try_from(calls.len()).unwrap_or(u64::MAX);
        counters.failed.fetch_add(n, Ordering::Relaxed);
    };
    let started = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        let answer = {
            // Held while the claim is sent only. Never closed, so a permit
            // always comes.
            let _sending = scripts.take_backs.acquire().await;
            tokio::time::timeout(REFUND_TIMEOUT, scripts.claim(calls)).await
        };
        let wait = match answer {
            Ok(Ok(Claimed::Calls(claimed))) => {
                for restored in claimed.into_iter().flatten() {
                    let counter = if restored.iter().all(|&r| r) {
                        &counters.restored
                    } else {
                        &counters.stale
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
            Ok(Ok(Claimed::Early(redis_us))) => until_deadlines(calls, redis_us),
            Ok(Err(error)) if !error.may_heal() => {
                failed();
                return;
            }
            // Credentials refused at login, or a permission cut, too: they
            // heal once the operator mends them, and until then the call
            // stays counted. `LOST_KEPT` bounds it.
            Ok(Err(_)) | Err(_) => {
                pause = (pause * 2).min(MOST_BETWEEN_TRIES);
                pause
            }
        };
        if started.elapsed() + wait > LOST_KEPT {
            failed();
            return;
        }
        tokio::time::sleep(wait).await;
    }
}

/// How long until the latest deadline of `calls` passes, Redis's clock
/// reading `redis_us` (at least 1 ms, at most [`MOST_BETWEEN_TRIES`]).
fn until_deadlines(calls: &[&Call], redis_us: u64) -> Duration {
    let deadline_us = calls
        .iter()
        .filter_map(|call| match call.args.get(3) {
            Some(&Arg::Number(deadline)) => Some(deadline),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let left_us = deadline_us.saturating_sub(redis_us);
    Duration::from_micros(left_us + 1_000).min(MOST_BETWEEN_TRIES)
}
