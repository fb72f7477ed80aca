//! The circuit breaker with a stand-in store and a hand-moved clock: it
//! opens after K consecutive transient failures, answers without calling
//! the store while open, lets one probe through at a time after the probe
//! interval, and closes on success. No sleeps: the clock is a ManualClock.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tollgate::testing::{Switch, SwitchedStore};
use tollgate::{AnyPolicy, DecidedBy, FailurePolicy, Limit, ManualClock, Plan, Store};
use tollgate_guard::{BreakerConfig, GuardedStore};

fn plan() -> Plan {
    let policy = AnyPolicy::from_name("token-bucket", 100, 100_000).unwrap();
    Plan::new("p", vec![Limit::new("l", policy, false)]).unwrap()
}

struct Setup {
    store: Arc<SwitchedStore>,
    clock: Arc<ManualClock>,
    guard: GuardedStore<Arc<SwitchedStore>>,
}

fn setup(policy: FailurePolicy) -> Setup {
    let store = Arc::new(SwitchedStore::new());
    let clock = Arc::new(ManualClock::new(10_000));
    let guard = GuardedStore::new(store.clone(), Duration::from_secs(60), policy)
        .with_clock(clock.clone())
        .with_breaker(BreakerConfig {
            failures: 3,
            probe_interval_ms: 500,
        });
    Setup {
        store,
        clock,
        guard,
    }
}

async fn ask(guard: &GuardedStore<Arc<SwitchedStore>>) -> DecidedBy {
    guard.check(&plan(), "c", 0, 1).await.unwrap().decided_by
}

const CLOSED: DecidedBy = DecidedBy::Failure(FailurePolicy::FailClosed);

#[tokio::test]
async fn opens_after_k_consecutive_transient_failures_and_stops_calling() {
    let s = setup(FailurePolicy::FailClosed);
    assert_eq!(ask(&s.guard).await, DecidedBy::Store);
    s.store.set(Switch::Down);
    for _ in 0..3 {
        assert_eq!(ask(&s.guard).await, CLOSED);
    }
    assert_eq!(s.store.calls(), 4);
    assert!(s.guard.counts().circuit_open);
    for _ in 0..10 {
        assert_eq!(ask(&s.guard).await, CLOSED);
    }
    assert_eq!(s.store.calls(), 4, "an open circuit calls nothing");
    let counts = s.guard.counts();
    assert_eq!((counts.short_circuited, counts.fail_closed), (10, 13));
    assert_eq!(counts.transient_errors, 3);
}

#[tokio::test]
async fn successes_and_permanent_errors_break_the_run_of_failures() {
    let s = setup(FailurePolicy::FailOpen);
    for mode in [
        Switch::Down,
        Switch::Down,
        Switch::Up,
        Switch::Down,
        Switch::Down,
    ] {
        s.store.set(mode);
        ask(&s.guard).await;
    }
    s.store.set(Switch::Broken);
    for _ in 0..5 {
        ask(&s.guard).await;
    }
    s.store.set(Switch::Down);
    ask(&s.guard).await;
    ask(&s.guard).await;
    assert!(!s.guard.counts().circuit_open);
    assert_eq!(s.store.calls(), 12);
    ask(&s.guard).await;
    assert!(s.guard.counts().circuit_open, "the third in a row opens it");
}

#[tokio::test]
async fn after_the_probe_interval_one_probe_closes_or_reopens() {
    let s = setup(FailurePolicy::FailClosed);
    s.store.set(Switch::Down);
    for _ in 0..3 {
        ask(&s.guard).await;
    }
    s.clock.advance(499);
    assert_eq!(ask(&s.guard).await, CLOSED);
    assert_eq!(s.store.calls(), 3);
    // Due: one probe, which fails and opens the circuit for another interval.
    s.clock.advance(1);
    assert_eq!(ask(&s.guard).await, CLOSED);
    assert_eq!(s.store.calls(), 4);
    s.clock.advance(499);
    assert_eq!(ask(&s.guard).await, CLOSED);
    assert_eq!(s.store.calls(), 4);
    // The store is back: the next probe succeeds and closes the circuit.
    s.store.set(Switch::Up);
    s.clock.advance(1);
    assert_eq!(ask(&s.guard).await, DecidedBy::Store);
    assert!(!s.guard.counts().circuit_open);
    for _ in 0..5 {
        assert_eq!(ask(&s.guard).await, DecidedBy::Store);
    }
    assert_eq!(s.store.calls(), 10);
}

fn poll_once<F: Future + ?Sized + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

#[tokio::test]
async fn only_one_probe_at_a_time_and_an_abandoned_probe_frees_the_next() {
    let s = setup(FailurePolicy::FailClosed);
    s.store.set(Switch::Down);
    for _ in 0..3 {
        ask(&s.guard).await;
    }
    s.clock.advance(500);
    s.store.set(Switch::Hang);
    let plan = plan();
    let mut probe = s.guard.check(&plan, "c", 0, 1);
    assert!(poll_once(&mut probe).is_pending(), "the probe is in flight");
    assert_eq!(s.store.calls(), 4);
    for _ in 0..5 {
        assert_eq!(ask(&s.guard).await, CLOSED);
    }
    assert_eq!(s.store.calls(), 4, "no second probe while one is in flight");
    // The caller gives up on the probe: the next call probes at once.
    drop(probe);
    s.store.set(Switch::Up);
    assert_eq!(ask(&s.guard).await, DecidedBy::Store);
    assert_eq!(s.store.calls(), 5);
    assert!(!s.guard.counts().circuit_open);
}

