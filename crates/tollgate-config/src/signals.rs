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

/// For a front end with no config file: logs each SIGHUP of `hangups`
/// (there is nothing to reload) until `shutdown` completes. The signal is
/// caught as with a file, so that a `kill -HUP` sent to a fleet's
/// processes does not end this one by its default action, and said, so
/// that an operator can tell it arrived.
pub async fn log_hangups_without_config(
    hangups: Option<Signal>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let Some(mut hangups) = hangups else {
        return shutdown.await;
    };
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            Some(()) = hangups.recv() => {
                tracing::info!("SIGHUP: no --config to reload; going on");
            }
        }
    }
}

/// A future that completes on SIGTERM or ctrl-c (SIGINT). Both are caught
/// from this call on, not from the future's first poll: call it before
/// telling anyone the server is up, so that a SIGTERM sent right after the
/// banner stops the server instead of killing it with the default action.
/// Needs a Tokio runtime; a signal that cannot be caught is logged, and the
/// other still stops the server.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    let terminate = catch(SignalKind::terminate(), "SIGTERM");
    let interrupt = catch(SignalKind::interrupt(), "SIGINT");
    async move {
        tokio::select! {
            () = next(interrupt) => {}
            () = next(terminate) => {}
        }
    }
}

fn catch(kind: SignalKind, name: &'static str) -> Option<Signal> {
    signal(kind)
        .inspect_err(|error| tracing::warn!(%error, "cannot listen for {name}"))
        .ok()
}

/// The next delivery of `signal`, or never.
async fn next(signal: Option<Signal>) {
    match signal {
        Some(mut signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}
