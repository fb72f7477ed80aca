//! The clients with the most requests or rejections in the last minute, for
//! `GET /v1/top` and the dashboard, in bounded memory whatever the number of
//! clients.
//!
//! The minute is [`SLOTS`] slots of [`SLOT_MS`] (the current slot and the
//! five before it: between 50 and 60 seconds), each with two
//! [`SpaceSaving`] summaries of [`COUNTERS`] counters (requests and
//! rejections). A query merges the slots still in the minute. Each server
//! instance counts only the decisions it made itself.

mod space_saving;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub use space_saving::{Counter, SpaceSaving};

/// The length of one slot.
pub const SLOT_MS: u64 = 10_000;

/// Slots in the window.
pub const SLOTS: usize = 6;

/// Counters per summary: per slot, clients above `1/COUNTERS` of the
/// slot's requests are always listed.
pub const COUNTERS: usize = 256;

/// What to rank clients by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RankBy {
    /// Rejected requests.
    #[default]
    Rejected,
    /// All requests (cost above 0).
    Requests,
}

struct Slot {
    /// The slot's number (time / SLOT_MS), plus one (0: never used).
    epoch: u64,
    requests: SpaceSaving,
    rejected: SpaceSaving,
}

/// The rotating summaries.
pub struct TopClients {
    capacity: usize,
    slots: Mutex<Vec<Slot>>,
}

impl Default for TopClients {
    fn default() -> Self {
        Self::new(COUNTERS)
    }
}

/// One ranked client.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TopClient {
    /// The client id.
    pub client: String,
    /// The plan of its latest counted request.
    pub plan: String,
    /// Estimated count: never below the true count.
    pub count: u64,
    /// A lower bound of the true count.
    pub at_least: u64,
    /// Ranked by rejections: what refused its latest rejected request (the
    /// limit that held it back longest, or the failure policy that
    /// answered for the store). Absent when ranked by requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limited_by: Option<String>,
}

/// `GET /v1/top`'s answer.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Ranking {
    /// What the clients are ranked by.
    pub by: RankBy,
    /// Start of the window counted, in clock milliseconds (inclusive).
    pub from_ms: u64,
    /// The clock's time of the answer.
    pub now_ms: u64,
    /// Units counted in the window, all clients.
    pub total: u64,
    /// The most any `count` can be over the truth: the sum over the window's
    /// slots of a full slot's smallest counter (0 for a slot that never
    /// filled; at most the slot's units / counters per slot).
    pub error_bound: u64,
    /// The clients, by count (highest first), then id.
    pub clients: Vec<TopClient>,
}

impl TopClients {
    /// Rotating summaries of `capacity` counters each.
    pub fn new(capacity: usize) -> Self {
        let slots = (0..SLOTS)
            .map(|_| Slot {
                epoch: 0,
                requests: SpaceSaving::new(capacity),
                rejected: SpaceSaving::new(capacity),
            })
            .collect();
        Self {
            capacity,
            slots: Mutex::new(slots),
        }
    }

    /// Counts one request of `client` on `plan` at `now_ms`, and a
    /// rejection when `limited_by` names what refused it.
    pub fn record(&self, now_ms: u64, client: &str, plan: &str, limited_by: Option<&str>) {
        let epoch = now_ms / SLOT_MS + 1;
        let mut slots = self.slots.lock();
        let slot = &mut slots[(epoch % SLOTS as u64) as usize];
        if slot.epoch > epoch {
            // The clock went back over a minute: not counted rather than
            // wiping a later slot.
            return;
        }
        if slot.epoch < epoch {
            slot.epoch = epoch;
            slot.requests = SpaceSaving::new(self.capacity);
            slot.rejected = SpaceSaving::new(self.capacity);
        }
        slot.requests.add(client, plan, None, 1);
        if let Some(why) = limited_by {
            slot.rejected.add(client, plan, Some(why), 1);
        }
    }

