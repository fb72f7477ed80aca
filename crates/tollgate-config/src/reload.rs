//! Hot reload: on SIGHUP, and when the config file's contents change (read
//! once a second; config files are small, and comparing contents rather than
//! mtimes catches edits within one mtime tick). A broken, deleted or
//! unreadable file is refused with a log line and the running config stays;
//! it is not retried until its contents change again or a SIGHUP asks.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use tokio::signal::unix::Signal;

use crate::config::read_config_text;

/// How often the config file is read for changes.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Calls `reload` on SIGHUP (from [`crate::signals::catch_hangups`]) and
/// whenever what the file at `path` holds changes (read every `poll`), until
/// `shutdown` completes. A file that is deleted or can no longer be read
/// counts as a change too: `reload` runs once and reports the error (it is
/// not called again at every poll while the file stays missing), and runs
/// again when the file is back. For any front end that reloads a config
/// file (`tollgate serve`, `tollgate proxy --config`); `reload` logs its own
/// outcome.
pub async fn watch_file(
    path: &Path,
    poll: Duration,
    mut hangups: Option<Signal>,
    shutdown: impl Future<Output = ()>,
    mut reload: impl FnMut(),
) {
    // `None`: the file could not be read at the last look.
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
                if current != last_seen {
                    if current.is_some() {
                        tracing::info!(path = %path.display(), "config file changed: reloading");
                    } else {
                        tracing::warn!(path = %path.display(), "config file deleted or unreadable");
                    }
                    last_seen = current;
                    reload();
                }
            }
        }
    }
}
