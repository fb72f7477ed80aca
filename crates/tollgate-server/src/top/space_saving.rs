//! Space-Saving (Metwally, Agrawal, El Abbadi, 2005): the heaviest keys of a
//! stream in a fixed number of counters, whatever the number of keys.
//!
//! Each of the `capacity` counters holds a key, its estimated count and the
//! most that estimate can be over the truth. A known key's counter grows; an
//! unknown key takes over the smallest counter, inheriting its count as its
//! error. Hence, for a stream of `total` units:
//! - every estimate is an upper bound, at most `total / capacity` too high
//!   (`count - error` is a lower bound);
//! - every key with a true count above `total / capacity` holds a counter.
//!
//! The counters sit in a binary min-heap (smallest count at the root) with
//! an index from key to position, so that an update costs O(log capacity).
//!
//! Written here rather than taken from a crate: see the README ("Top
//! clients") for the crates considered.

use std::hash::BuildHasher;
use std::sync::Arc;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

/// One monitored key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// The key (a client id); its buffer is reused when the counter is taken over.
    pub key: String,
    /// A tag kept with the key, replaced on every update (the client's plan).
    pub tag: Arc<str>,
    /// A note kept with the key, replaced on every update (what limited
    /// the client). `None` costs an update no read of a string elsewhere
    /// in memory: the summary of all requests has none.
    pub note: Option<Arc<str>>,
    /// Estimated count: never below the true count.
    pub count: u64,
    /// How much `count` may be over the true count.
    pub error: u64,
    /// The key's hash, to find it in the index when it is replaced.
    hash: u64,
    /// The counter's position in the heap.
    at: usize,
}

impl Counter {
    /// Replaces the tag and the note, allocating only for one that changed.
    fn label(&mut self, tag: &str, note: Option<&str>) {
        if *self.tag != *tag {
            self.tag = Arc::from(tag);
        }
        if self.note.as_deref() != note {
            self.note = note.map(Arc::from);
        }
    }
}

/// A Space-Saving summary of at most `capacity` counters.
///
/// Counters never move in `counters`; the heap holds their indices, and the
/// index maps a key's hash to its counter, so that an update hashes the key
/// once and allocates nothing (a taken-over counter reuses its key's buffer).
#[derive(Debug, Clone)]
pub struct SpaceSaving {
    capacity: usize,
    counters: Vec<Counter>,
    /// Counter indices, a min-heap on their `count`.
    heap: Vec<usize>,
    /// Counter indices by the hash of their key.
    index: HashTable<usize>,
    hasher: RandomState,
    total: u64,
}

