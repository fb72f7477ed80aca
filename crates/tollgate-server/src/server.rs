//! The running service: the active config, the store, the clock and the
//! metrics, shared by every connection. Decisions and reloads go through
//! here; [`crate::http`] only translates HTTP to and from it.

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use tollgate::{Clock, Inspection, MemoryBackend, Plan, PlanDecision, Store};
use tollgate_config::store::{cached, guard, rejection_cache, RejectionCache};
use tollgate_config::{Config, Overrides, StoreHandle};
use tollgate_guard::GuardedStore;

use crate::metrics::{Frontend, Metrics, PlanMetrics};
use crate::stopwatch::Stopwatch;
use crate::Error;

mod grpc_metrics;
mod look;
mod observe;
mod reload;
mod render;
mod sweep;

pub use observe::{Observed, PartCircuit, StoreHealth, StoreRefunds};
pub use reload::ReloadReport;
pub use sweep::sweep_idle;

/// The config in force, with the counters of each of its plans.
struct Active {
    config: Arc<Config>,
    /// By plan index.
    metrics: Vec<PlanMetrics>,
}

struct Inner {
    /// Shared with the gRPC service's metrics observer.
    active: Arc<ArcSwap<Active>>,
    store: Arc<dyn Store>,
    memory: Option<Arc<MemoryBackend>>,
    /// The shared store behind its timeout and failure policy (its local
    /// fallback is swept with the memory store), and the gRPC service's own
    /// guard when `[envoy] on_store_error` differs: their counts are the
    /// store errors in `/metrics`.
    guarded: Option<Arc<GuardedStore<Arc<dyn Store>>>>,
    envoy_guarded: Option<Arc<GuardedStore<Arc<dyn Store>>>>,
    /// The shared store's exact rejection cache, in front of both guards:
    /// its size is a gauge, and a reload drops the changed plans' entries.
    rejection_cache: Option<Arc<RejectionCache>>,
    /// The Redis store, for how many calls carried its decisions.
    redis: Option<Arc<tollgate_redis::RedisStore>>,
    clock: Arc<dyn Clock>,
    /// The gRPC rate limit service's view: the same store (behind the
    /// policy `unavailable` if `[envoy] on_store_error` says so) and
    /// clock, the config's `[[envoy.rules]]` (replaced on reload), and an
    /// observer counting its decisions in `metrics`.
    envoy: tollgate_envoy::ServiceConfig,
    metrics: Arc<Metrics>,
    config_file: OnceLock<ConfigFile>,
    reload_lock: Mutex<()>,
    swept: AtomicU64,
    /// The dashboard's counters (`/v1/stats`, `/v1/top`), unless `[dashboard]` is off.
    observed: Option<Arc<Observed>>,
    /// How long a request body may take to come whole after its head:
    /// `[connections] header_read_timeout`, kept from the start as every
    /// connection limit is.
    body_within: Duration,
}

