//! The in-memory store: a sharded map from client id to policy state.
//!
//! Clients are spread over shards by hash. A decision for a known client
//! takes its shard's table for reading and then the client's own slot lock,
//! so that two threads deciding for different clients write no cache line
//! in common: the table's reader lock is sharded by thread
//! ([`crossbeam_utils::sync::ShardedLock`]: each thread locks a line of its
//! own) and the slot lock sits in the slot, on the line the decision reads
//! anyway. With one lock per shard, both threads took every shard's lock in
//! turn, and about every other decision waited for the lock's line to come
//! back from the other core (BENCHMARKS.md, issue 12). Only a new client
//! takes the shard for writing (every thread's reader line).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::PoisonError;

use compact_str::CompactString;
use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard, ShardedLockWriteGuard};
use foldhash::fast::RandomState;
use hashbrown::HashTable;
// Not std's Mutex: two threads deciding for one hot client (the buggy app
// in a retry loop) hand the slot lock back and forth, and parking_lot's
// adaptive spinning halves the time per decision there (BENCHMARKS.md);
// its lock is one byte, and it has no poisoning, which a store whose
// policies never leave a state half-written does not need.
use parking_lot::{Mutex, MutexGuard};
use std::hash::BuildHasher;

pub use crate::eviction::{Eviction, LeastRecentlySeen};
use crate::same_id::same_id;

/// One client's state as the store keeps it.
#[derive(Debug, Clone)]
pub struct Entry<S> {
    /// The latest time seen for this client: a call with an earlier time is
    /// answered as if made at this time.
    pub last_seen: u64,
    /// The policy's state.
    pub state: S,
}

/// One client in a shard's table, behind its own lock. The id is kept
/// inline when it has at most [`MemoryStore::INLINE_ID_BYTES`] bytes (a
/// `Box<str>` cost a second cache miss on every probe: the pointer, then the
/// bytes it points to). The id is under the lock too: outside it, a state
/// aligned to 16 bytes (GCRA's `u128`) would pad the slot by 16 more bytes.
type Slot<S> = Mutex<Client<S>>;

/// What a slot's lock guards.
struct Client<S> {
    id: CompactString,
    last_seen: u64,
    state: S,
}

/// A shard on its own cache lines, so that a new client in one shard does
/// not move the line of its neighbour's table.
#[repr(align(128))]
struct Shard<S> {
    table: ShardedLock<HashTable<Slot<S>>>,
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
                    table: ShardedLock::new(HashTable::new()),
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
    fn shard(&self, hash: u64) -> &ShardedLock<HashTable<Slot<S>>> {
        let index = (hash >> 40) as usize % SHARDS;
        &self.shards[index].table
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
        self.with_entry_reclaiming(client, now_ms, init, LeastRecentlySeen, f)
    }

