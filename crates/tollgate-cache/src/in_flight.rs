//! What the store allowed a client while others of its calls were in
//! flight, for [`RejectionCache::remember_call`](crate::RejectionCache::remember_call).
//!
//! Two calls of one client in flight together through one instance may be
//! run by the store in one order and handed to the cache in the other: a
//! rejection run first, then an allowed request of a smaller cost that took
//! from every limit, whose answer the cache took in first (with no entry
//! yet, it had nothing to take it off). The rejection's room, remembered
//! then, would be the room before that request. So each call of a client
//! notes, when it is sent, how much the store had allowed the client's
//! calls in flight so far, and a rejection takes off its room what was
//! allowed since (which may count a request the store ran before it: room
//! taken off twice only sends requests back to the store). The note lives
//! while the client has calls in flight, so it costs a client with none
//! nothing.

use std::collections::HashMap;
use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use parking_lot::Mutex;

/// Shards of the notes (a power of two).
const SHARDS: usize = 16;

/// One client's calls in flight.
#[derive(Default)]
struct Calls {
    /// How many.
    outstanding: u32,
    /// The costs the store allowed the client since its first call in
    /// flight was sent.
    allowed: u64,
}

/// One shard's clients with calls in flight.
type Shard = Mutex<HashMap<Box<str>, Calls>>;

/// The clients with calls in flight.
pub(crate) struct InFlight {
    shards: Box<[Shard]>,
    hasher: RandomState,
}

/// One call in flight, from when it is sent until it is dropped.
pub struct CallInFlight<'a> {
    in_flight: &'a InFlight,
    client: &'a str,
    /// What the client's calls had been allowed when this one was sent.
    allowed_before: u64,
}

impl InFlight {
    pub(crate) fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::default(),
        }
    }

    fn shard(&self, client: &str) -> &Shard {
        &self.shards[(self.hasher.hash_one(client) as usize) % SHARDS]
    }

    /// Notes a call of `client` sent now.
    pub(crate) fn begin<'a>(&'a self, client: &'a str) -> CallInFlight<'a> {
        let mut calls = self.shard(client).lock();
        let calls = calls.entry(client.into()).or_default();
        calls.outstanding += 1;
        CallInFlight {
            in_flight: self,
            client,
            allowed_before: calls.allowed,
        }
    }

    /// Clients with calls in flight (for tests).
    pub(crate) fn clients(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

impl CallInFlight<'_> {
    /// Takes in the store's answer to this call, `allowed` the cost it let
    /// in (0 when it refused), for the client's other calls in flight; and
    /// returns what the store allowed the client's calls since this one was
    /// sent, its own cost included.
    pub(crate) fn answered(&self, allowed: u32) -> u64 {
        let mut calls = self.in_flight.shard(self.client).lock();
        calls.get_mut(self.client).map_or(0, |c| {
            c.allowed += u64::from(allowed);
            c.allowed - self.allowed_before
        })
    }
}

impl Drop for CallInFlight<'_> {
    fn drop(&mut self) {
        let mut calls = self.in_flight.shard(self.client).lock();
        if let Some(c) = calls.get_mut(self.client) {
            c.outstanding -= 1;
            if c.outstanding == 0 {
                calls.remove(self.client);
            }
        }
    }
}
