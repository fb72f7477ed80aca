//! What the binary logs by default: tollgate's lines at `info`, and the
//! Redis client's own only at `error`.
//!
//! redis-rs logs every failed reconnection and every slot refresh at `warn`
//! and `info`: with one master of a cluster down, about 160 lines a second
//! from a `serve` answering 150 requests a second (measured), which drown
//! tollgate's own account of the outage. tollgate logs the store's failures
//! itself, at most one line a second with the count it held back
//! (`tollgate-guard`'s `log.rs`), and the circuit breaker's every turn.
//! A `RUST_LOG` that names the `redis` target is taken as it is.

/// The filter's directives for `rust_log`, the `RUST_LOG` variable (`None`
/// or blank: not set): `info` by default, and the `redis` target at `error`
/// unless `rust_log` says otherwise.
pub fn directives(rust_log: Option<&str>) -> String {
    let given = rust_log.map(str::trim).filter(|spec| !spec.is_empty());
    match given {
        None => "info,redis=error".to_owned(),
        Some(spec) if names_redis(spec) => spec.to_owned(),
        Some(spec) => format!("{spec},redis=error"),
    }
}

/// Whether a directive of `spec` is about the `redis` crate's targets
/// (`redis=warn`, `redis::cluster_handling=info`), not another crate's
/// whose name contains it (`tollgate_redis`).
fn names_redis(spec: &str) -> bool {
    spec.split(',').any(|directive| {
        let target = directive.trim().split(['=', '[']).next().unwrap_or("");
        target == "redis" || target.starts_with("redis::")
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
            "redis::cluster_handling=info"
        );
    }
}
