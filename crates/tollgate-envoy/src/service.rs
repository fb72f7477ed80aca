//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
//!
//! # A rejected request consumes nothing
//!
//! The descriptors of one request may name several clients (say, the
//! caller's address and its API key), and the store is atomic per client
//! only. So the service decides a request in two steps, holding a lock
//! (one of 256 stripes, by client) on every client of the request:
//!
//! 1. With one client (the common case), one store check does it: the
//!    store decides and consumes atomically, all or nothing.
//! 2. With several, each is first asked without using anything (cost 0),
//!    and only if every one has room for its cost is each consumed.
//!    Otherwise the rejecting ones are checked with their real cost (a
//!    rejection consumes nothing) for exact `Retry-After` numbers, and the
//!    others are reported as they stay.
//!
//! The locks make this exact within one process, for the memory store and
//! for Redis. Several processes sharing one Redis can race between the two
//! steps: another instance may use the last unit in between, and then the
//! clients consumed before the one that rejects are not refunded (the
//! request is still answered `OVER_LIMIT`). That window is one Redis round
//! trip wide, and only requests with several limited descriptors meet it.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use foldhash::fast::RandomState;
use tokio::sync::{Mutex, MutexGuard};
use tollgate::{Plan, PlanDecision};
use tonic::{Request, Response, Status};

use crate::config::ServiceConfig;
use crate::rules::client_key;
use crate::status::{bare_status, descriptor_status, response_headers};

const STRIPES: usize = 256;

/// More descriptors than any Envoy route sends; a bound so that one
/// request cannot make the service do quadratic work.
pub const MAX_DESCRIPTORS: usize = 1024;

/// The rate limit service: implements Envoy's `RateLimitService` over a
/// tollgate store. Serve it with [`crate::run`] or mount [`crate::router`].
pub struct RlsService {
    config: ServiceConfig,
    locks: Box<[Mutex<()>]>,
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
    cost: u32,
}

/// A request's descriptors grouped by client.
struct Grouped {
    groups: Vec<Group>,
    /// For each descriptor, the group that decides it (None: unlimited).
    slots: Vec<Option<usize>>,
}

