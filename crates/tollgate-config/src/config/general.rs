//! The top-level keys: `listen`, `max_cost` and `sweep_interval`.

use std::net::{IpAddr, SocketAddr};

use toml::Spanned;

use super::window::Millis;
use super::{file, At, Config, DEFAULT_LISTEN, DEFAULT_MAX_COST, DEFAULT_SWEEP_INTERVAL_MS};
use crate::{Error, Overrides};

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

/// Every address `serve` listens on, HTTP (`listen`) and gRPC
/// (`grpc_listen`), taken once (after the flags): two of them on one socket
/// would pass `tollgate check` and then fail at start-up with "Address
/// already in use", which points at some other process. Each address is
/// named by where it came from: `flags` (`--listen`, `--grpc-listen`),
/// `file`'s keys, at their line, or `grpc_listen`'s default; `file` is
/// `None` for serve without a config file (the embedded default).
pub(super) fn check_distinct_addresses(
    config: &Config,
    flags: &Overrides,
    file: Option<(&file::File, &At<'_>)>,
) -> Result<(), Error> {
    let listen_key = if flags.listen.is_empty() {
        "listen"
    } else {
        "--listen"
    };
    let written_grpc = file.and_then(|(file, _)| file.envoy.grpc_listen.as_ref());
    let grpc_key = match (&flags.grpc_listen, written_grpc) {
        (Some(_), _) => "--grpc-listen",
        (None, Some(_)) => "grpc_listen",
        (None, None) if file.is_some() => {
            "grpc_listen, whose default it is; set [envoy] grpc_listen to another address, or \"off\""
        }
        (None, None) => "grpc_listen, whose default it is; give --grpc-listen another address, or off",
    };
    let grpc = (config.envoy.grpc_listen.iter()).map(|addr| (addr, grpc_key));
    let all: Vec<(&SocketAddr, &str)> = (config.listen.iter())
        .map(|addr| (addr, listen_key))
        .chain(grpc)
        .collect();
    // The file's line of the address at `index` of `all`, unless a flag gave it.
    let written = |index: usize| {
        let (file, _) = file?;
        let (addr, key) = all[index];
        let text = match key {
            "grpc_listen" => file.envoy.grpc_listen.as_ref(),
            "listen" => file.listen.as_ref().and_then(|addrs| addrs.get(index)),
            _ => None,
        };
        text.filter(|text| text.get_ref().parse::<SocketAddr>().ok().as_ref() == Some(addr))
            .map(Spanned::span)
    };
    for (i, (a, key_a)) in all.iter().enumerate() {
        let Some(j) = all[..i].iter().position(|(b, _)| same_socket(a, b)) else {
            continue;
        };
        let (b, key_b) = all[j];
        let what = if *a == b {
            format!("{a} is given twice")
        } else {
            format!("{a} overlaps {b}")
        };
        let detail = format!(
            "{what} ({key_b}, then {key_a}): every address serve listens on must be its own"
        );
        return Err(match (file, written(i).or_else(|| written(j))) {
            (Some((_, at)), Some(span)) => at(span, detail),
            _ => Error::AddressesCollide { detail },
        });
    }
    Ok(())
}

/// Whether binding both would collide: the same port (not 0, which the
/// system picks) on the same address, or on a wildcard address that covers
/// the other (`0.0.0.0` its family's, `[::]` every address).
fn same_socket(a: &SocketAddr, b: &SocketAddr) -> bool {
    let covers =
        |wide: IpAddr, other: IpAddr| wide.is_unspecified() && (wide.is_ipv6() || other.is_ipv4());
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || covers(a.ip(), b.ip()) || covers(b.ip(), a.ip()))
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
