//! [`Taken`]: what the clients of one request consumed, given back unless
//! the request is allowed, so that a refused or abandoned request consumes
//! nothing (see [`crate::service`]).

use std::sync::Arc;

use tollgate::{Receipt, Store};

/// The receipts of what one request's clients consumed so far. Given back
/// by [`Taken::give_back`], or, when the request is abandoned (Envoy
/// cancelled the call, its future dropped), by a task started on drop;
/// kept only by [`Taken::keep`].
pub(crate) struct Taken {
    store: Arc<dyn Store>,
    receipts: Vec<Receipt>,
}

impl Taken {
    /// Nothing taken yet from `store`.
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            receipts: Vec::new(),
        }
    }

    /// Adds what one check consumed (`None`: nothing to give back).
    pub(crate) fn push(&mut self, receipt: Option<Receipt>) {
        self.receipts.extend(receipt);
    }

    /// The request is allowed: what it consumed stays.
    pub(crate) fn keep(mut self) {
        self.receipts.clear();
    }

    /// Gives back everything taken, before the caller lets go of the
    /// clients' locks. A give-back that fails leaves its consumption in
    /// place; the store counts it (a Redis store's `refunds_failed`), so
    /// there is nothing more to do with the error here.
    pub(crate) async fn give_back(mut self) {
        for receipt in std::mem::take(&mut self.receipts) {
            let _ = self.store.give_back(receipt).await;
        }
    }
}

impl Drop for Taken {
    /// Abandoned before it was kept or given back: gives back in a task of
    /// its own (outside a Tokio runtime, where no store call could run, the
    /// consumption stays).
    fn drop(&mut self) {
        if self.receipts.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.store.clone();
        let receipts = std::mem::take(&mut self.receipts);
        runtime.spawn(async move {
            for receipt in receipts {
                let _ = store.give_back(receipt).await;
            }
        });
    }
}
