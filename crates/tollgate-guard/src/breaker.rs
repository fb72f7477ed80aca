//! The circuit breaker of a guarded store: after [`BreakerConfig::failures`]
//! consecutive transient failures (errors that may go away by themselves,
//! and timeouts), calls are answered by the failure policy at once, without
//! calling the store, so that an outage costs callers nothing rather than a
//! timeout each. Once [`BreakerConfig::probe_interval_ms`] has passed, ONE
//! call at a time goes through as a probe: success closes the circuit, a
//! transient failure opens it again for another interval.
//!
//! A permanent error (the store answered, but refused the call) shows that
//! the store is reachable: it does not count toward opening, and a probe
//! that meets one closes the circuit. So does a transient error that the
//! store's part answered about one client alone
//! ([`tollgate::StoreErrorKind::TransientClientOnly`]: a Redis Cluster slot being moved),
//! which the failure policy still answers. Nor does a timeout while the
//! same part answered another call (one client's call slow, e.g. its slot
//! moving under load, while its part serves the rest). Time comes from the
//! guard's [`Clock`]; a time earlier than the opening (a clock stepped
//! back) lets a probe through rather than keeping the circuit open.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tollgate::Clock;

use crate::log::Throttle;

/// Consecutive transient failures that open the circuit, unless configured.
pub const DEFAULT_BREAKER_FAILURES: u32 = 5;

/// How long an open circuit waits before letting one probe through, in ms,
/// unless configured.
pub const DEFAULT_BREAKER_PROBE_INTERVAL_MS: u64 = 500;

/// When the circuit opens and how often it probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive transient failures that open the circuit (0: never
    /// opens, every call goes to the store).
    pub failures: u32,
    /// How long an open circuit answers by the failure policy before one
    /// call goes through as a probe, in ms.
    pub probe_interval_ms: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures: DEFAULT_BREAKER_FAILURES,
            probe_interval_ms: DEFAULT_BREAKER_PROBE_INTERVAL_MS,
        }
    }
}

/// What the breaker lets a call do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// The circuit is closed: call the store.
    Call,
    /// The circuit is open and a probe is due: call the store, alone.
    Probe,
    /// The circuit is open: answer by the failure policy without calling.
    ShortCircuit,
}

/// How a call that went to the store ended, for the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The store answered (a decision, a permanent error, or a transient
    /// one about the client alone).
    Reached,
    /// A transient error or a timeout.
    Unreached,
    /// A timeout while the part answered another call (see
    /// [`Breaker::answered`]): this call's own delay, which neither counts
    /// toward opening nor breaks a run of failures. On a probe, which goes
    /// alone, as [`Outcome::Unreached`].
    Overtaken,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    /// Open since this time; no probe in flight.
    Open {
        since_ms: u64,
    },
    /// Open, with one probe in flight.
    Probing,
}

/// One circuit's state (the whole store's, or one part's: see
/// [`crate::breakers`]), shared by every guard over the same store.
#[derive(Debug)]
pub(crate) struct Breaker {
    config: BreakerConfig,
    /// The part of the store it judges, for the log (`None`: the whole store).
    domain: Option<Arc<str>>,
    /// Lock-free view of "not closed", so that the closed path takes no lock.
    open: AtomicBool,
    consecutive: AtomicU32,
    /// Calls that reached the part so far ([`Breaker::answered`]).
    answered: AtomicU64,
    state: Mutex<State>,
    short_circuited: AtomicU64,
    /// The log of failed probes: one a probe interval would flood it (the
    /// interval may be 1 ms), so at most one line a second.
    failed_probes: Mutex<Throttle>,
}

