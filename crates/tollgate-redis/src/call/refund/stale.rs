//! Refunds that found their state changed, kept to be tried again after a
//! later refund of the same client restores (`refund.rs` says why), for at
//! most [`STALE_KEPT_US`], and one task that drops them as they come of
//! age. A kept refund lets go of its call's receipt: held open, it would
//! keep the store's later calls of its group of slots from dropping any
//! receipt (`receipts.rs`) for as long, and a busy client's receipts would
//! swell meanwhile, read and written by each of its calls. A retry that
//! finds the receipt dropped since keeps the use, as a stale refund does.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tollgate::GivenBack;

use super::queue::{attempt, Queued};
use super::{STALE_KEPT, STALE_KEPT_US};
use crate::call::Scripts;
use crate::task_place::TaskPlace;

/// The refunds kept, each with when it was kept (the clock's monotonic
/// µs), and whether a task drops them as they come of age.
#[derive(Default)]
pub(super) struct Kept {
    refunds: Vec<(u64, Queued)>,
    pruning: bool,
}

impl Kept {
    /// Drops the refunds kept for [`STALE_KEPT_US`] by `now_us`; the
    /// oldest left's time, if any.
    fn prune(&mut self, now_us: u64) -> Option<u64> {
        self.refunds
            .retain(|(at, _)| now_us.saturating_sub(*at) < STALE_KEPT_US);
        self.refunds.iter().map(|(at, _)| *at).min()
    }
}

/// Keeps `queued`, whose refund found its state changed, to be tried again
/// ([`STALE_KEPT`] at most: the oldest go first), and starts the task that
/// drops it when it comes of age, unless that runs.
pub(super) fn keep_stale(scripts: &Arc<Scripts>, mut queued: Queued) {
    queued.refund.let_go_of_receipt();
    let now_us = scripts.clock.now_us();
    let start = {
        let mut pending = scripts.refunds.lock();
        let kept = &mut pending.stale;
        kept.prune(now_us);
        if kept.refunds.len() >= STALE_KEPT {
            kept.refunds.remove(0);
        }
        kept.refunds.push((now_us, queued));
        !std::mem::replace(&mut kept.pruning, true)
    };
    if start {
        scripts.spawn(prune_until_none(scripts.clone()));
    }
}

/// Drops the kept refunds as they come of age, until none is left.
async fn prune_until_none(scripts: Arc<Scripts>) {
    let mut place = TaskPlace::new(|| scripts.refunds.lock().stale.pruning = false);
    loop {
        let now_us = scripts.clock.now_us();
        let wait_us = {
            let mut pending = scripts.refunds.lock();
            let Some(oldest) = pending.stale.prune(now_us) else {
                pending.stale.pruning = false;
                place.given_back();
                return;
            };
            STALE_KEPT_US.saturating_sub(now_us.saturating_sub(oldest))
        };
        tokio::time::sleep(Duration::from_micros(wait_us.max(1_000))).await;
    }
}

/// Tries `client`'s kept refunds again, newest call first, while they
/// restore: a refund of the client just restored may have been what they
/// waited for.
pub(crate) async fn retry_stale_of(scripts: &Arc<Scripts>, client: &str) {
    loop {
        let next = {
            let mut pending = scripts.refunds.lock();
            let kept = &mut pending.stale.refunds;
            let newest = kept
                .iter()
                .enumerate()
                .filter(|(_, (_, queued))| queued.refund.client == client)
                .max_by_key(|(_, (_, queued))| queued.number)
                .map(|(at, _)| at);
            let Some(at) = newest else {
                return;
            };
            kept.remove(at).1
        };
        // Counted as stale when first tried: it is pending again, and
        // whatever it ends as now counts instead.
        let counters = &scripts.refunds.counters;
        counters.pending.fetch_add(1, Ordering::Relaxed);
        counters.stale.fetch_sub(1, Ordering::Relaxed);
        if !matches!(attempt(scripts, next).await, Ok(GivenBack::Restored)) {
            return;
        }
    }
}
