//! Hot reload: on SIGHUP, and when the config file's contents change (read
//! once a second; config files are small, and comparing contents rather than
//! mtimes catches edits within one mtime tick). A broken file is refused with
//! a log line and the running config stays; it is not retried until its
//! contents change again or a SIGHUP asks.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::config::read_config_text;
use crate::server::Server;

/// How often the config file is read for changes.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Starts catching SIGHUP (whose default action would end the process), so
/// that a SIGHUP arriving before [`watch`] runs is kept for it. Call it before
/// telling anyone the server is up. `None` when signals are unavailable.
pub fn catch_hangups() -> Option<Signal> {
    match signal(SignalKind::hangup()) {
        Ok(hangups) => Some(hangups),
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGHUP; reloading on file changes only");
            None
        }
    }
}

/// Watches for SIGHUP (from [`catch_hangups`]) and config file changes until
/// `shutdown` completes, reloading `server` from its config file. Does
/// nothing (but wait for `shutdown`) when the server has no config file.
pub async fn watch(
    server: Server,
    poll: Duration,
    hangups: Option<Signal>,
    shutdown: impl Future<Output = ()>,
) {
    let Some(path) = server.config_path().map(ToOwned::to_owned) else {
        shutdown.await;
        return;
    };
    // Errors are logged and counted by `reload`.
    watch_file(&path, poll, hangups, shutdown, || {
        let _ = server.reload();
    })
    .await;
}

/// Calls `reload` on SIGHUP (from [`catch_hangups`]) and whenever the
/// contents of the file at `path` change (read every `poll`), until
/// `shutdown` completes. For any front end that reloads a config file
/// (`tollgate serve`, `tollgate proxy --config`); `reload` logs its own
/// outcome.
pub async fn watch_file(
    path: &Path,
    poll: Duration,
    mut hangups: Option<Signal>,
    shutdown: impl Future<Output = ()>,
    mut reload: impl FnMut(),
) {
    let mut last_seen = read_config_text(path).ok();
    let mut ticks = tokio::time::interval(poll);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            Some(()) = async {
                match hangups.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                tracing::info!(path = %path.display(), "SIGHUP: reloading the config");
                last_seen = read_config_text(path).ok();
                reload();
            }
            _ = ticks.tick() => {
                let current = read_config_text(path).ok();
                if current.is_some() && current != last_seen {
                    tracing::info!(path = %path.display(), "config file changed: reloading");
                    last_seen = current;
                    reload();
                }
            }
        }
    }
}

/// Sweeps idle client state from memory every `interval` until `shutdown`.
pub async fn sweep_periodically(
    server: Server,
    interval: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = ticks.tick() => {
                let dropped = server.sweep();
                if dropped > 0 {
                    tracing::debug!(dropped, "swept idle clients");
                }
            }
        }
    }
}
