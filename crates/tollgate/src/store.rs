//! The in-memory store: a sharded map from client id to policy state.
//!
//! Clients are spread over independently locked shards by hash, so threads
//! working on different clients rarely meet on a lock, and a decision costs
//! one hash, one short critical section and the policy's arithmetic.

use std::sync::atomic::{AtomicU64, Ordering};

use foldhash::fast::RandomState;
use hashbrown::HashTable;
// Not std's Mutex: two threads deciding for one hot client (the buggy app
// in a retry loop) hand the shard lock back and forth, and parking_lot's
// adaptive spinning halves the time per decision there (BENCHMARKS.md);
// it also has no poisoning, which a store whose policies never leave a
// state half-written does not need.
use parking_lot::{Mutex, MutexGuard};
use std::hash::BuildHasher;

/// One client's state as the store keeps it.
#[derive(Debug, Clone)]
pub struct Entry<S> {
    /// The latest time seen for this client: a call with an earlier time is
    /// answered as if made at this time.
    pub last_seen: u64,
    /// The policy's state.
    pub state: S,
}

struct Slot<S> {
    client: Box<str>,
    entry: Entry<S>,
}

/// A shard on its own cache lines, so that two cores locking neighbouring
/// shards do not fight over one line.
#[repr(align(128))]
struct Shard<S> {
    map: Mutex<HashTable<Slot<S>>>,
}

/// What dropping one entry to make room for a new client would give away,
/// as the store's caller judges it (see [`MemoryStore::with_entry_reclaiming`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCost {
    /// Dropping the entry changes no answer: such entries go first.
    Nothing,
    /// Dropping the entry would give the client back this many units (it
    /// would start afresh): entries that give back fewer go first, so a
    /// client that used up its quota is evicted last.
    GivesBack(u64),
}

/// What [`MemoryStore::with_entry`] hands to its closure.
pub struct Access<'a, S> {
    /// The client's state (freshly made if the client was unknown).
    pub state: &'a mut S,
    /// The time to decide at: the call's time, or the latest time already
    /// seen for this client if that is later.
    pub now_ms: u64,
    /// True when the client was unknown before this call.
    pub is_new: bool,
}

/// A concurrent map from client id to per-client state `S`.
///
/// Shared by reference (`&self`) from any number of threads.
///
/// # Capped stores
///
/// [`MemoryStore::with_max_clients`] bounds the number of clients kept, so
/// that a flood of distinct client ids cannot grow memory without end. The
/// cap is kept per shard (each shard holds at most `max_clients / 64`, at
/// least 1). When a new client arrives at a full shard, the shard first drops
/// entries whose removal changes no answer (the caller says which, see
/// [`MemoryStore::with_entry_reclaiming`]); if that frees less than an eighth
/// of the shard, the clients whose eviction gives back the fewest units are
/// evicted in one batch down to seven eighths of the shard's cap (among
/// equals, the least recently seen first; [`MemoryStore::with_entry`] counts
/// every client as equal, so it evicts least recently seen first). Batching
/// keeps the cost of a full shard amortised: one pass over the shard per
/// eighth of its cap of new clients. An evicted client starts afresh at its
/// next call, so the cap trades exactness for idle clients against memory;
/// [`MemoryStore::evicted`] counts how often that happened. Giving back the
/// least first means that a flood of fresh ids evicts fresh ids: a client
/// that used up its quota goes only when every other client in its shard
/// has used at least as much.
pub struct MemoryStore<S> {
    shards: Box<[Shard<S>]>,
    hasher: RandomState,
    /// Most clients one shard may hold (`usize::MAX`: no cap).
    shard_cap: usize,
    /// Entries dropped to make room because they changed no answer.
    reclaimed: AtomicU64,
    /// Entries dropped to make room although they still held state.
    evicted: AtomicU64,
}

/// Shards per store: enough that two to a few dozen cores rarely collide.
const SHARDS: usize = 64;

impl<S> Default for MemoryStore<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> MemoryStore<S> {
    /// An empty store without a cap on clients.
    pub fn new() -> Self {
        Self::with_shard_cap(usize::MAX)
    }

