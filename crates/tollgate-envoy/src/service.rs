//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
//!
//! # A rejected request consumes nothing
//!
//! The descriptors of one request may name several clients (say, the
//! caller's address and its API key), and the store is atomic per client
//! only. So the service decides a request in two steps, holding a lock
//! (one of 256 stripes, by client) on every client of the request, shared
//! by the requests of one client, whose single store check is atomic (they
//! go side by side, each waiting only for its own store call), and held
//! alone by a request of several clients:
//!
//! 1. With one client (the common case), one store check does it: the
//!    store decides and consumes atomically, all or nothing.
//! 2. With several, each is first looked at (cost 0, using nothing). Then
//!    the clients without room for their cost are checked with it: each
//!    refuses, consuming nothing, with its exact `Retry-After`, and the
//!    others are reported as they stay. Only when every client had room
//!    is each consumed. The looks are asked at once, and so are the uses of
//!    each step (on Redis, one round trip or one batch each: two round
//!    trips for a request, whatever its clients; BENCHMARKS.md, "Envoy
//!    requests of two clients on Redis").
//!
//! The locks make the look exact within one process. Between the look and
//! the use, though, the state can change elsewhere: another instance
//! sharing one Redis uses the last unit, a late call is refunded, Redis's
//! clock moves on (a Redis store reading the time from Redis), or the
//! store fails and its failure policy refuses. So every use keeps a receipt
//! ([`tollgate::Store::check_returnable`]), and when a client refuses
//! after others consumed, what they consumed is given back
//! ([`tollgate::Store::give_back`]) before the locks are let go; a
//! request abandoned half way (Envoy cancelled the call) gives back too.
//! A give-back is compare and restore: a client whose state another
//! instance changed meanwhile keeps the use (towards admitting less) under
//! the token bucket and GCRA, never under the sliding log. The memory
//! store gives receipts too: within one process the locks leave nothing to
//! race among the service's own requests, but another front end of the
//! same process (`serve`'s HTTP API, a tower layer) decides on the same
//! store without them.
//!
//! # A cost no limit may grant is `OVER_LIMIT`
//!
//! A client's cost is its descriptors' `hits_addend` added up, never capped.
//! Past [`ServiceConfig::max_cost`](crate::ServiceConfig::max_cost)
//! (`u32::MAX` unless set, and every limit is at most `u32::MAX`) the
//! request is refused whatever the clients' state: `OVER_LIMIT`, for ever
//! (no `Retry-After`), consuming nothing from any client of the request.
//! Not an error status: Envoy hands errors to its failure mode, by default
//! letting the request through, and a caller who can set `hits_addend`
//! (Envoy can take it from a request header) would skip its limit. The
//! store is not asked for the cost, only looked at (cost 0) for the numbers
//! of the answer: each client over the bound is answered as the store
//! answers a cost over every limit, the others as they stay.

use std::hash::BuildHasher;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use foldhash::fast::RandomState;
use tokio::sync::{RwLock, RwLockWriteGuard};
use tollgate::{DecidedBy, Plan, PlanDecision, StoreError};
use tonic::{Request, Response, Status};

use crate::config::ServiceConfig;
use crate::rules::client_key;
use crate::status::{bare_status, descriptor_status, response_headers};

mod together;

const STRIPES: usize = 256;

/// More descriptors than any Envoy route sends; a bound so that one
/// request cannot make the service do quadratic work.
pub const MAX_DESCRIPTORS: usize = 1024;

/// The rate limit service: implements Envoy's `RateLimitService` over a
/// tollgate store. Serve it with [`crate::run`] or mount [`crate::router`].
pub struct RlsService {
    config: ServiceConfig,
    locks: Box<[RwLock<()>]>,
    hasher: RandomState,
}

