//! The signals every long-running front end (`tollgate serve`, `tollgate
//! proxy`) answers alike: SIGHUP reloads the config file (see
//! [`crate::reload`]), SIGTERM and ctrl-c stop.

use tokio::signal::unix::{signal, Signal, SignalKind};

/// Starts catching SIGHUP (whose default action would end the process), so
/// that a SIGHUP arriving before [`crate::reload::watch_file`] runs is kept
/// for it. Call it before telling anyone the server is up. `None` when
/// signals are unavailable.
pub fn catch_hangups() -> Option<Signal> {
    match signal(SignalKind::hangup()) {
        Ok(hangups) => Some(hangups),
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGHUP; reloading on file changes only");
            None
        }
    }
}

/// Completes on SIGTERM or ctrl-c (SIGINT).
pub async fn shutdown_signal() {
    let terminate = async {
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; stop with ctrl-c");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
