//! What the binary logs by default: tollgate's lines at `info`, and the
//! Redis client's own only at `error`.
//!
//! redis-rs logs every failed reconnection and every slot refresh at `warn`
//! and `info`: with one master of a cluster down, about 160 lines a second
//! from a `serve` answering 150 requests a second (measured), which drown
//! tollgate's own account of the outage. tollgate logs the store's failures
//! itself, at most one line a second with the count it held back
//! (`tollgate-guard`'s `log.rs`), and the circuit breaker's every turn.
//! A `RUST_LOG` that sets the `redis` target itself, or turns every log
//! off, is taken as it is; one that sets a part of it (`redis::aio=debug`)
//! keeps the rest at `error` (the most specific directive wins).

/// The filter's directives for `rust_log`, the `RUST_LOG` variable (`None`
/// or blank: not set): `info` by default, and the `redis` target at `error`
/// unless `rust_log` sets it or turns every log off.
pub fn directives(rust_log: Option<&str>) -> String {
    let given = rust_log.map(str::trim).filter(|spec| !spec.is_empty());
    match given {
        None => "info,redis=error".to_owned(),
        Some(spec) if sets_redis_or_all_off(spec) => spec.to_owned(),
        Some(spec) => format!("{spec},redis=error"),
    }
}

/// Whether a directive of `spec` sets the `redis` crate's target itself
/// (`redis=warn`; not `tollgate_redis`, nor a part such as `redis::aio`),
/// or is a bare `off`, which `redis=error` after it would undo for redis.
fn sets_redis_or_all_off(spec: &str) -> bool {
    spec.split(',').map(str::trim).any(|directive| {
        let target = directive.split(['=', '[']).next().unwrap_or("");
        target == "redis" || directive.eq_ignore_ascii_case("off")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redis_client_is_quiet_below_error_unless_named() {
        assert_eq!(directives(None), "info,redis=error");
        assert_eq!(directives(Some("  ")), "info,redis=error");
        assert_eq!(directives(Some("debug")), "debug,redis=error");
        assert_eq!(
            directives(Some("info,tollgate_redis=debug")),
            "info,tollgate_redis=debug,redis=error"
        );
        assert_eq!(directives(Some("info,redis=warn")), "info,redis=warn");
        assert_eq!(
            directives(Some("redis::cluster_handling=info")),
            "redis::cluster_handling=info,redis=error"
        );
        assert_eq!(directives(Some("off")), "off");
        assert_eq!(directives(Some("OFF")), "OFF");
    }
}
