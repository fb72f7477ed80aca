//! Deciding every request as `tollgate serve` would, and counting.
//!
//! `serve` on the in-memory store decides a request of client `c` with
//! `PlanLimiter::check(plan of c, c, now, cost 1)` on a limiter capped at
//! `[store] max_clients`. The simulation does the same with each request's
//! own log time as `now`.
//!
//! It does not sweep idle clients, as `serve` does every `sweep_interval`:
//! a sweep at time `t` drops the state that no call at `t` or later needs,
//! which is safe on a clock but not on a log, whose times may go back (two
//! servers' logs joined one after the other, a clock stepped back). A
//! client whose state a sweep at a later log time had dropped would then
//! be answered afresh, and could pass its limit. Its state stays instead,
//! bounded by the cap, as the per-client counts kept here are anyway.

use std::collections::HashMap;

use tollgate::PlanLimiter;
use tollgate_config::Config;

use super::timeline::Timelines;

/// Counts for one plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanTally {
    /// Requests of clients on this plan.
    pub requests: u64,
    /// Of them, rejected.
    pub rejected: u64,
    /// Per limit (the plan's order): requests this limit said no to. For a
    /// shadow limit, the requests it would have rejected.
    pub limit_rejections: Vec<u64>,
}

/// Counts for one client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientTally {
    /// The index of the client's plan in the config.
    pub plan: usize,
    /// Its requests.
    pub requests: u64,
    /// Of them, rejected.
    pub rejected: u64,
    /// The log time of its first rejection.
    pub first_rejected_ms: Option<u64>,
}

type ClientMap<V> = HashMap<Box<str>, V, foldhash::fast::RandomState>;

/// A simulation in progress.
pub struct Simulation<'c> {
    config: &'c Config,
    limiter: PlanLimiter,
    /// Requests decided.
    pub requests: u64,
    /// Of them, rejected.
    pub rejected: u64,
    /// The earliest and latest request times.
    pub span_ms: Option<(u64, u64)>,
    /// Per plan, in the config's order.
    pub plans: Vec<PlanTally>,
    /// Per client (memory grows with the number of distinct clients, not
    /// with the number of lines).
    pub clients: ClientMap<ClientTally>,
    /// Allowed and rejected over time, one series per plan.
    pub timelines: Timelines,
    watched: ClientMap<usize>,
    /// Allowed and rejected over time of the watched clients (see [`Simulation::watch`]).
    pub watched_timelines: Timelines,
}

impl<'c> Simulation<'c> {
    /// A simulation of `config`'s plans on an empty in-memory store.
    pub fn new(config: &'c Config) -> Self {
        let plans = config
            .plans()
            .iter()
            .map(|plan| PlanTally {
                limit_rejections: vec![0; plan.limits().len()],
                ..PlanTally::default()
            })
            .collect::<Vec<_>>();
        let timelines = Timelines::new(plans.len());
        Self {
            config,
            // Repeatable: a second pass (--report), and a second run, evict
            // the same clients and so give the same answers.
            limiter: PlanLimiter::with_max_clients_repeatable(config.store.max_clients),
            requests: 0,
            rejected: 0,
            span_ms: None,
            watched_timelines: Timelines::on_axis_of(&timelines, 0),
            timelines,
            plans,
            clients: ClientMap::default(),
            watched: ClientMap::default(),
        }
    }

    /// Also keeps a timeline of each of `clients`, on the axis of `axis`
    /// (a run over the same log gives the same axis).
    pub fn watch(&mut self, clients: &[String], axis: &Timelines) {
        self.watched = clients
            .iter()
            .enumerate()
            .map(|(index, client)| (client.as_str().into(), index))
            .collect();
        self.watched_timelines = Timelines::on_axis_of(axis, clients.len());
    }

    /// How many times a client's state in use was dropped for room
    /// (`[store] max_clients` reached), as `serve` would: that client was
    /// decided afresh after.
    pub fn evicted(&self) -> u64 {
        self.limiter.store().evicted()
    }

    /// Decides one request of `client` at `time_ms`, as `serve` would.
    pub fn decide(&mut self, client: &str, time_ms: u64) {
        let tally = match self.clients.get_mut(client) {
            Some(tally) => tally,
            None => self
                .clients
                .entry(client.into())
                .or_insert_with(|| ClientTally {
                    plan: self.config.plan_index_for(client),
                    ..ClientTally::default()
                }),
        };
        let plan = &self.config.plans()[tally.plan];
        let decision = self.limiter.check(plan, client, time_ms, 1);
        let plan_tally = &mut self.plans[tally.plan];
        tally.requests += 1;
        plan_tally.requests += 1;
        self.requests += 1;
        if !decision.allowed {
            tally.rejected += 1;
            tally.first_rejected_ms.get_or_insert(time_ms);
            plan_tally.rejected += 1;
            self.rejected += 1;
        }
        for (count, limit) in plan_tally.limit_rejections.iter_mut().zip(&decision.limits) {
            *count += u64::from(!limit.decision.allowed);
        }
        self.timelines.add(tally.plan, time_ms, decision.allowed);
        if let Some(&index) = self.watched.get(client) {
            self.watched_timelines.add(index, time_ms, decision.allowed);
        }
        self.span_ms = Some(match self.span_ms {
            None => (time_ms, time_ms),
            Some((first, last)) => (first.min(time_ms), last.max(time_ms)),
        });
    }
}
