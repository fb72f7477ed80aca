//! The running service: the active config, the store, the clock and the
//! metrics, shared by every connection. Decisions and reloads go through
//! here; [`crate::http`] only translates HTTP to and from it.

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use arc_swap::ArcSwap;
use tollgate::{
    Clock, DecidedBy, Decision, LimitDecision, MemoryBackend, Plan, PlanDecision, Policy, Store,
};

use crate::clock::Stopwatch;
use crate::config::{Config, FailurePolicy, StoreKind};
use crate::http::Rejection;
use crate::metrics::{Gauges, Metrics, PlanMetrics};
use crate::Error;

/// Where the server keeps limit state.
#[derive(Clone)]
pub enum StoreHandle {
    /// In this process: the server also reports tracked clients and sweeps idle ones.
    Memory(Arc<MemoryBackend>),
    /// Anywhere else behind the [`Store`] trait (Redis).
    Shared(Arc<dyn Store>),
}

impl StoreHandle {
    /// The store for the config's `[store]` section.
    ///
    /// # Errors
    /// [`Error::RedisUnavailable`] for a Redis URL: this build has no Redis store.
    pub fn for_config(config: &Config) -> Result<Self, Error> {
        match &config.store.kind {
            StoreKind::Memory => Ok(StoreHandle::Memory(Arc::new(
                MemoryBackend::with_max_clients(config.store.max_clients),
            ))),
            StoreKind::Redis { url } => Err(Error::RedisUnavailable { url: url.clone() }),
        }
    }
}

/// The config in force, with the counters of each of its plans.
struct Active {
    config: Arc<Config>,
    /// By plan index.
    metrics: Vec<PlanMetrics>,
}

struct Inner {
    active: ArcSwap<Active>,
    store: Arc<dyn Store>,
    memory: Option<Arc<MemoryBackend>>,
    /// Decides for the `local-fallback` failure policy.
    fallback: MemoryBackend,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    config_path: OnceLock<PathBuf>,
    reload_lock: Mutex<()>,
    swept: AtomicU64,
}

/// The service, cheap to clone (every clone is the same server).
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

/// One decided request.
#[derive(Debug, Clone)]
pub struct Decided {
    /// The config the decision was taken under (the plan's name lives there).
    pub config: Arc<Config>,
    /// The plan's index in `config`.
    pub plan: usize,
    /// The decision.
    pub decision: PlanDecision,
}

impl Decided {
    /// The plan the request was checked against.
    pub fn plan(&self) -> &Plan {
        &self.config.plans()[self.plan]
    }
}

/// What a reload changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadReport {
    /// Limits of the new config that existed unchanged before: their clients keep their state.
    pub kept: usize,
    /// Limits that are new or changed (policy, limit or window): their clients start afresh.
    pub fresh: usize,
    /// Limits of the old config that are gone.
    pub removed: usize,
    /// Settings that changed but only take effect on restart.
    pub needs_restart: Vec<&'static str>,
}

