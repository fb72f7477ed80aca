//! The last five minutes of decisions, second by second, for `GET /v1/stats`
//! and the dashboard: decisions, allowed and rejected per plan, store
//! errors, who decided, and latency percentiles.
//!
//! A ring of [`SECONDS`] slots of atomic counters: recording a decision is
//! a few relaxed atomic additions on the slot of the current second (a slot
//! left from five minutes ago is cleared first, once, under its own lock).
//! Seconds are those of the server's [`tollgate::Clock`], given by the
//! caller; latencies come from the server's stopwatch. `/metrics` stays the
//! place for long-term counters: this is a window for people to look at.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use serde::Serialize;
use tollgate::{DecidedBy, FailurePolicy, PlanDecision};

/// Seconds kept: five minutes.
pub const SECONDS: usize = 300;

/// Plans counted separately, in order of first decision; decisions on
/// plans beyond these (a config of more, or many reloads with new plan
/// names) are counted under [`OTHER_PLANS`]. The counters of a second are
/// two per plan, so the ring holds `2 x 8 x 300 x (MAX_PLANS + 1)` bytes
/// (1.2 MiB), whatever the config.
pub const MAX_PLANS: usize = 256;

/// The name under which plans beyond [`MAX_PLANS`] are counted.
pub const OTHER_PLANS: &str = "(other plans)";

/// Latency buckets: log-linear, four per power of two of microseconds
/// (each bucket is at most 25 % wide), up to about 16 s.
const LATENCY_BUCKETS: usize = 96;

/// Who decided, as counted: the store is every decision minus the others.
const STAND_INS: [DecidedBy; 4] = [
    DecidedBy::Cache,
    DecidedBy::Failure(FailurePolicy::FailOpen),
    DecidedBy::Failure(FailurePolicy::FailClosed),
    DecidedBy::Failure(FailurePolicy::LocalFallback),
];

fn counters<const N: usize>() -> [AtomicU64; N] {
    std::array::from_fn(|_| AtomicU64::new(0))
}

/// The counters of one second.
struct Second {
    /// The second (of the clock) counted here, plus one (0: never used).
    epoch: AtomicU64,
    clearing: Mutex<()>,
    allowed: [AtomicU64; MAX_PLANS + 1],
    rejected: [AtomicU64; MAX_PLANS + 1],
    store_errors: AtomicU64,
    stand_ins: [AtomicU64; STAND_INS.len()],
    latency: [AtomicU64; LATENCY_BUCKETS],
}

impl Second {
    fn new() -> Self {
        Self {
            epoch: AtomicU64::new(0),
            clearing: Mutex::new(()),
            allowed: counters(),
            rejected: counters(),
            store_errors: AtomicU64::new(0),
            stand_ins: counters(),
            latency: counters(),
        }
    }

    fn all(&self) -> impl Iterator<Item = &AtomicU64> {
        self.allowed
            .iter()
            .chain(&self.rejected)
            .chain(std::iter::once(&self.store_errors))
            .chain(&self.stand_ins)
            .chain(&self.latency)
    }
}

/// The per-second ring.
pub struct Stats {
    seconds: Box<[Second]>,
    /// Plan names by counter index, in order of first decision.
    plans: ArcSwap<Vec<Arc<str>>>,
    adding_plan: Mutex<()>,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

/// The bucket of a latency of `micros` µs.
fn latency_bucket(micros: u64) -> usize {
    let bucket = if micros < 4 {
        micros as usize
    } else {
        let power = 63 - micros.leading_zeros() as usize;
        4 * (power - 1) + ((micros >> (power - 2)) & 3) as usize
    };
    bucket.min(LATENCY_BUCKETS - 1)
}

/// The largest latency, in µs, that falls in `bucket`.
fn latency_upper_bound(bucket: usize) -> u64 {
    let lower = |b: usize| -> u64 {
        if b < 4 {
            b as u64
        } else {
            let power = b / 4 + 1;
            (4 + (b % 4) as u64) << (power - 2)
        }
    };
    lower(bucket + 1) - 1
}

impl Stats {
    /// An empty ring.
    pub fn new() -> Self {
        Self {
            seconds: (0..SECONDS).map(|_| Second::new()).collect(),
            plans: ArcSwap::from_pointee(Vec::new()),
            adding_plan: Mutex::new(()),
        }
    }

