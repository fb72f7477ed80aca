//! `[envoy]`: the gRPC rate limit service for Envoy (and Istio, Envoy
//! Gateway, Gloo) that `tollgate serve` runs beside its HTTP API, on the
//! same store, clock and plans. `[[envoy.rules]]` map an Envoy domain and
//! descriptor entries to one of the config's plans (the format is
//! `tollgate_envoy::rules`'s); `on_store_error` says whether a store
//! failure is answered by the `[store]` failure policy or is gRPC
//! `UNAVAILABLE` for Envoy's `failure_mode_deny` to decide.

use std::net::{Ipv4Addr, SocketAddr};

use tollgate::{FailurePolicy, Plan};
use tollgate_envoy::{Rules, RulesConfig};

use super::{file, At};
use crate::Error;

/// The default gRPC listen address.
pub const DEFAULT_GRPC_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 8081);

/// The names `[envoy] on_store_error` accepts: the `[store]` failure
/// policy answers (the default), or every failure is gRPC `UNAVAILABLE`.
pub const ON_STORE_ERROR_NAMES: [&str; 2] = ["failure-policy", "unavailable"];

/// `[envoy] on_store_error` read: `None` for `"failure-policy"` (the
/// `[store]` failure policy answers, as for the HTTP API),
/// `Some(FailurePolicy::Unavailable)` for `"unavailable"`.
fn on_store_error_from_name(name: &str) -> Option<Option<FailurePolicy>> {
    match name {
        "failure-policy" => Some(None),
        "unavailable" => Some(Some(FailurePolicy::Unavailable)),
        _ => None,
    }
}

/// `[envoy]`, resolved.
#[derive(Debug, Clone)]
pub struct EnvoyConfig {
    /// Where the gRPC rate limit service listens; `None` when it is off
    /// (`grpc_listen = "off"`).
    pub grpc_listen: Option<SocketAddr>,
    /// What a store failure or timeout gives over gRPC: `None`, the
    /// `[store]` failure policy (the default); `Some(policy)`, the same
    /// guard over the same store with this policy instead
    /// (`"unavailable"`: every failure is gRPC `UNAVAILABLE`, so that Envoy's
    /// own `failure_mode_deny` decides; the HTTP API keeps the failure
    /// policy). Only a shared store (Redis) can fail.
    pub on_store_error: Option<FailurePolicy>,
    /// The rules, checked against the config's plans. Without any, every
    /// descriptor is answered `OK` (not limited).
    pub rules: Rules,
}

impl Default for EnvoyConfig {
    fn default() -> Self {
        Self {
            grpc_listen: Some(DEFAULT_GRPC_LISTEN),
            on_store_error: None,
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
        None => None,
        Some(name) => on_store_error_from_name(name.get_ref()).ok_or_else(|| {
            at(
                name.span(),
                format!(
                    "unknown on_store_error {:?}: known ones are {}",
                    name.get_ref(),
                    ON_STORE_ERROR_NAMES.join(", ")
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
