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

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::sync::Mutex;
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
            hasher: RandomState::new(),
        }
    }

    /// Decides one `ShouldRateLimit` request.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for an empty domain, no descriptors or more than
    /// [`MAX_DESCRIPTORS`], or a `hits_addend` over `u32::MAX`; `UNAVAILABLE`
    /// when the store hands back an error (a guarded store's failure policy
    /// answers the failures it can: see `tollgate_guard::GuardedStore`).
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
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
        let request_cost = cost(u64::from(request.hits_addend))?;
        let rules = self.config.rules.current();
        let mut groups: Vec<Group> = Vec::new();
        // For each descriptor, the group that decides it (None: unlimited).
        let mut slots: Vec<Option<usize>> = Vec::with_capacity(request.descriptors.len());
        for descriptor in &request.descriptors {
            let cost = match &descriptor.hits_addend {
                Some(addend) => cost(addend.value)?,
                None => request_cost,
            };
            // Negative hits return budget; tollgate never refunds, so such a
            // descriptor is left alone.
            let entries = || {
                descriptor
                    .entries
                    .iter()
                    .map(|e| (e.key.as_str(), e.value.as_str()))
            };
            let rule = match descriptor.is_negative_hits {
                true => None,
                false => rules.find(&request.domain, entries()),
            };
            let Some(rule) = rule else {
                slots.push(None);
                continue;
            };
            let key = client_key(&request.domain, entries());
            let same = groups
                .iter()
                .position(|g| g.key == key && g.plan.name() == rule.plan.name());
            match same {
                Some(i) => {
                    groups[i].cost = groups[i].cost.saturating_add(cost);
                    slots.push(Some(i));
                }
                None => {
                    slots.push(Some(groups.len()));
                    groups.push(Group {
                        plan: rule.plan.clone(),
                        key,
                        cost,
                    });
                }
            }
        }

        let observer = self
            .config
            .observer
            .as_deref()
            .filter(|_| !groups.is_empty());
        let started = observer.map(|_| Instant::now());
        let verdicts = self.decide_groups(&groups).await;
        if let (Some(observer), Some(started)) = (observer, started) {
            observer.timed(started.elapsed());
        }
        let verdicts = verdicts?;

        let mut response = RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..RateLimitResponse::default()
        };
        for slot in slots {
            let status = match slot.map(|i| (&groups[i], &verdicts[i])) {
                None => bare_status(Code::Ok),
                Some((group, Verdict::Decided(d) | Verdict::Untouched(d))) => {
                    descriptor_status(group.plan.name(), d)
                }
            };
            if status.code == Code::OverLimit as i32 {
                response.overall_code = Code::OverLimit as i32;
            }
            response.statuses.push(status);
        }
        let decided = groups.iter().zip(&verdicts).map(|(g, v)| match v {
            Verdict::Decided(d) | Verdict::Untouched(d) => (g.plan.name(), d),
        });
        response.response_headers_to_add = response_headers(decided);
        Ok(response)
    }

    async fn decide_groups(&self, groups: &[Group]) -> Result<Vec<Verdict>, Status> {
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let mut stripes: Vec<usize> = groups
            .iter()
            .map(|g| {
                let hash = self.hasher.hash_one((g.plan.name(), g.key.as_str()));
                usize::try_from(hash % STRIPES as u64).unwrap_or(0)
            })
            .collect();
        // Locks are taken in stripe order, so two requests never wait on
        // each other in a cycle.
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for stripe in stripes {
            guards.push(self.locks[stripe].lock().await);
        }
        let now = self.config.clock.now_ms();

        if let [group] = groups {
            let verdict = self.check(group, now, group.cost).await?;
            return Ok(vec![verdict]);
        }

        // Step 1: does every group have room for its cost?
        let mut peeks = Vec::with_capacity(groups.len());
        for group in groups {
            peeks.push(self.check(group, now, 0).await?);
        }
        let has_room = |group: &Group, verdict: &Verdict| match verdict {
            Verdict::Decided(d) => {
                d.allowed
                    && d.limits
                        .iter()
                        .filter(|l| !l.shadow)
                        .all(|l| l.decision.remaining >= group.cost)
            }
            Verdict::Untouched(_) => false,
        };
        let rooms: Vec<bool> = groups
            .iter()
            .zip(&peeks)
            .map(|(g, v)| has_room(g, v))
            .collect();
        let all_fit = rooms.iter().all(|room| *room);

        // Step 2: consume from all, or report why not.
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
        drop(guards);
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