impl SpaceSaving {
    /// An empty summary with `capacity` counters (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            counters: Vec::with_capacity(capacity),
            heap: Vec::with_capacity(capacity),
            index: HashTable::with_capacity(capacity),
            hasher: RandomState::default(),
            total: 0,
        }
    }

    /// The number of counters.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Units counted so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Keys monitored now (at most [`SpaceSaving::capacity`]).
    pub fn len(&self) -> usize {
        self.counters.len()
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }

    /// The smallest count monitored when every counter is taken (0 otherwise):
    /// the most an unmonitored key may have had.
    pub fn floor(&self) -> u64 {
        if self.counters.len() < self.capacity {
            0
        } else {
            self.heap.first().map_or(0, |&c| self.counters[c].count)
        }
    }

    /// Counts `units` for `key`, tagged `tag`, with `note`.
    pub fn add(&mut self, key: &str, tag: &str, note: Option<&str>, units: u64) {
        self.total = self.total.saturating_add(units);
        let hash = self.hasher.hash_one(key);
        let counters = &self.counters;
        if let Some(&c) = self.index.find(hash, |&c| counters[c].key == key) {
            let counter = &mut self.counters[c];
            counter.count = counter.count.saturating_add(units);
            counter.label(tag, note);
            let at = counter.at;
            self.sift_down(at);
            return;
        }
        if self.counters.len() < self.capacity {
            let c = self.counters.len();
            self.counters.push(Counter {
                key: key.to_owned(),
                tag: Arc::from(tag),
                note: note.map(Arc::from),
                count: units,
                error: 0,
                hash,
                at: self.heap.len(),
            });
            self.heap.push(c);
            let counters = &self.counters;
            self.index.insert_unique(hash, c, |&c| counters[c].hash);
            self.sift_up(self.heap.len() - 1);
            return;
        }
        // Take over the smallest counter: its count becomes the new key's error.
        let c = self.heap[0];
        if let Ok(entry) = self.index.find_entry(self.counters[c].hash, |&x| x == c) {
            entry.remove();
        }
        let counter = &mut self.counters[c];
        counter.key.clear();
        counter.key.push_str(key);
        counter.hash = hash;
        counter.error = counter.count;
        counter.count = counter.count.saturating_add(units);
        counter.label(tag, note);
        let counters = &self.counters;
        self.index.insert_unique(hash, c, |&c| counters[c].hash);
        self.sift_down(0);
    }

    /// The counters, in no particular order.
    pub fn counters(&self) -> &[Counter] {
        &self.counters
    }

    /// The counter of `key`, if monitored.
    pub fn get(&self, key: &str) -> Option<&Counter> {
        let hash = self.hasher.hash_one(key);
        self.index
            .find(hash, |&c| self.counters[c].key == key)
            .map(|&c| &self.counters[c])
    }

    fn count_at(&self, at: usize) -> u64 {
        self.counters[self.heap[at]].count
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.counters[self.heap[a]].at = a;
        self.counters[self.heap[b]].at = b;
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.count_at(parent) <= self.count_at(at) {
                break;
            }
            self.swap(parent, at);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        loop {
            let left = 2 * at + 1;
            let right = left + 1;
            let mut smallest = at;
            if left < self.heap.len() && self.count_at(left) < self.count_at(smallest) {
                smallest = left;
            }
            if right < self.heap.len() && self.count_at(right) < self.count_at(smallest) {
                smallest = right;
            }
            if smallest == at {
                return;
            }
            self.swap(at, smallest);
            at = smallest;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag() -> &'static str {
        "free"
    }

    #[test]
    fn counts_exactly_while_every_key_has_a_counter() {
        let mut s = SpaceSaving::new(4);
        for (key, n) in [("a", 5), ("b", 3), ("c", 1)] {
            for _ in 0..n {
                s.add(key, tag(), None, 1);
            }
        }
        assert_eq!(s.get("a").map(|c| (c.count, c.error)), Some((5, 0)));
        assert_eq!(s.get("b").map(|c| (c.count, c.error)), Some((3, 0)));
        assert_eq!(s.floor(), 0);
        assert_eq!(s.total(), 9);
    }

    #[test]
    fn keeps_heavy_keys_and_bounds_the_error_under_many_keys() {
        let capacity = 16;
        let mut s = SpaceSaving::new(capacity);
        let mut total = 0u64;
        for i in 0..10_000u64 {
            s.add(&format!("noise-{i}"), tag(), None, 1);
            total += 1;
            if i % 10 == 0 {
                s.add("heavy", tag(), None, 1);
                total += 1;
            }
        }
        assert_eq!(s.len(), capacity);
        let heavy = s.get("heavy").expect("the heavy key keeps a counter");
        assert!(heavy.count >= 1_000, "an estimate is never below the truth");
        assert!(
            heavy.count - heavy.error <= 1_000,
            "count - error is a lower bound"
        );
        assert!(heavy.error <= total / capacity as u64);
        for c in s.counters() {
            assert!(c.error <= total / capacity as u64, "{c:?}");
        }
        // The heap property holds: the root is the smallest count, and
        // every monitored key is found by its name.
        let min = s.counters().iter().map(|c| c.count).min();
        assert_eq!(Some(s.floor()), min);
        for c in s.counters() {
            assert_eq!(s.get(&c.key), Some(c));
        }
        assert!(s.get("noise-0").is_none(), "taken over long ago");
    }
}
