//! `/metrics`: the server's counters and its stores' gauges, read at once.

use std::sync::atomic::Ordering;

use tollgate::MemoryBackend;

use super::Server;
use crate::metrics::{Circuit, Gauges, StoreCalls};

impl Server {
    /// The guards' local fallbacks, each once (sibling guards share one).
    fn fallbacks(&self) -> Vec<&MemoryBackend> {
        let mut fallbacks: Vec<&MemoryBackend> = Vec::new();
        for guard in self.guards() {
            let fallback = guard.fallback();
            if !fallbacks.iter().any(|seen| std::ptr::eq(*seen, fallback)) {
                fallbacks.push(fallback);
            }
        }
        fallbacks
    }

    /// The metrics in Prometheus text format.
    pub fn render_metrics(&self) -> String {
        let mut gauges = Gauges {
            swept: self.inner.swept.load(Ordering::Relaxed),
            ..Gauges::default()
        };
        for guard in self.guards() {
            let counts = guard.counts();
            gauges.store_errors.transient += counts.transient_errors + counts.timeouts;
            gauges.store_errors.permanent += counts.permanent_errors;
            // Siblings share one breaker: its state and count once.
            gauges.circuit = Circuit {
                open: counts.circuit_open,
                short_circuited: counts.short_circuited,
                parts: guard.part_circuits(),
            };
        }
        gauges.rejection_cache_clients = self.inner.rejection_cache.as_ref().map_or(0, |c| c.len());
        gauges.store_calls = self.inner.redis.as_ref().map(|redis| {
            let counts = redis.call_counts();
            StoreCalls {
                decisions: counts.decisions,
                calls: counts.calls,
                refunded: counts.refunded,
                refunds_stale: counts.refunds_stale,
                refunds_restored_late: counts.refunds_restored_late,
                refunds_failed: counts.refunds_failed,
                replies_lost: counts.replies_lost,
                refunds_pending: counts.refunds_pending,
                not_replicated: counts.not_replicated,
            }
        });
        if let Some(memory) = &self.inner.memory {
            let store = memory.limiter().store();
            gauges.tracked_clients = Some(store.len());
            gauges.max_clients = store.max_clients();
            gauges.evicted = store.evicted();
            gauges.reclaimed = store.reclaimed();
        }
        for fallback in self.fallbacks() {
            let store = fallback.limiter().store();
            gauges.evicted += store.evicted();
            gauges.reclaimed += store.reclaimed();
        }
        self.inner.metrics.render(gauges)
    }
}
