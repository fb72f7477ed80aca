//! The conformance suite, written once against [`tollgate::Store`] and run by
//! every store's own tests: the in-memory store in `tollgate`, one Redis node
//! and a Redis Cluster in `tollgate-redis`. A new store is checked by calling
//! it from its tests; it needs nothing but this crate.
//!
//! Every case compares the store, decision by decision and with every number
//! of every limit, with [`NaiveStore`]: the plan contract over deliberately
//! naive models that share no arithmetic with the library (see
//! [`crate::models`]). The worked sessions and edge cases are also checked
//! against answers written down by hand. So the suite can fail for every
//! store, the in-memory one included.
//!
//! The cases ([`CASES`]): the worked sessions of the contract
//! (`examples/*.replay` with their `.expected` output), the edge cases of the
//! core issue, random sessions of one-limit plans, random plans with several
//! limits, costs, shadows and backwards times, the largest numbers a store
//! must take, sliding windows counting up to `u32::MAX` units, and
//! [`Store::inspect`] after a sequence of
//! decisions (the state written down by hand; inspecting changes nothing).
//!
//! Two ways to run it: [`run_all`] in one test, or [`conformance_tests!`](crate::conformance_tests)
//! (`tollgate_testkit::conformance_tests!`), which generates one `#[test]` per
//! case, so a failure names its case and the cases run in parallel:
//!
//! ```ignore
//! use std::sync::Arc;
//! use tollgate::{MemoryBackend, Store};
//!
//! // An expression evaluated by each test: `Some(a store factory)`, or `None`
//! // to skip (e.g. no redis-server here). The factory makes a fresh,
//! // empty store each time it is called.
//! tollgate_testkit::conformance_tests!(Some(|| async {
//!     Arc::new(MemoryBackend::new()) as Arc<dyn Store>
//! }));
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tollgate::{Plan, PlanDecision, Store};

use crate::reference::NaiveStore;

mod inspection;
mod random;
mod sessions;

pub use inspection::inspection;
pub use random::{extremes, huge_costs, plans, random_sessions, Rng, EXACT_RANGE};
pub use sessions::{edge_cases, run_session, worked_sessions, EDGE_CASES};

/// A fresh store, being made.
pub type FreshStore<'a> = Pin<Box<dyn Future<Output = Arc<dyn Store>> + 'a>>;

/// What the suite needs from a store under test: a fresh store (empty, its
/// own key space) whenever asked, made inside the case's async runtime.
///
/// Any `Fn() -> impl Future<Output = Arc<dyn Store>>` is one.
pub trait MakeStore {
    /// A fresh, empty store.
    fn fresh(&self) -> FreshStore<'_>;
}

impl<F, Fut> MakeStore for F
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Store>> + 'static,
{
    fn fresh(&self) -> FreshStore<'_> {
        Box::pin(self())
    }
}

/// One case of the suite.
pub type Case = fn(&dyn MakeStore);

/// Every case, by name. [`conformance_tests!`](crate::conformance_tests) generates one test per entry
/// (and a test that it covers them all).
pub const CASES: &[(&str, Case)] = &[
    ("worked_sessions", worked_sessions),
    ("edge_cases", edge_cases),
    ("random_sessions", random_sessions),
    ("plans", plans),
    ("extremes", extremes),
    ("huge_costs", huge_costs),
    ("inspection", inspection),
];

/// Runs every case against stores from `make_store`, in order.
///
/// # Panics
/// On the first answer that differs from the expected one, saying where.
pub fn run_all(make_store: impl MakeStore) {
    for (name, case) in CASES {
        eprintln!("conformance: {name}");
        case(&make_store);
    }
}

/// Runs `f` to completion on a fresh single-threaded runtime (each case has
/// its own, so a store's connections live and die with the case).
///
/// # Panics
/// When no runtime can be built.
pub fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime for the conformance case")
        .block_on(f)
}

/// Asks `store` and the naive reference the same question, asserts that
/// every field of the two decisions is equal, and returns the store's.
///
/// # Panics
/// When the store fails to answer or answers differently; `context` says
/// where in the case this was.
pub async fn same_as_naive(
    store: &dyn Store,
    naive: &NaiveStore,
    (plan, client, now, cost): (&Plan, &str, u64, u32),
    context: &dyn Fn() -> String,
) -> PlanDecision {
    let got = store
        .check(plan, client, now, cost)
        .await
        .unwrap_or_else(|e| panic!("the store failed: {e}\n{}", context()));
    let want = naive.decide(plan, client, now, cost);
    assert_eq!(
        got,
        want,
        "the store differs from the naive model for {client:?} at {now} cost {cost}\n{}",
        context()
    );
    got
}

/// One `#[test]` per conformance case ([`CASES`]) against the stores that
/// `$make_store` makes, plus a test that no case was left out.
///
/// `$make_store` is an expression of type `Option<impl MakeStore>`,
/// evaluated at the start of every test (so each test may spawn, and drop,
/// its own server); `None` skips the test (say why on standard error).
#[macro_export]
macro_rules! conformance_tests {
    ($make_store:expr) => {
        $crate::conformance_tests!(@cases $make_store;
            worked_sessions, edge_cases, random_sessions, plans, extremes, huge_costs, inspection);
    };
    (@cases $make_store:expr; $($case:ident),+) => {
        $(
            #[test]
            fn $case() {
                if let Some(make_store) = $make_store {
                    $crate::conformance::$case(&make_store);
                }
            }
        )+

        #[test]
        fn every_conformance_case_has_a_test() {
            let generated: &[&str] = &[$(stringify!($case)),+];
            let cases: Vec<&str> = $crate::conformance::CASES.iter().map(|(name, _)| *name).collect();
            assert_eq!(generated, cases.as_slice(), "conformance_tests! must list every case of CASES");
        }
    };
}
