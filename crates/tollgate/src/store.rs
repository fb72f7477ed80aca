//! The in-memory store: a sharded map from client id to policy state.
//!
//! Clients are spread over independently locked shards by hash, so threads
//! working on different clients rarely meet on a lock, and a decision costs
//! one hash, one short critical section and the policy's arithmetic.

use std::sync::atomic::{AtomicU64, Ordering};

use compact_str::CompactString;
use foldhash::fast::SeedableRandomState;
use hashbrown::HashTable;
// Not std's Mutex: two threads deciding for one hot client (the buggy app
// in a retry loop) hand the shard lock back and forth, and parking_lot's
// adaptive spinning halves the time per decision there (BENCHMARKS.md);
// it also has no poisoning, which a store whose policies never leave a
// state half-written does not need.
use parking_lot::{Mutex, MutexGuard};
use std::hash::BuildHasher;

pub use crate::eviction::{Eviction, LeastRecentlySeen};
pub use lineage::{Lineage, SameEntry};

use crate::same_id::same_id;

mod lineage;
mod room;

use room::drop_where;
pub use room::RECLAIM_BEHIND_MS;

/// One client's state as the store keeps it.
#[derive(Debug, Clone)]
pub struct Entry<S> {
    /// The latest time seen for this client: a call with an earlier time is
    /// answered as if made at this time.
    pub last_seen: u64,
    /// The policy's state.
    pub state: S,
}

/// One client in a shard's table. The id is kept inline when it has at most
/// [`MemoryStore::INLINE_ID_BYTES`] bytes (a `Box<str>` cost a second cache
/// miss on every probe: the pointer, then the bytes it points to), so a
/// token bucket's slot is one 48-byte read. The time and the state are
/// fields of their own rather than an [`Entry`], so that a state aligned to
/// 16 bytes (GCRA's `u128`) packs right after the 24-byte id and 8-byte time.
struct Slot<S> {
    client: CompactString,
    last_seen: u64,
    state: S,
}

/// A shard on its own cache lines, so that two cores locking neighbouring
/// shards do not fight over one line.
#[repr(align(128))]
struct Shard<S> {
    map: Mutex<HashTable<Slot<S>>>,
    /// How many entries left this shard (evicted, reclaimed, swept,
    /// cleared): a [`Lineage`]. Changed and read under `map`'s lock only.
    removals: AtomicU64,
    /// Most clients this shard may hold (`usize::MAX`: no cap).
    cap: usize,
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
    /// Which entry this is, for [`MemoryStore::with_same_entry`].
    pub lineage: Lineage,
}

/// A concurrent map from client id to per-client state `S`.
///
/// Shared by reference (`&self`) from any number of threads.
///
/// # Capped stores
///
/// [`MemoryStore::with_max_clients`] bounds the number of clients kept, so
/// that a flood of distinct client ids cannot grow memory without end. The
/// cap is kept per shard (the 64 shards' caps add up to it, each
/// `max_clients / 64` or one more, at least 2). When a new client arrives
/// at a full shard, the shard first drops entries whose removal changes no
/// answer (the caller says which, see
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
    /// Spreads clients over the shards; random, unless the store was made
    /// [`MemoryStore::repeatable`].
    hasher: SeedableRandomState,
    /// Most clients the store holds, the sum of its shards' caps (`None`:
    /// no cap).
    max_clients: Option<usize>,
    /// Entries dropped to make room because they changed no answer.
    reclaimed: AtomicU64,
    /// Entries dropped to make room although they still held state.
    evicted: AtomicU64,
}

/// Shards per store: enough that two to a few dozen cores rarely collide.
const SHARDS: usize = 64;

/// The fewest clients a capped shard holds: two, so that a newcomer always
/// has another resident to weigh against the one there (a shard of one
/// would have to evict its only client, however much it used, for any
/// newcomer: a spent client would win its quota back with one fresh id).
const MIN_SHARD_CAP: usize = 2;

impl<S> Default for MemoryStore<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> MemoryStore<S> {
    /// An empty store without a cap on clients.
    pub fn new() -> Self {
        Self::with_shard_caps(None)
    }

    /// An empty store holding at most `max(max_clients, 128)` clients: the
    /// 64 shards share the cap, each holding `max_clients / 64` or one
    /// more (two per shard at least). See the type's documentation for what
    /// happens when a shard is full.
    pub fn with_max_clients(max_clients: usize) -> Self {
        Self::with_shard_caps(Some(Self::clients_kept_at_most(max_clients)))
    }

    /// This store, spreading clients over its shards the same way in every
    /// run and process, so that a capped store evicts the same clients
    /// for the same calls: for what-if tools whose answers must not change
    /// from one run to the next (`tollgate simulate`). Not for a server:
    /// whoever knows the spread can pick ids that all land in one shard.
    #[must_use]
    pub fn repeatable(mut self) -> Self {
        self.hasher = SeedableRandomState::fixed();
        self
    }

