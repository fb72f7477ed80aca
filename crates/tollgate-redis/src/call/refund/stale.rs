//! Refunds that found their state changed, kept to be tried again (for at
//! most [`STALE_KEPT_US`] from when first kept): after a later refund of the
//! same client restores, and on a timer, by one task that also drops them
//! as they come of age.
//!
//! The timer is for refunds of other stores: the servers of a fleet that
//! all gave up on one client's calls during a Redis stall each hold some
//! of its refunds, and a store's refund can restore only once every later
//! call's refund has, whichever store holds it (an audit: two stores
//! sharing 30 abandoned calls kept 29 units, each waiting for the other).
//! The task tries each client's kept refunds again every
//! [`RETRY_FIRST`], doubling the wait up to [`RETRY_MOST`] while nothing
//! restores; a pass goes through all of a client's, newest call first,
//! and another follows while one restored.
//!
//! A kept refund lets go of its call's receipt: held open, it would keep
//! the store's later calls of its group of slots from dropping any receipt
//! (`receipts.rs`) for as long, and a busy client's receipts would swell
//! meanwhile, read and written by each of its calls. A retry that finds the
//! receipt dropped since keeps the use, as a stale refund does.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::queue::{send_once, Queued, Sent};
use super::{STALE_KEPT, STALE_KEPT_US};
use crate::by_client::by_client;
use crate::call::{Scripts, REFUND_TIMEOUT};
use crate::task_place::TaskPlace;

/// The first wait before kept refunds are tried again, and the wait after
/// a round in which one restored.
const RETRY_FIRST: Duration = Duration::from_millis(50);

/// The longest wait between two rounds of tries.
const RETRY_MOST: Duration = Duration::from_secs(1);

/// The refunds kept, each with when it was first kept (the clock's
/// monotonic µs), and whether the task that tries them again runs.
#[derive(Default)]
pub(super) struct Kept {
    refunds: Vec<(u64, Queued)>,
    retrying: bool,
}

impl Kept {
    /// Drops the refunds kept for [`STALE_KEPT_US`] by `now_us`.
    fn prune(&mut self, now_us: u64) {
        self.refunds
            .retain(|(at, _)| now_us.saturating_sub(*at) < STALE_KEPT_US);
    }
}

/// Keeps `queued`, whose refund found its state changed, to be tried again
/// ([`STALE_KEPT`] at most: the one kept longest goes first) until [`STALE_KEPT_US`]
/// after it was first kept, and starts the task that tries the kept
/// refunds again, unless that runs.
pub(super) fn keep_stale(scripts: &Arc<Scripts>, mut queued: Queued) {
    queued.refund.let_go_of_receipt();
    let now_us = scripts.clock.now_us();
    let first_kept = *queued.first_kept_us.get_or_insert(now_us);
    let start = {
        let mut pending = scripts.refunds.lock();
        let kept = &mut pending.stale;
        kept.prune(now_us);
        if kept.refunds.len() >= STALE_KEPT {
            // The one kept longest (a refund tried again goes back to the
            // end with its first time).
            let oldest = (0..kept.refunds.len()).min_by_key(|&i| kept.refunds[i].0);
            if let Some(oldest) = oldest {
                kept.refunds.swap_remove(oldest);
            }
        }
        kept.refunds.push((first_kept, queued));
        !std::mem::replace(&mut kept.retrying, true)
    };
    if start {
        scripts.spawn(retry_until_none(scripts.clone()));
    }
}

/// Sends a kept refund again, unless it has been kept [`STALE_KEPT_US`].
/// It was counted stale when first tried, and stays so unless it now
/// restores every limit left (then it counts as restored, and as restored
/// late), so that the counts never show a retry under way.
/// Kept again when it does not: under a new id once Redis answered (its
/// answer is kept under the old one), under the same one after an error
/// (Redis may have run it). One come of age is dropped unsent, and a try
/// waits no longer than its refund has left to be kept (a Redis that hangs
/// must not keep the refunds past their time, nor hold the others' tries
/// for long). Whether it restored.
async fn retry(scripts: &Arc<Scripts>, queued: Queued) -> bool {
    let now_us = scripts.clock.now_us();
    let kept_for = now_us.saturating_sub(queued.first_kept_us.unwrap_or(now_us));
    let left = Duration::from_micros(STALE_KEPT_US.saturating_sub(kept_for));
    if left.is_zero() {
        return false;
    }
    let counters = &scripts.refunds.counters;
    match send_once(scripts, queued, left.min(REFUND_TIMEOUT)).await {
        Sent::Restored => {
            counters.restored_late.fetch_add(1, Ordering::Relaxed);
            counters.stale.fetch_sub(1, Ordering::Relaxed);
            counters.restored.fetch_add(1, Ordering::Relaxed);
            true
        }
        Sent::NothingThere => false,
        Sent::Partly(again) | Sent::Failed(_, again) => {
            keep_stale(scripts, again);
            false
        }
    }
}

/// Tries the kept refunds again in rounds, each client's in passes, and
/// drops them as they come of age, until none is left. A round takes them
/// all at once, split by client (one pass over the kept refunds, however
/// many clients hold them).
async fn retry_until_none(scripts: Arc<Scripts>) {
    let mut place = TaskPlace::new(|| scripts.refunds.lock().stale.retrying = false);
    let mut wait = RETRY_FIRST;
    loop {
        tokio::time::sleep(wait).await;
        let taken: Vec<Queued> = {
            let mut pending = scripts.refunds.lock();
            pending.stale.prune(scripts.clock.now_us());
            if pending.stale.refunds.is_empty() {
                pending.stale.retrying = false;
                place.given_back();
                return;
            }
            let kept = std::mem::take(&mut pending.stale.refunds);
            kept.into_iter().map(|(_, queued)| queued).collect()
        };
        let mut restored = false;
        for of_client in by_client(taken, |queued| Some(&queued.refund.client)) {
            let client = of_client[0].refund.client.clone();
            if retry_pass(&scripts, of_client).await {
                restored = true;
                retry_stale_of(&scripts, &client).await;
            }
        }
        wait = if restored {
            RETRY_FIRST
        } else {
            (wait * 2).min(RETRY_MOST)
        };
    }
}

/// Tries `client`'s kept refunds again, in passes while one restores: a
/// refund of the client just restored (here or by another store) may have
/// been what they waited for. Whether one restored.
pub(crate) async fn retry_stale_of(scripts: &Arc<Scripts>, client: &str) -> bool {
    let mut any = false;
    loop {
        let of_client: Vec<Queued> = {
            let mut pending = scripts.refunds.lock();
            let kept = &mut pending.stale.refunds;
            let (of_client, others) = std::mem::take(kept)
                .into_iter()
                .partition(|(_, queued)| queued.refund.client == client);
            *kept = others;
            of_client.into_iter().map(|(_, queued)| queued).collect()
        };
        if of_client.is_empty() || !retry_pass(scripts, of_client).await {
            return any;
        }
        any = true;
    }
}

/// One pass through one client's kept refunds, newest call first, all of
/// them (one further down may restore although one above it is still held
/// back). Whether one restored.
async fn retry_pass(scripts: &Arc<Scripts>, mut of_client: Vec<Queued>) -> bool {
    of_client.sort_by_key(|queued| std::cmp::Reverse(queued.number));
    let mut restored = false;
    for queued in of_client {
        restored |= retry(scripts, queued).await;
    }
    restored
}
