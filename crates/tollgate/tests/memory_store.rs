//! The sharded in-memory store on its own: the client cap, what goes first
//! when a shard is full (reclaimable entries, then those whose eviction gives
//! back the fewest units, least recently seen among equals).

use tollgate::{Eviction, MemoryStore};

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

/// A cap that is not a multiple of the 64 shards is kept whole: what the
/// config says, `/metrics` shows and the store holds are one number (a
/// cap of 200 was 192 before: three per shard).
#[test]
fn a_cap_between_multiples_of_the_shards_is_kept_exactly() {
    for cap in [200, 129, 1_000_001] {
        let store = MemoryStore::<u32>::with_max_clients(cap);
        assert_eq!(store.max_clients(), Some(cap));
        assert_eq!(MemoryStore::<u32>::clients_kept_at_most(cap), cap);
    }
    let store = MemoryStore::<u32>::with_max_clients(200);
    let mut most = 0;
    for i in 0..20_000u64 {
        touch(&store, &format!("c{i}"), i);
        most = most.max(store.len());
    }
    assert!(most <= 200, "held {most}");
    assert!(
        most > 192,
        "held at most {most}: the cap's remainder unused"
    );
}

#[test]
fn tiny_caps_still_hold_two_clients_per_shard() {
    let store = MemoryStore::<u32>::with_max_clients(1);
    assert_eq!(store.max_clients(), Some(128));
    assert_eq!(MemoryStore::<u32>::clients_kept_at_most(1), 128);
    for i in 0..1_000u64 {
        touch(&store, &format!("c{i}"), i);
        assert!(store.len() <= 128);
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
        store.with_entry_reclaiming(&format!("c{i}"), i, |_| (i % 2) as u32, EvenGoes, |_| ());
        assert!(store.len() <= 640);
    }
    assert!(store.reclaimed() > 0);
    // Odd states never reclaim, so evictions still happen, but at most
    // once per batch per shard: far fewer evictions than clients.
    assert!(store.reclaimed() + store.evicted() + store.len() as u64 == 50_000);
    assert!(store.evicted() < store.reclaimed() + store.evicted());
}

/// Even states are reclaimable; the others give back 1.
struct EvenGoes;

impl Eviction<u32> for EvenGoes {
    fn reclaimable(&mut self, state: &mut u32, _: u64) -> bool {
        state.is_multiple_of(2)
    }

    fn units_given_back(&mut self, _: &u32, _: u64) -> u64 {
        1
    }
}

/// The state is the number of units its eviction gives back.
struct StateGivesBack;

impl Eviction<u64> for StateGivesBack {
    fn reclaimable(&mut self, _: &mut u64, _: u64) -> bool {
        false
    }

    fn units_given_back(&mut self, state: &u64, _: u64) -> u64 {
        *state
    }
}

/// Inserts `client` with `units` as its state, judged by that number.
fn insert_giving_back(store: &MemoryStore<u64>, client: &str, units: u64, now: u64) {
    store.with_entry_reclaiming(client, now, |_| units, StateGivesBack, |_| ());
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