    /// The bound on clients a store made by [`Self::with_max_clients`]
    /// keeps to: `max(max_clients, 128)` (two clients per
    /// shard at least), as `tollgate check` tells it.
    pub const fn clients_kept_at_most(max_clients: usize) -> usize {
        if max_clients < SHARDS * MIN_SHARD_CAP {
            SHARDS * MIN_SHARD_CAP
        } else {
            max_clients
        }
    }

    /// `max_clients` spread over the shards, the remainder one each to the
    /// first ones, so that the caps add up to it.
    fn with_shard_caps(max_clients: Option<usize>) -> Self {
        let cap = |index: usize| match max_clients {
            Some(total) => total / SHARDS + usize::from(index < total % SHARDS),
            None => usize::MAX,
        };
        Self {
            shards: (0..SHARDS)
                .map(|index| Shard {
                    map: Mutex::new(HashTable::new()),
                    removals: AtomicU64::new(0),
                    cap: cap(index),
                })
                .collect(),
            hasher: SeedableRandomState::random(),
            max_clients,
            reclaimed: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }

    /// The most clients this store keeps, if capped
    /// (see [`MemoryStore::with_max_clients`]).
    pub fn max_clients(&self) -> Option<usize> {
        self.max_clients
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
        self.shard_of(hash).map.lock()
    }

    fn shard_of(&self, hash: u64) -> &Shard<S> {
        &self.shards[(hash >> 40) as usize % SHARDS]
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
        let shard = self.shard_of(hash);
        let mut map = shard.map.lock();
        let same = |slot: &Slot<S>| same_id(slot.client.as_bytes(), client.as_bytes());
        if let Some(slot) = map.find_mut(hash, same) {
            slot.last_seen = slot.last_seen.max(now_ms);
            return f(Access {
                state: &mut slot.state,
                now_ms: slot.last_seen,
                is_new: false,
                lineage: shard.lineage(),
            });
        }
        // Room first, so that the new entry's lineage is the one it is
        // stored under.
        if map.len() >= shard.cap {
            self.make_room(shard, &mut map, now_ms, &mut eviction);
        }
        let mut state = init(now_ms);
        let result = f(Access {
            state: &mut state,
            now_ms,
            is_new: true,
            lineage: shard.lineage(),
        });
        let hasher = &self.hasher;
        map.insert_unique(
            hash,
            Slot {
                client: CompactString::new(client),
                last_seen: now_ms,
                state,
            },
            |slot| hasher.hash_one(slot.client.as_str()),
        );
        result
    }

    /// A copy of the client's entry, if the client is known.
    pub fn get(&self, client: &str) -> Option<Entry<S>>
    where
        S: Clone,
    {
        let hash = self.hash(client);
        let map = self.shard(hash);
        map.find(hash, |slot| {
            same_id(slot.client.as_bytes(), client.as_bytes())
        })
        .map(|slot| Entry {
            last_seen: slot.last_seen,
            state: slot.state.clone(),
        })
    }

    /// Runs `f` on the state of `client` under its shard lock, when the
    /// client is stored in the entry read under `lineage` (an
    /// [`Access::lineage`]); nothing is stored when it is not (unlike
    /// [`MemoryStore::with_entry`], which stores an unknown client). The
    /// latest seen time stays as it is.
    pub fn with_same_entry<R>(
        &self,
        client: &str,
        lineage: Lineage,
        f: impl FnOnce(&mut S) -> R,
    ) -> SameEntry<R> {
        let hash = self.hash(client);
        let shard = self.shard_of(hash);
        let mut map = shard.map.lock();
        let found = map.find_mut(hash, |slot| {
            same_id(slot.client.as_bytes(), client.as_bytes())
        });
        match found {
            None => SameEntry::Gone,
            Some(_) if shard.lineage() != lineage => SameEntry::Unsure,
            Some(slot) => SameEntry::Same(f(&mut slot.state)),
        }
    }

    /// Number of clients with stored state.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.map.lock().len()).sum()
    }

    /// True when no client has stored state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Offers every entry last seen at or before `now_ms` to `remove(state,
    /// now_ms)`, one shard at a time (other shards keep serving meanwhile),
    /// and drops those for which it returns true; it may also trim the state
    /// it keeps. Returns how many entries were dropped.
    ///
    /// An entry seen after `now_ms` is neither offered nor trimmed: a call
    /// between the two is answered at its latest seen time, which a state
    /// judged at `now_ms` could not keep.
    pub fn sweep_with(&self, now_ms: u64, mut remove: impl FnMut(&mut S, u64) -> bool) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut map = shard.map.lock();
            removed += drop_where(shard, &mut map, now_ms, &mut remove);
        }
        removed
    }

    /// Removes every client.
    pub fn clear(&self) {
        for shard in self.shards.iter() {
            let mut map = shard.map.lock();
            shard.removed(map.len());
            map.clear();
        }
    }

    /// Bytes the store spends per stored client besides the state's own heap
    /// memory and the id's (see [`MemoryStore::id_heap_bytes`]): the slot
    /// (the id, inline up to [`MemoryStore::INLINE_ID_BYTES`] bytes, the time,
    /// the inline state) plus the table's control byte.
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