impl std::fmt::Debug for RlsService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RlsService")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// One client of a request: the descriptors that map to the same plan and
/// client key are counted together.
struct Group {
    plan: Arc<Plan>,
    key: String,
    /// The descriptors' costs added up: never capped to `u32::MAX` (a limit
    /// of `u32::MAX` would then be asked for less than the request costs);
    /// saturated at `u64::MAX`, far past any limit.
    cost: u64,
}

/// A request's descriptors grouped by client.
struct Grouped {
    groups: Vec<Group>,
    /// For each descriptor, the group that decides it (None: unlimited).
    slots: Vec<Option<usize>>,
}

impl Grouped {
    /// The index of the group of `plan` and `key`, made or grown by `cost`.
    fn add(&mut self, plan: &Arc<Plan>, key: String, cost: u64) -> usize {
        let same = self
            .groups
            .iter()
            .position(|g| g.key == key && g.plan.name() == plan.name());
        match same {
            Some(i) => {
                self.groups[i].cost = self.groups[i].cost.saturating_add(cost);
                i
            }
            None => {
                self.groups.push(Group {
                    plan: plan.clone(),
                    key,
                    cost,
                });
                self.groups.len() - 1
            }
        }
    }
}

/// What was decided for one group.
enum Verdict {
    /// The store decided (and consumed, if allowed).
    Decided(PlanDecision),
    /// The group had room, but another group rejected the request: reported
    /// as it stays, nothing consumed.
    Untouched(PlanDecision),
}

impl RlsService {
    /// A service deciding by `config`.
    pub fn new(config: ServiceConfig) -> Self {
        Self {
            config,
            locks: (0..STRIPES).map(|_| RwLock::new(())).collect(),
            hasher: RandomState::default(),
        }
    }

