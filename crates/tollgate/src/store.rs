//! The in-memory store: a sharded map from client id to policy state.
//!
//! Clients are spread over independently locked shards by hash, so threads
//! working on different clients rarely meet on a lock, and a decision costs
//! one hash, one short critical section and the policy's arithmetic.

use std::sync::{Mutex, MutexGuard, PoisonError};

use foldhash::fast::RandomState;
use hashbrown::HashTable;
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
pub struct MemoryStore<S> {
    shards: Box<[Shard<S>]>,
    hasher: RandomState,
}

/// Shards per store: enough that two to a few dozen cores rarely collide.
const SHARDS: usize = 64;

impl<S> Default for MemoryStore<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> MemoryStore<S> {
    /// An empty store.
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| Shard {
                    map: Mutex::new(HashTable::new()),
                })
                .collect(),
            hasher: RandomState::default(),
        }
    }

    fn hash(&self, client: &str) -> u64 {
        self.hasher.hash_one(client)
    }

    /// The shard for a hash. Uses bits the shard's own table does not use
    /// for its bucket index (low bits) or its tag (top 7 bits).
    fn shard(&self, hash: u64) -> MutexGuard<'_, HashTable<Slot<S>>> {
        let index = (hash >> 40) as usize % SHARDS;
        // A poisoned shard only means another thread panicked while holding
        // it; policies never leave a state half-written, so carry on.
        self.shards[index]
            .map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the client's state under the client's shard lock.
    ///
    /// An unknown client gets `init(now_ms)`; it is kept afterwards only if
    /// `keep_new` says so for the state and result (so that merely asking
    /// about a client need not allocate). The time handed to `f` is never earlier
    /// than the latest time seen for the client.
    pub fn with_entry<R>(
        &self,
        client: &str,
        now_ms: u64,
        init: impl FnOnce(u64) -> S,
        keep_new: impl FnOnce(&S, &R) -> bool,
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
        if keep_new(&state, &result) {
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
        }
        result
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
        self.shards
            .iter()
            .map(|shard| {
                shard
                    .map
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .len()
            })
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
            let mut map = shard.map.lock().unwrap_or_else(PoisonError::into_inner);
            let before = map.len();
            map.retain(|slot| {
                let now = now_ms.max(slot.entry.last_seen);
                !remove(&mut slot.entry.state, now)
            });
            removed += before - map.len();
        }
        removed
    }

    /// Removes every client.
    pub fn clear(&self) {
        for shard in self.shards.iter() {
            shard
                .map
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
        }
    }

    /// Bytes the store spends per stored client besides the state's own heap
    /// memory: the slot (id pointer, time, inline state) plus the table's
    /// control byte. The id's own bytes come on top.
    pub fn bytes_per_client_inline() -> usize {
        std::mem::size_of::<Slot<S>>() + 1
    }
}