    /// An empty store holding at most `max(max_clients, 64)` clients: each of
    /// the 64 shards holds at most `max(max_clients / 64, 1)`. See the type's
    /// documentation for what happens when a shard is full.
    pub fn with_max_clients(max_clients: usize) -> Self {
        Self::with_shard_cap((max_clients / SHARDS).max(1))
    }

    fn with_shard_cap(shard_cap: usize) -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| Shard {
                    map: Mutex::new(HashTable::new()),
                })
                .collect(),
            hasher: RandomState::default(),
            shard_cap,
            reclaimed: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }

    /// The most clients this store keeps, if capped
    /// (see [`MemoryStore::with_max_clients`]).
    pub fn max_clients(&self) -> Option<usize> {
        (self.shard_cap != usize::MAX).then(|| self.shard_cap * SHARDS)
    }

    /// How many clients were dropped to make room for new ones although their
    /// state still mattered. Always 0 without a cap.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// How many clients were dropped to make room for new ones because their
    /// removal changed no answer. Always 0 without a cap.
    pub fn reclaimed(&self) -> u64 {
        self.reclaimed.load(Ordering::Relaxed)
    }

    fn hash(&self, client: &str) -> u64 {
        self.hasher.hash_one(client)
    }

    /// The shard for a hash. Uses bits the shard's own table does not use
    /// for its bucket index (low bits) or its tag (top 7 bits).
    fn shard(&self, hash: u64) -> MutexGuard<'_, HashTable<Slot<S>>> {
        let index = (hash >> 40) as usize % SHARDS;
        self.shards[index].map.lock()
    }

    /// Runs `f` on the client's state under the client's shard lock.
    ///
    /// An unknown client gets `init(now_ms)` and is stored, even when `f`
    /// only asks: its entry records the latest time seen, at which a later
    /// call with an earlier time is answered. The time handed to `f` is never
    /// earlier than the latest time seen for the client.
    ///
    /// In a capped store, making room for a new client evicts the least
    /// recently seen ones; use [`MemoryStore::with_entry_reclaiming`] to drop
    /// entries that no longer matter first and to evict by what each
    /// eviction gives away.
    pub fn with_entry<R>(
        &self,
        client: &str,
        now_ms: u64,
        init: impl FnOnce(u64) -> S,
        f: impl FnOnce(Access<'_, S>) -> R,
    ) -> R {
        self.with_entry_reclaiming(client, now_ms, init, |_, _| DropCost::GivesBack(0), f)
    }

    /// [`MemoryStore::with_entry`] for a capped store: when a new client
    /// finds its shard full, every entry of the shard is judged by
    /// `judge(state, now)` (which may trim the state first): entries whose
    /// drop costs [`DropCost::Nothing`] go first; if that did not free an
    /// eighth of the shard, the entries that give back the fewest units go
    /// next, the least recently seen first among equals. `judge` is never
    /// called on an uncapped store.
    pub fn with_entry_reclaiming<R>(
        &self,
        client: &str,
        now_ms: u64,
        init: impl FnOnce(u64) -> S,
        judge: impl FnMut(&mut S, u64) -> DropCost,
        f: impl FnOnce(Access<'_, S>) -> R,
    ) -> R {
        let hash = self.hash(client);
        let mut map = self.shard(hash);
        if let Some(slot) = map.find_mut(hash, |slot| &*slot.client == client) {
            let entry = &mut slot.entry;
            entry.last_seen = entry.last_seen.max(now_ms);
            return f(Access {
                state: &mut entry.state,
                now_ms: entry.last_seen,
                is_new: false,
            });
        }
        let mut state = init(now_ms);
        let result = f(Access {
            state: &mut state,
            now_ms,
            is_new: true,
        });
        if map.len() >= self.shard_cap {
            self.make_room(&mut map, now_ms, judge);
        }
        let hasher = &self.hasher;
        map.insert_unique(
            hash,
            Slot {
                client: client.into(),
                entry: Entry {
                    last_seen: now_ms,
                    state,
                },
            },
            |slot| hasher.hash_one(&*slot.client),
        );
        result
    }

    /// Brings a full shard down to seven eighths of its cap: first by dropping
    /// entries whose drop costs nothing, then by evicting those that give
    /// back the fewest units (least recently seen first among equals).
    fn make_room(
        &self,
        map: &mut HashTable<Slot<S>>,
        now_ms: u64,
        mut judge: impl FnMut(&mut S, u64) -> DropCost,
    ) {
        let target = self.shard_cap - (self.shard_cap / 8).max(1);
        // (units given back, last seen, bucket): removing a bucket by its
        // index leaves every other entry in its bucket.
        let mut candidates: Vec<(u64, u64, usize)> = Vec::with_capacity(map.len());
        let buckets: Vec<usize> = map.iter_buckets().collect();
        let mut reclaimed = 0;
        for bucket in buckets {
            let Some(slot) = map.get_bucket_mut(bucket) else {
                continue;
            };
            let entry = &mut slot.entry;
            match judge(&mut entry.state, now_ms.max(entry.last_seen)) {
                DropCost::Nothing => {
                    remove_bucket(map, bucket);
                    reclaimed += 1;
                }
                DropCost::GivesBack(units) => candidates.push((units, entry.last_seen, bucket)),
            }
        }
        self.reclaimed.fetch_add(reclaimed, Ordering::Relaxed);
        if map.len() <= target {
            return;
        }
        let excess = map.len() - target;
        candidates.select_nth_unstable(excess - 1);
        for &(_, _, bucket) in &candidates[..excess] {
            remove_bucket(map, bucket);
        }
        self.evicted.fetch_add(excess as u64, Ordering::Relaxed);
    }

    /// A copy of the client's entry, if the client is known.
    pub fn get(&self, client: &str) -> Option<Entry<S>>
    where
        S: Clone,
    {
        let hash = self.hash(client);
        let map = self.shard(hash);
        map.find(hash, |slot| &*slot.client == client)
            .map(|slot| slot.entry.clone())
    }

    /// Number of clients with stored state.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.map.lock().len()).sum()
    }

    /// True when no client has stored state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Offers every entry to `remove(state, now)`, one shard at a time
    /// (other shards keep serving meanwhile), and drops those for which it
    /// returns true; it may also trim the state it keeps. Returns how many
    /// entries were dropped.
    ///
    /// `now_ms` is clamped per entry to its latest seen time, so a sweep with
    /// a stale clock never removes state that is still live.
    pub fn sweep_with(&self, now_ms: u64, mut remove: impl FnMut(&mut S, u64) -> bool) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut map = shard.map.lock();
            removed += drop_where(&mut map, now_ms, &mut remove);
        }
        removed
    }

    /// Removes every client.
    pub fn clear(&self) {
        for shard in self.shards.iter() {
            shard.map.lock().clear();
        }
    }

    /// Bytes the store spends per stored client besides the state's own heap
    /// memory: the slot (id pointer, time, inline state) plus the table's
    /// control byte. The id's own bytes come on top.
    pub fn bytes_per_client_inline() -> usize {
        std::mem::size_of::<Slot<S>>() + 1
    }
}

