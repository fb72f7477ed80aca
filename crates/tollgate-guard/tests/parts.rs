//! A circuit breaker per part of a store that fails apart (a Redis Cluster's
//! masters, named by `Store::failure_domain`): one part's failures open its
//! own circuit only, the other parts' clients are still decided by the
//! store, each part probes and closes on its own, and a part no longer
//! called is dropped. A stand-in store of two parts and a hand-moved clock;
//! no sleeps.

use std::sync::Arc;
use std::time::Duration;

use tollgate::testing::{Switch, SwitchedStore};
use tollgate::{AnyPolicy, DecidedBy, FailurePolicy, Limit, ManualClock, Plan, Store};
use tollgate_guard::{BreakerConfig, GuardedStore, IDLE_PART_MS};

/// Clients `a:…` live on part "a", `b:…` on part "b"; any other client's
/// part is unknown (`None`).
fn two_parts() -> Arc<SwitchedStore> {
    Arc::new(SwitchedStore::with_parts(|client| {
        ["a", "b"].into_iter().find(|part| {
            client
                .strip_prefix(part)
                .is_some_and(|rest| rest.starts_with(':'))
        })
    }))
}

/// Switches `part` down (every call fails, transient) or up.
fn set_down(store: &SwitchedStore, part: &'static str, down: bool) {
    store.set_part(part, if down { Switch::Down } else { Switch::Up });
}

fn plan() -> Plan {
    let policy = AnyPolicy::from_name("token-bucket", 100, 100_000).unwrap();
    Plan::new("p", vec![Limit::new("l", policy, false)]).unwrap()
}

fn guard(store: &Arc<SwitchedStore>, clock: &Arc<ManualClock>) -> GuardedStore<Arc<SwitchedStore>> {
    GuardedStore::new(
        store.clone(),
        Duration::from_secs(60),
        FailurePolicy::FailClosed,
    )
    .with_clock(clock.clone())
    .with_breaker(BreakerConfig {
        failures: 3,
        probe_interval_ms: 500,
    })
}

async fn ask(guard: &GuardedStore<Arc<SwitchedStore>>, client: &str) -> DecidedBy {
    guard.check(&plan(), client, 0, 1).await.unwrap().decided_by
}

const CLOSED: DecidedBy = DecidedBy::Failure(FailurePolicy::FailClosed);

#[tokio::test]
async fn a_part_that_fails_opens_only_its_own_circuit() {
    let store = two_parts();
    let clock = Arc::new(ManualClock::new(10_000));
    let guard = guard(&store, &clock);
    set_down(&store, "a", true);
    for _ in 0..3 {
        assert_eq!(ask(&guard, "a:1").await, CLOSED);
    }
    assert!(guard.counts().circuit_open);
    let calls = store.calls();
    for _ in 0..5 {
        assert_eq!(ask(&guard, "a:2").await, CLOSED);
        assert_eq!(ask(&guard, "b:1").await, DecidedBy::Store, "another part");
        assert_eq!(ask(&guard, "other").await, DecidedBy::Store, "no part");
    }
    assert_eq!(store.calls(), calls + 10, "part a's clients were not sent");
    assert_eq!(guard.counts().short_circuited, 5);
    assert_eq!(
        guard.part_circuits(),
        [(Arc::from("a"), true), (Arc::from("b"), false)],
        "each part that had a call, and whether it is open"
    );
}

/// A client whose slot is half-way through a migration meets an error its
/// part answered (a Redis Cluster master's `TRYAGAIN`): the failure policy
/// answers it every time, but the part was reached, so the part's circuit
/// stays closed for its other clients (an audit's drill: five `TRYAGAIN`s
/// opened a master's circuit, and its clients not moving were answered by
/// fail-closed until the move ended). The part's own failures still open it.
#[tokio::test]
async fn a_slot_moving_does_not_open_its_parts_circuit() {
    let store = two_parts();
    let clock = Arc::new(ManualClock::new(10_000));
    let guard = guard(&store, &clock);
    store.set_client("a:moving", Switch::Moving);
    for _ in 0..5 {
        assert_eq!(ask(&guard, "a:moving").await, CLOSED);
    }
    assert_eq!(store.calls(), 5, "each call went to the store");
    assert_eq!(
        ask(&guard, "a:1").await,
        DecidedBy::Store,
        "the part serves"
    );
    let counts = guard.counts();
    assert_eq!((counts.transient_errors, counts.fail_closed), (5, 5));
    assert_eq!(counts.short_circuited, 0);
    assert!(!counts.circuit_open);

    set_down(&store, "a", true);
    for _ in 0..3 {
        assert_eq!(ask(&guard, "a:1").await, CLOSED);
    }
    assert!(
        guard.counts().circuit_open,
        "the part's own failures open it"
    );
    let calls = store.calls();
    assert_eq!(ask(&guard, "a:2").await, CLOSED);
    assert_eq!(store.calls(), calls, "short-circuited");
}

