//! The service's configuration: plans and their limits, which client is on
//! which plan, the store, how `/v1/auth` finds the client id, and where to
//! listen. Read from TOML (see `examples/tollgate.toml`), checked completely
//! before use: every mistake is reported with its line and column.

mod auth;
mod clock;
mod connections;
mod envoy;
mod file;
mod general;
mod locate;
mod overrides;
mod plans;
mod redis_bounds;
mod redis_url;
mod store;
mod summary;
mod window;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;

use http::HeaderName;
use tollgate::{AnyPolicy, Limit, Plan};

use crate::Error;
pub use auth::ClientIdSource;
pub use clock::clock_name;
pub use envoy::{EnvoyConfig, DEFAULT_GRPC_LISTEN, ON_STORE_ERROR_NAMES};
use locate::error_at;
pub use overrides::Overrides;
pub use store::{
    check_redis_url, Batching, FailurePolicy, StoreConfig, StoreKind, DEFAULT_PREFIX,
    DEFAULT_TIMEOUT_MS,
};
pub use window::{format_duration, parse_duration};

/// The longest client id accepted, in bytes: by every front end, and for
/// the client ids of `[clients]` (the core's [`tollgate::MAX_CLIENT_BYTES`]).
pub use tollgate::MAX_CLIENT_BYTES;

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
    /// `[connections]`: the header-read and idle timeouts and the cap on
    /// open connections of every HTTP listener (changing them needs a restart).
    pub connections: tollgate_connections::Limits,
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

    /// The embedded default with `flags` applied, checked as a file with
    /// those flags is (serve without `--config`): two addresses on one
    /// socket are refused here rather than by the system at start-up.
    ///
    /// # Errors
    /// As [`Overrides::apply`], and [`Error::AddressesCollide`].
    pub fn embedded_default_with(flags: &Overrides) -> Result<Self, Error> {
        let mut config = Self::embedded_default();
        flags.apply(&mut config)?;
        general::check_distinct_addresses(&config, flags, None)?;
        Ok(config)
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
            connections: tollgate_connections::Limits::default(),
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

    /// Reads and checks a config file, then applies the flags that replace
    /// some of its keys (see [`Overrides`]).
    ///
    /// # Errors
    /// As [`Config::load`], or the error of a bad flag.
    pub fn load_with(path: &Path, overrides: &Overrides) -> Result<Self, Error> {
        let text = read_config_text(path)?;
        Self::parse_with(&text, overrides).map_err(|e| e.with_origin(path))
    }

    /// [`Config::load_with`] for a reload of a server that runs the store
    /// `running`: since a `[store]` change waits for a restart, the file's
    /// limits go into force on `running`, so each must be one that store
    /// can serve too (a Redis store's exact range), whatever store the file
    /// names.
    ///
    /// # Errors
    /// As [`Config::load_with`]; [`Error::InvalidConfig`] at a limit the
    /// running store could not serve.
    pub fn load_for_reload(
        path: &Path,
        overrides: &Overrides,
        running: &StoreConfig,
    ) -> Result<Self, Error> {
        let text = read_config_text(path)?;
        Self::parse_checked(&text, overrides, Some(&running.kind)).map_err(|e| e.with_origin(path))
    }

    /// Checks config text.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] with the line and column of the first mistake:
    /// TOML syntax, an unknown or misspelt key, a value of the wrong type, an
    /// unknown policy, a limit or window the policy cannot work with, a
    /// reference to a plan that does not exist, an address that is not one.
    pub fn parse(text: &str) -> Result<Self, Error> {
        Self::parse_with(text, &Overrides::default())
    }

    /// [`Config::parse`], then the flags that replace some of its keys.
    ///
    /// # Errors
    /// As [`Config::parse`], or the error of a bad flag.
    pub fn parse_with(text: &str, overrides: &Overrides) -> Result<Self, Error> {
        Self::parse_checked(text, overrides, None)
    }

    /// [`Config::parse_with`], the limits checked against the store a
    /// server runs too, when given ([`Config::load_for_reload`]).
    fn parse_checked(
        text: &str,
        overrides: &Overrides,
        running: Option<&StoreKind>,
    ) -> Result<Self, Error> {
        let file: file::File = toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |span| span.start);
            error_at(text, offset, in_words(text, offset, e.message()))
        })?;
        let at =
            |span: std::ops::Range<usize>, message: String| error_at(text, span.start, message);
        let plans = plans::build_plans(&file, &at)?;
        let listen = general::build_listen(file.listen.as_deref(), &at)?;
        let max_cost = general::build_max_cost(file.max_cost.as_ref(), &at)?;
        let sweep_interval_ms = general::build_sweep_interval(file.sweep_interval.as_ref(), &at)?;
        let store = store::build_store(&file.store, &at)?;
        let client_id = auth::build_auth(&file.auth, &at)?;
        let envoy = envoy::build_envoy(&file.envoy, &plans.plans, &at)?;
        let connections = connections::build_connections(&file.connections, &at)?;
        let mut config = Self {
            plans: plans.plans,
            plan_index: plans.index,
            clients: plans.clients,
            default_plan: plans.default,
            listen,
            store,
            client_id,
            max_cost,
            sweep_interval_ms,
            envoy,
            dashboard_enabled: file.dashboard.enabled.unwrap_or(true),
            connections,
        };
        overrides.apply(&mut config)?;
        general::check_distinct_addresses(&config, overrides, Some((&file, &at)))?;
        store::check_redis_only_settings(&config, &file.store, &at)?;
        redis_bounds::check_store_bounds(&config, &file, &at)?;
        if let Some(running) = running {
            redis_bounds::check_running_store_bounds(running, &file, &at)?;
        }
        Ok(config)
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
}

