//! [`Store::inspect`](tollgate::Store::inspect): after a sequence of
//! decisions, the inspection is the state written down by hand, and
//! inspecting changes nothing: not the client's state, not an unknown
//! client's token-bucket anchor, not the latest time seen (every decision
//! around the inspections is compared with the naive reference, which never
//! saw them).

use tollgate::{AnyPolicy, Inspection, Limit, Plan, Store};

use super::{block_on, same_as_naive, MakeStore};
use crate::reference::NaiveStore;

/// A sliding window of 3, a token bucket of 2 and GCRA of 4, each per second.
fn plan() -> Plan {
    let limit = |name: &str, policy: &str, n: u32| {
        let policy = AnyPolicy::from_name(policy, n, 1_000).expect("a valid policy");
        Limit::new(name, policy, false)
    };
    Plan::new(
        "inspected",
        vec![
            limit("log", "sliding-window", 3),
            limit("bucket", "token-bucket", 2),
            limit("gcra", "gcra", 4),
        ],
    )
    .expect("a valid plan")
}

async fn inspect(store: &dyn Store, plan: &Plan, client: &str, now: u64) -> Inspection {
    store
        .inspect(plan, client, now)
        .await
        .unwrap_or_else(|e| panic!("inspecting {client:?} at {now} failed: {e}"))
}

/// `(remaining, reset_after_ms, retry_after_ms)` of each limit.
fn numbers(inspection: &Inspection) -> Vec<(u32, u64, u64)> {
    let limits = inspection.limits.iter();
    limits
        .map(|l| (l.remaining, l.reset_after_ms, l.retry_after_ms))
        .collect()
}

/// The sliding log's runs as `(at_ms, units, leaves_in_ms)`.
fn runs(inspection: &Inspection) -> Vec<(u64, u32, u64)> {
    let log = inspection.limits[0].log.as_ref().expect("the log's runs");
    log.iter()
        .map(|r| (r.at_ms, r.units, r.leaves_in_ms))
        .collect()
}

/// The case: see the module documentation.
pub fn inspection(make_store: &dyn MakeStore) {
    block_on(async {
        let store = make_store.fresh().await;
        let naive = NaiveStore::new();
        let plan = plan();
        let context = || "the inspection case".to_owned();
        let decide = |client: &'static str, now: u64, cost: u32| {
            same_as_naive(&*store, &naive, (&plan, client, now, cost), &context)
        };
        for (now, allowed) in [(1_000, true), (1_000, true), (1_200, false), (1_600, true)] {
            assert_eq!(decide("a", now, 1).await.allowed, allowed, "a at {now}");
        }
        // At 1700: the log holds 2 units from 1000 (leaving at 2000) and 1
        // from 1600; the bucket (drips at 1500, 2000, ...) is empty until
        // 2000 and full at 2500; GCRA's TAT is 1850, so 3 are left.
        let seen = inspect(&*store, &plan, "a", 1_700).await;
        assert_eq!(seen.now_ms, 1_700);
        assert_eq!(numbers(&seen), [(0, 900, 300), (0, 800, 300), (3, 150, 0)]);
        assert_eq!(runs(&seen), [(1_000, 2, 300), (1_600, 1, 900)]);
        assert_eq!((seen.allowed, seen.retry_after_ms), (false, 300));
        assert!(seen.limits[1].log.is_none() && seen.limits[2].log.is_none());
        let names: Vec<&str> = seen.limits.iter().map(|l| &*l.name).collect();
        assert_eq!(names, ["log", "bucket", "gcra"]);
        assert_eq!(inspect(&*store, &plan, "a", 1_700).await, seen);
        // A time before the latest seen (1600) is read at 1600, as a
        // decision would be.
        assert_eq!(inspect(&*store, &plan, "a", 1_100).await.now_ms, 1_600);
        // Nothing changed: the next decisions are the naive reference's.
        assert!(!decide("a", 1_700, 1).await.allowed);
        assert!(decide("a", 2_000, 1).await.allowed);

        // An unknown client is all full, and inspecting it anchors nothing:
        // with the bucket anchored at 1000 a token would drip back at 1500,
        // anchored at the first decision (1300) not before 1800.
        let fresh = inspect(&*store, &plan, "b", 1_000).await;
        assert_eq!(numbers(&fresh), [(3, 0, 0), (2, 0, 0), (4, 0, 0)]);
        assert!(runs(&fresh).is_empty() && fresh.allowed);
        assert!(decide("b", 1_300, 2).await.allowed);
        assert!(!decide("b", 1_600, 1).await.allowed);

        // Inspecting at a later time records nothing: the decision at 200
        // is answered at 200 (the unit from 100 still in the log), not at 5000.
        assert!(decide("c", 100, 1).await.allowed);
        assert_eq!(
            inspect(&*store, &plan, "c", 5_000).await.limits[0].remaining,
            3
        );
        assert!(!decide("c", 200, 3).await.allowed);
    });
}
