//! One stop signal for every task of a serving instance: a shutdown asked
//! for, or any one server failing, stops them all.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;

/// Clones share the signal; once stopped it stays stopped.
#[derive(Debug, Clone)]
pub(crate) struct StopSignal {
    sender: Arc<watch::Sender<bool>>,
    receiver: watch::Receiver<bool>,
}

impl StopSignal {
    /// A signal not yet given.
    pub(crate) fn new() -> Self {
        let (sender, receiver) = watch::channel(false);
        Self {
            sender: Arc::new(sender),
            receiver,
        }
    }

    /// Gives the signal (again is harmless).
    pub(crate) fn stop(&self) {
        let _ = self.sender.send(true);
    }

    /// Completes once the signal is given.
    pub(crate) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut receiver = self.receiver.clone();
        async move {
            let _ = receiver.wait_for(|stopped| *stopped).await;
        }
    }

    /// Completes when `shutdown` does or the signal is given, and gives it.
    pub(crate) fn on_shutdown(
        &self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> impl Future<Output = ()> + Send {
        let signal = self.clone();
        async move {
            tokio::select! {
                () = shutdown => {}
                () = signal.stopped() => {}
            }
            signal.stop();
        }
    }
}