impl Breaker {
    pub(crate) fn new(config: BreakerConfig, domain: Option<Arc<str>>) -> Self {
        Self {
            config,
            domain,
            open: AtomicBool::new(false),
            consecutive: AtomicU32::new(0),
            answered: AtomicU64::new(0),
            state: Mutex::new(State::Closed),
            short_circuited: AtomicU64::new(0),
            failed_probes: Mutex::new(Throttle::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the circuit is open (or probing) now.
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// How many calls have reached the part so far: read before a call and
    /// again when it timed out, a change shows the part answered meanwhile
    /// ([`Outcome::Overtaken`]).
    pub(crate) fn answered(&self) -> u64 {
        self.answered.load(Ordering::Acquire)
    }

    /// Calls answered without the store since the guard was built.
    pub(crate) fn short_circuited(&self) -> u64 {
        self.short_circuited.load(Ordering::Relaxed)
    }

    /// What a call at `now_ms` may do.
    pub(crate) fn admit(&self, now_ms: u64) -> Admission {
        let admission = self.admit_uncounted(now_ms);
        if admission == Admission::ShortCircuit {
            self.short_circuited.fetch_add(1, Ordering::Relaxed);
        }
        admission
    }

    /// [`Breaker::admit`] for a look at a client's state (an inspection),
    /// which the failure policy does not answer: a refusal is not counted
    /// as a short-circuited answer, but a look due to probe does probe, so
    /// that a circuit no decision comes to try closes all the same.
    pub(crate) fn admit_look(&self, now_ms: u64) -> Admission {
        self.admit_uncounted(now_ms)
    }

    fn admit_uncounted(&self, now_ms: u64) -> Admission {
        if !self.is_open() {
            return Admission::Call;
        }
        let mut state = self.state();
        match *state {
            State::Closed => Admission::Call,
            State::Probing => Admission::ShortCircuit,
            State::Open { since_ms } => {
                let due = now_ms < since_ms || now_ms - since_ms >= self.config.probe_interval_ms;
                if due {
                    *state = State::Probing;
                    Admission::Probe
                } else {
                    Admission::ShortCircuit
                }
            }
        }
    }

    /// Records how a call admitted as `admission` ended at `now_ms`.
    pub(crate) fn record(&self, admission: Admission, outcome: Outcome, now_ms: u64) {
        if outcome == Outcome::Reached {
            self.answered.fetch_add(1, Ordering::AcqRel);
        }
        match (admission, outcome) {
            (Admission::ShortCircuit, _) | (Admission::Call, Outcome::Overtaken) => {}
            (Admission::Call, Outcome::Reached) => {
                if self.consecutive.load(Ordering::Relaxed) != 0 {
                    self.consecutive.store(0, Ordering::Relaxed);
                }
            }
            (Admission::Call, Outcome::Unreached) => {
                let failures = self.consecutive.fetch_add(1, Ordering::Relaxed) + 1;
                if self.config.failures > 0 && failures >= self.config.failures {
                    let mut state = self.state();
                    if *state == State::Closed {
                        self.open_at(&mut state, now_ms, failures);
                    }
                }
            }
            (Admission::Probe, Outcome::Reached) => {
                let mut state = self.state();
                *state = State::Closed;
                self.consecutive.store(0, Ordering::Relaxed);
                self.open.store(false, Ordering::Release);
                tracing::info!(
                    part = self.part(),
                    "the store answered a probe; circuit closed"
                );
            }
            (Admission::Probe, Outcome::Unreached | Outcome::Overtaken) => {
                *self.state() = State::Open { since_ms: now_ms };
                let mut failed_probes =
                    (self.failed_probes.lock()).unwrap_or_else(PoisonError::into_inner);
                if let Some(suppressed) = failed_probes.admit(now_ms) {
                    tracing::warn!(
                        part = self.part(),
                        probe_in_ms = self.config.probe_interval_ms,
                        suppressed,
                        "the store failed a probe; circuit open again"
                    );
                }
            }
        }
    }

    fn open_at(&self, state: &mut State, now_ms: u64, failures: u32) {
        *state = State::Open { since_ms: now_ms };
        self.open.store(true, Ordering::Release);
        tracing::warn!(
            part = self.part(),
            failures,
            probe_in_ms = self.config.probe_interval_ms,
            "the store failed repeatedly; circuit open: the failure policy answers without calling it"
        );
    }

    /// The part of the store this circuit is for, as the log names it.
    fn part(&self) -> &str {
        self.domain.as_deref().unwrap_or("the whole store")
    }

    /// A probe that ended without an outcome (its caller gave up): the next
    /// call may probe at once.
    pub(crate) fn abandon_probe(&self, clock: &dyn Clock) {
        let mut state = self.state();
        if *state == State::Probing {
            let since_ms = clock.now_ms().saturating_sub(self.config.probe_interval_ms);
            *state = State::Open { since_ms };
        }
    }
}

/// Ends an abandoned probe when dropped before [`ProbeGuard::done`].
pub(crate) struct ProbeGuard<'a> {
    breaker: &'a Breaker,
    clock: &'a dyn Clock,
    armed: bool,
}

impl<'a> ProbeGuard<'a> {
    pub(crate) fn new(breaker: &'a Breaker, clock: &'a dyn Clock, admission: Admission) -> Self {
        Self {
            breaker,
            clock,
            armed: admission == Admission::Probe,
        }
    }

    /// The probe's outcome was recorded.
    pub(crate) fn done(mut self) {
        self.armed = false;
    }
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.breaker.abandon_probe(self.clock);
        }
    }
}
