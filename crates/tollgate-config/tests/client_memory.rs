//! The memory a store's wiring keeps clients in (`StoreHandle::into_store`'s
//! `ClientMemory`), which a front end sweeps of idle clients: the memory
//! store itself, or a shared store's local fallback, which fills while the
//! store is down.

use std::sync::Arc;

use tollgate::testing::FailingStore;
use tollgate::{AnyPolicy, DecidedBy, FailurePolicy, Limit, Plan};
use tollgate_config::{ClientMemory, Config, StoreHandle};

fn plan() -> Plan {
    let policy = AnyPolicy::from_name("sliding-window", 5, 1_000).expect("policy");
    Plan::new("s", vec![Limit::new("1s", policy, false)]).expect("plan")
}

/// A shared store that is down, answered by the local fallback: the
/// clients it decided are in the memory handed back, and a sweep past
/// their window drops them.
#[tokio::test]
async fn a_shared_stores_local_fallback_is_the_memory_to_sweep() {
    let config = Config::parse(
        "[[plans.default]]\nname = \"1s\"\npolicy = \"sliding-window\"\nlimit = 5\nwindow = \"1s\"\n\
         [store]\nurl = \"redis://127.0.0.1:1\"\nfailure_policy = \"local-fallback\"\n",
    )
    .expect("config");
    let handle = StoreHandle::Shared(Arc::new(FailingStore::down()));
    let (store, _, memory) = handle.into_store(&config.store);
    assert!(matches!(memory, ClientMemory::Fallback(_)));
    let plan = plan();
    for client in 0..20 {
        let decided = store.check(&plan, &format!("c{client}"), 0, 1).await;
        let decided_by = decided.expect("answered").decided_by;
        assert_eq!(decided_by, DecidedBy::Failure(FailurePolicy::LocalFallback));
    }
    assert_eq!(memory.limiter().clients(), 20);
    assert_eq!(memory.limiter().sweep(&[plan], 60_000, false), 20);
    assert_eq!(memory.limiter().clients(), 0);
}

/// The memory store is its own memory to sweep.
#[test]
fn the_memory_store_is_the_memory_to_sweep() {
    let config = Config::embedded_default();
    let handle = StoreHandle::for_config(&config).expect("memory");
    let (_, cache, memory) = handle.into_store(&config.store);
    assert!(cache.is_none());
    assert!(matches!(memory, ClientMemory::Memory(_)));
}
