//! [`RejectionCache`]: the store's recent rejections, one per client, and
//! the rules for when one of them answers a new request exactly.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use parking_lot::Mutex;
use tollgate::{DecidedBy, MonotonicClock, Plan, PlanDecision, Policy};

use crate::in_flight::{CallInFlight, InFlight};
use crate::Error;

/// The default [`RejectionCache`] capacity: 100,000 clients.
pub const DEFAULT_MAX_CLIENTS: usize = 100_000;

/// The largest capacity accepted: ten million entries (a few GB at most),
/// far beyond the number of clients rejected within one wait.
pub const MAX_MAX_CLIENTS: usize = 10_000_000;

/// Shards of the table: decisions for different clients rarely meet on a lock.
const SHARDS: usize = 16;

/// One client's remembered rejection.
struct Slot {
    client: Box<str>,
    /// The plan the store rejected under: the cache answers no other.
    plan: Box<str>,
    /// The plan's limits and their shadow flags when the store rejected:
    /// an entry of a plan whose limits changed since answers nothing.
    fingerprint: u64,
    /// The smallest cost rejected.
    cost: u32,
    /// When the store rejected it, on the cache's time (the caller's, or
    /// its own clock's: [`RejectionCache::on_own_clock`]).
    rejected_at: u64,
    /// `rejected_at` plus the store's exact wait: from then on the request
    /// goes to the store again.
    until: u64,
    /// The store's answer, repeated with its waits counted down.
    decision: PlanDecision,
    /// The latest time of the client's requests the cache answered or the
    /// store answered since the entry was made: the store never sees the
    /// cache's answers, so every request is answered, and sent to the
    /// store, at this time or later (the backwards-time rule, as the store
    /// would apply it had it seen them all).
    latest: u64,
}

impl Slot {
    /// Takes in that the store allowed a request of `cost` (a smaller one
    /// than the rejected) while this entry is held: it consumed `cost` from
    /// every limit, so a limit the rejection said had room has that much
    /// less, and may refuse a cost it allowed then. (A limit that refused
    /// refuses at least as long.)
    fn consumed(&mut self, cost: u64) {
        let cost = u32::try_from(cost).unwrap_or(u32::MAX);
        for limit in &mut self.decision.limits {
            if limit.decision.allowed {
                limit.decision.remaining = limit.decision.remaining.saturating_sub(cost);
            }
        }
    }
}

/// What [`RejectionCache::lookup`] makes of a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// The cache's answer: a rejection the store would give too.
    Answered(PlanDecision),
    /// The store's to decide, at `now_ms`: the request's own time, or the
    /// latest time the cache holds for the client when that is later.
    AskStore {
        /// The time to hand the store, and then to
        /// [`RejectionCache::remember`]. On a cache with its own clock, the
        /// cache's time for the request: hand the store the caller's own
        /// time (it reads its own clock), and remember at this one
        /// ([`crate::CachedStore`] does both).
        now_ms: u64,
    },
}

/// Rejections the shared store made, answered again without calling it.
///
/// Keyed by client, as the store's latest seen time is: one rejection per
/// client, under one plan. Holds at most about `max_clients` entries (the
/// cap is kept per shard of 1/16 of it, at least one each): a new entry in
/// a full shard first drops the shard's expired entries, then, if that
/// freed less than an eighth, the entries that expire soonest. Dropping an
/// entry only sends requests back to the store, so it never changes an
/// answer. See the crate documentation for why the answers are exact.
pub struct RejectionCache {
    shards: Box<[Mutex<HashTable<Slot>>]>,
    hasher: RandomState,
    shard_cap: usize,
    max_clients: usize,
    own_clock: Option<Arc<dyn MonotonicClock>>,
    in_flight: InFlight,
}