impl Grouped {
    /// The index of the group of `plan` and `key`, made or grown by `cost`.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when the group's cost would pass `max_cost`. A sum
    /// is never capped: a capped sum would ask a limit of `u32::MAX` for less
    /// than the request costs.
    fn add(
        &mut self,
        plan: &Arc<Plan>,
        key: String,
        cost: u32,
        max_cost: u32,
    ) -> Result<usize, Status> {
        let same = self
            .groups
            .iter()
            .position(|g| g.key == key && g.plan.name() == plan.name());
        let (at, total) = match same {
            Some(i) => (i, u64::from(self.groups[i].cost) + u64::from(cost)),
            None => (self.groups.len(), u64::from(cost)),
        };
        if total > u64::from(max_cost) {
            return Err(Status::invalid_argument(format!(
                "the descriptors of client {key:?} ask for a cost of {total} in all, \
                 over the maximum of {max_cost}"
            )));
        }
        match same {
            // total <= max_cost, a u32: the cast keeps it whole.
            Some(i) => self.groups[i].cost = total as u32,
            None => self.groups.push(Group {
                plan: plan.clone(),
                key,
                cost,
            }),
        }
        Ok(at)
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
            locks: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hasher: RandomState::default(),
        }
    }

    /// Decides one `ShouldRateLimit` request: validate it, group its
    /// descriptors by client, decide the groups, answer per descriptor.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for an empty domain, no descriptors or more than
    /// [`MAX_DESCRIPTORS`], a `hits_addend` over `u32::MAX`, or one client's
    /// cost over the configured `max_cost` ([`crate::ServiceConfig::max_cost`],
    /// `u32::MAX` unless set); `UNAVAILABLE`
    /// when the store hands back an error (a guarded store's failure policy
    /// answers the failures it can: see `tollgate_guard::GuardedStore`).
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        let request_cost = validate(request)?;
        let grouped = self.group(request, request_cost)?;
        let verdicts = self.decide_timed(&grouped.groups).await?;
        Ok(respond(&grouped, &verdicts))
    }

    /// The groups of a request's descriptors: those naming the same plan and
    /// client key are counted together, their costs added.
    fn group(&self, request: &RateLimitRequest, request_cost: u32) -> Result<Grouped, Status> {
        let rules = self.config.rules.load();
        let max_cost = self.config.max_cost;
        let mut grouped = Grouped {
            groups: Vec::new(),
            slots: Vec::with_capacity(request.descriptors.len()),
        };
        for descriptor in &request.descriptors {
            let cost = match &descriptor.hits_addend {
                Some(addend) => cost(addend.value)?,
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
            let slot = match rule {
                Some(rule) => Some(grouped.add(
                    &rule.plan,
                    client_key(&request.domain, entries()),
                    cost,
                    max_cost,
                )?),
                None => None,
            };
            grouped.slots.push(slot);
        }
        Ok(grouped)
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

    /// Decides every group under the locks of their stripes.
    async fn decide_groups(&self, groups: &[Group]) -> Result<Vec<Verdict>, Status> {
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        if let [group] = groups {
            // One client (the common case): one lock, nothing to sort.
            let guard = self.locks[self.stripe(group)].lock().await;
            let now = self.config.clock.now_ms();
            let verdict = self.check(group, now, group.cost).await?;
            drop(guard);
            return Ok(vec![verdict]);
        }
        let guards = self.lock(groups).await;
        let now = self.config.clock.now_ms();
        let verdicts = self.decide_together(groups, now).await?;
        drop(guards);
        Ok(verdicts)
    }

    /// The lock stripe of a group's client.
    fn stripe(&self, group: &Group) -> usize {
        let hash = self
            .hasher
            .hash_one((group.plan.name(), group.key.as_str()));
        usize::try_from(hash % STRIPES as u64).unwrap_or(0)
    }

    /// Locks the stripe of every group, in stripe order, so two requests
    /// never wait on each other in a cycle.
    async fn lock(&self, groups: &[Group]) -> Vec<MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> = groups.iter().map(|g| self.stripe(g)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for stripe in stripes {
            guards.push(self.locks[stripe].lock().await);
        }
        guards
    }

    /// Several groups, all or nothing (see the module docs): step 1 asks
    /// whether every group has room for its cost, step 2 consumes from all,
    /// or reports why not.
    async fn decide_together(&self, groups: &[Group], now: u64) -> Result<Vec<Verdict>, Status> {
        let mut peeks = Vec::with_capacity(groups.len());
        for group in groups {
            peeks.push(self.check(group, now, 0).await?);
        }
        let rooms: Vec<bool> = groups
            .iter()
            .zip(&peeks)
            .map(|(g, v)| has_room(g, v))
            .collect();
        let all_fit = rooms.iter().all(|room| *room);
        let mut verdicts = Vec::with_capacity(groups.len());
        for ((group, peek), room) in groups.iter().zip(peeks).zip(rooms) {
            let verdict = match peek {
                Verdict::Decided(_) if all_fit => self.check(group, now, group.cost).await?,
                Verdict::Decided(d) if room => Verdict::Untouched(d),
                // Rejects by itself: the real check consumes nothing and
                // gives the exact wait.
                Verdict::Decided(_) => self.check(group, now, group.cost).await?,
                other => other,
            };
            verdicts.push(verdict);
        }
        Ok(verdicts)
    }

    /// One store call; `cost` 0 is a look, reported to the observer only
    /// if it fails.
    async fn check(&self, group: &Group, now: u64, cost: u32) -> Result<Verdict, Status> {
        let answer = self
            .config
            .store
            .check(&group.plan, &group.key, now, cost)
            .await;
        if let Some(observer) = &self.config.observer {
            match &answer {
                Ok(decision) if cost > 0 => observer.decided(&group.plan, cost, decision),
                Ok(_) => {}
                Err(error) => observer.store_failed(&group.plan, error),
            }
        }
        // The error itself (a Redis message may name a script's hash) goes
        // to the observer and the guard's log, not to the caller.
        answer
            .map(Verdict::Decided)
            .map_err(|_| Status::unavailable("rate limit store unavailable"))
    }
}

/// Checks what a request must hold before anything is decided, and reads
/// its cost.
fn validate(request: &RateLimitRequest) -> Result<u32, Status> {
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
    cost(u64::from(request.hits_addend))
}

/// Whether a group's look (cost 0) leaves room for its cost in every
/// enforced limit.
fn has_room(group: &Group, peek: &Verdict) -> bool {
    match peek {
        Verdict::Decided(d) => {
            d.allowed
                && d.limits
                    .iter()
                    .filter(|l| !l.shadow)
                    .all(|l| l.decision.remaining >= group.cost)
        }
        Verdict::Untouched(_) => false,
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

/// A `hits_addend` as a cost: 0 means 1 (as Envoy's own service reads it),
/// and more than `u32::MAX` is refused.
fn cost(hits: u64) -> Result<u32, Status> {
    match hits {
        0 => Ok(1),
        n => u32::try_from(n).map_err(|_| {
            Status::invalid_argument(format!("hits_addend {n} is larger than {}", u32::MAX))
        }),
    }
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.decide(request.get_ref()).await.map(Response::new)
    }
}
