//! Deliberately naive models of the three policies, sharing nothing with the
//! library's arithmetic, so that a store can be checked against answers it
//! did not compute itself:
//!
//! - sliding window ([`NaiveLog`]): a list of allowed times (with how many
//!   units each took), filtered on every call;
//! - token bucket ([`NaiveBucket`]): tokens counted one drip at a time (only
//!   drips into a full bucket, which change nothing but the schedule, are
//!   skipped in one step);
//! - GCRA ([`NaiveMeter`]): a continuous "leaky bucket as a meter" over
//!   exact fractions (no f64).
//!
//! A model only says how many units fit at a time and how a request changes
//! it. Every field of a [`Decision`] follows from that ([`decide`]): allowed
//! when `cost <= available`, `remaining` by asking again after using, and
//! the two waits by searching for the first millisecond at which the request
//! fits / the quota is full (availability never drops while nothing is used,
//! so a binary search finds the first one).

use tollgate::Decision;

/// One naive per-client model of a policy.
pub trait Model: Clone {
    /// The policy's limit (units per window).
    fn limit(&self) -> u32;
    /// The policy's window in ms.
    fn window(&self) -> u64;
    /// Units that fit at `now`, using none.
    fn available(&self, now: u64) -> u32;
    /// Uses `cost` at `now` (only called when it fits).
    fn use_up(&mut self, now: u64, cost: u32);
}

/// The sliding-window log: every allowed request's time and cost.
#[derive(Clone, Debug)]
pub struct NaiveLog {
    limit: u32,
    window: u64,
    used: Vec<(u64, u32)>,
}

impl NaiveLog {
    /// An empty log.
    pub fn new(limit: u32, window: u64) -> Self {
        Self {
            limit,
            window,
            used: Vec::new(),
        }
    }
}

impl Model for NaiveLog {
    fn limit(&self) -> u32 {
        self.limit
    }
    fn window(&self) -> u64 {
        self.window
    }
    fn available(&self, now: u64) -> u32 {
        let inside: u64 = self
            .used
            .iter()
            .filter(|&&(t, _)| u128::from(t) + u128::from(self.window) > u128::from(now))
            .map(|&(_, cost)| u64::from(cost))
            .sum();
        (u64::from(self.limit) - inside) as u32
    }
    fn use_up(&mut self, now: u64, cost: u32) {
        self.used.push((now, cost));
    }
}

/// The token bucket: full at the first call, one token back every
/// `window / limit` ms counted from it.
#[derive(Clone, Debug)]
pub struct NaiveBucket {
    limit: u32,
    window: u64,
    interval: u64,
    tokens: u32,
    next_drip: u64,
}

impl NaiveBucket {
    /// A full bucket anchored at `first_call`.
    pub fn new(limit: u32, window: u64, first_call: u64) -> Self {
        let interval = window / u64::from(limit);
        Self {
            limit,
            window,
            interval,
            tokens: limit,
            next_drip: first_call + interval,
        }
    }

    fn advance(&mut self, now: u64) {
        while self.next_drip <= now {
            if self.tokens == self.limit {
                // Every drip from here to `now` falls into a full bucket.
                let wasted = (now - self.next_drip) / self.interval + 1;
                self.next_drip += wasted * self.interval;
                break;
            }
            self.tokens += 1;
            self.next_drip += self.interval;
        }
    }
}

impl Model for NaiveBucket {
    fn limit(&self) -> u32 {
        self.limit
    }
    fn window(&self) -> u64 {
        self.window
    }
    fn available(&self, now: u64) -> u32 {
        let mut copy = self.clone();
        copy.advance(now);
        copy.tokens
    }
    fn use_up(&mut self, now: u64, cost: u32) {
        self.advance(now);
        self.tokens -= cost;
    }
}

/// A non-negative fraction `n / d`.
#[derive(Clone, Copy, Debug)]
pub struct Frac {
    n: u128,
    d: u128,
}

impl Frac {
    /// The whole number `n`.
    pub fn whole(n: u64) -> Self {
        Self {
            n: u128::from(n),
            d: 1,
        }
    }
    fn add(self, o: Self) -> Self {
        Self {
            n: self.n * o.d + o.n * self.d,
            d: self.d * o.d,
        }
        .reduce()
    }
    /// `max(0, self - o)`.
    fn sub_floor0(self, o: Self) -> Self {
        let (a, b) = (self.n * o.d, o.n * self.d);
        Self {
            n: a.saturating_sub(b),
            d: self.d * o.d,
        }
        .reduce()
    }
    fn mul(self, k: u64) -> Self {
        Self {
            n: self.n * u128::from(k),
            d: self.d,
        }
        .reduce()
    }
    /// `floor(self / o)`.
    fn div_floor(self, o: Self) -> u128 {
        (self.n * o.d) / (self.d * o.n)
    }
    fn reduce(self) -> Self {
        let (mut a, mut b) = (self.n, self.d);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        let g = a.max(1);
        Self {
            n: self.n / g,
            d: self.d / g,
        }
    }
}