#[tokio::test]
async fn each_part_probes_and_closes_on_its_own() {
    let store = two_parts();
    let clock = Arc::new(ManualClock::new(10_000));
    let guard = guard(&store, &clock);
    set_down(&store, "a", true);
    set_down(&store, "b", true);
    for _ in 0..3 {
        ask(&guard, "a:1").await;
        ask(&guard, "b:1").await;
    }
    set_down(&store, "a", false);
    clock.advance(500);
    assert_eq!(ask(&guard, "a:1").await, DecidedBy::Store, "a's probe");
    assert_eq!(ask(&guard, "a:2").await, DecidedBy::Store, "a is closed");
    let calls = store.calls();
    assert_eq!(ask(&guard, "b:1").await, CLOSED, "b's probe fails");
    assert_eq!(ask(&guard, "b:2").await, CLOSED, "b is open again");
    assert_eq!(store.calls(), calls + 1, "only b's probe was sent");
    assert!(guard.counts().circuit_open, "b's circuit");
}

#[tokio::test]
async fn siblings_share_every_parts_breaker() {
    let store = two_parts();
    let clock = Arc::new(ManualClock::new(10_000));
    let guard = guard(&store, &clock);
    let sibling = guard.sibling(FailurePolicy::Unavailable);
    set_down(&store, "a", true);
    for _ in 0..3 {
        ask(&guard, "a:1").await;
    }
    let calls = store.calls();
    assert!(sibling.check(&plan(), "a:9", 0, 1).await.is_err());
    assert_eq!(store.calls(), calls, "the sibling saw a's open circuit");
    assert_eq!(ask(&sibling, "b:1").await, DecidedBy::Store);
}

/// After a failover the old master gets no more calls: its circuit, open
/// when it died, is dropped once idle for `IDLE_PART_MS` (else it would be
/// shown open for ever), its short-circuited calls stay counted, and a part
/// called again starts closed.
#[tokio::test]
async fn a_part_no_longer_called_is_dropped_and_its_count_kept() {
    let store = two_parts();
    let clock = Arc::new(ManualClock::new(10_000));
    let guard = guard(&store, &clock);
    set_down(&store, "a", true);
    for _ in 0..4 {
        ask(&guard, "a:1").await;
    }
    assert_eq!(guard.counts().short_circuited, 1);
    clock.advance(IDLE_PART_MS - 1);
    assert_eq!(ask(&guard, "b:1").await, DecidedBy::Store);
    let a: Arc<str> = Arc::from("a");
    let b: Arc<str> = Arc::from("b");
    assert_eq!(
        guard.part_circuits(),
        [(a.clone(), true), (b.clone(), false)]
    );
    clock.advance(1);
    assert_eq!(guard.part_circuits(), [(b, false)], "a was idle");
    let counts = guard.counts();
    assert!(!counts.circuit_open, "no circuit open any more");
    assert_eq!(counts.short_circuited, 1, "a's short-circuited call");
    let calls = store.calls();
    assert_eq!(ask(&guard, "a:1").await, CLOSED, "a fresh breaker calls");
    assert_eq!(store.calls(), calls + 1);
}

/// A call that times out while its part answers other calls is that call's
/// own delay, not its part's: it does not count toward opening the part's
/// circuit (an audit's drill under load: a client whose slot moved had its
/// redis-rs retries outlast the guard's timeout, five such timeouts opened
/// its master's circuit, and the master's other clients were answered by
/// the failure policy for half a second). A part that answers nothing while
/// its calls wait still opens on their timeouts.
#[tokio::test(start_paused = true)]
async fn timeouts_of_one_client_while_its_part_answers_others_leave_it_closed() {
    let store = two_parts();
    let clock = Arc::new(ManualClock::new(10_000));
    let guard = Arc::new(
        GuardedStore::new(
            store.clone(),
            Duration::from_millis(100),
            FailurePolicy::FailClosed,
        )
        .with_clock(clock.clone())
        .with_breaker(BreakerConfig {
            failures: 3,
            probe_interval_ms: 500,
        }),
    );
    store.set_client("a:moving", Switch::Hang);
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let guard = guard.clone();
            tokio::spawn(async move { ask(&guard, "a:moving").await })
        })
        .collect();
    tokio::task::yield_now().await;
    assert_eq!(store.calls(), 3, "the three calls wait on the store");
    assert_eq!(
        ask(&guard, "a:1").await,
        DecidedBy::Store,
        "the part answers"
    );
    for call in waiting {
        assert_eq!(call.await.unwrap(), CLOSED, "each timed out");
    }
    let counts = guard.counts();
    assert_eq!((counts.timeouts, counts.fail_closed), (3, 3));
    assert!(!counts.circuit_open, "the part answered while they waited");
    assert_eq!(ask(&guard, "a:2").await, DecidedBy::Store);

    store.set_part("a", Switch::Hang);
    for _ in 0..3 {
        assert_eq!(ask(&guard, "a:1").await, CLOSED);
    }
    assert!(
        guard.counts().circuit_open,
        "a part silent while its calls wait opens"
    );
}
