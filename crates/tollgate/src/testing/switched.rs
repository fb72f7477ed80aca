//! [`SwitchedStore`]: the memory store behind switches a test turns, for
//! code that must answer a store that goes down, breaks or hangs, in whole,
//! in part (one master of a cluster) or for one client (its slot moving),
//! and comes back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::{
    GivenBack, Inspection, MemoryBackend, Plan, PlanDecision, Receipt, Returnable, Store,
    StoreError, StoreFuture,
};

/// How a [`SwitchedStore`] answers the calls of a part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Switch {
    /// The memory store decides.
    #[default]
    Up,
    /// Every call fails at once with a transient error, as a stopped Redis.
    Down,
    /// Every call fails at once with a permanent error, as a Redis out of
    /// memory or a script it refuses.
    Broken,
    /// No call is ever answered, as a paused or unreachable Redis.
    Hang,
    /// Every call fails at once with a transient error its part answered
    /// ([`crate::StoreErrorKind::TransientClientOnly`]), as a Redis Cluster master answers
    /// `TRYAGAIN` for a slot half-way through a migration.
    Moving,
}

/// Names the part of the store that holds a client, or `None` for the
/// clients of no part.
type PartOf = dyn Fn(&str) -> Option<&'static str> + Send + Sync;

/// A memory store whose answers a test switches ([`Switch`]): for the whole
/// store ([`SwitchedStore::set`]), or for one part of it
/// ([`SwitchedStore::set_part`]) when it is made of parts that fail apart
/// ([`SwitchedStore::with_parts`]; the parts are also its
/// [`Store::failure_domain`]s), or for one client
/// ([`SwitchedStore::set_client`]). It counts the checks and inspections
/// that reach it, answered or not. Giving back always reaches the memory
/// store.
pub struct SwitchedStore {
    memory: MemoryBackend,
    part_of: Box<PartOf>,
    whole: Mutex<Switch>,
    parts: Mutex<HashMap<&'static str, Switch>>,
    clients: Mutex<HashMap<String, Switch>>,
    calls: AtomicU64,
}

impl SwitchedStore {
    /// A store of one part, up.
    pub fn new() -> Self {
        Self::with_parts(|_| None)
    }

    /// A store whose clients live in the parts `part_of` names, all up.
    pub fn with_parts(
        part_of: impl Fn(&str) -> Option<&'static str> + Send + Sync + 'static,
    ) -> Self {
        Self {
            memory: MemoryBackend::new(),
            part_of: Box::new(part_of),
            whole: Mutex::new(Switch::Up),
            parts: Mutex::new(HashMap::new()),
            clients: Mutex::new(HashMap::new()),
            calls: AtomicU64::new(0),
        }
    }

    /// Switches the whole store, every part and client included.
    pub fn set(&self, switch: Switch) {
        *lock(&self.whole) = switch;
        lock(&self.parts).clear();
        lock(&self.clients).clear();
    }

    /// Switches the part named `part` alone (a client switched on its own
    /// keeps its switch).
    pub fn set_part(&self, part: &'static str, switch: Switch) {
        lock(&self.parts).insert(part, switch);
    }

    /// Switches the calls of `client` alone, e.g. [`Switch::Moving`] for a
    /// client whose slot moves while the rest of its part serves.
    pub fn set_client(&self, client: &str, switch: Switch) {
        lock(&self.clients).insert(client.to_owned(), switch);
    }

    /// Checks and inspections that reached the store so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// The memory store behind the switches, to read or use directly.
    pub fn memory(&self) -> &MemoryBackend {
        &self.memory
    }

    /// Counts a call for `client` and tells how to answer it.
    fn switch_for(&self, client: &str) -> Switch {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let own = lock(&self.clients).get(client).copied();
        let part = || (self.part_of)(client).and_then(|part| lock(&self.parts).get(part).copied());
        own.or_else(part).unwrap_or_else(|| *lock(&self.whole))
    }