    /// The slot of the second of `now_ms`, cleared if it held an older
    /// second; `None` if it already holds a later one (the clock went back
    /// more than five minutes: such a call is not counted rather than
    /// wiping a later second).
    fn second(&self, now_ms: u64) -> Option<&Second> {
        let epoch = now_ms / 1000 + 1;
        let slot = &self.seconds[(epoch % SECONDS as u64) as usize];
        let held = slot.epoch.load(Ordering::Acquire);
        if held == epoch {
            return Some(slot);
        }
        if held > epoch {
            return None;
        }
        let _clearing = slot.clearing.lock();
        let held = slot.epoch.load(Ordering::Acquire);
        if held < epoch {
            for counter in slot.all() {
                counter.store(0, Ordering::Relaxed);
            }
            slot.epoch.store(epoch, Ordering::Release);
        }
        (held <= epoch).then_some(slot)
    }

    /// The counter index of `plan`, registering the name on first sight.
    fn plan_index(&self, plan: &str) -> usize {
        if let Some(i) = self.plans.load().iter().position(|p| **p == *plan) {
            return i;
        }
        let _adding = self.adding_plan.lock();
        let plans = self.plans.load_full();
        if let Some(i) = plans.iter().position(|p| **p == *plan) {
            return i;
        }
        if plans.len() >= MAX_PLANS {
            return MAX_PLANS;
        }
        let mut more = (*plans).clone();
        more.push(Arc::from(plan));
        self.plans.store(Arc::new(more));
        plans.len()
    }

