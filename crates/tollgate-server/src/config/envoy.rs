//! `[envoy]`: the gRPC rate limit service for Envoy (and Istio, Envoy
//! Gateway, Gloo) that `tollgate serve` runs beside its HTTP API, on the
//! same store, clock and plans. `[[envoy.rules]]` map an Envoy domain and
//! descriptor entries to one of the config's plans (the format is
//! `tollgate_envoy::rules`'s).

use std::net::{Ipv4Addr, SocketAddr};

use tollgate::Plan;
use tollgate_envoy::{Rules, RulesConfig};

use super::{file, At};
use crate::Error;

/// The default gRPC listen address.
pub const DEFAULT_GRPC_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 8081);

/// `[envoy]`, resolved.
#[derive(Debug, Clone)]
pub struct EnvoyConfig {
    /// Where the gRPC rate limit service listens.
    pub grpc_listen: SocketAddr,
    /// The rules, checked against the config's plans. Without any, every
    /// descriptor is answered `OK` (not limited).
    pub rules: Rules,
}

impl Default for EnvoyConfig {
    fn default() -> Self {
        Self {
            grpc_listen: DEFAULT_GRPC_LISTEN,
            rules: Rules::default(),
        }
    }
}

pub(super) fn build_envoy(
    section: &file::EnvoySection,
    plans: &[Plan],
    at: &At<'_>,
) -> Result<EnvoyConfig, Error> {
    let grpc_listen = match &section.grpc_listen {
        None => DEFAULT_GRPC_LISTEN,
        Some(addr) => addr.get_ref().parse().map_err(|_| {
            at(
                addr.span(),
                format!(
                    "invalid grpc_listen address {:?}: expected IP:PORT, e.g. 127.0.0.1:8081",
                    addr.get_ref()
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
    Ok(EnvoyConfig { grpc_listen, rules })
}
