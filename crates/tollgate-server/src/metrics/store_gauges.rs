//! The stores' numbers, read when `/metrics` is scraped rather than
//! counted on the hot path: how many clients the memory store tracks, its
//! cap, and how many it dropped and why; the guarded store's errors by kind
//! and its circuit breaker; the rejection cache's size; the Redis store's
//! decisions and the calls that carried them.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::sync::Arc;

use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

/// Values read at render time from elsewhere (the store).
#[derive(Debug, Clone, Default)]
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
    /// Store errors counted by the guarded stores: transient (timeouts
    /// included) and permanent. Only a shared store fails.
    pub store_errors: StoreErrors,
    /// The shared store's circuit breaker (closed, nothing short-circuited,
    /// for the memory store).
    pub circuit: Circuit,
    /// Clients in the shared store's rejection cache (0
    /// without one).
    pub rejection_cache_clients: usize,
    /// The Redis store's decisions and the script calls that carried them
    /// (`None` for another store).
    pub store_calls: Option<StoreCalls>,
}

/// How many decisions went to Redis, and in how many script calls: with
/// batching, fewer calls than decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCalls {
    /// Decisions sent to Redis (alone or in a batch).
    pub decisions: u64,
    /// Script calls that carried them.
    pub calls: u64,
    /// Decisions that consumed after their caller gave up, or that their
    /// caller gave back (another client of the request refused), taken
    /// back.
    pub refunded: u64,
    /// Such decisions whose refund found the client used since: kept.
    pub refunds_stale: u64,
    /// Of those, restored on a later try (moved from `refunds_stale` to
    /// `refunded` since).
    pub refunds_restored_late: u64,
    /// Such decisions whose refund failed: kept.
    pub refunds_failed: u64,
    /// Decisions whose reply never came (the connection dropped after they
    /// were sent, or no reply within 5 s; on a cluster, any that failed),
    /// looked up by the receipt they left in Redis; those that consumed are
    /// refunded, and counted above.
    pub replies_lost: u64,
    /// Refunds not ended yet: queued, being sent, or waiting for Redis to
    /// be reached again (up to 60 s).
    pub refunds_pending: u64,
    /// Decisions that consumed but too few replicas acknowledged
    /// (`[store] replicas_to_ack`): refunded, answered by the failure policy.
    pub not_replicated: u64,
}

/// Store errors by kind, as the guarded stores counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreErrors {
    /// Errors that may go away by themselves, and timeouts.
    pub transient: u64,
    /// Errors that retrying cannot fix.
    pub permanent: u64,
}

/// The state of a guarded store's circuit breaker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Circuit {
    /// Whether the circuit is open now (on a cluster, any master's).
    pub open: bool,
    /// Calls answered without calling the store so far.
    pub short_circuited: u64,
    /// On a Redis Cluster, each master called in the last 10 s (`host:port`)
    /// and whether its own circuit is open now; empty for one node.
    pub parts: Vec<(Arc<str>, bool)>,
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
        registry.register(
            "rejection_cache_clients",
            "clients whose rejection by the shared store this instance answers again itself (0 without a rejection cache)",
            ConstGauge::new(self.rejection_cache_clients),
        );
        self.register_store(&mut registry);
        registry.register("clients_dropped", "Clients dropped from memory: evicted (at the cap, those whose eviction gives back the fewest requests first, the least recently seen among equals), reclaimed (at the cap, state no longer mattered) or swept (idle, by the periodic sweep)", dropped);
        registry
    }

    /// The guarded store's errors, its circuit breaker and, on Redis, its
    /// calls.
    fn register_store(self, registry: &mut Registry) {
        let errors = Family::<[(&'static str, &'static str); 1], Counter>::default();
        for (kind, count) in [
            ("transient", self.store_errors.transient),
            ("permanent", self.store_errors.permanent),
        ] {
            errors.get_or_create(&[("kind", kind)]).inc_by(count);
        }
        registry.register(
            "store_errors",
            "Store errors, by whether retrying may help",
            errors,
        );
        self.circuit.register(registry);
        if let Some(calls) = self.store_calls {
            calls.register(registry);
        }
    }
}

impl Circuit {
    /// The circuit breaker: open or not, per master on a cluster, and the
    /// calls it answered without the store.
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "store_circuit_open",
            "1 while the shared store's circuit is open, or on a cluster any master's (the failure policy answers without calling it)",
            ConstGauge::new(i64::from(self.open)),
        );
        if !self.parts.is_empty() {
            let parts = Family::<[(&'static str, String); 1], Gauge>::default();
            for (part, open) in &self.parts {
                parts
                    .get_or_create(&[("part", part.to_string())])
                    .set(i64::from(*open));
            }
            registry.register(
                "store_part_circuit_open",
                "1 while the circuit of one master of a Redis Cluster (part=\"host:port\") is open: its clients are answered by the failure policy, the others' are not",
                parts,
            );
        }
        let short_circuited = Counter::<u64>::default();
        short_circuited.inc_by(self.short_circuited);
        registry.register(
            "store_short_circuited",
            "Calls answered by the failure policy without calling the store, its circuit being open",
            short_circuited,
        );
    }
}

impl StoreCalls {
    /// The Redis store's calls, lost replies and refunds.
    fn register(self, registry: &mut Registry) {
        for (name, help, count) in [
            (
                "store_decisions_sent",
                "Decisions sent to the Redis store, alone or batched",
                self.decisions,
            ),
            (
                "store_calls",
                "Script calls to Redis that carried those decisions (fewer when batched)",
                self.calls,
            ),
            (
                "store_replies_lost",
                "Decisions whose reply never came (the connection dropped after they were sent, or no reply within 5 s; on a Redis Cluster, any failed decision, since the cluster client sends a command again), looked up by the receipt they left in Redis and refunded if they consumed",
                self.replies_lost,
            ),
            (
                "store_not_replicated",
                "Decisions that consumed but that fewer replicas than [store] replicas_to_ack acknowledged within the store's timeout (Redis's WAIT): refunded, and answered by the failure policy",
                self.not_replicated,
            ),
        ] {
            let counter = Counter::<u64>::default();
            counter.inc_by(count);
            registry.register(name, help, counter);
        }
        let refunds = Family::<[(&'static str, &'static str); 1], Counter>::default();
        for (outcome, count) in [
            // Each refund counted once, by how its first try ended, so
            // that every outcome only grows: one restored on a later try
            // stays under "stale" and is counted under "restored_late" too.
            (
                "restored",
                self.refunded.saturating_sub(self.refunds_restored_late),
            ),
            (
                "stale",
                self.refunds_stale
                    .saturating_add(self.refunds_restored_late),
            ),
            ("restored_late", self.refunds_restored_late),
            ("failed", self.refunds_failed),
        ] {
            refunds.get_or_create(&[("outcome", outcome)]).inc_by(count);
        }
        registry.register(
            "store_refunds",
            "Decisions Redis ran and counted but whose caller had given up (timed out or gone) before the answer came, whose reply was lost, or that their caller gave back (an Envoy request another of whose clients refused): restored (taken back), stale (the client was used since, or the master reached does not hold the call's write after a failover, so kept: admits less, never more; or another abandoned call's refund had to restore first), of the stale those restored_late (taken back on a later try), or failed (kept)",
            refunds,
        );
        registry.register(
            "store_refunds_pending",
            "Refunds not ended yet: queued, being sent, or sent again every 100 ms for up to 60 s while Redis cannot be reached",
            ConstGauge::new(i64::try_from(self.refunds_pending).unwrap_or(i64::MAX)),
        );
    }
}