/// Reads a config file, refusing huge ones.
///
/// The size is checked twice: from the file's metadata, for a clear message
/// about a regular file, and while reading, since a device or a pipe
/// (`/dev/zero`, `<(yes)`) has no length to check and never ends.
///
/// # Errors
/// [`Error::ReadConfig`].
pub fn read_config_text(path: &Path) -> Result<String, Error> {
    use std::io::Read;
    let read_error = |source| Error::ReadConfig {
        path: path.to_owned(),
        source,
    };
    let too_big = |size: String| {
        read_error(std::io::Error::other(format!(
            "the file is {size}, over the {MAX_CONFIG_BYTES}-byte limit for a config"
        )))
    };
    let metadata = std::fs::metadata(path).map_err(read_error)?;
    if metadata.len() > MAX_CONFIG_BYTES {
        return Err(too_big(format!("{} bytes", metadata.len())));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes))
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_big("longer (it goes on)".to_owned()));
    }
    String::from_utf8(bytes).map_err(|e| read_error(std::io::Error::other(not_utf8(&e))))
}

/// Where a file stops being UTF-8, as a config error says where a mistake
/// is (the column in bytes).
fn not_utf8(error: &std::string::FromUtf8Error) -> String {
    let valid = &error.as_bytes()[..error.utf8_error().valid_up_to()];
    let line_start = valid
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |at| at + 1);
    let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = valid.len() - line_start + 1;
    format!("line {line}, column {column}: not valid UTF-8 (a config is UTF-8 text)")
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

/// Turns a span of the config text and a message into an
/// [`Error::InvalidConfig`] at that span's line and column.
pub(crate) type At<'a> = dyn Fn(std::ops::Range<usize>, String) -> Error + 'a;

/// serde's refusal of a value, in the file's words. Every number of the
/// file is read as a `u64` and its key's range checked after, with the
/// key's name; serde refuses first only what is no `u64` at all (negative,
/// a fraction, past 2^64), in Rust's words ("expected u64", "as i128"),
/// which say neither the key nor what it takes. So the key at `offset` is
/// named, and the types are told as numbers.
fn in_words(text: &str, offset: usize, message: &str) -> String {
    let message = message
        .trim_end()
        .replace("expected u64", "expected a whole number, not negative")
        .replace("` as i128", "`, too large");
    match locate::key_at(text, offset) {
        Some(key) => format!("{key}: {message}"),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::Policy;

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
