//! Each call's receipt id, and which of a store's calls are still open.
//!
//! A call that consumes leaves a receipt in Redis under its id, so that it
//! can be found should its reply be lost ([`crate::call::lost`]), and so that
//! its refund runs only where its write is ([`crate::call::refund`]). The id is
//! the store's tag (random, 64 bits, so that no two stores of a fleet share
//! one) and the call's number in the store, `<tag hex>:<seq>`. A receipt is
//! of use only while its call is open: sent or about to be, with no reply
//! read yet, lost and not yet claimed, or with a refund not yet ended (one
//! queued, sent again, or a caller's to give back, not one kept after a
//! stale result: a refund sent after the reply came finds its receipt all
//! the same). Each call also carries a watermark, the lowest number still
//! open among the store's calls of clients near
//! its own (of the same group of 16 cluster slots), and a consuming call
//! drops the client's receipts of its own store below it (`decide.lua`), so
//! a client keeps about one receipt per store that called it, not one per
//! call (and none 180 s after its last consuming call).
//!
//! By group of slots, not for the whole store: a lost call holds the
//! watermark of its group until it is claimed, which, on a cluster with a
//! master down, can take up to [`crate::call::LOST_KEPT`]; meanwhile the
//! clients of that group keep every receipt of the store's calls (up to
//! 1 MiB each, read and written by each of their calls). Clients of the
//! masters still up are in other groups (a master serves ranges of
//! consecutive slots), so a master's outage does not slow down the
//! others'.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::arg::Arg;

/// Consecutive cluster slots per group of open calls.
const SLOTS_PER_GROUP: u16 = 16;
/// Groups of open calls: 16,384 slots in groups of 16.
const GROUPS: usize = 16_384 / SLOTS_PER_GROUP as usize;

/// The receipt ids of one store's calls, and those still open, by group
/// of their client's slot.
pub(crate) struct Receipts {
    tag: u64,
    next: AtomicU64,
    open: Box<[Mutex<BTreeSet<u64>>]>,
}

impl Receipts {
    pub(crate) fn new() -> Self {
        // Without the OS's randomness (never seen on a supported system),
        // the clock's nanoseconds still tell stores started apart apart.
        let tag = getrandom::u64().unwrap_or_else(|_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
        Self {
            tag,
            next: AtomicU64::new(1),
            open: (0..GROUPS).map(|_| Mutex::default()).collect(),
        }
    }

    fn lock(&self, group: usize) -> MutexGuard<'_, BTreeSet<u64>> {
        self.open[group]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A new call's receipt for a client of cluster slot `slot` (its keys'
    /// hash tag's, on one node too), open until the returned value is
    /// dropped, and the watermark with it open: the lowest number of a call
    /// still open among the store's calls of clients of the same group of
    /// slots (every call of theirs below it has been answered, or claimed).
    pub(crate) fn open(self: &Arc<Self>, slot: u16) -> (OpenReceipt, u64) {
        let group = usize::from(slot / SLOTS_PER_GROUP) % GROUPS;
        // The number is taken under the group's lock: taken before it, a
        // call could read a watermark above the number of a call of its
        // group that has its number but is not yet open, and drop that
        // call's receipt.
        let (seq, watermark) = {
            let mut open = self.lock(group);
            let seq = self.next.fetch_add(1, Ordering::Relaxed);
            open.insert(seq);
            (seq, open.first().copied().unwrap_or(seq))
        };
        let receipt = OpenReceipt(Arc::new(Open {
            receipts: self.clone(),
            group,
            seq,
        }));
        (receipt, watermark)
    }

    /// An id no other call or refund of any store shares, `<tag hex>:<seq>`,
    /// for one refund ([`crate::call::refund`]): its answer is kept under it, so
    /// that the refund sent again answers from it.
    pub(crate) fn refund_id(&self) -> String {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{:016x}:{seq}", self.tag)
    }
}

/// One open call's receipt id; closed once every clone of it is dropped
/// (the call's reply read, its refund or its claim ended, or the call
/// never sent): a call, and any refund made of it, holds one.
#[derive(Clone)]
pub(crate) struct OpenReceipt(Arc<Open>);

struct Open {
    receipts: Arc<Receipts>,
    group: usize,
    seq: u64,
}

impl OpenReceipt {
    /// The receipt id as the scripts take it.
    pub(crate) fn arg(&self) -> Arg {
        Arg::Receipt {
            tag: self.0.receipts.tag,
            seq: self.0.seq,
        }
    }
}

impl PartialEq for OpenReceipt {
    fn eq(&self, other: &Self) -> bool {
        self.arg() == other.arg()
    }
}

impl Eq for OpenReceipt {}

impl std::fmt::Debug for OpenReceipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "OpenReceipt({:016x}:{})",
            self.0.receipts.tag, self.0.seq
        )
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.receipts.lock(self.group).remove(&self.seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_is_the_lowest_call_still_open() {
        let receipts = Arc::new(Receipts::new());
        let (first, watermark) = receipts.open(0);
        assert_eq!(watermark, 1, "none open before: its own number");
        let (second, watermark) = receipts.open(0);
        assert_eq!(watermark, 1);
        let (third, _) = receipts.open(0);
        drop(second);
        assert_eq!(receipts.open(0).1, 1, "the first is still open");
        drop(first);
        assert_eq!(receipts.open(0).1, 3);
        drop(third);
        assert_eq!(receipts.open(0).1, 6, "none other open: its own number");
        let a = Receipts::new();
        assert_ne!(a.tag, receipts.tag, "each store its own tag");
    }

    #[test]
    fn a_call_still_open_holds_back_only_its_group_of_slots() {
        let receipts = Arc::new(Receipts::new());
        let (_lost, watermark) = receipts.open(100);
        assert_eq!(watermark, 1);
        // Slots 96-111 are one group; 112 and the far slots are others'.
        assert_eq!(receipts.open(111).1, 1, "same group: held back");
        assert_eq!(receipts.open(96).1, 1, "same group: held back");
        assert_eq!(receipts.open(112).1, 4, "the next group: its own number");
        assert_eq!(receipts.open(16_383).1, 5);
        assert_eq!(receipts.open(0).1, 6);
    }
}
