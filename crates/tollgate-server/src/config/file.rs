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
    /// Client id to plan name.
    #[serde(default)]
    pub clients: BTreeMap<String, Spanned<String>>,
    /// Plan name to its limits.
    #[serde(default)]
    pub plans: BTreeMap<String, Spanned<Vec<LimitSection>>>,
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// `"memory"` or a `redis://` URL.
    pub url: Option<Spanned<String>>,
    /// `"fail-open"`, `"fail-closed"` or `"local-fallback"`.
    pub failure_policy: Option<Spanned<String>>,
    /// Cap on clients tracked in memory.
    pub max_clients: Option<Spanned<u64>>,
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
    pub limit: Spanned<u32>,
    /// The window.
    pub window: Spanned<Millis>,
    /// Decide and count, but never reject.
    #[serde(default)]
    pub shadow: bool,
}