impl fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} limit(s) kept their state, {} new or changed, {} removed",
            self.kept, self.fresh, self.removed
        )?;
        if !self.needs_restart.is_empty() {
            write!(
                f,
                "; changed settings that need a restart: {}",
                self.needs_restart.join(", ")
            )?;
        }
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Server {
    /// A server deciding with `store` under `config`, reading time from `clock`.
    pub fn new(config: Config, store: StoreHandle, clock: Arc<dyn Clock>) -> Self {
        let (store, memory): (Arc<dyn Store>, _) = match store {
            StoreHandle::Memory(memory) => (memory.clone(), Some(memory)),
            StoreHandle::Shared(store) => (store, None),
        };
        let metrics = Metrics::new();
        let fallback = MemoryBackend::with_max_clients(config.store.max_clients);
        let active = Self::activate(&metrics, config);
        Self {
            inner: Arc::new(Inner {
                active: ArcSwap::from_pointee(active),
                store,
                memory,
                fallback,
                clock,
                metrics,
                config_path: OnceLock::new(),
                reload_lock: Mutex::new(()),
                swept: AtomicU64::new(0),
            }),
        }
    }

    /// The same server, reloading from `path` (see [`Server::reload`]).
    /// The path is set once: a second call keeps the first path.
    pub fn with_config_path(self, path: impl Into<PathBuf>) -> Self {
        let _ = self.inner.config_path.set(path.into());
        self
    }

    /// The config file reloads read, if any.
    pub fn config_path(&self) -> Option<&std::path::Path> {
        self.inner.config_path.get().map(PathBuf::as_path)
    }

    fn activate(metrics: &Metrics, config: Config) -> Active {
        let plan_metrics = config.plans().iter().map(|p| metrics.for_plan(p)).collect();
        Active {
            config: Arc::new(config),
            metrics: plan_metrics,
        }
    }

    /// The config in force.
    pub fn config(&self) -> Arc<Config> {
        self.inner.active.load().config.clone()
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Decides a request of `cost` units (0: only look) for `client`, on its
    /// plan or on the plan named `plan`. Store failures are answered by the
    /// config's failure policy and counted; the decision is counted per plan
    /// and limit (looks are not).
    ///
    /// # Errors
    /// A 400 [`Rejection`] for an unknown plan or a cost over the config's
    /// `max_cost`; nothing is decided then.
    pub async fn decide(
        &self,
        client: &str,
        plan: Option<&str>,
        cost: u32,
    ) -> Result<Decided, Rejection> {
        let active = self.inner.active.load_full();
        let config = &active.config;
        let index = match plan {
            Some(name) => config.plan_index(name).ok_or_else(|| {
                let known: Vec<&str> = config.plans().iter().map(Plan::name).collect();
                Rejection::bad_request(format!(
                    "unknown plan {name:?}: known plans are {}",
                    known.join(", ")
                ))
            })?,
            None => config.plan_index_for(client),
        };
        if cost > config.max_cost {
            return Err(Rejection::bad_request(format!(
                "cost {cost} is over the maximum of {} per request",
                config.max_cost
            )));
        }
        let plan = &config.plans()[index];
        let stopwatch = Stopwatch::start();
        let now = self.inner.clock.now_ms();
        let decision = match self.inner.store.check(plan, client, now, cost).await {
            Ok(decision) => decision,
            Err(error) => {
                let errors = self.inner.metrics.record_store_error(error.transient);
                let policy = config.store.failure_policy;
                // A store that is down fails every request: log the 1st,
                // 2nd, 4th, 8th... error rather than flood the log.
                if errors.is_power_of_two() {
                    tracing::warn!(%error, transient = error.transient, errors, client, plan = plan.name(), policy = policy.as_str(), "store failed; the failure policy decides");
                }
                self.stand_in(policy, plan, client, now, cost)
            }
        };
        let metrics = &self.inner.metrics;
        metrics.record_decided_by(decision.decided_by);
        if cost > 0 {
            active.metrics[index].record(&decision);
        }
        metrics.record_latency(stopwatch.elapsed());
        tracing::debug!(
            client,
            plan = plan.name(),
            cost,
            allowed = decision.allowed,
            retry_after_ms = decision.retry_after_ms,
            decided_by = decision.decided_by.as_str(),
            "decision"
        );
        Ok(Decided {
            config: active.config.clone(),
            plan: index,
            decision,
        })
    }

    /// The failure policy's answer when the store could not decide.
    fn stand_in(
        &self,
        policy: FailurePolicy,
        plan: &Plan,
        client: &str,
        now: u64,
        cost: u32,
    ) -> PlanDecision {
        if policy == FailurePolicy::LocalFallback {
            let mut decision = self.inner.fallback.limiter().check(plan, client, now, cost);
            decision.decided_by = DecidedBy::LocalFallback;
            return decision;
        }
        let open = policy == FailurePolicy::FailOpen;
        // Without the store nothing is known about the client: fail-open
        // shows full quotas, fail-closed shows none and asks to retry in a
        // second, when the store may be back.
        let limits = plan
            .limits()
            .iter()
            .map(|limit| {
                let p = limit.policy();
                LimitDecision {
                    name: limit.name().into(),
                    policy: p.name(),
                    window_ms: p.window_ms(),
                    shadow: limit.is_shadow(),
                    decision: Decision {
                        allowed: open,
                        limit: p.limit(),
                        remaining: if open { p.limit() } else { 0 },
                        retry_after_ms: Some(if open { 0 } else { 1_000 }),
                        reset_after_ms: if open { 0 } else { p.window_ms() },
                    },
                }
            })
            .collect();
        let mut decision = PlanDecision::from_limits(limits);
        decision.decided_by = if open {
            DecidedBy::FailOpen
        } else {
            DecidedBy::FailClosed
        };
        decision
    }

    /// Re-reads the config file and, if it is valid, puts it in force.
    /// Limits that did not change (same plan, limit name, policy, limit and
    /// window) keep every client's state. A broken file is refused with a
    /// log line and the running config stays.
    ///
    /// # Errors
    /// [`Error::NoConfigFile`] when the server runs without a file; the
    /// file's read or config error otherwise.
    pub fn reload(&self) -> Result<ReloadReport, Error> {
        let path = self.inner.config_path.get().ok_or(Error::NoConfigFile)?;
        let _one_at_a_time = lock(&self.inner.reload_lock);
        match Config::load(path) {
            Ok(config) => {
                let report = self.apply(config);
                if report.needs_restart.is_empty() {
                    tracing::info!(path = %path.display(), %report, "config reloaded");
                } else {
                    tracing::warn!(path = %path.display(), %report, "config reloaded, but some changes wait for a restart");
                }
                Ok(report)
            }
            Err(error) => {
                self.inner.metrics.record_reload(false);
                tracing::error!(path = %path.display(), %error, "config reload refused; the running config stays");
                Err(error)
            }
        }
    }

    /// Puts `config` in force (see [`Server::reload`]).
    pub fn apply(&self, config: Config) -> ReloadReport {
        let old = self.config();
        let old_ids: HashSet<u64> = old
            .plans()
            .iter()
            .flat_map(|p| p.limits().iter().map(|l| l.id()))
            .collect();
        let new_ids: HashSet<u64> = config
            .plans()
            .iter()
            .flat_map(|p| p.limits().iter().map(|l| l.id()))
            .collect();
        let kept = new_ids.intersection(&old_ids).count();
        let mut needs_restart = Vec::new();
        if config.listen != old.listen {
            needs_restart.push("listen");
        }
        if config.store != old.store {
            needs_restart.push("store");
        }
        if config.sweep_interval_ms != old.sweep_interval_ms {
            needs_restart.push("sweep_interval");
        }
        let report = ReloadReport {
            kept,
            fresh: new_ids.len() - kept,
            removed: old_ids.len() - kept,
            needs_restart,
        };
        let active = Self::activate(&self.inner.metrics, config);
        self.inner.active.store(Arc::new(active));
        self.inner.metrics.record_reload(true);
        report
    }

    /// Drops the state of idle clients from the memory stores (and state of
    /// limits no longer in the config). Returns how many clients were dropped.
    pub fn sweep(&self) -> usize {
        let config = self.config();
        let now = self.inner.clock.now_ms();
        let mut dropped = self
            .inner
            .fallback
            .limiter()
            .sweep(config.plans(), now, false);
        if let Some(memory) = &self.inner.memory {
            dropped += memory.limiter().sweep(config.plans(), now, false);
        }
        self.inner
            .swept
            .fetch_add(dropped as u64, Ordering::Relaxed);
        dropped
    }

    /// The metrics in Prometheus text format.
    pub fn render_metrics(&self) -> String {
        let mut gauges = Gauges {
            swept: self.inner.swept.load(Ordering::Relaxed),
            ..Gauges::default()
        };
        if let Some(memory) = &self.inner.memory {
            let store = memory.limiter().store();
            gauges.tracked_clients = Some(store.len());
            gauges.max_clients = store.max_clients();
            gauges.evicted = store.evicted();
            gauges.reclaimed = store.reclaimed();
        }
        self.inner.metrics.render(gauges)
    }
}
