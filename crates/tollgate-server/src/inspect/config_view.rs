//! `GET /v1/config`: the config in force, as the dashboard shows it: plans
//! and limits, the store (a Redis URL without its password) and failure
//! policy, where serve listens. Public like every other endpoint: it holds
//! nothing secret.

use serde::Serialize;
use tollgate::{MemoryStore, Policy};
use tollgate_config::config::clock_name;
use tollgate_config::store::RejectionCache;
use tollgate_redis::redact_url;

use crate::config::{ClientIdSource, Config, StoreConfig, StoreKind};

/// One limit.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LimitView {
    /// The limit's name.
    pub name: String,
    /// Its policy.
    pub policy: &'static str,
    /// Requests per window, or the bucket's capacity.
    pub limit: u32,
    /// The window, in ms.
    pub window_ms: u64,
    /// Whether the limit only observes.
    pub shadow: bool,
}

/// One plan.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PlanView {
    /// The plan's name.
    pub name: String,
    /// Whether clients not listed in `[clients]` get it.
    pub default: bool,
    /// Clients listed in `[clients]` with this plan.
    pub clients: usize,
    /// Its limits, in order.
    pub limits: Vec<LimitView>,
}

/// The store section.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StoreView {
    /// `"memory"` or `"redis"`.
    pub kind: &'static str,
    /// The Redis URL (a cluster's seeds, comma-separated) with its
    /// passwords replaced by `***`, as the log shows it
    /// ([`tollgate_redis::redact_url`]).
    pub url: Option<String>,
    /// What answers when the store fails.
    pub failure_policy: &'static str,
    /// Per-call timeout (shared stores), in ms.
    pub timeout_ms: u64,
    /// Cap on clients kept in memory (the memory store, or a shared
    /// store's local fallback), as in force: `max_clients`, at least 128
    /// (a bound: each of the store's 64 shards keeps its share).
    pub max_clients: usize,
    /// Whose clock times the decisions: `"caller"` (this server's) or
    /// `"redis"`.
    pub clock: &'static str,
    /// The rejection cache's cap on clients, as in force; `None` when off
    /// (and for the memory store, which has none).
    pub rejection_cache_max_clients: Option<usize>,
}

/// `GET /v1/config`'s answer.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ConfigView {
    /// Every plan, by name.
    pub plans: Vec<PlanView>,
    /// The store.
    pub store: StoreView,
    /// HTTP listen addresses.
    pub listen: Vec<String>,
    /// The gRPC (Envoy rate limit service) address (`null`: no gRPC port).
    pub grpc_listen: Option<String>,
    /// Where `/v1/auth` finds the client id.
    pub client_id: String,
    /// The largest cost of one request.
    pub max_cost: u32,
    /// Whether the dashboard and its counters are on.
    pub dashboard: bool,
}

impl StoreView {
    /// The view of `[store]` as in force.
    fn of(store: &StoreConfig) -> Self {
        let (kind, url) = match &store.kind {
            StoreKind::Memory => ("memory", None),
            StoreKind::Redis { url } => ("redis", Some(redact_url(url))),
            StoreKind::RedisCluster { seeds } => {
                let seeds: Vec<String> = seeds.iter().map(|s| redact_url(s)).collect();
                ("redis-cluster", Some(seeds.join(",")))
            }
        };
        Self {
            kind,
            url,
            failure_policy: store.failure_policy.as_str(),
            timeout_ms: store.timeout_ms,
            max_clients: MemoryStore::<()>::clients_kept_at_most(store.max_clients),
            clock: clock_name(store.clock),
            rejection_cache_max_clients: (store.shared_rejection_cache())
                .map(RejectionCache::most_entries),
        }
    }
}

impl ConfigView {
    /// The view of `config`.
    pub fn of(config: &Config) -> Self {
        let default = config.default_plan().name();
        let plans = config
            .plans()
            .iter()
            .map(|plan| PlanView {
                name: plan.name().to_owned(),
                default: plan.name() == default,
                clients: config
                    .client_plans()
                    .filter(|(_, p)| p.name() == plan.name())
                    .count(),
                limits: plan
                    .limits()
                    .iter()
                    .map(|l| LimitView {
                        name: l.name().to_owned(),
                        policy: l.policy().name(),
                        limit: l.policy().limit(),
                        window_ms: l.policy().window_ms(),
                        shadow: l.is_shadow(),
                    })
                    .collect(),
            })
            .collect();
        Self {
            plans,
            store: StoreView::of(&config.store),
            listen: config.listen.iter().map(ToString::to_string).collect(),
            grpc_listen: config.envoy.grpc_listen.map(|a| a.to_string()),
            client_id: match &config.client_id {
                ClientIdSource::Header(name) => format!("header {name}"),
                ClientIdSource::ApiKey => "API key".to_owned(),
            },
            max_cost: config.max_cost,
            dashboard: config.dashboard_enabled,
        }
    }
}