    /// [`MemoryStore::with_entry`] for a capped store: when a new client
    /// finds its shard full, the entries that `eviction` finds reclaimable
    /// go first; if that did not free an eighth of the shard, those whose
    /// eviction gives back the fewest units go next, the least recently seen
    /// first among equals. `eviction` is never called on an uncapped store.
    pub fn with_entry_reclaiming<R>(
        &self,
        client: &str,
        now_ms: u64,
        init: impl FnOnce(u64) -> S,
        mut eviction: impl Eviction<S>,
        f: impl FnOnce(Access<'_, S>) -> R,
    ) -> R {
        let hash = self.hash(client);
        let shard = self.shard(hash);
        if let Some(mut known) = find(&read(shard), hash, client) {
            known.last_seen = known.last_seen.max(now_ms);
            let now_ms = known.last_seen;
            return f(Access {
                state: &mut known.state,
                now_ms,
                is_new: false,
            });
        }
        let mut map = write(shard);
        // Another thread may have added the client between the two locks.
        if let Some(slot) = map.find_mut(hash, |slot| slot.lock().id == client) {
            let known = slot.get_mut();
            known.last_seen = known.last_seen.max(now_ms);
            let now_ms = known.last_seen;
            return f(Access {
                state: &mut known.state,
                now_ms,
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
            self.make_room(&mut map, now_ms, &mut eviction);
        }
        let hasher = &self.hasher;
        map.insert_unique(
            hash,
            Mutex::new(Client {
                id: CompactString::new(client),
                last_seen: now_ms,
                state,
            }),
            // Under the write lock: no slot lock is held, none waits.
            |slot| hasher.hash_one(slot.lock().id.as_str()),
        );
        result
    }

    /// Brings a full shard down to seven eighths of its cap: first by dropping
    /// reclaimable entries, then by evicting those that give back the fewest
    /// units (least recently seen first among equals).
    ///
    /// Two passes, because the states may live behind pointers: the first (as
    /// short per entry as the caller's check) lets the processor fetch many
    /// entries at once; the second computes what each gives back from the
    /// cache.
    fn make_room(
        &self,
        map: &mut HashTable<Slot<S>>,
        now_ms: u64,
        eviction: &mut impl Eviction<S>,
    ) {
        let target = self.shard_cap - (self.shard_cap / 8).max(1);
        let reclaimed = drop_where(map, now_ms, &mut |state, now| {
            eviction.reclaimable(state, now)
        });
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
                let slot = map.get_bucket(bucket)?.lock();
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
        self.evicted.fetch_add(excess as u64, Ordering::Relaxed);
    }

    /// A copy of the client's entry, if the client is known.
    pub fn get(&self, client: &str) -> Option<Entry<S>>
    where
        S: Clone,
    {
        let hash = self.hash(client);
        let map = read(self.shard(hash));
        find(&map, hash, client).map(|known| Entry {
            last_seen: known.last_seen,
            state: known.state.clone(),
        })
    }

    /// Number of clients with stored state.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| read(&shard.table).len())
            .sum()
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
            removed += drop_where(&mut write(&shard.table), now_ms, &mut remove);
        }
        removed
    }

    /// Removes every client.
    pub fn clear(&self) {
        for shard in self.shards.iter() {
            write(&shard.table).clear();
        }
    }

    /// Bytes the store spends per stored client besides the state's own heap
    /// memory and the id's (see [`MemoryStore::id_heap_bytes`]): the slot
    /// (its lock, the id, inline up to [`MemoryStore::INLINE_ID_BYTES`]
    /// bytes, the time, the inline state) plus the table's control byte.
    pub fn bytes_per_client_inline() -> usize {
        std::mem::size_of::<Slot<S>>() + 1
    }

    /// Longest id kept inside the slot; a longer one goes on the heap.
    pub const INLINE_ID_BYTES: usize = std::mem::size_of::<CompactString>();

    /// Heap bytes the store spends on `client`'s id: 0 when it fits inline,
    /// else its length (the allocator's rounding on top).
    pub fn id_heap_bytes(client: &str) -> usize {
        if client.len() <= Self::INLINE_ID_BYTES {
            0
        } else {
            client.len()
        }
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
        let slot = slot.get_mut();
        let now = now_ms.max(slot.last_seen);
        !remove(&mut slot.state, now)
    });
    before - map.len()
}

/// The slot of `client`, locked, if the table holds it. Only slots whose
/// hash tag matches are locked to compare ids, and only the client's stays
/// locked.
fn find<'a, S>(
    map: &'a HashTable<Slot<S>>,
    hash: u64,
    client: &str,
) -> Option<MutexGuard<'a, Client<S>>> {
    map.iter_hash(hash)
        .map(Mutex::lock)
        .find(|slot| same_id(slot.id.as_bytes(), client.as_bytes()))
}

/// A shard's table for reading. A panic under the write lock (only in a
/// caller's `init` or `f`, before the table changed) leaves the table whole,
/// so a poisoned lock is used as is.
fn read<T>(lock: &ShardedLock<T>) -> ShardedLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// A shard's table for writing; see [`read`] on poisoning.
fn write<T>(lock: &ShardedLock<T>) -> ShardedLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}
