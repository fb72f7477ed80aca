//! The service's configuration: plans and their limits, which client is on
//! which plan, the store, how `/v1/auth` finds the client id, and where to
//! listen. Read from TOML (see `examples/tollgate.toml`), checked completely
//! before use: every mistake is reported with its line and column.

mod auth;
mod envoy;
mod file;
mod locate;
mod store;
mod window;

use std::collections::HashMap;
use std::fmt::Write;
use std::net::SocketAddr;
use std::path::Path;

use axum::http::HeaderName;
use tollgate::{AnyPolicy, Limit, Plan, Policy};
use toml::Spanned;

use crate::Error;
pub use auth::ClientIdSource;
pub use envoy::{EnvoyConfig, EnvoyOnStoreError, DEFAULT_GRPC_LISTEN};
use locate::error_at;
pub use store::{
    check_redis_url, FailurePolicy, StoreConfig, StoreKind, DEFAULT_PREFIX, DEFAULT_TIMEOUT_MS,
};
pub use window::{format_duration, parse_duration};

/// Config files larger than this are refused unread: a rate-limit config is
/// a few kilobytes, and reading one must stay cheap for the reload poller.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The default cap on cost per request when the config sets none.
pub const DEFAULT_MAX_COST: u32 = 1_000_000;

/// The default cap on clients tracked in memory.
pub const DEFAULT_MAX_CLIENTS: usize = 1_000_000;

/// The default interval between sweeps of idle client state.
pub const DEFAULT_SWEEP_INTERVAL_MS: u64 = 10_000;

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// The default header carrying the client id for `/v1/auth`.
pub const DEFAULT_CLIENT_HEADER: &str = "x-client-id";

/// A checked configuration, ready to serve.
#[derive(Debug, Clone)]
pub struct Config {
    plans: Vec<Plan>,
    plan_index: HashMap<String, usize>,
    clients: HashMap<String, usize>,
    default_plan: usize,
    /// Addresses to listen on.
    pub listen: Vec<SocketAddr>,
    /// The store.
    pub store: StoreConfig,
    /// How `/v1/auth` finds the client id.
    pub client_id: ClientIdSource,
    /// The largest cost one request may ask for.
    pub max_cost: u32,
    /// How often idle client state is swept, in milliseconds.
    pub sweep_interval_ms: u64,
    /// The gRPC rate limit service for Envoy.
    pub envoy: EnvoyConfig,
    /// `[dashboard] enabled`: the page at `GET /` and the counters behind
    /// `/v1/stats` and `/v1/top` (default true; changing it needs a restart).
    pub dashboard_enabled: bool,
}

/// The embedded default: one plan of 100 requests per second per client on a
/// sliding window, in memory, on 127.0.0.1:8080.
pub const EMBEDDED_DEFAULT: &str = r#"# tollgate's embedded default
listen = ["127.0.0.1:8080"]
default_plan = "default"

[[plans.default]]
name = "1s"
policy = "sliding-window"
limit = 100
window = "1s"

# Envoy's rate limit service (gRPC): one budget per client address, for
# Envoy routes with `domain: tollgate` and a `remote_address` action.
[envoy]
grpc_listen = "127.0.0.1:8081"

[[envoy.rules]]
domain = "tollgate"
descriptor = [{ key = "remote_address" }]
plan = "default"
"#;

impl Config {
    /// The embedded default ([`EMBEDDED_DEFAULT`]).
    pub fn embedded_default() -> Self {
        // The embedded text is fixed and covered by a test; should it ever
        // fail, fall back to the same plan built by hand rather than panic.
        Self::parse(EMBEDDED_DEFAULT).unwrap_or_else(|_| Self::fallback_default())
    }

    fn fallback_default() -> Self {
        let limit = AnyPolicy::from_name("sliding-window", 100, 1_000)
            .map(|policy| Limit::new("1s", policy, false));
        let plan = limit
            .ok()
            .and_then(|limit| Plan::new("default", vec![limit]).ok());
        let plans: Vec<Plan> = plan.into_iter().collect();
        Self {
            plan_index: plans
                .iter()
                .enumerate()
                .map(|(i, p)| (p.name().to_owned(), i))
                .collect(),
            plans,
            clients: HashMap::new(),
            default_plan: 0,
            listen: DEFAULT_LISTEN.parse().into_iter().collect(),
            store: StoreConfig::memory(),
            client_id: ClientIdSource::Header(HeaderName::from_static(DEFAULT_CLIENT_HEADER)),
            max_cost: DEFAULT_MAX_COST,
            sweep_interval_ms: DEFAULT_SWEEP_INTERVAL_MS,
            envoy: EnvoyConfig::default(),
            dashboard_enabled: true,
        }
    }