    /// Counts a decision (of a cost above 0) on `plan` at `now_ms`.
    pub fn record_decision(&self, now_ms: u64, plan: &str, decision: &PlanDecision) {
        let Some(second) = self.second(now_ms) else {
            return;
        };
        let index = self.plan_index(plan);
        let counter = if decision.allowed {
            &second.allowed[index]
        } else {
            &second.rejected[index]
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(i) = STAND_INS.iter().position(|d| *d == decision.decided_by) {
            second.stand_ins[i].fetch_add(1, Ordering::Relaxed);
        }
        // The rejection cache answers for a store that works: only a failure
        // policy's answer stands for a store error.
        if let DecidedBy::Failure(_) = decision.decided_by {
            second.store_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a store error that no decision counted: one no failure
    /// policy answered, or a look (cost 0) one answered.
    pub fn record_store_error(&self, now_ms: u64) {
        if let Some(second) = self.second(now_ms) {
            second.store_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts how long one decision took.
    pub fn record_latency(&self, now_ms: u64, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        if let Some(second) = self.second(now_ms) {
            second.latency[latency_bucket(micros)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Store errors (including those a failure policy answered) in the
    /// `seconds` seconds up to and including that of `now_ms`.
    pub fn recent_store_errors(&self, now_ms: u64, seconds: u64) -> u64 {
        let now = now_ms / 1000;
        (now.saturating_sub(seconds.saturating_sub(1))..=now)
            .filter_map(|s| self.counted(s))
            .map(|slot| slot.store_errors.load(Ordering::Relaxed))
            .sum()
    }

    /// The slot of clock second `second` if it still holds that second.
    fn counted(&self, second: u64) -> Option<&Second> {
        let epoch = second + 1;
        let slot = &self.seconds[(epoch % SECONDS as u64) as usize];
        (slot.epoch.load(Ordering::Acquire) == epoch).then_some(slot)
    }

    /// The last [`SECONDS`] seconds up to and including that of `now_ms`,
    /// oldest first, as columns.
    pub fn snapshot(&self, now_ms: u64) -> Snapshot {
        let now = now_ms / 1000;
        let first = now.saturating_sub(SECONDS as u64 - 1);
        let mut plans: Vec<Arc<str>> = (*self.plans.load_full()).clone();
        plans.push(Arc::from(OTHER_PLANS));
        let mut out = Snapshot::empty(&plans, first, now);
        for (column, second) in (first..=now).enumerate() {
            let Some(slot) = self.counted(second) else {
                continue;
            };
            out.fill(column, slot, &plans);
        }
        // Only show the overflow bucket when something landed there.
        if out
            .plans
            .last()
            .is_some_and(|p| p.allowed.iter().chain(&p.rejected).all(|n| *n == 0))
        {
            out.plans.pop();
        }
        out
    }
}

/// One plan's columns.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PlanColumns {
    /// The plan's name.
    pub plan: String,
    /// Allowed requests per second.
    pub allowed: Vec<u64>,
    /// Rejected requests per second.
    pub rejected: Vec<u64>,
}

/// Latency percentiles per second, in µs (the upper edge of the bucket the
/// percentile falls in: at most 25 % above the true value; 0 when nothing
/// was decided that second).
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct LatencyColumns {
    /// Median.
    pub p50: Vec<u64>,
    /// 90th percentile.
    pub p90: Vec<u64>,
    /// 99th percentile.
    pub p99: Vec<u64>,
    /// The largest.
    pub max: Vec<u64>,
}

/// `GET /v1/stats`: per-second columns, oldest first; `time_ms[i]` is the
/// start of the second counted at index `i` of every other column.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Snapshot {
    /// The start of each second, in clock milliseconds.
    pub time_ms: Vec<u64>,
    /// Decisions (of a cost above 0, HTTP and gRPC) per second.
    pub decisions: Vec<u64>,
    /// Rejected decisions per second, all plans.
    pub rejected: Vec<u64>,
    /// Per plan, in order of first decision.
    pub plans: Vec<PlanColumns>,
    /// Store failures per second: those a failure policy answered plus
    /// those it could not.
    pub store_errors: Vec<u64>,
    /// Who decided, per second: `store`, `cache`, `fail-open`, `fail-closed`, `local-fallback`.
    pub decided_by: std::collections::BTreeMap<&'static str, Vec<u64>>,
    /// Decision latency percentiles.
    pub latency_us: LatencyColumns,
}

impl Snapshot {
    fn empty(plans: &[Arc<str>], first: u64, last: u64) -> Self {
        let n = (last - first + 1) as usize;
        let zeros = || vec![0u64; n];
        let mut decided_by = std::collections::BTreeMap::new();
        decided_by.insert(DecidedBy::Store.as_str(), zeros());
        for d in STAND_INS {
            decided_by.insert(d.as_str(), zeros());
        }
        Self {
            time_ms: (first..=last).map(|s| s * 1000).collect(),
            decisions: zeros(),
            rejected: zeros(),
            plans: plans
                .iter()
                .map(|p| PlanColumns {
                    plan: p.to_string(),
                    allowed: zeros(),
                    rejected: zeros(),
                })
                .collect(),
            store_errors: zeros(),
            decided_by,
            latency_us: LatencyColumns {
                p50: zeros(),
                p90: zeros(),
                p99: zeros(),
                max: zeros(),
            },
        }
    }

    fn fill(&mut self, column: usize, slot: &Second, plans: &[Arc<str>]) {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut decisions = 0;
        for (i, columns) in self.plans.iter_mut().enumerate() {
            // The overflow bucket is last in both.
            let counter = if i + 1 == plans.len() { MAX_PLANS } else { i };
            columns.allowed[column] = get(&slot.allowed[counter]);
            columns.rejected[column] = get(&slot.rejected[counter]);
            decisions += columns.allowed[column] + columns.rejected[column];
            self.rejected[column] += columns.rejected[column];
        }
        self.decisions[column] = decisions;
        self.store_errors[column] = get(&slot.store_errors);
        let mut stand_ins = 0;
        for (i, d) in STAND_INS.iter().enumerate() {
            let n = get(&slot.stand_ins[i]);
            stand_ins += n;
            if let Some(col) = self.decided_by.get_mut(d.as_str()) {
                col[column] = n;
            }
        }
        if let Some(col) = self.decided_by.get_mut(DecidedBy::Store.as_str()) {
            col[column] = decisions.saturating_sub(stand_ins);
        }
        let buckets: Vec<u64> = slot.latency.iter().map(get).collect();
        let l = &mut self.latency_us;
        l.p50[column] = percentile(&buckets, 0.50);
        l.p90[column] = percentile(&buckets, 0.90);
        l.p99[column] = percentile(&buckets, 0.99);
        l.max[column] = percentile(&buckets, 1.0);
    }
}

/// The upper edge of the bucket holding quantile `q` (0 when empty).
fn percentile(buckets: &[u64], q: f64) -> u64 {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return 0;
    }
    // The rank of the quantile, 1-based: at least the first observation.
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (bucket, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return latency_upper_bound(bucket);
        }
    }
    latency_upper_bound(buckets.len() - 1)
}

#[cfg(test)]
mod tests;