impl RejectionCache {
    /// An empty cache of at most about `max_clients` clients.
    ///
    /// # Errors
    /// [`Error::Capacity`] unless `1 <= max_clients <= MAX_MAX_CLIENTS`.
    pub fn new(max_clients: usize) -> Result<Self, Error> {
        if !(1..=MAX_MAX_CLIENTS).contains(&max_clients) {
            return Err(Error::Capacity {
                got: max_clients,
                max: MAX_MAX_CLIENTS,
            });
        }
        Ok(Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashTable::new())).collect(),
            hasher: RandomState::default(),
            shard_cap: max_clients.div_ceil(SHARDS),
            max_clients,
            own_clock: None,
            in_flight: InFlight::new(),
        })
    }

    /// The same cache, timing its entries by `clock` rather than by the
    /// callers' times: for a store that times its decisions by a clock of
    /// its own (the Redis store's `TimeSource::Redis`). There a caller's
    /// clock says nothing of the store's, and a step of it would stretch or
    /// cut an entry's wait by as much, while a monotonic clock measures a
    /// wait as the store's clock passes it. [`CachedStore`](crate::CachedStore)
    /// reads it ([`RejectionCache::own_now_ms`]).
    pub fn on_own_clock(mut self, clock: Arc<dyn MonotonicClock>) -> Self {
        self.own_clock = Some(clock);
        self
    }

    /// The time, in milliseconds, of the clock given to
    /// [`RejectionCache::on_own_clock`]; `None` when the cache takes the
    /// callers' times.
    pub fn own_now_ms(&self) -> Option<u64> {
        self.own_clock.as_ref().map(|clock| clock.now_us() / 1_000)
    }

    /// The capacity asked for.
    pub fn max_clients(&self) -> usize {
        self.max_clients
    }

    /// The most entries a cache asked for `max_clients` holds: the cap is
    /// kept per shard of 1/16, rounded up, so `max_clients` rounded up to a
    /// multiple of 16 (100,000 is one; 5 holds up to 16).
    pub const fn most_entries(max_clients: usize) -> usize {
        SHARDS * max_clients.div_ceil(SHARDS)
    }

    /// Entries held now, expired ones not yet dropped included.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// True when no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn hash(&self, client: &str) -> u64 {
        self.hasher.hash_one(client)
    }

    fn shard(&self, hash: u64) -> &Mutex<HashTable<Slot>> {
        &self.shards[(hash >> 48) as usize % SHARDS]
    }

    /// What identifies a plan's rejections: its limits' ids (plan, name,
    /// policy, limit, window) and which of them only observe.
    fn fingerprint(&self, plan: &Plan) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        for limit in plan.limits() {
            hasher.write_u64(limit.id());
            hasher.write_u8(u8::from(limit.is_shadow()));
        }
        hasher.finish()
    }

    /// What to do with a request of `cost` by `client` under `plan` at
    /// `now_ms`, the cache's time: the caller's, or, on a cache with its own
    /// clock, [`RejectionCache::own_now_ms`] (read before the store is
    /// asked, so that a wait counts from no later than the store's). Its time is first brought up to the latest the cache holds
    /// for the client (`t'`). It is answered when a remembered rejection
    /// proves the store would reject it too: same plan with the same
    /// limits, `cost` at least the rejected one (and able to pass some day:
    /// no larger than any enforced limit), `t' < until`, and every limit
    /// answering it as it answered the rejected one (each that refused
    /// still within its own wait, each that allowed with room for `cost`);
    /// the answer is
    /// the store's rejection with `decided_by` [`DecidedBy::Cache`],
    /// `retry_after_ms = until - t'`, and each limit's waits counted down.
    /// Otherwise the store is asked at `t'`; hand its answer to
    /// [`RejectionCache::remember`].
    pub fn lookup(&self, plan: &Plan, client: &str, now_ms: u64, cost: u32) -> Lookup {
        let hash = self.hash(client);
        let mut table = self.shard(hash).lock();
        let Ok(entry) = table.find_entry(hash, |s| &*s.client == client) else {
            return Lookup::AskStore { now_ms };
        };
        let slot = entry.into_mut();
        let now_ms = now_ms.max(slot.latest);
        let answers = now_ms < slot.until
            && cost >= slot.cost
            && every_limit_alike(slot, now_ms, cost)
            && *slot.plan == *plan.name()
            && can_pass_some_day(plan, cost)
            && slot.fingerprint == self.fingerprint(plan);
        if !answers {
            return Lookup::AskStore { now_ms };
        }
        slot.latest = now_ms;
        Lookup::Answered(counted_down(slot, now_ms))
    }

    /// The time the store should read `client`'s state at, for a request
    /// at `now_ms` that changes nothing (an inspection): the latest the
    /// cache holds for the client when that is later.
    pub fn time_for(&self, client: &str, now_ms: u64) -> u64 {
        let hash = self.hash(client);
        let table = self.shard(hash).lock();
        let latest = table.find(hash, |s| &*s.client == client).map(|s| s.latest);
        latest.map_or(now_ms, |latest| now_ms.max(latest))
    }

    /// Takes in `decision`, the answer to a request of `cost` by `client`
    /// under `plan` that [`RejectionCache::lookup`] sent to the store at
    /// `now_ms`. Only the store's own answers ([`DecidedBy::Store`]) count:
    /// a failure policy's says nothing of the store, which may never have
    /// seen the request.
    ///
    /// A rejection that waiting cures (of a cost that can pass some day) is
    /// remembered, replacing the client's entry when that is of another
    /// plan, for a larger cost, or run out. Any other answer moves the
    /// entry's latest time, and ends an entry run out once the store has
    /// seen a time at or past every one the cache answered at; an allowed
    /// one takes its cost off the room the entry says its limits have.
    ///
    /// For a call that was in flight beside others of the same client, use
    /// [`RejectionCache::remember_call`].
    pub fn remember(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
        decision: &PlanDecision,
    ) {
        self.remember_after(plan, client, now_ms, cost, decision, 0);
    }

    /// Notes a call of `client` sent to the store now, until the returned
    /// value is dropped: hand it to [`RejectionCache::remember_call`] with
    /// the store's answer.
    pub fn begin_call<'a>(&'a self, client: &'a str) -> CallInFlight<'a> {
        self.in_flight.begin(client)
    }

    /// [`RejectionCache::remember`] of the answer to `call`, knowing what
    /// the store allowed the client's other calls in flight since `call`
    /// was sent: the store may have run them after it, so a rejection takes
    /// that off the room its limits had (see `in_flight.rs`).
    #[allow(clippy::too_many_arguments)]
    pub fn remember_call(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
        decision: &PlanDecision,
        call: &CallInFlight<'_>,
    ) {
        let allowed = decision.decided_by == DecidedBy::Store && decision.allowed;
        let allowed_since = call.answered(if allowed { cost } else { 0 });
        self.remember_after(plan, client, now_ms, cost, decision, allowed_since);
    }

    /// Clients with calls in flight ([`RejectionCache::begin_call`]).
    pub fn clients_in_flight(&self) -> usize {
        self.in_flight.clients()
    }

    /// [`RejectionCache::remember`], a rejection's room less `allowed_since`.
    fn remember_after(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
        decision: &PlanDecision,
        allowed_since: u64,
    ) {
        if decision.decided_by != DecidedBy::Store {
            return;
        }
        let wait = match (decision.allowed, decision.retry_after_ms) {
            (false, Some(wait)) if wait > 0 && cost > 0 => Some(wait),
            _ => None,
        };
        let hash = self.hash(client);
        let mut table = self.shard(hash).lock();
        let held = table.find_entry(hash, |s| &*s.client == client);
        let Some(wait) = wait else {
            if let Ok(held) = held {
                let run_out = now_ms >= held.get().until && now_ms >= held.get().latest;
                if run_out {
                    held.remove();
                } else {
                    let slot = held.into_mut();
                    slot.latest = slot.latest.max(now_ms);
                    if decision.allowed {
                        slot.consumed(u64::from(cost));
                    }
                }
            }
            return;
        };
        let mut slot = Slot {
            client: client.into(),
            plan: plan.name().into(),
            fingerprint: self.fingerprint(plan),
            cost,
            rejected_at: now_ms,
            until: now_ms.saturating_add(wait),
            decision: decision.clone(),
            latest: now_ms,
        };
        slot.consumed(allowed_since);
        if let Ok(mut held) = held {
            let old = held.get_mut();
            let latest = old.latest.max(now_ms);
            let replace = cost <= old.cost
                || now_ms >= old.until
                || *old.plan != *slot.plan
                || old.fingerprint != slot.fingerprint;
            if replace {
                *old = slot;
            }
            old.latest = latest;
            return;
        }
        if table.len() >= self.shard_cap {
            make_room(&mut table, self.shard_cap, now_ms);
        }
        let hasher = &self.hasher;
        table.insert_unique(hash, slot, |s| hasher.hash_one(&*s.client));
    }

    /// Drops every entry whose plan is not in `plans` with the same limits
    /// (a reload changed or removed it). Returns how many were dropped.
    pub fn forget_changed(&self, plans: &[Plan]) -> usize {
        let current: Vec<(&str, u64)> = plans
            .iter()
            .map(|p| (p.name(), self.fingerprint(p)))
            .collect();
        let mut dropped = 0;
        for shard in self.shards.iter() {
            let mut table = shard.lock();
            let before = table.len();
            table.retain(|s| current.contains(&(&*s.plan, s.fingerprint)));
            dropped += before - table.len();
        }
        dropped
    }
}

