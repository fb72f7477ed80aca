//! The config file as written: the TOML schema, with the position of every
//! value that a later check may need to point at.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::window::Millis;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// Addresses to listen on.
    pub listen: Option<Vec<Spanned<String>>>,
    /// The plan of clients not in `clients`.
    pub default_plan: Option<Spanned<String>>,
    /// The largest cost one request may ask for.
    pub max_cost: Option<Spanned<u64>>,
    /// How often idle client state is swept.
    pub sweep_interval: Option<Spanned<Millis>>,
    /// Where limit state lives.
    #[serde(default)]
    pub store: StoreSection,
    /// How `/v1/auth` finds the client id.
    #[serde(default)]
    pub auth: AuthSection,
    /// The gRPC rate limit service for Envoy.
    #[serde(default)]
    pub envoy: EnvoySection,
    /// The dashboard at `GET /`.
    #[serde(default)]
    pub dashboard: DashboardSection,
    /// Limits on HTTP connections.
    #[serde(default)]
    pub connections: ConnectionsSection,
    /// Client id to plan name.
    #[serde(default)]
    pub clients: BTreeMap<String, Spanned<String>>,
    /// Plan name to its limits.
    #[serde(default)]
    pub plans: BTreeMap<String, Spanned<LimitList>>,
}

/// The limits of one plan: `[[plans.NAME]]` entries. A single `[plans.NAME]`
/// table is the likely slip, and gets its own message.
#[derive(Debug)]
pub struct LimitList(pub Vec<LimitSection>);

impl<'de> Deserialize<'de> for LimitList {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ListVisitor;

        impl<'de> serde::de::Visitor<'de> for ListVisitor {
            type Value = LimitList;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of limits, each written as [[plans.NAME]]")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<LimitList, A::Error> {
                let mut limits = Vec::new();
                while let Some(limit) = seq.next_element()? {
                    limits.push(limit);
                }
                Ok(LimitList(limits))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                _map: A,
            ) -> Result<LimitList, A::Error> {
                Err(serde::de::Error::custom(
                    "a plan is a list of limits: write each limit as [[plans.NAME]] (double brackets), not [plans.NAME]",
                ))
            }
        }

        deserializer.deserialize_seq(ListVisitor)
    }
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// `"memory"` or a `redis://` / `rediss://` URL.
    pub url: Option<Spanned<String>>,
    /// A Redis Cluster's seed nodes (instead of `url`).
    pub cluster: Option<Spanned<Vec<String>>>,
    /// A PEM file of the CA that signed the Redis server's certificate.
    pub tls_ca: Option<Spanned<String>>,
    /// `"fail-open"`, `"fail-closed"` or `"local-fallback"`.
    pub failure_policy: Option<Spanned<String>>,
    /// Cap on clients tracked in memory.
    pub max_clients: Option<Spanned<u64>>,
    /// The Redis key prefix.
    pub prefix: Option<Spanned<String>>,
    /// How long one Redis call may take before the failure policy answers.
    pub timeout: Option<Spanned<Millis>>,
    /// Consecutive transient failures that open the store's circuit (0: never).
    pub breaker_failures: Option<Spanned<u64>>,
    /// How often an open circuit lets one probe through.
    pub breaker_probe_interval: Option<Spanned<Millis>>,
    /// Whether a shared store's rejections are answered again by this instance.
    pub rejection_cache: Option<Spanned<bool>>,
    /// Cap on the clients the rejection cache remembers a rejection of.
    pub rejection_cache_max_clients: Option<Spanned<u64>>,
    /// At most this many decisions in one Redis script call (1: no batching).
    pub batch_max: Option<Spanned<u64>>,
    /// At most this many Redis script calls of batched decisions in flight.
    pub batches_in_flight: Option<Spanned<u64>>,
    /// Replicas that must acknowledge a decision before it is answered.
    pub replicas_to_ack: Option<Spanned<u64>>,
    /// `"caller"` or `"redis"`: whose clock times a shared store's decisions.
    pub clock: Option<Spanned<String>>,
}

/// `[envoy]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvoySection {
    /// Where the gRPC service listens.
    pub grpc_listen: Option<Spanned<String>>,
    /// `"failure-policy"` or `"unavailable"`.
    pub on_store_error: Option<Spanned<String>>,
    /// `[[envoy.rules]]`: descriptors to plans.
    #[serde(default)]
    pub rules: Vec<Spanned<tollgate_envoy::RuleConfig>>,
}

/// `[dashboard]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DashboardSection {
    /// Serve the dashboard and keep its counters (default true).
    pub enabled: Option<bool>,
}

/// `[connections]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionsSection {
    /// How long a request head may take to arrive.
    pub header_read_timeout: Option<Spanned<Millis>>,
    /// How long a connection may stay without a byte moving.
    pub idle_timeout: Option<Spanned<Millis>>,
    /// Open connections per listen address at most.
    pub max_connections: Option<Spanned<u64>>,
}

/// `[auth]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// The header carrying the client id.
    pub header: Option<Spanned<String>>,
    /// Take the client id from the API key instead.
    pub api_key: Option<Spanned<bool>>,
}

/// One `[[plans.NAME]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSection {
    /// The limit's name within its plan.
    pub name: Spanned<String>,
    /// The policy's registered name.
    pub policy: Spanned<String>,
    /// Requests per window (or bucket capacity).
    pub limit: Spanned<u64>,
    /// The window.
    pub window: Spanned<Millis>,
    /// Decide and count, but never reject.
    #[serde(default)]
    pub shadow: bool,
}
