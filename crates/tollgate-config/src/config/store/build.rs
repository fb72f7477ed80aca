//! `[store]` read from the file: each key checked and given its default.

use std::path::PathBuf;

use tollgate_guard::BreakerConfig;

use super::{
    check_redis_url, Batching, FailurePolicy, StoreConfig, StoreKind, DEFAULT_PREFIX,
    DEFAULT_TIMEOUT_MS,
};
use crate::config::{file, At, Config, DEFAULT_MAX_CLIENTS};
use crate::Error;

pub(in crate::config) fn build_store(
    section: &file::StoreSection,
    at: &At<'_>,
) -> Result<StoreConfig, Error> {
    let kind = build_kind(section, at)?;
    let store = StoreConfig {
        rejection_cache: build_rejection_cache(section, at)?,
        kind,
        failure_policy: build_failure_policy(section, at)?,
        max_clients: build_max_clients(section, at)?,
        prefix: build_prefix(section, at)?,
        timeout_ms: build_timeout(section, at)?,
        breaker: build_breaker(section, at)?,
        tls_ca: section.tls_ca.as_ref().map(|p| PathBuf::from(p.get_ref())),
        batching: Batching {
            batch_max: build_bounded(
                &section.batch_max,
                "batch_max",
                tollgate_redis::DEFAULT_BATCH_MAX,
                tollgate_redis::MAX_BATCH,
                at,
            )?,
            batches_in_flight: build_bounded(
                &section.batches_in_flight,
                "batches_in_flight",
                tollgate_redis::DEFAULT_BATCHES_IN_FLIGHT,
                tollgate_redis::MAX_BATCHES_IN_FLIGHT,
                at,
            )?,
        },
        replicas_to_ack: build_replicas_to_ack(section, at)?,
        clock: crate::config::clock::build_clock(section, at)?,
    };
    check_redis_target(&store, section, at)?;
    Ok(store)
}

/// `failure_policy`, by name (fail-open when left out).
fn build_failure_policy(section: &file::StoreSection, at: &At<'_>) -> Result<FailurePolicy, Error> {
    let Some(name) = &section.failure_policy else {
        return Ok(FailurePolicy::FailOpen);
    };
    FailurePolicy::from_name(name.get_ref()).ok_or_else(|| {
        at(
            name.span(),
            format!(
                "unknown failure_policy {:?}: known ones are {}",
                name.get_ref(),
                FailurePolicy::NAMES.join(", ")
            ),
        )
    })
}

/// `max_clients`: at least 1.
fn build_max_clients(section: &file::StoreSection, at: &At<'_>) -> Result<usize, Error> {
    let Some(v) = &section.max_clients else {
        return Ok(DEFAULT_MAX_CLIENTS);
    };
    match usize::try_from(*v.get_ref()) {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(at(
            v.span(),
            format!("max_clients must be at least 1 (got {})", v.get_ref()),
        )),
    }
}

/// A count from 1 to `max` (`default` when left out).
fn build_bounded(
    value: &Option<toml::Spanned<u64>>,
    name: &str,
    default: usize,
    max: usize,
    at: &At<'_>,
) -> Result<usize, Error> {
    let Some(v) = value else {
        return Ok(default);
    };
    match usize::try_from(*v.get_ref()) {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(at(
            v.span(),
            format!("{name} must be from 1 to {max} (got {})", v.get_ref()),
        )),
    }
}

/// `replicas_to_ack`: from 0 (the default: none) to the Redis store's bound.
fn build_replicas_to_ack(section: &file::StoreSection, at: &At<'_>) -> Result<u32, Error> {
    let Some(v) = &section.replicas_to_ack else {
        return Ok(0);
    };
    let max = tollgate_redis::MAX_REPLICAS_TO_ACK;
    match u32::try_from(*v.get_ref()) {
        Ok(n) if n <= max => Ok(n),
        _ => Err(at(
            v.span(),
            format!(
                "replicas_to_ack must be from 0 to {max} (got {})",
                v.get_ref()
            ),
        )),
    }
}

/// `prefix`: one the Redis key layout accepts.
fn build_prefix(section: &file::StoreSection, at: &At<'_>) -> Result<String, Error> {
    let Some(prefix) = &section.prefix else {
        return Ok(DEFAULT_PREFIX.to_owned());
    };
    tollgate_redis::keys::KeyLayout::new(prefix.get_ref().clone())
        .map_err(|e| at(prefix.span(), format!("invalid prefix: {e}")))?;
    Ok(prefix.get_ref().clone())
}

/// `timeout`: from 1 ms to 1 h, the Redis store's own bounds
/// ([`tollgate_redis::MIN_TIMEOUT`], [`tollgate_redis::MAX_TIMEOUT`]): far
/// past any use of a per-call timeout, and far below what would make a
/// Redis script refuse the call's deadline, which would leave every
/// decision to the failure policy.
fn build_timeout(section: &file::StoreSection, at: &At<'_>) -> Result<u64, Error> {
    let min_ms = tollgate_redis::MIN_TIMEOUT.as_millis() as u64;
    let max_ms = tollgate_redis::MAX_TIMEOUT.as_millis() as u64;
    match &section.timeout {
        None => Ok(DEFAULT_TIMEOUT_MS),
        Some(t) if !(min_ms..=max_ms).contains(&t.get_ref().0) => Err(at(
            t.span(),
            format!("timeout must be from 1ms to 1h (got {} ms)", t.get_ref().0),
        )),
        Some(t) => Ok(t.get_ref().0),
    }
}