/// Whether a request of `cost` can ever pass `plan`: the store answers one
/// that cannot with "never" (no retry-after), which the cache must not
/// replace with a wait.
fn can_pass_some_day(plan: &Plan, cost: u32) -> bool {
    plan.limits()
        .iter()
        .filter(|l| !l.is_shadow())
        .all(|l| cost <= l.policy().limit())
}

/// Whether every limit of the remembered rejection would answer a request
/// of `cost` at `now_ms` as it answered that one: each limit that refused
/// still within its own wait (or refusing for good), each that allowed with
/// room for `cost`. The metrics, the top clients and a shadow limit's count
/// take each limit's answer from the cache's, so where one would differ
/// (a larger cost than a limit has room for; a limit whose own wait is
/// over while another's is not), the store answers.
fn every_limit_alike(slot: &Slot, now_ms: u64, cost: u32) -> bool {
    let passed = now_ms - slot.rejected_at;
    slot.decision.limits.iter().all(|limit| {
        let d = &limit.decision;
        if d.allowed {
            d.remaining >= cost
        } else {
            d.retry_after_ms.is_none_or(|wait| passed < wait)
        }
    })
}

/// The remembered rejection as of `now_ms`, answered by the cache.
fn counted_down(slot: &Slot, now_ms: u64) -> PlanDecision {
    let passed = now_ms - slot.rejected_at;
    let mut decision = slot.decision.clone();
    decision.decided_by = DecidedBy::Cache;
    decision.retry_after_ms = Some(slot.until - now_ms);
    for limit in &mut decision.limits {
        let d = &mut limit.decision;
        d.retry_after_ms = d.retry_after_ms.map(|w| w.saturating_sub(passed));
        d.reset_after_ms = d.reset_after_ms.saturating_sub(passed);
    }
    decision
}

/// Brings a full shard below its cap: expired entries go first; if that
/// freed less than an eighth, those that expire soonest go down to seven
/// eighths (one pass per eighth of new entries keeps the cost amortised).
fn make_room(table: &mut HashTable<Slot>, cap: usize, now_ms: u64) {
    table.retain(|s| now_ms < s.until);
    let target = cap - (cap / 8).max(1).min(cap);
    if table.len() <= target {
        return;
    }
    let mut untils: Vec<u64> = table.iter().map(|s| s.until).collect();
    let excess = table.len() - target;
    untils.select_nth_unstable(excess - 1);
    let cutoff = untils[excess - 1];
    let mut left = excess;
    table.retain(|s| {
        if left > 0 && s.until <= cutoff {
            left -= 1;
            false
        } else {
            true
        }
    });
}