/// Where reloads read the config from: the file, and the flags that
/// replace some of its keys (applied again on every reload).
struct ConfigFile {
    path: PathBuf,
    overrides: Overrides,
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The index in `config` of the plan `client` is decided on: the one named
/// `plan`, or else the client's own.
///
/// # Errors
/// [`Error::UnknownPlan`], listing the plans there are.
pub(crate) fn plan_index(
    config: &Config,
    client: &str,
    plan: Option<&str>,
) -> Result<usize, Error> {
    let Some(name) = plan else {
        return Ok(config.plan_index_for(client));
    };
    config.plan_index(name).ok_or_else(|| {
        let known: Vec<&str> = config.plans().iter().map(Plan::name).collect();
        Error::UnknownPlan {
            name: name.to_owned(),
            known: known.join(", "),
        }
    })
}

/// [`plan_index`], once the request's cost is known to be within bounds.
fn plan_to_decide(
    config: &Config,
    client: &str,
    plan: Option<&str>,
    cost: u32,
) -> Result<usize, Error> {
    let index = plan_index(config, client, plan)?;
    if cost > config.max_cost {
        return Err(Error::CostOverMaximum {
            cost,
            max_cost: config.max_cost,
        });
    }
    Ok(index)
}

impl Server {
    /// A server deciding with `store` under `config`, reading time from
    /// `clock`. A shared store ([`StoreHandle::Redis`], [`StoreHandle::Shared`]) is put behind a
    /// `tollgate_guard::GuardedStore` with the config's `[store]` timeout and
    /// failure policy (fixed for the server's life: `[store]` changes need a
    /// restart). The gRPC service decides on the same guarded store, or,
    /// with `[envoy] on_store_error = "unavailable"`, on the same inner
    /// store behind a sibling guard (same timeout and circuit breaker)
    /// with the policy `unavailable`, so that a failure reaches it as an
    /// error and is gRPC `UNAVAILABLE`. Both get the config's rejection
    /// cache (one for both) in front of their guard.
    pub fn new(config: Config, store: StoreHandle, clock: Arc<dyn Clock>) -> Self {
        let redis = store.redis();
        let (store, memory, guarded, envoy_guarded, cache): (Arc<dyn Store>, _, _, _, _) =
            match store.shared() {
                Err(memory) => (memory.clone(), Some(memory), None, None, None),
                Ok(shared) => {
                    let cache = rejection_cache(&config.store);
                    let policy = config.store.failure_policy;
                    let guarded = Arc::new(guard(shared, &config.store));
                    // One breaker for both: they share the Redis connection.
                    let envoy_guarded = config
                        .envoy
                        .on_store_error
                        .filter(|p| *p != policy)
                        .map(|p| Arc::new(guarded.sibling(p)));
                    let store = cached(guarded.clone(), cache.as_ref());
                    (store, None, Some(guarded), envoy_guarded, cache)
                }
            };
        let envoy_store: Arc<dyn Store> = match &envoy_guarded {
            Some(envoy_guarded) => cached(envoy_guarded.clone(), cache.as_ref()),
            None => store.clone(),
        };
        let rules = config.envoy.rules.clone();
        // A shutdown waits for gRPC calls as long as for HTTP requests.
        let drain_within = config.connections.idle_timeout;
        let body_within = config.connections.header_read_timeout;
        let metrics = Arc::new(Metrics::new());
        let observed = config
            .dashboard_enabled
            .then(|| Arc::new(Observed::new(clock.clone())));
        let active = Arc::new(ArcSwap::from_pointee(Self::activate(&metrics, config)));
        // Only errors the failure policy hands back reach the service: they
        // are gRPC UNAVAILABLE.
        let envoy = tollgate_envoy::ServiceConfig::new(rules, envoy_store, clock.clone())
            .observer(Arc::new(grpc_metrics::GrpcMetrics::new(
                active.clone(),
                metrics.clone(),
                observed.clone(),
            )))
            .drain_within(drain_within);
        Self {
            inner: Arc::new(Inner {
                active,
                store,
                memory,
                guarded,
                envoy_guarded,
                rejection_cache: cache,
                redis,
                clock,
                envoy,
                metrics,
                config_file: OnceLock::new(),
                reload_lock: Mutex::new(()),
                swept: AtomicU64::new(0),
                observed,
                body_within,
            }),
        }
    }

    /// The same server, reloading from `path` (see [`Server::reload`]).
    /// The path is set once: a second call keeps the first path.
    pub fn with_config_path(self, path: impl Into<PathBuf>) -> Self {
        self.with_config_file(path, Overrides::default())
    }

    /// The same server, reloading from `path` with `overrides` (the flags
    /// it was started with) applied to every reloaded config, so that a key
    /// a flag replaced is unchanged on reload. Set once, like
    /// [`Server::with_config_path`].
    pub fn with_config_file(self, path: impl Into<PathBuf>, overrides: Overrides) -> Self {
        let _ = self.inner.config_file.set(ConfigFile {
            path: path.into(),
            overrides,
        });
        self
    }

    /// The config file reloads read, if any.
    pub fn config_path(&self) -> Option<&std::path::Path> {
        self.inner.config_file.get().map(|file| file.path.as_path())
    }

    fn activate(metrics: &Metrics, config: Config) -> Active {
        let plan_metrics = config.plans().iter().map(|p| metrics.for_plan(p)).collect();
        Active {
            config: Arc::new(config),
            metrics: plan_metrics,
        }
    }

    /// How long a request body may take to come whole after its head.
    pub(crate) fn body_within(&self) -> Duration {
        self.inner.body_within
    }

    /// The config in force.
    pub fn config(&self) -> Arc<Config> {
        self.inner.active.load().config.clone()
    }

    /// The gRPC rate limit service for Envoy on this server's store, clock
    /// and `[[envoy.rules]]` (kept current across reloads): serve it with
    /// `tollgate_envoy::run`.
    pub fn envoy_service(&self) -> tollgate_envoy::ServiceConfig {
        self.inner.envoy.clone()
    }

    /// Waits, at most [`tollgate::SETTLE_WITHIN`], for the store to settle
    /// ([`Store::settle`]: on Redis, the replies of the calls still in
    /// flight and the refunds they need; the guard logs what is left):
    /// [`crate::run`] does once it has finished the requests in flight,
    /// before the process exits.
    pub async fn settle_store(&self) {
        self.settle_store_within(tollgate::SETTLE_WITHIN).await;
    }

