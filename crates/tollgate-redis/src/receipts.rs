//! Each call's receipt id, and which of a store's calls are still open.
//!
//! A call that consumes leaves a receipt in Redis under its id, so that it
//! can be found should its reply be lost ([`crate::lost`]). The id is the
//! store's tag (random, 64 bits, so that no two stores of a fleet share
//! one) and the call's number in the store, `<tag hex>:<seq>`. A receipt is
//! of use only while its call is open: sent or about to be, with no reply
//! yet, or lost and not yet claimed. Each call also carries the store's
//! watermark, the lowest number still open, and a consuming call drops the
//! client's receipts of its own store below it (`decide.lua`), so a client
//! keeps about one receipt per store that called it, not one per call
//! (and none 180 s after its last consuming call).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::call::Arg;

/// The receipt ids of one store's calls, and those still open.
pub(crate) struct Receipts {
    tag: u64,
    next: AtomicU64,
    open: Mutex<BTreeSet<u64>>,
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
            open: Mutex::new(BTreeSet::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeSet<u64>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new call's receipt, open until the returned value is dropped, and
    /// the store's watermark with it open: the lowest number of a call
    /// still open (every call below it has been answered, or claimed).
    pub(crate) fn open(self: &Arc<Self>) -> (OpenReceipt, u64) {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let watermark = {
            let mut open = self.lock();
            open.insert(seq);
            open.first().copied().unwrap_or(seq)
        };
        let receipt = OpenReceipt {
            receipts: self.clone(),
            seq,
        };
        (receipt, watermark)
    }
}

/// One open call's receipt id; closed when dropped (its reply handed over,
/// its claim done, or the call never sent).
pub(crate) struct OpenReceipt {
    receipts: Arc<Receipts>,
    seq: u64,
}

impl OpenReceipt {
    /// The receipt id as the scripts take it.
    pub(crate) fn arg(&self) -> Arg {
        Arg::Receipt {
            tag: self.receipts.tag,
            seq: self.seq,
        }
    }
}

impl std::fmt::Debug for OpenReceipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OpenReceipt({:016x}:{})", self.receipts.tag, self.seq)
    }
}

impl Drop for OpenReceipt {
    fn drop(&mut self) {
        self.receipts.lock().remove(&self.seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_is_the_lowest_call_still_open() {
        let receipts = Arc::new(Receipts::new());
        let (first, watermark) = receipts.open();
        assert_eq!(watermark, 1, "none open before: its own number");
        let (second, watermark) = receipts.open();
        assert_eq!(watermark, 1);
        let (third, _) = receipts.open();
        drop(second);
        assert_eq!(receipts.open().1, 1, "the first is still open");
        drop(first);
        assert_eq!(receipts.open().1, 3);
        drop(third);
        assert_eq!(receipts.open().1, 6, "none other open: its own number");
        let a = Receipts::new();
        assert_ne!(a.tag, receipts.tag, "each store its own tag");
    }
}
