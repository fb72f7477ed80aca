//! The top-level keys: `listen`, `max_cost` and `sweep_interval`.

use std::net::SocketAddr;

use toml::Spanned;

use super::window::Millis;
use super::{At, DEFAULT_LISTEN, DEFAULT_MAX_COST, DEFAULT_SWEEP_INTERVAL_MS};
use crate::Error;

/// The shortest `sweep_interval` accepted, in ms.
pub const MIN_SWEEP_INTERVAL_MS: u64 = 100;

/// `listen`: one or more `IP:PORT`.
pub(super) fn build_listen(
    addrs: Option<&[Spanned<String>]>,
    at: &At<'_>,
) -> Result<Vec<SocketAddr>, Error> {
    match addrs {
        None => Ok(DEFAULT_LISTEN.parse().into_iter().collect()),
        Some([]) => Err(at(
            0..0,
            "listen is empty: give at least one IP:PORT".to_owned(),
        )),
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
            .collect(),
    }
}

/// `max_cost`: from 1 to `u32::MAX`.
pub(super) fn build_max_cost(value: Option<&Spanned<u64>>, at: &At<'_>) -> Result<u32, Error> {
    let Some(value) = value else {
        return Ok(DEFAULT_MAX_COST);
    };
    match u32::try_from(*value.get_ref()) {
        Ok(cost) if cost >= 1 => Ok(cost),
        _ => Err(at(
            value.span(),
            format!(
                "max_cost must be between 1 and {} (got {})",
                u32::MAX,
                value.get_ref()
            ),
        )),
    }
}

/// `sweep_interval`: at least [`MIN_SWEEP_INTERVAL_MS`].
pub(super) fn build_sweep_interval(
    value: Option<&Spanned<Millis>>,
    at: &At<'_>,
) -> Result<u64, Error> {
    match value {
        None => Ok(DEFAULT_SWEEP_INTERVAL_MS),
        Some(v) if v.get_ref().0 >= MIN_SWEEP_INTERVAL_MS => Ok(v.get_ref().0),
        Some(v) => Err(at(
            v.span(),
            "sweep_interval must be at least 100ms".to_owned(),
        )),
    }
}