    /// Decides one `ShouldRateLimit` request: validate it, group its
    /// descriptors by client, decide the groups, answer per descriptor.
    ///
    /// A client's cost over [`crate::ServiceConfig::max_cost`] (`u32::MAX`
    /// unless set) is no error: the request is answered `OVER_LIMIT` and
    /// consumes nothing (see the module docs).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for an empty domain, no descriptors or more than
    /// [`MAX_DESCRIPTORS`] (none of which Envoy sends); `UNAVAILABLE` when
    /// the store hands back an error and no client of the request refused
    /// (a guarded store's failure policy answers the failures it can: see
    /// `tollgate_guard::GuardedStore`).
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        validate(request)?;
        let grouped = self.group(request);
        let verdicts = self.decide_timed(&grouped.groups).await?;
        Ok(respond(&grouped, &verdicts))
    }

    /// The groups of a request's descriptors: those naming the same plan and
    /// client key are counted together, their costs added.
    fn group(&self, request: &RateLimitRequest) -> Grouped {
        let rules = self.config.rules.load();
        let request_cost = cost(u64::from(request.hits_addend));
        let mut grouped = Grouped {
            groups: Vec::new(),
            slots: Vec::with_capacity(request.descriptors.len()),
        };
        for descriptor in &request.descriptors {
            let cost = match &descriptor.hits_addend {
                Some(addend) => cost(addend.value),
                None => request_cost,
            };
            let entries = || {
                descriptor
                    .entries
                    .iter()
                    .map(|e| (e.key.as_str(), e.value.as_str()))
            };
            // Negative hits return budget; tollgate never refunds, so such a
            // descriptor is left alone.
            let rule = match descriptor.is_negative_hits {
                true => None,
                false => rules.find(&request.domain, entries()),
            };
            let slot = rule
                .map(|rule| grouped.add(&rule.plan, client_key(&request.domain, entries()), cost));
            grouped.slots.push(slot);
        }
        grouped
    }

    /// [`Self::decide_groups`], timed for the observer when there is one and
    /// there was something to decide.
    async fn decide_timed(&self, groups: &[Group]) -> Result<Vec<Verdict>, Status> {
        let observer = self
            .config
            .observer
            .as_deref()
            .filter(|_| !groups.is_empty());
        let started = observer.map(|_| Instant::now());
        let verdicts = self.decide_groups(groups).await;
        if let (Some(observer), Some(started)) = (observer, started) {
            observer.timed(started.elapsed());
        }
        verdicts
    }

    /// Decides every group under the locks of their stripes, or refuses
    /// them all when one asks for more than `max_cost`.
    async fn decide_groups(&self, groups: &[Group]) -> Result<Vec<Verdict>, Status> {
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let Some(costs) = store_costs(groups, self.config.max_cost) else {
            return Ok(self.refuse(groups).await);
        };
        if let ([group], [cost]) = (groups, costs.as_slice()) {
            // One client (the common case): its store check is atomic, so
            // the client's other such requests go side by side (each, in a
            // stall, waits its own timeout, not theirs too); the lock, shared,
            // only keeps them out of a request of several clients' look
            // and use. Nothing to sort.
            let guard = self.locks[self.stripe(group)].read().await;
            let now = self.config.clock.now_ms();
            let verdict = self.check(group, now, *cost).await?;
            drop(guard);
            return Ok(vec![verdict]);
        }
        let guards = self.lock(groups).await;
        let now = self.config.clock.now_ms();
        let verdicts = self.decide_together(groups, &costs, now).await?;
        drop(guards);
        Ok(verdicts)
    }

    /// A request one of whose clients asks for more than `max_cost`:
    /// refused for ever, and nothing consumed; each client over it is
    /// reported to the observer as refused (at its cost, or `u32::MAX`
    /// when larger), the others left untouched. Each client is looked at
    /// (cost 0: one store call that consumes nothing, so no lock) for the
    /// numbers of the answer; a look that fails leaves its client without
    /// numbers rather than turn a certain refusal into an error (which
    /// Envoy would let through).
    async fn refuse(&self, groups: &[Group]) -> Vec<Verdict> {
        let max_cost = u64::from(self.config.max_cost);
        let now = self.config.clock.now_ms();
        let mut verdicts = Vec::with_capacity(groups.len());
        for group in groups {
            let look = match self.check(group, now, 0).await {
                Ok(Verdict::Decided(d) | Verdict::Untouched(d)) => Some(d),
                Err(_) => None,
            };
            verdicts.push(if group.cost > max_cost {
                let refused = never(look);
                if let Some(observer) = &self.config.observer {
                    let cost = u32::try_from(group.cost).unwrap_or(u32::MAX);
                    observer.decided(&group.plan, &group.key, cost, &refused);
                }
                Verdict::Decided(refused)
            } else {
                Verdict::Untouched(look.unwrap_or_else(|| PlanDecision::from_limits(Vec::new())))
            });
        }
        verdicts
    }

    /// The lock stripe of a group's client.
    fn stripe(&self, group: &Group) -> usize {
        let hash = self
            .hasher
            .hash_one((group.plan.name(), group.key.as_str()));
        usize::try_from(hash % STRIPES as u64).unwrap_or(0)
    }

    /// Locks the stripe of every group, alone, in stripe order, so two requests
    /// never wait on each other in a cycle.
    async fn lock(&self, groups: &[Group]) -> Vec<RwLockWriteGuard<'_, ()>> {
        let mut stripes: Vec<usize> = groups.iter().map(|g| self.stripe(g)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for stripe in stripes {
            guards.push(self.locks[stripe].write().await);
        }
        guards
    }

    /// One store call; `cost` 0 is a look, reported to the observer only
    /// if it fails.
    async fn check(&self, group: &Group, now: u64, cost: u32) -> Result<Verdict, Status> {
        let answer = self
            .config
            .store
            .check(&group.plan, &group.key, now, cost)
            .await;
        if let (Some(observer), Ok(decision)) = (&self.config.observer, &answer) {
            if cost > 0 {
                observer.decided(&group.plan, &group.key, cost, decision);
            }
        }
        answer
            .map(Verdict::Decided)
            .map_err(|error| self.failed(group, &error))
    }

    /// A store error, told to the observer; the caller gets `UNAVAILABLE`.
    /// The error itself (a Redis message may name a script's hash) goes to
    /// the observer and the guard's log, not to the caller.
    fn failed(&self, group: &Group, error: &StoreError) -> Status {
        if let Some(observer) = &self.config.observer {
            observer.store_failed(&group.plan, error);
        }
        Status::unavailable("rate limit store unavailable")
    }
}