/// A CA file (`tls_ca`, or `--redis-ca`) is for a `rediss://` Redis store,
/// `replicas_to_ack` above 0 for a Redis store's replicas, and `clock =
/// "redis"` for a Redis store's clock: with the memory store they would be
/// ignored, so they are refused, at their line (checked after the flags,
/// which may name the Redis store they are for).
pub(in crate::config) fn check_redis_only_settings(
    config: &Config,
    section: &file::StoreSection,
    at: &At<'_>,
) -> Result<(), Error> {
    if config.store.kind != StoreKind::Memory {
        return Ok(());
    }
    if let Some(path) = &config.store.tls_ca {
        return Err(at(
            section.tls_ca.as_ref().map_or(0..0, |ca| ca.span()),
            format!(
                "tls_ca {:?} is the CA of a rediss:// Redis store, but the store is memory: \
                 give url = \"rediss://...\" (or --redis) or leave tls_ca out",
                path.display()
            ),
        ));
    }
    if config.store.replicas_to_ack > 0 {
        return Err(at(
            section.replicas_to_ack.as_ref().map_or(0..0, |n| n.span()),
            format!(
                "replicas_to_ack = {} waits for a Redis store's replicas, but the store is \
                 memory: give url = \"redis://...\" (or --redis) or leave replicas_to_ack out",
                config.store.replicas_to_ack
            ),
        ));
    }
    if config.store.clock == tollgate_redis::TimeSource::Redis {
        return Err(at(
            section.clock.as_ref().map_or(0..0, |c| c.span()),
            "clock = \"redis\" times decisions by a Redis store's clock, but the store is \
             memory: give url = \"redis://...\" (or --redis) or leave clock out"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Everything the Redis client can check without connecting (schemes, the
/// CA file, a cluster's database), shown where the key is.
fn check_redis_target(
    store: &StoreConfig,
    section: &file::StoreSection,
    at: &At<'_>,
) -> Result<(), Error> {
    let Err(e) = store.redis_target() else {
        return Ok(());
    };
    let span = match (&section.tls_ca, &section.cluster, &section.url) {
        (Some(ca), _, _) if e.to_string().contains("CA") => ca.span(),
        (_, Some(cluster), _) => cluster.span(),
        (_, _, Some(url)) => url.span(),
        (Some(ca), _, _) => ca.span(),
        _ => 0..0,
    };
    Err(at(span, e.to_string()))
}

/// Memory, one Redis node or a cluster: `url` and `cluster` exclude each other.
fn build_kind(section: &file::StoreSection, at: &At<'_>) -> Result<StoreKind, Error> {
    Ok(match (&section.url, &section.cluster) {
        (Some(url), Some(_)) => {
            return Err(at(
                url.span(),
                "give either url (one Redis node) or cluster (seed nodes), not both".to_owned(),
            ))
        }
        (None, Some(seeds)) => {
            for seed in seeds.get_ref() {
                check_redis_url(seed).map_err(|e| at(seeds.span(), e.to_string()))?;
            }
            StoreKind::RedisCluster {
                seeds: seeds.get_ref().clone(),
            }
        }
        (None, None) => StoreKind::Memory,
        (Some(url), None) if url.get_ref() == "memory" => StoreKind::Memory,
        (Some(url), None) => StoreKind::Redis {
            url: check_redis_url(url.get_ref()).map_err(|e| at(url.span(), e.to_string()))?,
        },
    })
}

/// `rejection_cache` (default on for a shared store, ignored for memory)
/// and `rejection_cache_max_clients` (checked even when off, so that a typo
/// is found before someone turns the cache on).
fn build_rejection_cache(
    section: &file::StoreSection,
    at: &At<'_>,
) -> Result<Option<usize>, Error> {
    let max = match &section.rejection_cache_max_clients {
        None => tollgate_cache::DEFAULT_MAX_CLIENTS,
        Some(n) => match usize::try_from(*n.get_ref()) {
            Ok(max) if (1..=tollgate_cache::MAX_MAX_CLIENTS).contains(&max) => max,
            _ => {
                return Err(at(
                    n.span(),
                    format!(
                        "rejection_cache_max_clients must be from 1 to {} (got {})",
                        tollgate_cache::MAX_MAX_CLIENTS,
                        n.get_ref()
                    ),
                ))
            }
        },
    };
    let on = section
        .rejection_cache
        .as_ref()
        .is_none_or(|on| *on.get_ref());
    Ok(on.then_some(max))
}

fn build_breaker(section: &file::StoreSection, at: &At<'_>) -> Result<BreakerConfig, Error> {
    let mut breaker = BreakerConfig::default();
    if let Some(n) = &section.breaker_failures {
        breaker.failures = u32::try_from(*n.get_ref()).map_err(|_| {
            at(
                n.span(),
                format!(
                    "breaker_failures must be at most {} (got {})",
                    u32::MAX,
                    n.get_ref()
                ),
            )
        })?;
    }
    if let Some(t) = &section.breaker_probe_interval {
        if t.get_ref().0 == 0 {
            return Err(at(
                t.span(),
                "breaker_probe_interval must be at least 1ms".to_owned(),
            ));
        }
        breaker.probe_interval_ms = t.get_ref().0;
    }
    Ok(breaker)
}