    /// Reads and checks a config file.
    ///
    /// # Errors
    /// [`Error::ReadConfig`] when the file cannot be read (or is over
    /// [`MAX_CONFIG_BYTES`]), [`Error::InvalidConfig`] naming the file, line
    /// and column of the first mistake.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = read_config_text(path)?;
        Self::parse(&text).map_err(|e| e.with_origin(path))
    }

    /// Checks config text.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] with the line and column of the first mistake:
    /// TOML syntax, an unknown or misspelt key, a value of the wrong type, an
    /// unknown policy, a limit or window the policy cannot work with, a
    /// reference to a plan that does not exist, an address that is not one.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let file: file::File = toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |span| span.start);
            error_at(text, offset, e.message().trim_end().to_owned())
        })?;
        let at =
            |span: std::ops::Range<usize>, message: String| error_at(text, span.start, message);

        let mut plans = Vec::with_capacity(file.plans.len());
        let mut plan_index = HashMap::new();
        for (name, limits) in &file.plans {
            let span = limits.span();
            plan_index.insert(name.clone(), plans.len());
            plans.push(build_plan(name, &limits.get_ref().0, span, &at)?);
        }
        if plans.is_empty() {
            return Err(at(
                0..0,
                "no plans: define at least one, e.g. [[plans.free]] with name, policy, limit and window"
                    .to_owned(),
            ));
        }
        let find_plan = |name: &Spanned<String>, what: &str| {
            plan_index.get(name.get_ref()).copied().ok_or_else(|| {
                at(
                    name.span(),
                    format!(
                        "{what} refers to unknown plan {:?}: defined plans are {}",
                        name.get_ref(),
                        known(plan_index.keys())
                    ),
                )
            })
        };
        let default_plan = match &file.default_plan {
            Some(name) => find_plan(name, "default_plan")?,
            None if plans.len() == 1 => 0,
            None => {
                return Err(at(
                    0..0,
                    format!(
                        "default_plan is missing: with several plans ({}), say which one clients not listed in [clients] get",
                        known(plan_index.keys())
                    ),
                ))
            }
        };
        let mut clients = HashMap::with_capacity(file.clients.len());
        for (client, plan) in &file.clients {
            if client.is_empty() || client.len() > crate::http::MAX_CLIENT_BYTES {
                return Err(at(
                    plan.span(),
                    format!(
                        "client id {client:?} in [clients] must be 1 to {} bytes long",
                        crate::http::MAX_CLIENT_BYTES
                    ),
                ));
            }
            clients.insert(
                client.clone(),
                find_plan(plan, &format!("client {client:?}"))?,
            );
        }

        let listen = match &file.listen {
            None => DEFAULT_LISTEN.parse().into_iter().collect(),
            Some(addrs) if addrs.is_empty() => {
                return Err(at(0..0, "listen is empty: give at least one IP:PORT".to_owned()))
            }
            Some(addrs) => addrs
                .iter()
                .map(|addr| {
                    addr.get_ref().parse::<SocketAddr>().map_err(|_| {
                        at(
                            addr.span(),
                            format!(
                                "invalid listen address {:?}: expected IP:PORT, e.g. 127.0.0.1:8080",
                                addr.get_ref()
                            ),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        };

        let max_cost = match &file.max_cost {
            None => DEFAULT_MAX_COST,
            Some(v) => match u32::try_from(*v.get_ref()) {
                Ok(cost) if cost >= 1 => cost,
                _ => {
                    return Err(at(
                        v.span(),
                        format!(
                            "max_cost must be between 1 and {} (got {})",
                            u32::MAX,
                            v.get_ref()
                        ),
                    ))
                }
            },
        };
        let sweep_interval_ms = match &file.sweep_interval {
            None => DEFAULT_SWEEP_INTERVAL_MS,
            Some(v) if v.get_ref().0 >= 100 => v.get_ref().0,
            Some(v) => {
                return Err(at(
                    v.span(),
                    "sweep_interval must be at least 100ms".to_owned(),
                ))
            }
        };

        let store = store::build_store(&file.store, &at)?;
        let client_id = auth::build_auth(&file.auth, &at)?;
        let envoy = envoy::build_envoy(&file.envoy, &plans, &at)?;
        Ok(Self {
            plans,
            plan_index,
            clients,
            default_plan,
            listen,
            store,
            client_id,
            max_cost,
            sweep_interval_ms,
            envoy,
            dashboard_enabled: file.dashboard.enabled.unwrap_or(true),
        })
    }

    /// Every plan, ordered by name.
    pub fn plans(&self) -> &[Plan] {
        &self.plans
    }

    /// The index (into [`Config::plans`]) of the plan called `name`.
    pub fn plan_index(&self, name: &str) -> Option<usize> {
        self.plan_index.get(name).copied()
    }

    /// The index of `client`'s plan: its entry in `[clients]`, or the default plan.
    pub fn plan_index_for(&self, client: &str) -> usize {
        self.clients
            .get(client)
            .copied()
            .unwrap_or(self.default_plan)
    }

    /// The plan of clients not listed in `[clients]`.
    pub fn default_plan(&self) -> &Plan {
        &self.plans[self.default_plan]
    }

    /// Every client with a plan of its own (`[clients]`), with that plan.
    pub fn client_plans(&self) -> impl Iterator<Item = (&str, &Plan)> + '_ {
        self.clients
            .iter()
            .map(|(client, &index)| (client.as_str(), &self.plans[index]))
    }

    /// Number of clients with a plan of their own.
    pub fn client_count(&self) -> usize {
        self.clients.len()
    }

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
            StoreKind::Memory => format!("memory (at most {} clients)", self.store.max_clients),
            StoreKind::Redis { url } => format!("redis {url}"),
        };
        let listen: Vec<String> = self.listen.iter().map(ToString::to_string).collect();
        let client_id = match &self.client_id {
            ClientIdSource::Header(h) => format!("header {h}"),
            ClientIdSource::ApiKey => "API key".to_owned(),
        };
        format!(
            "{} plan(s), {} client(s) with their own plan, default plan {:?}\n{}store: {store}, on store failure: {}\nlisten: {}\ngRPC (Envoy rate limit service): {}, {} rule(s), on store failure: {}\n/v1/auth client id from: {client_id}; max cost per request: {}\n",
            self.plans.len(),
            self.clients.len(),
            self.default_plan().name(),
            self.describe_plans(),
            self.store.failure_policy.as_str(),
            listen.join(", "),
            self.envoy.grpc_listen,
            self.envoy.rules.len(),
            match self.envoy.on_store_error {
                EnvoyOnStoreError::FailurePolicy => self.store.failure_policy.as_str(),
                EnvoyOnStoreError::Unavailable => "gRPC UNAVAILABLE",
            },
            self.max_cost,
        )
    }
}