    /// [`Self::settle_store`], waiting at most `within` (a shutdown's
    /// waits share one `SETTLE_WITHIN`: `crate::settle`); true when the
    /// store settled (the guard logs what it still owed otherwise).
    pub(crate) async fn settle_store_within(&self, within: std::time::Duration) -> bool {
        self.inner.store.settle(within).await.is_ok()
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Decides a request of `cost` units (0: only look) for `client`, on its
    /// plan or on the plan named `plan`. Store failures and timeouts are
    /// answered by the guarded store's failure policy (see
    /// [`StoreHandle::Shared`]), which counts and logs them; the decision is
    /// counted per plan and limit (looks are not).
    ///
    /// # Errors
    /// [`Error::UnknownPlan`] or [`Error::CostOverMaximum`] (the config's
    /// `max_cost`); nothing is decided then. [`Error::Store`] when the
    /// failure policy is `unavailable` and the store failed (the guard
    /// counted and logged it; front ends answer "unavailable" without its
    /// text).
    pub async fn decide(
        &self,
        client: &str,
        plan: Option<&str>,
        cost: u32,
    ) -> Result<Decided, Error> {
        self.decide_at(client, plan, cost, None).await
    }

    /// [`Self::decide`] at `now`, or at the clock's time when `None` (read
    /// once the latency's stopwatch has started, as it always was).
    async fn decide_at(
        &self,
        client: &str,
        plan: Option<&str>,
        cost: u32,
        now: Option<u64>,
    ) -> Result<Decided, Error> {
        let active = self.inner.active.load_full();
        let index = plan_to_decide(&active.config, client, plan, cost)?;
        let plan = &active.config.plans()[index];
        let stopwatch = Stopwatch::start();
        let now = now.unwrap_or_else(|| self.inner.clock.now_ms());
        let decision = match self.inner.store.check(plan, client, now, cost).await {
            Ok(decision) => decision,
            // Only the policy `unavailable` hands errors back; the guard
            // counted and logged this one.
            Err(error) => {
                if let Some(observed) = &self.inner.observed {
                    observed.stats.record_store_error(now);
                }
                return Err(Error::Store(error));
            }
        };
        let decided = Decided {
            config: active.config.clone(),
            plan: index,
            decision,
        };
        self.record(&active, &decided, client, cost, now, stopwatch);
        Ok(decided)
    }

    /// Counts, observes and traces a decision taken at `now`.
    fn record(
        &self,
        active: &Active,
        decided: &Decided,
        client: &str,
        cost: u32,
        now: u64,
        stopwatch: Stopwatch,
    ) {
        let (plan, decision) = (decided.plan(), &decided.decision);
        let metrics = &self.inner.metrics;
        // Counted the same way for gRPC (see `grpc_metrics`).
        metrics.record_decision(
            Some(&active.metrics[decided.plan]),
            cost,
            decision,
            Frontend::Http,
        );
        // One reading of the clock for both latency counters.
        let elapsed = stopwatch.elapsed();
        metrics.record_latency(elapsed);
        if let Some(observed) = &self.inner.observed {
            observed.decided(now, client, plan.name(), cost, decision);
            observed.timed(now, cost, elapsed);
        }
        tracing::debug!(
            client,
            plan = plan.name(),
            cost,
            allowed = decision.allowed,
            retry_after_ms = decision.retry_after_ms,
            decided_by = decision.decided_by.as_str(),
            "decision"
        );
    }

    /// `client`'s state under every limit of its plan (or of the plan named
    /// `plan`) at the clock's time, read from the store
    /// ([`tollgate::Store::inspect`]): nothing is used or written, on memory
    /// and Redis alike, and nothing is counted. Returns the plan's name with
    /// the inspection.
    ///
    /// # Errors
    /// [`Error::UnknownPlan`]; [`Error::Inspect`] when the store cannot be
    /// read (whatever the failure policy: it decides requests, it does not
    /// make up a client's state).
    pub async fn inspect(
        &self,
        client: &str,
        plan: Option<&str>,
    ) -> Result<(String, Inspection), Error> {
        let config = self.config();
        let plan = &config.plans()[plan_index(&config, client, plan)?];
        let now = self.inner.clock.now_ms();
        match self.inner.store.inspect(plan, client, now).await {
            Ok(inspection) => Ok((plan.name().to_owned(), inspection)),
            Err(error) => {
                tracing::warn!(client, plan = plan.name(), %error, "inspection failed");
                Err(Error::Inspect(error))
            }
        }
    }

    /// The guarded stores: the HTTP API's, and the gRPC service's own when
    /// it has one (`on_store_error = "unavailable"`); each counts its calls.
    fn guards(&self) -> impl Iterator<Item = &GuardedStore<Arc<dyn Store>>> {
        [&self.inner.guarded, &self.inner.envoy_guarded]
            .into_iter()
            .flatten()
            .map(|guard| &**guard)
    }
}
