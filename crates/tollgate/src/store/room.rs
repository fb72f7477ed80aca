//! Room in a full shard of a capped [`MemoryStore`]: which clients go, in
//! which order, and how far behind a time their state is judged.

use std::sync::atomic::Ordering;

use hashbrown::HashTable;

use super::{MemoryStore, Shard, Slot};
use crate::eviction::Eviction;

/// How far behind a time the memory store judges whether a client's state
/// can be dropped (ms): behind a new client's time when a full shard makes
/// room (first; see `make_room` for what goes next), and behind the clock in
/// `tollgate serve`'s sweep.
///
/// A dropped state changes no answer for calls at or after the time it was
/// judged at, but a call at an earlier time finds a new client, its quota
/// whole. Requests read the clock before they reach the store, so one read
/// just before (its thread descheduled), or after the wall clock stepped
/// back, arrives with an earlier time than a newer request's. Judged ten
/// seconds behind, such a call finds the state it needs; idle clients stay
/// that much longer. (Redis keeps a state a margin past its window the same
/// way.)
pub const RECLAIM_BEHIND_MS: u64 = 10_000;

impl<S> MemoryStore<S> {
    /// Brings a full shard down to seven eighths of its cap, giving away as
    /// little as it can, in this order:
    ///
    /// 1. the entries reclaimable [`RECLAIM_BEHIND_MS`] before the new
    ///    client's `now_ms`: no call of the last ten seconds needs them;
    /// 2. as many as the room still needs of the entries reclaimable at
    ///    `now_ms`: only a call stamped before it (a stale clock) would find
    ///    its quota whole, where evicting a client still in use gives back
    ///    what it used for certain;
    /// 3. those whose eviction gives back the fewest units at `now_ms`
    ///    (least recently seen first among equals).
    ///
    /// The reclaiming passes keep every entry seen after the time they
    /// judge at ([`drop_where`]); only the eviction may take one.
    ///
    /// The reclaiming passes and the eviction's weighing are apart, because
    /// the states live behind pointers: a pass as short per entry as the
    /// caller's check lets the processor fetch many entries at once; the
    /// weighing computes what each gives back from the cache.
    pub(super) fn make_room(
        &self,
        shard: &Shard<S>,
        map: &mut HashTable<Slot<S>>,
        now_ms: u64,
        eviction: &mut impl Eviction<S>,
    ) {
        let target = shard.cap - (shard.cap / 8).max(1);
        let judged_at = now_ms.saturating_sub(RECLAIM_BEHIND_MS);
        let mut reclaimed = drop_where(shard, map, judged_at, &mut |state, now| {
            eviction.reclaimable(state, now)
        });
        // Only as many as the room needs: each may be one a stale call needs.
        let mut needed = map.len().saturating_sub(target);
        if needed > 0 {
            reclaimed += drop_where(shard, map, now_ms, &mut |state, now| {
                let drop = needed > 0 && eviction.reclaimable(state, now);
                needed -= usize::from(drop);
                drop
            });
        }
        self.reclaimed
            .fetch_add(reclaimed as u64, Ordering::Relaxed);
        if map.len() <= target {
            return;
        }
        let excess = map.len() - target;
        // (units given back, last seen, bucket): removing an entry by its
        // bucket index leaves every other entry in its bucket.
        let mut candidates: Vec<(u64, u64, usize)> = map
            .iter_buckets()
            .filter_map(|bucket| {
                let slot = map.get_bucket(bucket)?;
                let now = now_ms.max(slot.last_seen);
                let units = eviction.units_given_back(&slot.state, now);
                Some((units, slot.last_seen, bucket))
            })
            .collect();
        candidates.select_nth_unstable(excess - 1);
        for &(_, _, bucket) in &candidates[..excess] {
            if let Ok(entry) = map.get_bucket_entry(bucket) {
                entry.remove();
            }
        }
        shard.removed(excess);
        self.evicted.fetch_add(excess as u64, Ordering::Relaxed);
    }
}

/// Drops the entries of `shard` (its locked table `map`) for which
/// `remove(state, now_ms)` is true, keeping every entry seen after `now_ms`
/// whatever its state: a call between `now_ms` and its latest seen time is
/// answered at that time, which a new client would not be (its use logged
/// earlier would leave the window earlier). Returns how many were dropped.
pub(super) fn drop_where<S>(
    shard: &Shard<S>,
    map: &mut HashTable<Slot<S>>,
    now_ms: u64,
    remove: &mut impl FnMut(&mut S, u64) -> bool,
) -> usize {
    let before = map.len();
    map.retain(|slot| slot.last_seen > now_ms || !remove(&mut slot.state, now_ms));
    let dropped = before - map.len();
    shard.removed(dropped);
    dropped
}