    /// Counters held now, all slots and summaries: at most
    /// `2 * SLOTS * capacity` whatever the number of clients.
    pub fn counters_held(&self) -> usize {
        let slots = self.slots.lock();
        slots
            .iter()
            .map(|s| s.requests.len() + s.rejected.len())
            .sum()
    }

    /// The `limit` clients with the highest counts in the window ending at `now_ms`.
    pub fn top(&self, now_ms: u64, by: RankBy, limit: usize) -> Ranking {
        let now_epoch = now_ms / SLOT_MS + 1;
        let oldest = now_epoch.saturating_sub(SLOTS as u64 - 1).max(1);
        let slots = self.slots.lock();
        let mut live: Vec<(u64, &SpaceSaving)> = slots
            .iter()
            .filter(|s| (oldest..=now_epoch).contains(&s.epoch))
            .map(|s| match by {
                RankBy::Requests => (s.epoch, &s.requests),
                RankBy::Rejected => (s.epoch, &s.rejected),
            })
            .collect();
        // Oldest first, so that the latest slot's plan and note stay.
        live.sort_unstable_by_key(|(epoch, _)| *epoch);
        let live: Vec<&SpaceSaving> = live.into_iter().map(|(_, s)| s).collect();
        let total = live.iter().map(|s| s.total()).sum();
        // A count is at most a full slot's smallest counter above the true
        // one (Space-Saving's bound, never above the slot's units / its
        // counters), and exact in a slot that never filled; a client
        // missing from a full slot may have had up to that floor there.
        let error_bound: u64 = live.iter().map(|s| s.floor()).sum();
        let mut merged: HashMap<&str, TopClient> = HashMap::new();
        for summary in &live {
            for c in summary.counters() {
                let entry = merged.entry(&c.key).or_insert_with(|| TopClient {
                    client: c.key.to_string(),
                    plan: String::new(),
                    count: error_bound,
                    at_least: 0,
                    limited_by: None,
                });
                entry.plan.clear();
                entry.plan.push_str(&c.tag);
                entry.limited_by = c.note.as_deref().map(str::to_owned);
                entry.count = entry.count - summary.floor() + c.count;
                entry.at_least += c.count - c.error;
            }
        }
        let mut clients: Vec<TopClient> = merged.into_values().collect();
        drop(live);
        drop(slots);
        clients.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.client.cmp(&b.client)));
        clients.truncate(limit);
        Ranking {
            by,
            from_ms: (oldest - 1) * SLOT_MS,
            now_ms,
            total,
            error_bound,
            clients,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_put_down_to_what_refused_its_latest_rejection() {
        let top = TopClients::new(8);
        top.record(40_000, "mallory", "free", Some("1s"));
        // The ring's first slot holds 50..60 s, its last 40..50 s.
        top.record(50_000, "mallory", "free", Some("1d"));
        top.record(50_001, "mallory", "free", None);
        let ranking = top.top(50_001, RankBy::Rejected, 10);
        assert_eq!(ranking.clients[0].count, 2);
        assert_eq!(ranking.clients[0].limited_by.as_deref(), Some("1d"));
        let ranking = top.top(50_001, RankBy::Requests, 10);
        assert_eq!(ranking.clients[0].count, 3);
        assert_eq!(ranking.clients[0].limited_by, None);
    }

    #[test]
    fn a_minute_of_slots_then_old_slots_drop_out() {
        let top = TopClients::new(8);
        let plan = "free";
        top.record(0, "early", plan, Some("1s"));
        top.record(59_999, "late", plan, Some("1s"));
        let ranking = top.top(59_999, RankBy::Rejected, 10);
        let names: Vec<&str> = ranking.clients.iter().map(|c| c.client.as_str()).collect();
        assert_eq!(names, ["early", "late"]);
        // At 60 s the slot of 0..10 s has left the window.
        let ranking = top.top(60_000, RankBy::Rejected, 10);
        let names: Vec<&str> = ranking.clients.iter().map(|c| c.client.as_str()).collect();
        assert_eq!(names, ["late"]);
        assert_eq!(ranking.from_ms, 10_000);
    }
}