/// Removes the entry in `bucket`, if any.
fn remove_bucket<T>(map: &mut HashTable<T>, bucket: usize) {
    if let Ok(entry) = map.get_bucket_entry(bucket) {
        entry.remove();
    }
}

/// Drops the entries of one shard for which `remove(state, now)` is true,
/// with `now` clamped to each entry's latest seen time (so a stale clock
/// never removes live state). Returns how many were dropped.
fn drop_where<S>(
    map: &mut HashTable<Slot<S>>,
    now_ms: u64,
    remove: &mut impl FnMut(&mut S, u64) -> bool,
) -> usize {
    let before = map.len();
    map.retain(|slot| {
        let now = now_ms.max(slot.entry.last_seen);
        !remove(&mut slot.entry.state, now)
    });
    before - map.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts one call for `client` in a store of plain counters.
    fn touch(store: &MemoryStore<u32>, client: &str, now: u64) {
        store.with_entry(client, now, |_| 0, |a| *a.state += 1);
    }

    #[test]
    fn uncapped_store_keeps_everyone() {
        let store = MemoryStore::<u32>::new();
        for i in 0..5_000 {
            touch(&store, &format!("c{i}"), i);
        }
        assert_eq!(store.len(), 5_000);
        assert_eq!(store.max_clients(), None);
        assert_eq!(store.evicted() + store.reclaimed(), 0);
    }

    #[test]
    fn capped_store_stays_under_its_cap_and_counts_evictions() {
        let store = MemoryStore::<u32>::with_max_clients(640);
        assert_eq!(store.max_clients(), Some(640));
        for i in 0..100_000u64 {
            touch(&store, &format!("c{i}"), i);
            assert!(store.len() <= 640);
        }
        // Every client either is still there or was counted as evicted.
        assert_eq!(store.len() as u64 + store.evicted(), 100_000);
        assert_eq!(store.reclaimed(), 0);
        // The most recent client always survives its own insertion.
        assert!(store.get("c99999").is_some());
    }

    #[test]
    fn tiny_caps_still_hold_one_client_per_shard() {
        let store = MemoryStore::<u32>::with_max_clients(1);
        assert_eq!(store.max_clients(), Some(64));
        for i in 0..1_000u64 {
            touch(&store, &format!("c{i}"), i);
            assert!(store.len() <= 64);
        }
    }

    #[test]
    fn recently_seen_clients_outlive_idle_ones() {
        // Four clients per shard: a hot client touched before every new one
        // is never the least recently seen in its shard.
        let store = MemoryStore::<u32>::with_max_clients(256);
        let mut now = 0;
        for i in 0..20_000 {
            now += 1;
            touch(&store, "hot", now);
            now += 1;
            touch(&store, &format!("cold{i}"), now);
        }
        assert_eq!(store.get("hot").map(|e| e.state), Some(20_000));
        assert!(store.evicted() > 0);
    }

    #[test]
    fn reclaimable_entries_go_before_any_eviction() {
        let store = MemoryStore::<u32>::with_max_clients(640);
        // Even states "no longer matter": dropping them changes no answer.
        for i in 0..50_000u64 {
            store.with_entry_reclaiming(
                &format!("c{i}"),
                i,
                |_| (i % 2) as u32,
                |state, _| {
                    if *state % 2 == 0 {
                        DropCost::Nothing
                    } else {
                        DropCost::GivesBack(1)
                    }
                },
                |_| (),
            );
            assert!(store.len() <= 640);
        }
        assert!(store.reclaimed() > 0);
        // Odd states never reclaim, so evictions still happen, but at most
        // once per batch per shard: far fewer evictions than clients.
        assert!(store.reclaimed() + store.evicted() + store.len() as u64 == 50_000);
        assert!(store.evicted() < store.reclaimed() + store.evicted());
    }

    /// Inserts `client` with `units` as its state, judged by that number.
    fn insert_giving_back(store: &MemoryStore<u64>, client: &str, units: u64, now: u64) {
        store.with_entry_reclaiming(
            client,
            now,
            |_| units,
            |state, _| DropCost::GivesBack(*state),
            |_| (),
        );
    }

    #[test]
    fn clients_that_give_back_the_most_are_evicted_last() {
        let store = MemoryStore::<u64>::with_max_clients(640);
        insert_giving_back(&store, "ten", 10, 0);
        insert_giving_back(&store, "five", 5, 1);
        // The newcomers give back 1 each and are seen later, yet they go
        // before the two older clients that give back more.
        for i in 0..20_000 {
            insert_giving_back(&store, &format!("c{i}"), 1, 2 + i);
        }
        assert!(store.evicted() > 0);
        assert_eq!(store.get("ten").map(|e| e.state), Some(10));
        assert_eq!(store.get("five").map(|e| e.state), Some(5));
    }

    #[test]
    fn among_clients_that_give_back_as_much_the_least_recently_seen_go() {
        // The case that remains: a shard full of clients that all give back
        // the most. Then the oldest goes, as with plain LRU.
        let store = MemoryStore::<u64>::with_max_clients(640);
        insert_giving_back(&store, "old", 10, 0);
        for i in 0..20_000 {
            insert_giving_back(&store, &format!("c{i}"), 10, 1 + i);
        }
        assert!(store.get("old").is_none());
        assert!(store.get("c19999").is_some());
    }
}
