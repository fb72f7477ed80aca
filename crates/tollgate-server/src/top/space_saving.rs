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

use std::collections::HashMap;
use std::sync::Arc;

/// One monitored key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// The key (a client id).
    pub key: Arc<str>,
    /// A tag kept with the key, replaced on every update (the client's plan).
    pub tag: Arc<str>,
    /// Estimated count: never below the true count.
    pub count: u64,
    /// How much `count` may be over the true count.
    pub error: u64,
}

/// A Space-Saving summary of at most `capacity` counters.
#[derive(Debug, Clone)]
pub struct SpaceSaving {
    capacity: usize,
    /// A min-heap on `count`.
    heap: Vec<Counter>,
    /// Key to its position in `heap`.
    index: HashMap<Arc<str>, usize, foldhash::fast::RandomState>,
    total: u64,
}

impl SpaceSaving {
    /// An empty summary with `capacity` counters (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            heap: Vec::with_capacity(capacity),
            index: HashMap::with_capacity_and_hasher(capacity, Default::default()),
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
        self.heap.len()
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The smallest count monitored when every counter is taken (0 otherwise):
    /// the most an unmonitored key may have had.
    pub fn floor(&self) -> u64 {
        if self.heap.len() < self.capacity {
            0
        } else {
            self.heap.first().map_or(0, |c| c.count)
        }
    }

    /// Counts `units` for `key`, tagged `tag`.
    pub fn add(&mut self, key: &str, tag: &str, units: u64) {
        self.total = self.total.saturating_add(units);
        if let Some(&at) = self.index.get(key) {
            let counter = &mut self.heap[at];
            counter.count = counter.count.saturating_add(units);
            if *counter.tag != *tag {
                counter.tag = Arc::from(tag);
            }
            self.sift_down(at);
            return;
        }
        let key: Arc<str> = Arc::from(key);
        if self.heap.len() < self.capacity {
            self.heap.push(Counter {
                key: key.clone(),
                tag: Arc::from(tag),
                count: units,
                error: 0,
            });
            let at = self.heap.len() - 1;
            self.index.insert(key, at);
            self.sift_up(at);
            return;
        }
        // Take over the smallest counter: its count becomes the new key's error.
        let smallest = &mut self.heap[0];
        self.index.remove(&smallest.key);
        smallest.error = smallest.count;
        smallest.count = smallest.count.saturating_add(units);
        smallest.key = key.clone();
        if *smallest.tag != *tag {
            smallest.tag = Arc::from(tag);
        }
        self.index.insert(key, 0);
        self.sift_down(0);
    }

    /// The counters, in no particular order.
    pub fn counters(&self) -> &[Counter] {
        &self.heap
    }

    /// The counter of `key`, if monitored.
    pub fn get(&self, key: &str) -> Option<&Counter> {
        self.index.get(key).map(|&at| &self.heap[at])
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        for at in [a, b] {
            if let Some(slot) = self.index.get_mut(&self.heap[at].key) {
                *slot = at;
            }
        }
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.heap[parent].count <= self.heap[at].count {
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
            if left < self.heap.len() && self.heap[left].count < self.heap[smallest].count {
                smallest = left;
            }
            if right < self.heap.len() && self.heap[right].count < self.heap[smallest].count {
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
                s.add(key, tag(), 1);
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
            s.add(&format!("noise-{i}"), tag(), 1);
            total += 1;
            if i % 10 == 0 {
                s.add("heavy", tag(), 1);
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
        // The heap property holds: the root is the smallest count.
        let min = s.counters().iter().map(|c| c.count).min();
        assert_eq!(Some(s.floor()), min);
    }
}
