//! `[store]`: where limit state lives and what to answer when it fails.

use super::{file, At, DEFAULT_MAX_CLIENTS};
use crate::Error;

/// What the service answers when the store cannot decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Let the request in (availability over exactness).
    FailOpen,
    /// Reject the request, asking to retry after a second.
    FailClosed,
    /// Decide with a local in-memory limiter, per server instance.
    LocalFallback,
}

impl FailurePolicy {
    /// Names accepted in the config.
    pub const NAMES: &'static [&'static str] = &["fail-open", "fail-closed", "local-fallback"];

    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::FailOpen => "fail-open",
            FailurePolicy::FailClosed => "fail-closed",
            FailurePolicy::LocalFallback => "local-fallback",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        match name {
            "fail-open" => Some(FailurePolicy::FailOpen),
            "fail-closed" => Some(FailurePolicy::FailClosed),
            "local-fallback" => Some(FailurePolicy::LocalFallback),
            _ => None,
        }
    }
}

/// Where limit state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// In this process's memory.
    Memory,
    /// In Redis, shared by every instance pointed at it.
    Redis {
        /// The URL, checked for form only.
        url: String,
    },
}

/// `[store]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Memory or Redis.
    pub kind: StoreKind,
    /// What to answer when the store fails.
    pub failure_policy: FailurePolicy,
    /// Cap on clients tracked in memory (idle ones are evicted beyond it).
    pub max_clients: usize,
    /// Every Redis key starts with this prefix (instances that share limits
    /// must use the same one).
    pub prefix: String,
    /// How long one store call may take before the failure policy answers, in ms.
    pub timeout_ms: u64,
}

/// The default Redis key prefix.
pub const DEFAULT_PREFIX: &str = "tollgate";

/// The default per-call store timeout, in ms.
pub const DEFAULT_TIMEOUT_MS: u64 = 100;

impl StoreConfig {
    /// The in-memory store with every default.
    pub fn memory() -> Self {
        Self {
            kind: StoreKind::Memory,
            failure_policy: FailurePolicy::FailOpen,
            max_clients: DEFAULT_MAX_CLIENTS,
            prefix: DEFAULT_PREFIX.to_owned(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
        }
    }
}

pub(super) fn build_store(section: &file::StoreSection, at: &At<'_>) -> Result<StoreConfig, Error> {
    let kind = match &section.url {
        None => StoreKind::Memory,
        Some(url) if url.get_ref() == "memory" => StoreKind::Memory,
        Some(url) => StoreKind::Redis {
            url: check_redis_url(url.get_ref()).map_err(|e| at(url.span(), e.to_string()))?,
        },
    };
    let failure_policy = match &section.failure_policy {
        None => FailurePolicy::FailOpen,
        Some(name) => FailurePolicy::from_name(name.get_ref()).ok_or_else(|| {
            at(
                name.span(),
                format!(
                    "unknown failure_policy {:?}: known ones are {}",
                    name.get_ref(),
                    FailurePolicy::NAMES.join(", ")
                ),
            )
        })?,
    };
    let max_clients = match &section.max_clients {
        None => DEFAULT_MAX_CLIENTS,
        Some(v) => match usize::try_from(*v.get_ref()) {
            Ok(n) if n >= 1 => n,
            _ => {
                return Err(at(
                    v.span(),
                    format!("max_clients must be at least 1 (got {})", v.get_ref()),
                ))
            }
        },
    };
    let prefix = match &section.prefix {
        None => DEFAULT_PREFIX.to_owned(),
        Some(prefix) => {
            tollgate_redis::keys::KeyLayout::new(prefix.get_ref().clone())
                .map_err(|e| at(prefix.span(), format!("invalid prefix: {e}")))?;
            prefix.get_ref().clone()
        }
    };
    let timeout_ms = match &section.timeout {
        None => DEFAULT_TIMEOUT_MS,
        Some(t) if t.get_ref().0 == 0 => {
            return Err(at(t.span(), "timeout must be at least 1ms".to_owned()))
        }
        Some(t) => t.get_ref().0,
    };
    Ok(StoreConfig {
        kind,
        failure_policy,
        max_clients,
        prefix,
        timeout_ms,
    })
}

/// Checks the form of a Redis URL (`redis://[user:pass@]host[:port][/db]`,
/// `rediss://...` or `unix:///path`), without connecting.
///
/// # Errors
/// [`Error::InvalidRedisUrl`] saying what is wrong.
pub fn check_redis_url(url: &str) -> Result<String, Error> {
    let invalid = |reason: &str| Error::InvalidRedisUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = ["redis://", "rediss://", "unix://", "redis+unix://"]
        .iter()
        .find_map(|scheme| url.strip_prefix(scheme))
        .ok_or_else(|| {
            invalid("expected redis://host[:port][/db], rediss://... or unix:///path")
        })?;
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("it contains spaces or control characters"));
    }
    let authority = rest.split('/').next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    if url.starts_with("redis") && !url.starts_with("redis+unix") {
        if host_port.is_empty() {
            return Err(invalid("the host is missing"));
        }
        if let Some((host, port)) = host_port.rsplit_once(':') {
            if !host.ends_with(']') && (host.is_empty() || port.parse::<u16>().is_err()) {
                return Err(invalid("the port must be a number from 0 to 65535"));
            }
        }
    } else if rest.is_empty() {
        return Err(invalid("the socket path is missing"));
    }
    Ok(url.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_urls() {
        assert!(check_redis_url("redis://127.0.0.1:6379/0").is_ok());
        assert!(check_redis_url("redis://:pw@host").is_ok());
        assert!(check_redis_url("unix:///tmp/redis.sock").is_ok());
        assert!(check_redis_url("http://x").is_err());
        assert!(check_redis_url("redis://").is_err());
        assert!(check_redis_url("redis://host:notaport").is_err());
    }
}
