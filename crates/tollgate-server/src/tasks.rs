//! The background tasks of a running server: reloading its config file
//! (on SIGHUP and on change, through `tollgate_config::reload`) and
//! sweeping idle clients from memory.

use std::future::Future;
use std::time::Duration;

use tokio::signal::unix::Signal;
use tollgate_config::reload::watch_file;
use tollgate_config::signals::log_hangups_without_config;

use crate::server::Server;

/// Watches for SIGHUP (from `tollgate_config::signals::catch_hangups`) and
/// config file changes until `shutdown` completes, reloading `server` from
/// its config file. Without one, logs each SIGHUP (nothing to reload)
/// until `shutdown`.
pub async fn watch(
    server: Server,
    poll: Duration,
    hangups: Option<Signal>,
    shutdown: impl Future<Output = ()>,
) {
    let Some(path) = server.config_path().map(ToOwned::to_owned) else {
        return log_hangups_without_config(hangups, shutdown).await;
    };
    // Errors are logged and counted by `reload`.
    watch_file(&path, poll, hangups, shutdown, || {
        let _ = server.reload();
    })
    .await;
}

/// Sweeps idle client state from memory every `interval` until `shutdown`.
pub async fn sweep_periodically(
    server: Server,
    interval: Duration,
    shutdown: impl Future<Output = ()>,
) {
    sweep_every(interval, shutdown, || server.sweep()).await;
}

/// Runs `sweep` (which says how many clients it dropped) every `interval`
/// until `shutdown`: `serve`'s sweeper, and the proxy's of its memory
/// stores. A tick missed while the runtime was busy is not made up.
pub async fn sweep_every(
    interval: Duration,
    shutdown: impl Future<Output = ()>,
    mut sweep: impl FnMut() -> usize,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = ticks.tick() => {
                let dropped = sweep();
                if dropped > 0 {
                    tracing::debug!(dropped, "swept idle clients");
                }
            }
        }
    }
}