/// Checks what a request must hold before anything is decided. Envoy never
/// sends a request that fails these (its domain is required configuration,
/// it does not call without descriptors, and its descriptors come one per
/// configured rate limit), so refusing them with an error lets no caller
/// skip a limit.
fn validate(request: &RateLimitRequest) -> Result<(), Status> {
    if request.domain.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit domain must not be empty",
        ));
    }
    if request.descriptors.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit descriptor list must not be empty",
        ));
    }
    if request.descriptors.len() > MAX_DESCRIPTORS {
        return Err(Status::invalid_argument(format!(
            "{} descriptors in one request; at most {MAX_DESCRIPTORS} are accepted",
            request.descriptors.len()
        )));
    }
    Ok(())
}

/// Every group's cost as the store takes it, or `None` when one is over
/// `max_cost` (at most `u32::MAX`, so the rest fit a `u32`).
fn store_costs(groups: &[Group], max_cost: u32) -> Option<Vec<u32>> {
    groups
        .iter()
        .map(|g| u32::try_from(g.cost).ok().filter(|cost| *cost <= max_cost))
        .collect()
}

/// The answer for a client whose cost is over `max_cost`, from a look at it
/// (`None`: the look failed): rejected by every limit with no wait that
/// helps (`retry_after_ms` `None`), as the store answers a cost over every
/// limit, the limits' numbers as they stay. `status` and the headers then
/// write it as any such rejection: `OVER_LIMIT`, no `Retry-After`.
fn never(look: Option<PlanDecision>) -> PlanDecision {
    let (mut limits, decided_by) = match look {
        Some(look) => (look.limits, look.decided_by),
        None => (Vec::new(), DecidedBy::Store),
    };
    for limit in &mut limits {
        limit.decision.allowed = false;
        limit.decision.retry_after_ms = None;
    }
    PlanDecision {
        allowed: false,
        retry_after_ms: None,
        limits,
        decided_by,
    }
}

/// The answer: one status per descriptor (in order), `OVER_LIMIT` overall
/// when any is, and the RateLimit headers over every group's decision.
fn respond(grouped: &Grouped, verdicts: &[Verdict]) -> RateLimitResponse {
    let decision = |i: usize| match &verdicts[i] {
        Verdict::Decided(d) | Verdict::Untouched(d) => d,
    };
    let mut response = RateLimitResponse {
        overall_code: Code::Ok as i32,
        ..RateLimitResponse::default()
    };
    for slot in &grouped.slots {
        let status = match slot {
            None => bare_status(Code::Ok),
            Some(i) => descriptor_status(grouped.groups[*i].plan.name(), decision(*i)),
        };
        if status.code == Code::OverLimit as i32 {
            response.overall_code = Code::OverLimit as i32;
        }
        response.statuses.push(status);
    }
    let decided = (grouped.groups.iter().enumerate()).map(|(i, g)| (g.plan.name(), decision(i)));
    response.response_headers_to_add = response_headers(decided);
    response
}

/// A `hits_addend` as a cost: 0 means 1 (as Envoy's own service reads it).
/// Kept whole: past `max_cost` the request is refused, never truncated.
fn cost(hits: u64) -> u64 {
    hits.max(1)
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        // A call read whole only after the shutdown's drain ended would be
        // decided while the store settles, and its answer lost with the
        // connection: it is not decided at all.
        if self.config.drain_ended.load(Ordering::Relaxed) {
            return Err(Status::unavailable("the server is shutting down"));
        }
        self.decide(request.get_ref()).await.map(Response::new)
    }
}
