//! Which stored entry a state was read from ([`Lineage`]), for a give-back
//! that must not take from an entry made anew under the same id.

use std::sync::atomic::Ordering;

use super::Shard;

/// Which stored entry a client's state was read from, for telling later
/// whether the client's entry is still that one: the count of entries
/// removed from its shard then. An entry removed (a capped store's
/// eviction, a sweep) and made anew under the same id, even within the same
/// millisecond, may hold a state equal to the old one's, so the state alone
/// cannot tell them apart; while no entry of the shard has been removed,
/// the entry under an id is the one that was read. Per shard, not per
/// entry, so that it costs no byte per client: a removal of another client
/// of the shard also makes the entry unsure ([`SameEntry::Unsure`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lineage(u64);

/// What [`MemoryStore::with_same_entry`](super::MemoryStore::with_same_entry) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameEntry<R> {
    /// The client's entry is the one read under the lineage: the closure's
    /// result.
    Same(R),
    /// The client is not stored.
    Gone,
    /// The client is stored, but an entry of its shard was removed since,
    /// so this may be a new entry under the same id: not handed over.
    Unsure,
}

impl<S> Shard<S> {
    /// The shard's lineage now (its table locked by the caller).
    pub(super) fn lineage(&self) -> Lineage {
        Lineage(self.removals.load(Ordering::Relaxed))
    }

    /// Records that `count` entries left the shard (its table locked by the
    /// caller).
    pub(super) fn removed(&self, count: usize) {
        if count > 0 {
            self.removals.fetch_add(count as u64, Ordering::Relaxed);
        }
    }
}
