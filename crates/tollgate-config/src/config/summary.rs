//! What a config puts in force, in words: for `tollgate check` and the
//! start-up banner.

use std::fmt::Write;

use tollgate::Policy;

use super::{format_duration, ClientIdSource, Config, FailurePolicy, StoreKind};

impl Config {
    /// A human summary of the plans in force, one line per plan.
    pub fn describe_plans(&self) -> String {
        let mut out = String::new();
        for plan in &self.plans {
            let marker = if plan.name() == self.default_plan().name() {
                " (default)"
            } else {
                ""
            };
            let _ = write!(out, "plan {:?}{marker}:", plan.name());
            for (i, limit) in plan.limits().iter().enumerate() {
                let policy = limit.policy();
                let _ = write!(
                    out,
                    "{} {:?} {} {} per {}{}",
                    if i == 0 { "" } else { "," },
                    limit.name(),
                    policy.name(),
                    policy.limit(),
                    format_duration(policy.window_ms()),
                    if limit.is_shadow() { " (shadow)" } else { "" }
                );
            }
            out.push('\n');
        }
        out
    }

    /// A one-paragraph summary for `tollgate check` and the startup banner.
    pub fn summary(&self) -> String {
        let store = match &self.store.kind {
            StoreKind::Memory => format!(
                "memory (at most {} clients)",
                tollgate::MemoryStore::<()>::clients_kept_at_most(self.store.max_clients)
            ),
            StoreKind::Redis { .. } | StoreKind::RedisCluster { .. } => {
                let mut cache = match self.store.shared_rejection_cache() {
                    Some(max) => format!(
                        "rejection cache of at most {} clients",
                        tollgate_cache::RejectionCache::most_entries(max)
                    ),
                    None => "no rejection cache".to_owned(),
                };
                if self.store.clock == tollgate_redis::TimeSource::Redis {
                    cache.push_str("; timed by Redis's clock");
                }
                match self.store.replicas_to_ack {
                    0 => {}
                    1 => cache.push_str("; each decision acknowledged by 1 replica"),
                    n => cache.push_str(&format!("; each decision acknowledged by {n} replicas")),
                }
                match self.store.redis_target() {
                    Ok(Some(target)) => format!("redis {} ({cache})", target.redacted()),
                    _ => "redis (unusable target)".to_owned(),
                }
            }
        };
        let listen: Vec<String> = self.listen.iter().map(ToString::to_string).collect();
        let grpc = self
            .envoy
            .grpc_listen
            .map_or_else(|| "off".to_owned(), |addr| addr.to_string());
        let client_id = match &self.client_id {
            ClientIdSource::Header(h) => format!("header {h}"),
            ClientIdSource::ApiKey => "API key".to_owned(),
        };
        format!(
            "{} plan(s), {} client(s) with their own plan, default plan {:?}\n{}store: {store}, on store failure: {}\nlisten: {}\ngRPC (Envoy rate limit service): {}, {} rule(s), on store failure: {}\n/v1/auth client id from: {client_id}; max cost per request: {}\nconnections: header-read timeout {}, idle timeout {}, at most {} open per listen address\n",
            self.plans.len(),
            self.clients.len(),
            self.default_plan().name(),
            self.describe_plans(),
            self.store.failure_policy.as_str(),
            listen.join(", "),
            grpc,
            self.envoy.rules.len(),
            match self.envoy.on_store_error.unwrap_or(self.store.failure_policy) {
                FailurePolicy::Unavailable => "gRPC UNAVAILABLE",
                policy => policy.as_str(),
            },
            self.max_cost,
            format_duration(duration_ms(self.connections.header_read_timeout)),
            format_duration(duration_ms(self.connections.idle_timeout)),
            self.connections.max_connections,
        ) + &self.warnings()
    }

    /// What the config lets happen that its author may not mean, a line
    /// each (`warning: ...`), for the summary.
    ///
    /// With `[auth] api_key = true`, `/v1/auth`'s client id is whatever
    /// key the caller sends, before the API has checked it, and a key not
    /// in `[clients]` is on the default plan. An Envoy client's id is its
    /// descriptor spelled out (`edge|remote_address=10.0.0.9`), one
    /// namespace with the HTTP API's ids (so that `/v1/clients` can show
    /// it): an Envoy rule on the default plan lets any caller of
    /// `/v1/auth` spend an Envoy client's quota by sending its id as a key.
    fn warnings(&self) -> String {
        let grpc_on = self.envoy.grpc_listen.is_some();
        let default = self.default_plan().name();
        let shared = self.envoy.rules.plan_names().any(|plan| plan == default);
        if grpc_on && shared && self.client_id == ClientIdSource::ApiKey {
            format!(
                "warning: an Envoy rule is on the default plan {default:?}, which /v1/auth's API \
                 keys are on too ([auth] api_key = true): a caller sending an Envoy client's id \
                 (edge|remote_address=10.0.0.9, say) as its API key spends that client's quota; \
                 give the Envoy rules plans of their own\n"
            )
        } else {
            String::new()
        }
    }
}

fn duration_ms(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
