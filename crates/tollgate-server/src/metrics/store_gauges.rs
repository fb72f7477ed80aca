//! The memory store's numbers, read when `/metrics` is scraped rather than
//! counted on the hot path: how many clients it tracks, its cap, and how
//! many it dropped and why.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Values read at render time from elsewhere (the store).
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    /// Clients with state in the memory store, if the store is in memory.
    pub tracked_clients: Option<usize>,
    /// The cap on tracked clients.
    pub max_clients: Option<usize>,
    /// Clients evicted to make room (their state still mattered).
    pub evicted: u64,
    /// Clients dropped to make room because their state no longer mattered.
    pub reclaimed: u64,
    /// Clients dropped by the periodic sweep.
    pub swept: u64,
}

impl Gauges {
    /// A registry of these values under `prefix`, built for one scrape.
    pub(super) fn registry(self, prefix: &str) -> Registry {
        let mut registry = Registry::with_prefix(prefix);
        if let Some(clients) = self.tracked_clients {
            registry.register(
                "tracked_clients",
                "Clients with state in the memory store",
                ConstGauge::new(clients),
            );
        }
        if let Some(max) = self.max_clients {
            registry.register(
                "tracked_clients_max",
                "The cap on clients tracked in memory",
                ConstGauge::new(max),
            );
        }
        let dropped = Family::<[(&'static str, &'static str); 1], Counter>::default();
        for (reason, count) in [
            ("evicted", self.evicted),
            ("reclaimed", self.reclaimed),
            ("swept", self.swept),
        ] {
            dropped.get_or_create(&[("reason", reason)]).inc_by(count);
        }
        registry.register("clients_dropped", "Clients dropped from memory: evicted (least recently seen, at the cap), reclaimed (at the cap, state no longer mattered) or swept (idle, by the periodic sweep)", dropped);
        registry
    }
}