    /// The answer of a call switched off, or `None` when the store is up.
    fn off<'a, T: Send + 'a>(&self, client: &str) -> Option<StoreFuture<'a, T>> {
        match self.switch_for(client) {
            Switch::Up => None,
            Switch::Down => Some(StoreFuture::ready(Err(StoreError::transient(
                "connection refused",
            )))),
            Switch::Broken => Some(StoreFuture::ready(Err(StoreError::permanent(
                "OOM command not allowed when used memory > 'maxmemory'",
            )))),
            Switch::Hang => Some(StoreFuture::new(std::future::pending())),
            Switch::Moving => Some(StoreFuture::ready(Err(StoreError::transient_reached(
                "TRYAGAIN Multiple keys request during rehashing of slot",
            )))),
        }
    }
}

impl Default for SwitchedStore {
    fn default() -> Self {
        Self::new()
    }
}

/// A switch's lock: a test that panicked while holding it left a plain
/// value behind, still good to read.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Store for SwitchedStore {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        self.off(client)
            .unwrap_or_else(|| self.memory.check(plan, client, now_ms, cost))
    }

    fn check_returnable<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, Returnable> {
        self.off(client)
            .unwrap_or_else(|| self.memory.check_returnable(plan, client, now_ms, cost))
    }

    fn give_back(&self, receipt: Receipt) -> StoreFuture<'_, GivenBack> {
        self.memory.give_back(receipt)
    }

    fn inspect<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Inspection> {
        self.off(client)
            .unwrap_or_else(|| self.memory.inspect(plan, client, now_ms))
    }

    fn failure_domain(&self, client: &str) -> Option<Arc<str>> {
        (self.part_of)(client).map(Arc::from)
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::{AnyPolicy, Limit};

    fn plan() -> Plan {
        let policy = AnyPolicy::from_name("token-bucket", 1, 1_000).unwrap();
        Plan::new("p", vec![Limit::new("l", policy, false)]).unwrap()
    }

    /// How a check of `client` is answered at once: `Some(Ok(allowed))`,
    /// `Some(Err(transient))`, or `None` when it hangs.
    fn answer(store: &SwitchedStore, client: &str) -> Option<Result<bool, bool>> {
        let plan = plan();
        let check = pin!(store.check(&plan, client, 0, 1))
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        match check {
            Poll::Ready(answer) => Some(answer.map(|d| d.allowed).map_err(|e| e.is_transient())),
            Poll::Pending => None,
        }
    }

    #[test]
    fn a_part_switches_alone_and_the_whole_store_switches_every_part() {
        let store = SwitchedStore::with_parts(|client| client.strip_prefix("a:").map(|_| "a"));
        store.set_part("a", Switch::Down);
        assert_eq!(answer(&store, "a:1"), Some(Err(true)));
        assert_eq!(answer(&store, "b:1"), Some(Ok(true)), "another part is up");
        assert_eq!(answer(&store, "b:1"), Some(Ok(false)), "decided by memory");
        store.set(Switch::Broken);
        assert_eq!(answer(&store, "a:1"), Some(Err(false)), "the part follows");
        assert_eq!(answer(&store, "b:1"), Some(Err(false)));
        store.set(Switch::Hang);
        assert_eq!(answer(&store, "a:2"), None);
        store.set(Switch::Up);
        assert_eq!(answer(&store, "a:1"), Some(Ok(true)), "a:1 never used");
        store.set_client("a:1", Switch::Moving);
        store.set_part("a", Switch::Down);
        assert_eq!(answer(&store, "a:1"), Some(Err(true)), "its own switch");
        assert_eq!(answer(&store, "a:2"), Some(Err(true)), "the part's");
        store.set(Switch::Up);
        assert_eq!(answer(&store, "a:1"), Some(Ok(false)), "a:1 used once");
        assert_eq!(store.calls(), 10, "every check, answered or not");
        assert_eq!(store.failure_domain("a:1").as_deref(), Some("a"));
        assert_eq!(store.failure_domain("b:1"), None);
    }
}
