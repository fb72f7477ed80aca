//! Limits the configured store can serve: the Redis store decides in Lua,
//! whose numbers are doubles, so a limit whose arithmetic would leave their
//! exact range (e.g. `window = "100000000000d"`) could never be answered
//! there. Such a limit is refused when the config is checked (`tollgate
//! check`, start-up, reload), at the line and column of the value to change,
//! rather than failing every request later. The bounds themselves are
//! `tollgate_redis::bounds::check_limit`'s.

use super::{file, At, Config, StoreKind};
use crate::Error;

/// Checks every limit of `file` against the store `config` names (after
/// the flags: `--redis` counts).
pub(super) fn check_store_bounds(
    config: &Config,
    file: &file::File,
    at: &At<'_>,
) -> Result<(), Error> {
    check_bounds(&config.store.kind, "the redis store", file, at)
}

/// Checks every limit of `file` against the store a server runs, for a
/// reload: a `[store]` change waits for a restart, so the new limits go into
/// force on `running` whatever store the file names.
pub(super) fn check_running_store_bounds(
    running: &StoreKind,
    file: &file::File,
    at: &At<'_>,
) -> Result<(), Error> {
    check_bounds(
        running,
        "the running redis store (a [store] change waits for a restart)",
        file,
        at,
    )
}

/// Checks every limit of `file` against `store`, named `store_named` in
/// the message.
fn check_bounds(
    store: &StoreKind,
    store_named: &str,
    file: &file::File,
    at: &At<'_>,
) -> Result<(), Error> {
    if !matches!(
        store,
        StoreKind::Redis { .. } | StoreKind::RedisCluster { .. }
    ) {
        return Ok(());
    }
    for (plan, limits) in &file.plans {
        for limit in &limits.get_ref().0 {
            // A limit past u32 is refused by the plans' own check.
            let Ok(count) = u32::try_from(*limit.limit.get_ref()) else {
                continue;
            };
            let (policy, window) = (limit.policy.get_ref(), limit.window.get_ref().0);
            if let Err(error) = tollgate_redis::bounds::check_limit(policy, count, window) {
                let span = match tollgate_redis::at_fault(policy, window) {
                    tollgate_redis::AtFault::Limit => limit.limit.span(),
                    tollgate_redis::AtFault::Window => limit.window.span(),
                };
                return Err(at(
                    span,
                    format!(
                        "plan {plan:?}, limit {:?}: {store_named} cannot serve it exactly: {error}",
                        limit.name.get_ref()
                    ),
                ));
            }
        }
    }
    Ok(())
}