/// Reads a config file, refusing huge ones.
///
/// # Errors
/// [`Error::ReadConfig`].
pub fn read_config_text(path: &Path) -> Result<String, Error> {
    let read_error = |source| Error::ReadConfig {
        path: path.to_owned(),
        source,
    };
    let metadata = std::fs::metadata(path).map_err(read_error)?;
    if metadata.len() > MAX_CONFIG_BYTES {
        return Err(read_error(std::io::Error::other(format!(
            "the file is {} bytes, over the {MAX_CONFIG_BYTES}-byte limit for a config",
            metadata.len()
        ))));
    }
    std::fs::read_to_string(path).map_err(read_error)
}

impl Error {
    fn with_origin(self, path: &Path) -> Self {
        match self {
            Error::InvalidConfig {
                line,
                column,
                message,
                snippet,
                ..
            } => Error::InvalidConfig {
                origin: Some(path.display().to_string()),
                line,
                column,
                message,
                snippet,
            },
            other => other,
        }
    }
}

fn known<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let mut names: Vec<&str> = names.map(String::as_str).collect();
    names.sort_unstable();
    names.join(", ")
}

pub(crate) type At<'a> = dyn Fn(std::ops::Range<usize>, String) -> Error + 'a;

fn build_plan(
    name: &str,
    limits: &[file::LimitSection],
    span: std::ops::Range<usize>,
    at: &At<'_>,
) -> Result<Plan, Error> {
    if name.is_empty() {
        return Err(at(span, "a plan name must not be empty".to_owned()));
    }
    let mut built = Vec::with_capacity(limits.len());
    for limit in limits {
        let limit_name = limit.name.get_ref();
        if limit_name.is_empty() {
            return Err(at(
                limit.name.span(),
                "a limit name must not be empty".to_owned(),
            ));
        }
        if built.iter().any(|l: &Limit| l.name() == limit_name) {
            return Err(at(
                limit.name.span(),
                format!("plan {name:?} names the limit {limit_name:?} twice"),
            ));
        }
        let policy = AnyPolicy::from_name(
            limit.policy.get_ref(),
            *limit.limit.get_ref(),
            limit.window.get_ref().0,
        )
        .map_err(|e| {
            let span = match e {
                tollgate::Error::UnknownPolicy { .. } => limit.policy.span(),
                tollgate::Error::ZeroLimit => limit.limit.span(),
                _ => limit.window.span(),
            };
            at(span, format!("plan {name:?}, limit {limit_name:?}: {e}"))
        })?;
        built.push(Limit::new(limit_name.as_str(), policy, limit.shadow));
    }
    Plan::new(name, built).map_err(|e| at(span, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_parses() {
        let config = Config::parse(EMBEDDED_DEFAULT).unwrap();
        assert_eq!(config.default_plan().name(), "default");
        assert_eq!(config.listen, vec!["127.0.0.1:8080".parse().unwrap()]);
        let limit = &config.default_plan().limits()[0];
        assert_eq!(
            (
                limit.policy().name(),
                limit.policy().limit(),
                limit.policy().window_ms()
            ),
            ("sliding-window", 100, 1_000)
        );
    }
}
