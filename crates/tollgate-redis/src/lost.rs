//! Calls whose reply never came: found by their receipt, then refunded.
//!
//! A call can run in Redis and its reply never reach the store: the
//! connection drops on the way back (a network fault, a proxy cut, a
//! `CLIENT KILL` between the run and the write of the reply), or, on one
//! node, the reply comes later than [`crate::RESPONSE_TIMEOUT`]. The caller
//! met an error and was answered by its failure policy, so what the call
//! consumed must be taken back, as for a reply that came too late
//! ([`crate::refund`]); but without the reply the store knows neither
//! whether the call ran nor what its refund needs.
//!
//! So every call carries an id unique to it (`src/receipts.rs`), and a
//! call that consumes leaves a receipt under that id in a key beside the
//! client's last-seen key: the time it was decided at and its undo numbers
//! (`decide.lua`). A call of cost 1 or more that ends in an error leaving its
//! outcome unknown is queued here. One task of the store claims each queued
//! call's receipt ([`crate::scripts::CLAIM`]), in the order the calls were
//! sent, once Redis's clock has passed the call's deadline (after it, a
//! call that has not started never writes: [`crate::deadline`]), so the
//! receipt is there exactly when the call consumed. A claim removes the
//! receipt, so a call is refunded at most once, and hands the refund to
//! [`crate::refund`], which sends it as any other: compare and restore, the
//! calls of one group newest first.
//!
//! A claim that cannot reach Redis (it is still down, or restarting) is
//! tried again, for up to [`LOST_KEPT`]; the call stays open meanwhile, so
//! no call of the store drops its receipt. What stays out of reach: a
//! receipt pushed out of a client's receipts, which keep at most about
//! 4 KiB (some 100 open calls of one client), receipts kept past 180 s
//! (`decide.lua`; longer than a claim is tried), a Redis that lost the
//! write itself (a restart without persistence), and claims past
//! [`MAX_LOST`] waiting. Each leaves the consumption in place, towards
//! admitting less.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::call::{Arg, Call, Scripts};
use crate::receipts::OpenReceipt;
use crate::refund::{Refund, REFUND_TIMEOUT};

/// At most this many lost calls wait to be claimed; one past it is counted
/// as a failed refund.
pub const MAX_LOST: usize = 65_536;

/// How long a lost call's claim is tried again while Redis cannot be
/// reached: 60 s, enough for a restart or a failover.
pub const LOST_KEPT: Duration = Duration::from_secs(60);

/// The longest pause between two tries of a claim.
const MOST_BETWEEN_TRIES: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Pending {
    /// Lost calls waiting to be claimed, in the order they were sent, each
    /// with its receipt, open until its claim is done.
    queue: Vec<(Call, OpenReceipt)>,
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
    pub(crate) fn push(&self, scripts: &Arc<Scripts>, call: &Call, open: OpenReceipt) {
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
            pending.queue.push((call.clone(), open));
            !std::mem::replace(&mut pending.running, true)
        };
        if start {
            tokio::spawn(claim_all(scripts.clone()));
        }
    }
}

/// Claims what is queued, in order, and queues the refunds of each group
/// together, until the queue is empty. Waits one turn first, so that the
/// other calls of the same lost batch or connection queue theirs.
async fn claim_all(scripts: Arc<Scripts>) {
    let mut place = Running {
        lost: &scripts.lost,
        given_back: false,
    };
    tokio::task::yield_now().await;
    loop {
        let group = {
            let mut pending = scripts.lost.lock();
            if pending.queue.is_empty() {
                pending.running = false;
                place.given_back = true;
                return;
            }
            std::mem::take(&mut pending.queue)
        };
        let mut refunds = Vec::new();
        for (call, _open) in &group {
            if let Some(refund) = claim(&scripts, call).await {
                refunds.push(refund);
            }
        }
        scripts.refunds.push_all(&scripts, refunds);
        // Only now are the calls closed: until their claims were done, no
        // call of the store could drop their receipts.
        drop(group);
    }
}

/// The claiming task's place, given back if the task ends early (a panic,
/// or the runtime shutting down) so that the next lost call starts a task.
struct Running<'a> {
    lost: &'a LostCalls,
    given_back: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.given_back {
            self.lost.lock().running = false;
        }
    }
}

/// Claims `call`'s receipt: the refund it makes, or `None` when the call
/// consumed nothing (no receipt). Waits for the deadline to pass on
/// Redis's clock, and tries again while Redis cannot be reached, for up to
/// [`LOST_KEPT`]; then counts a failed refund.
async fn claim(scripts: &Arc<Scripts>, call: &Call) -> Option<Refund> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(10);
    loop {
        let answer = tokio::time::timeout(REFUND_TIMEOUT, scripts.claim(call)).await;
        let wait = match answer {
            Ok(Ok(claimed)) => match claimed.split_first() {
                Some((&0, [])) => return None,
                Some((&1, found)) => {
                    let refund = Refund::of_receipt(call, found);
                    if refund.is_none() {
                        scripts.refunds.count_failed();
                    }
                    return refund;
                }
                Some((&-1, &[redis_us])) => until_deadline(call, redis_us),
                _ => {
                    scripts.refunds.count_failed();
                    return None;
                }
            },
            Ok(Err(error)) if !error.is_transient() => {
                scripts.refunds.count_failed();
                return None;
            }
            Ok(Err(_)) | Err(_) => {
                pause = (pause * 2).min(MOST_BETWEEN_TRIES);
                pause
            }
        };
        if started.elapsed() + wait > LOST_KEPT {
            scripts.refunds.count_failed();
            return None;
        }
        tokio::time::sleep(wait).await;
    }
}

/// How long until `call`'s deadline passes, Redis's clock reading
/// `redis_us` (at least 1 ms, at most [`MOST_BETWEEN_TRIES`]).
fn until_deadline(call: &Call, redis_us: i64) -> Duration {
    let deadline_us = match call.args.get(3) {
        Some(&Arg::Number(deadline)) => deadline,
        _ => 0,
    };
    let left_us = deadline_us.saturating_sub(u64::try_from(redis_us).unwrap_or(0));
    Duration::from_micros(left_us + 1_000).min(MOST_BETWEEN_TRIES)
}