/// GCRA as a meter: `debt` ms of emission intervals not yet drained, drained
/// at one ms per ms since `last`; a request of cost `c` adds `c * T` with
/// `T = window / limit` and fits while the debt stays within `window`.
#[derive(Clone, Debug)]
pub struct NaiveMeter {
    limit: u32,
    window: u64,
    debt: Frac,
    last: u64,
}

impl NaiveMeter {
    /// An empty meter first seen at `first_call`.
    pub fn new(limit: u32, window: u64, first_call: u64) -> Self {
        Self {
            limit,
            window,
            debt: Frac::whole(0),
            last: first_call,
        }
    }
    fn emission(&self) -> Frac {
        Frac {
            n: u128::from(self.window),
            d: u128::from(self.limit),
        }
        .reduce()
    }
    fn debt_at(&self, now: u64) -> Frac {
        self.debt.sub_floor0(Frac::whole(now - self.last))
    }
}

impl Model for NaiveMeter {
    fn limit(&self) -> u32 {
        self.limit
    }
    fn window(&self) -> u64 {
        self.window
    }
    fn available(&self, now: u64) -> u32 {
        let room = Frac::whole(self.window).sub_floor0(self.debt_at(now));
        room.div_floor(self.emission()) as u32
    }
    fn use_up(&mut self, now: u64, cost: u32) {
        self.debt = self.debt_at(now).add(self.emission().mul(u64::from(cost)));
        self.last = now;
    }
}

/// Any of the three models, chosen by policy name.
#[derive(Clone, Debug)]
pub enum AnyModel {
    /// `sliding-window`.
    Log(NaiveLog),
    /// `token-bucket`.
    Bucket(NaiveBucket),
    /// `gcra`.
    Meter(NaiveMeter),
}

impl AnyModel {
    /// The model of the policy called `policy`, first called at `first_call`,
    /// or `None` for a name without a model.
    pub fn new(policy: &str, limit: u32, window: u64, first_call: u64) -> Option<Self> {
        Some(match policy {
            "sliding-window" => Self::Log(NaiveLog::new(limit, window)),
            "token-bucket" => Self::Bucket(NaiveBucket::new(limit, window, first_call)),
            "gcra" => Self::Meter(NaiveMeter::new(limit, window, first_call)),
            _ => return None,
        })
    }
}

macro_rules! each_model {
    ($self:ident, $m:ident => $e:expr) => {
        match $self {
            AnyModel::Log($m) => $e,
            AnyModel::Bucket($m) => $e,
            AnyModel::Meter($m) => $e,
        }
    };
}

impl Model for AnyModel {
    fn limit(&self) -> u32 {
        each_model!(self, m => m.limit())
    }
    fn window(&self) -> u64 {
        each_model!(self, m => m.window())
    }
    fn available(&self, now: u64) -> u32 {
        each_model!(self, m => m.available(now))
    }
    fn use_up(&mut self, now: u64, cost: u32) {
        each_model!(self, m => m.use_up(now, cost))
    }
}

/// The first `w` in `0..=bound` with `ok(now + w)`, by binary search over a
/// predicate that never turns false again once true.
pub fn first_ok(now: u64, bound: u64, ok: impl Fn(u64) -> bool) -> Option<u64> {
    if !ok(now + bound) {
        return None;
    }
    let (mut lo, mut hi) = (0, bound);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if ok(now + mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

/// The decision a model implies for `cost` at `now`; uses the cost when it
/// fits (the model is left as after the request).
///
/// # Panics
/// When the model breaks its own promise that the quota is full again, and
/// every request within the limit fits, within one window.
pub fn decide<M: Model>(m: &mut M, now: u64, cost: u32) -> Decision {
    let (limit, window) = (m.limit(), m.window());
    let allowed = cost <= m.available(now);
    if allowed && cost > 0 {
        m.use_up(now, cost);
    }
    let retry_after_ms = if allowed {
        Some(0)
    } else if cost > limit {
        None
    } else {
        let w = first_ok(now, window, |t| m.available(t) >= cost);
        Some(w.expect("every request of cost <= limit fits within a window"))
    };
    let reset_after_ms = first_ok(now, window, |t| m.available(t) == limit)
        .expect("the quota is full again within a window");
    Decision {
        allowed,
        limit,
        remaining: m.available(now),
        retry_after_ms,
        reset_after_ms,
    }
}
