//! `[envoy]`: the gRPC rate limit service for Envoy (and Istio, Envoy
//! Gateway, Gloo) that `tollgate serve` runs beside its HTTP API, on the
//! same store, clock and plans. `[[envoy.rules]]` map an Envoy domain and
//! descriptor entries to one of the config's plans (the format is
//! `tollgate_envoy::rules`'s); `on_store_error` says whether a store
//! failure is answered by the `[store]` failure policy or is gRPC
//! `UNAVAILABLE` for Envoy's `failure_mode_deny` to decide.

use std::net::{Ipv4Addr, SocketAddr};

use tollgate::Plan;
use tollgate_envoy::{Rules, RulesConfig};

use super::{file, At};
use crate::Error;

/// The default gRPC listen address.
pub const DEFAULT_GRPC_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 8081);

/// What the gRPC rate limit service answers when the store fails or times
/// out (`[envoy] on_store_error`). Only a shared store (Redis) can fail: with
/// the memory store both answer alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EnvoyOnStoreError {
    /// The `[store]` failure policy answers, as for the HTTP API (the
    /// default). Errors no policy answers (permanent ones) are gRPC
    /// `UNAVAILABLE`.
    #[default]
    FailurePolicy,
    /// Every store failure or timeout is gRPC `UNAVAILABLE`, so that Envoy's
    /// own `failure_mode_deny` decides: the operator's choice is made in the
    /// Envoy config. The HTTP API keeps the failure policy.
    Unavailable,
}

impl EnvoyOnStoreError {
    /// Names accepted in the config.
    pub const NAMES: &'static [&'static str] = &["failure-policy", "unavailable"];

    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            EnvoyOnStoreError::FailurePolicy => "failure-policy",
            EnvoyOnStoreError::Unavailable => "unavailable",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        match name {
            "failure-policy" => Some(EnvoyOnStoreError::FailurePolicy),
            "unavailable" => Some(EnvoyOnStoreError::Unavailable),
            _ => None,
        }
    }
}

/// `[envoy]`, resolved.
#[derive(Debug, Clone)]
pub struct EnvoyConfig {
    /// Where the gRPC rate limit service listens; `None` when it is off
    /// (`grpc_listen = "off"`).
    pub grpc_listen: Option<SocketAddr>,
    /// What a store failure or timeout gives over gRPC.
    pub on_store_error: EnvoyOnStoreError,
    /// The rules, checked against the config's plans. Without any, every
    /// descriptor is answered `OK` (not limited).
    pub rules: Rules,
}

impl Default for EnvoyConfig {
    fn default() -> Self {
        Self {
            grpc_listen: Some(DEFAULT_GRPC_LISTEN),
            on_store_error: EnvoyOnStoreError::default(),
            rules: Rules::default(),
        }
    }
}

/// The gRPC service's address: `IP:PORT`, or `off` (`Some(None)`); `None`
/// when `text` is neither.
pub(super) fn parse_grpc_listen(text: &str) -> Option<Option<SocketAddr>> {
    if text == "off" {
        return Some(None);
    }
    text.parse().ok().map(Some)
}

pub(super) fn build_envoy(
    section: &file::EnvoySection,
    plans: &[Plan],
    at: &At<'_>,
) -> Result<EnvoyConfig, Error> {
    let grpc_listen = match &section.grpc_listen {
        None => Some(DEFAULT_GRPC_LISTEN),
        Some(addr) => parse_grpc_listen(addr.get_ref()).ok_or_else(|| {
            at(
                addr.span(),
                format!(
                    "invalid grpc_listen address {:?}: expected IP:PORT, e.g. 127.0.0.1:8081, or \"off\"",
                    addr.get_ref()
                ),
            )
        })?,
    };
    let on_store_error = match &section.on_store_error {
        None => EnvoyOnStoreError::default(),
        Some(name) => EnvoyOnStoreError::from_name(name.get_ref()).ok_or_else(|| {
            at(
                name.span(),
                format!(
                    "unknown on_store_error {:?}: known ones are {}",
                    name.get_ref(),
                    EnvoyOnStoreError::NAMES.join(", ")
                ),
            )
        })?,
    };
    let written = RulesConfig {
        rules: section.rules.iter().map(|r| r.get_ref().clone()).collect(),
    };
    let rules = Rules::new(written, plans).map_err(|error| match error {
        tollgate_envoy::Error::Rule { number, message } => {
            let span = section
                .rules
                .get(number.saturating_sub(1))
                .map_or(0..0, |rule| rule.span());
            at(span, format!("[[envoy.rules]] number {number}: {message}"))
        }
        other => at(0..0, other.to_string()),
    })?;
    Ok(EnvoyConfig {
        grpc_listen,
        on_store_error,
        rules,
    })
}