#[tokio::test]
async fn a_clock_stepped_back_lets_a_probe_through() {
    let s = setup(FailurePolicy::FailOpen);
    s.store.set(Switch::Down);
    for _ in 0..3 {
        ask(&s.guard).await;
    }
    s.store.set(Switch::Up);
    s.clock.set(1_000);
    assert_eq!(ask(&s.guard).await, DecidedBy::Store);
    assert!(!s.guard.counts().circuit_open);
}

#[tokio::test]
async fn an_open_circuit_under_unavailable_hands_back_an_error_at_once() {
    let s = setup(FailurePolicy::Unavailable);
    s.store.set(Switch::Down);
    for _ in 0..3 {
        assert!(s.guard.check(&plan(), "c", 0, 1).await.is_err());
    }
    let error = s.guard.check(&plan(), "c", 0, 1).await.unwrap_err();
    assert!(
        error.is_transient() && error.message.contains("circuit open"),
        "{error}"
    );
    assert_eq!(s.store.calls(), 3);
}

#[tokio::test]
async fn siblings_share_one_breaker() {
    let s = setup(FailurePolicy::FailOpen);
    let sibling = s.guard.sibling(FailurePolicy::Unavailable);
    s.store.set(Switch::Down);
    for _ in 0..3 {
        ask(&s.guard).await;
    }
    assert!(sibling.check(&plan(), "c", 0, 1).await.is_err());
    assert_eq!(s.store.calls(), 3, "the sibling saw the open circuit");
    assert_eq!(sibling.counts().unavailable, 1);
}

#[test]
fn the_default_breaker_opens_after_5_and_probes_every_500_ms() {
    let config = BreakerConfig::default();
    assert_eq!((config.failures, config.probe_interval_ms), (5, 500));
}

/// With no decision coming (an operator looking at `/v1/clients` after an
/// outage), an inspection is the probe an open circuit waits for: before
/// the probe interval it fails at once, without calling the store or
/// counting as a short-circuited answer; after it, it reaches the store
/// and, the store back, closes the circuit.
#[tokio::test]
async fn an_inspection_probes_an_open_circuit_and_closes_it() {
    let s = setup(FailurePolicy::FailClosed);
    s.store.set(Switch::Down);
    for _ in 0..3 {
        ask(&s.guard).await;
    }
    assert!(s.guard.counts().circuit_open);
    s.store.set(Switch::Up);
    let (calls, short_circuited) = (s.store.calls(), s.guard.counts().short_circuited);
    let early = s.guard.inspect(&plan(), "c", 0).await.unwrap_err();
    assert!(early.message.contains("circuit open"), "{}", early.message);
    assert_eq!(s.store.calls(), calls);
    assert_eq!(s.guard.counts().short_circuited, short_circuited);
    s.clock.advance(500);
    s.guard
        .inspect(&plan(), "c", 0)
        .await
        .expect("the probe reaches the store");
    assert!(!s.guard.counts().circuit_open);
    assert_eq!(ask(&s.guard).await, DecidedBy::Store);
}

/// A failed inspection probe opens the circuit again for another interval,
/// a permanent error too: only an answer shows the store is back (a store
/// that cannot inspect fails every inspection at once, up or down).
#[tokio::test]
async fn an_inspection_probe_that_fails_keeps_the_circuit_open() {
    let s = setup(FailurePolicy::FailClosed);
    s.store.set(Switch::Down);
    for _ in 0..3 {
        ask(&s.guard).await;
    }
    s.clock.advance(500);
    assert!(s.guard.inspect(&plan(), "c", 0).await.is_err());
    assert!(s.guard.counts().circuit_open);
    s.store.set(Switch::Broken);
    s.clock.advance(500);
    assert!(s.guard.inspect(&plan(), "c", 0).await.is_err());
    assert!(s.guard.counts().circuit_open, "a permanent error closed it");
    s.store.set(Switch::Up);
    let calls = s.store.calls();
    assert_eq!(
        ask(&s.guard).await,
        DecidedBy::Failure(FailurePolicy::FailClosed)
    );
    assert_eq!(
        s.store.calls(),
        calls,
        "not probed again before the interval"
    );
}

/// A writer into a shared buffer: the log lines of a test.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// However short the probe interval, a failed probe is logged at most once
/// a second, with the count of those held back (audit: a 1 ms interval made
/// about 900 lines a second while Redis was down).
#[tokio::test]
async fn failed_probes_are_logged_at_most_once_a_second() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    let store = Arc::new(SwitchedStore::new());
    let clock = Arc::new(ManualClock::new(10_000));
    let guard = GuardedStore::new(
        store.clone(),
        Duration::from_secs(60),
        FailurePolicy::FailOpen,
    )
    .with_clock(clock.clone())
    .with_breaker(BreakerConfig {
        failures: 1,
        probe_interval_ms: 1,
    });
    store.set(Switch::Down);
    ask(&guard).await;
    assert!(guard.counts().circuit_open);
    // Three seconds of probes, one a millisecond, every one failing.
    for _ in 0..3_000 {
        clock.advance(1);
        ask(&guard).await;
    }
    assert_eq!(store.calls(), 3_001, "every probe reached the store");
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let failed: Vec<&str> = (log.lines())
        .filter(|line| line.contains("the store failed a probe"))
        .collect();
    // At 1 ms, 1,001 ms, 2,001 ms and 3,000 ms at the most.
    assert!((3..=4).contains(&failed.len()), "{log}");
    assert!(failed[1].contains("suppressed=999"), "{}", failed[1]);
}
